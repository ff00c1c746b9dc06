package soak

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync/atomic"
	"time"
)

// redisProcess is a redis-server of the soak on a loopback port. It keeps
// every write in an append-only file synced on each write, so that a
// restart (SIGKILL, then a new process on the same port) loses no
// idempotency key: what the soak checks is stagger's at-most-once, not a
// store that forgets (the server package documents that limit).
type redisProcess struct {
	dir, addr string
	cmd       *exec.Cmd
	exited    chan struct{}
}

// startRedis starts redis-server in dir; ok is false when none is on PATH.
func startRedis(dir string) (r *redisProcess, ok bool, err error) {
	if _, err := exec.LookPath("redis-server"); err != nil {
		return nil, false, nil
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, true, err
	}
	port := l.Addr().(*net.TCPAddr).Port
	_ = l.Close()
	r = &redisProcess{dir: dir, addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(port))}
	return r, true, r.start()
}

// start runs redis-server and waits until it accepts connections.
func (r *redisProcess) start() error {
	logFile, err := os.OpenFile(filepath.Join(r.dir, "redis.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer logFile.Close()
	_, port, _ := net.SplitHostPort(r.addr)
	cmd := exec.Command("redis-server", "--port", port, "--bind", "127.0.0.1", "--dir", r.dir,
		"--save", "", "--appendonly", "yes", "--appendfsync", "always")
	cmd.Stdout, cmd.Stderr = logFile, logFile
	if err := cmd.Start(); err != nil {
		return err
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	r.cmd, r.exited = cmd, exited
	for end := time.Now().Add(10 * time.Second); time.Now().Before(end); time.Sleep(5 * time.Millisecond) {
		select {
		case <-exited:
			return fmt.Errorf("soak: redis-server exited at start (log in %s)", r.dir)
		default:
		}
		if c, err := net.DialTimeout("tcp", r.addr, time.Second); err == nil {
			_ = c.Close()
			return nil
		}
	}
	r.kill()
	return errors.New("soak: redis-server did not accept connections within 10s")
}

// kill ends the process at once (SIGKILL) and waits for it.
func (r *redisProcess) kill() {
	if r.cmd == nil {
		return
	}
	_ = r.cmd.Process.Kill()
	<-r.exited
	r.cmd = nil
}

// restart kills the server, leaves it down for d, and starts it again on
// its port, from its append-only file.
func (r *redisProcess) restart(ctx context.Context, d time.Duration) error {
	r.kill()
	sleep(ctx, d)
	return r.start()
}

// redisLog counts go-redis's log lines (a pool that cannot dial while
// Redis restarts, dozens a second) instead of printing them: the history
// has the restarts.
type redisLog struct{ lines *atomic.Uint64 }

func (l redisLog) Printf(context.Context, string, ...any) { l.lines.Add(1) }

package redisstore_test

import (
	"bufio"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"
)

// redisServer is a redis-server process of one test, on a free loopback
// port, with neither snapshots nor an append-only file, in a t.TempDir.
type redisServer struct {
	t      testing.TB
	dir    string
	port   string
	cmd    *exec.Cmd
	exited chan struct{} // closed when cmd has been waited for
}

// startRedis starts a redis-server for t and stops it when t ends. It fails
// t when redis-server is not installed: these tests need a real Redis, and
// CI installs one.
func startRedis(t testing.TB) *redisServer {
	t.Helper()
	if _, err := exec.LookPath("redis-server"); err != nil {
		t.Fatalf("redis-server is not on PATH (%v): the tests of package redisstore run a real Redis; install it (apt-get install redis-server)", err)
	}
	r := &redisServer{t: t, dir: t.TempDir()}
	t.Cleanup(r.stop)
	// Another process may take the free port between its probe and
	// redis-server's bind: try a few.
	for try := 0; ; try++ {
		r.port = freePort(t)
		err := r.run()
		if err == nil {
			return r
		}
		if try == 2 {
			t.Fatalf("redis-server did not start: %v\n%s", err, r.log())
		}
	}
}

func freePort(t testing.TB) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return strconv.Itoa(l.Addr().(*net.TCPAddr).Port)
}

// Addr is the server's address, host:port.
func (r *redisServer) Addr() string { return net.JoinHostPort("127.0.0.1", r.port) }

// restart starts the server again on its port, after stop.
func (r *redisServer) restart() {
	r.t.Helper()
	if err := r.run(); err != nil {
		r.t.Fatalf("redis-server did not start again: %v\n%s", err, r.log())
	}
}

// run starts redis-server and waits until it answers PING.
func (r *redisServer) run() error {
	logf, err := os.OpenFile(filepath.Join(r.dir, "redis.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer logf.Close()
	cmd := exec.Command("redis-server", "--port", r.port, "--bind", "127.0.0.1",
		"--save", "", "--appendonly", "no", "--dir", r.dir)
	cmd.Dir = r.dir
	cmd.Stdout, cmd.Stderr = logf, logf // files: no copying goroutine
	if err := cmd.Start(); err != nil {
		return err
	}
	r.cmd, r.exited = cmd, make(chan struct{})
	go func(exited chan struct{}) {
		_ = cmd.Wait()
		close(exited)
	}(r.exited)
	deadline := time.Now().Add(10 * time.Second)
	for !r.pings() {
		select {
		case <-r.exited:
			r.cmd = nil
			return errExited
		case <-time.After(5 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			r.stop()
			return errNotReady
		}
	}
	return nil
}

type startError string

func (e startError) Error() string { return string(e) }

const (
	errExited   = startError("redis-server exited")
	errNotReady = startError("redis-server did not answer PING within 10s")
)

// pings reports whether the server answers PING.
func (r *redisServer) pings() bool {
	c, err := net.DialTimeout("tcp", r.Addr(), time.Second)
	if err != nil {
		return false
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(time.Second))
	if _, err := c.Write([]byte("PING\r\n")); err != nil {
		return false
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	return err == nil && strings.TrimSpace(line) == "+PONG"
}

// stop kills the server (as a crash would) and waits for it to exit.
func (r *redisServer) stop() {
	if r.cmd == nil {
		return
	}
	_ = r.cmd.Process.Kill()
	<-r.exited
	r.cmd = nil
}

func (r *redisServer) log() string {
	b, _ := os.ReadFile(filepath.Join(r.dir, "redis.log"))
	return string(b)
}

// newClient returns a client of r, closed when t ends. change, when not
// nil, adjusts its options.
func newClient(t testing.TB, r *redisServer, change func(*redis.Options)) *redis.Client {
	t.Helper()
	o := &redis.Options{
		Addr: r.Addr(),
		// Redis 7.0 knows neither: no handshake errors in the logs.
		DisableIdentity:          true,
		MaintNotificationsConfig: &maintnotifications.Config{Mode: maintnotifications.ModeDisabled},
	}
	if change != nil {
		change(o)
	}
	c := redis.NewClient(o)
	t.Cleanup(func() { _ = c.Close() })
	return c
}

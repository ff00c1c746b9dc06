//go:build unix

package policy

import (
	"errors"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// hangBound is how long a read that does not block may take at most here:
// far more than a read of a small file takes under -race on a loaded
// machine, far less than a test's timeout.
const hangBound = 5 * time.Second

// releaseFIFO opens path's pipe for writing and closes it at once, so that
// a reader blocked in open or read (the tree before the fix) gets EOF and
// returns; a no-op when nobody reads it.
func releaseFIFO(path string) {
	if f, err := os.OpenFile(path, os.O_WRONLY|syscall.O_NONBLOCK, 0); err == nil {
		f.Close()
	}
}

// returnsSoon waits for done to be closed or sent on, and reports whether
// that happened within hangBound; when not, it releases the pipe at path
// until done, so that no goroutine is left blocked on it.
func returnsSoon[T any](path string, done <-chan T) bool {
	select {
	case <-done:
		return true
	case <-time.After(hangBound):
	}
	for {
		releaseFIFO(path)
		select {
		case <-done:
			return false
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// TestSourceRefusesFIFO: a policy path that becomes a named pipe with no
// writer is a refusal naming the path and its kind, at once: neither the
// reload, nor the polling goroutine, nor Close waits on a writer, and the
// Source's state stays readable meanwhile. A pipe at the path of a first
// load is refused too.
func TestSourceRefusesFIFO(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "policy.json")
	cfgWrite(t, path, cfgVersionDoc(1, ""))
	ticks := make(chan time.Time)
	events := &cfgEvents{}
	reported := make(chan struct{}, 4)
	src, err := WatchFile(path, WithPollTicks(ticks), OnReload(func(ev SourceEvent) {
		events.record(ev)
		reported <- struct{}{}
	}))
	if err != nil {
		t.Fatal(err)
	}
	first := src.Config()
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mkfifo(path, 0o600); err != nil {
		t.Skipf("mkfifo: %v", err)
	}
	t.Cleanup(func() { releaseFIFO(path) })

	// The polling goroutine's reload.
	ticks <- time.Time{}
	if !returnsSoon(path, reported) {
		src.Close()
		t.Fatalf("the poll's reload of a named pipe was not reported within %v", hangBound)
	}
	evs := events.list()
	if len(evs) != 1 || evs[0].Err == nil || evs[0].Config != first {
		t.Fatalf("events = %+v, want one refusal keeping the first config", evs)
	}
	if msg := evs[0].Err.Error(); !strings.Contains(msg, path) || !strings.Contains(msg, "named pipe") {
		t.Errorf("refusal %q does not name the path and its kind", msg)
	}
	if n, ev := src.Refused(); n != 1 || ev.Err == nil {
		t.Errorf("Refused() = %d, %+v", n, ev)
	}

	// An explicit Reload, and Close, return too.
	var reloadErr error
	done := make(chan struct{})
	go func() { reloadErr = src.Reload(); close(done) }()
	if !returnsSoon(path, done) {
		src.Close()
		t.Fatalf("Reload() of a named pipe did not return within %v", hangBound)
	}
	var pe *fs.PathError
	if reloadErr == nil || !errors.As(reloadErr, &pe) || pe.Path != path {
		t.Errorf("Reload() = %v, want a *fs.PathError naming %s", reloadErr, path)
	}
	closed := make(chan struct{})
	go func() { src.Close(); close(closed) }()
	if !returnsSoon(path, closed) {
		t.Fatalf("Close() did not return within %v", hangBound)
	}

	// A first load of a pipe, through WatchFile and LoadFile.
	for name, load := range map[string]func() error{
		"WatchFile": func() error { s, err := WatchFile(path, WithPollInterval(0)); s.closeIfAny(); return err },
		"LoadFile":  func() error { _, err := LoadFile(path); return err },
	} {
		var err error
		done := make(chan struct{})
		go func() { err = load(); close(done) }()
		if !returnsSoon(path, done) {
			t.Fatalf("%s of a named pipe did not return within %v", name, hangBound)
		}
		if err == nil || !strings.Contains(err.Error(), "named pipe") {
			t.Errorf("%s(pipe) = %v, want a refusal naming a named pipe", name, err)
		}
	}
}

// closeIfAny closes s when it is not nil.
func (s *Source) closeIfAny() {
	if s != nil {
		s.Close()
	}
}

// TestLoadFileRefusesOtherKinds: a socket, a device and a directory are
// refused, each by name and kind.
func TestLoadFileRefusesOtherKinds(t *testing.T) {
	dir := t.TempDir()
	sock := filepath.Join(dir, "p.sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Skipf("unix socket: %v", err)
	}
	defer l.Close()
	link := filepath.Join(dir, "null.json")
	if err := os.Symlink(os.DevNull, link); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct{ path, kind string }{
		{sock, "a socket"},
		{link, "a character device"},
		{dir, "a directory"},
	} {
		_, err := LoadFile(tt.path)
		if err == nil || !strings.Contains(err.Error(), tt.path) || !strings.Contains(err.Error(), tt.kind+", not a regular file") {
			t.Errorf("LoadFile(%s) = %v, want a refusal naming it and %q", tt.path, err, tt.kind)
		}
	}
}

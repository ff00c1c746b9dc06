package testserver_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
	"google.golang.org/grpc"

	"github.com/stagger-go/stagger/testserver"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// transports are the two ways a client reaches the server; every mode is tested
// over both.
var transports = []struct {
	name string
	opts []testserver.Option
	dial func(*testserver.Server, ...grpc.DialOption) (*grpc.ClientConn, error)
}{
	{"bufconn", nil, (*testserver.Server).Dial},
	{"tcp", []testserver.Option{testserver.WithTCP()}, (*testserver.Server).DialTCP},
}

// forEachTransport starts a server per transport and gives the test a raw
// client: no interceptor and grpc-go's own retries off, so it sees exactly what
// the server sends.
func forEachTransport(t *testing.T, opts []testserver.Option, f func(t *testing.T, s *testserver.Server, cc *grpc.ClientConn)) {
	t.Helper()
	for _, tr := range transports {
		t.Run(tr.name, func(t *testing.T) {
			s := testserver.New(append(append([]testserver.Option(nil), tr.opts...), opts...)...)
			t.Cleanup(s.Close)
			cc, err := tr.dial(s, grpc.WithDisableRetry())
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = cc.Close() })
			f(t, s, cc)
		})
	}
}

// fakeClock is a manual Clock: time moves only when the test calls Advance.
type fakeClock struct {
	mu       sync.Mutex
	now      time.Time
	sleepers map[*sleeper]struct{}
	changed  chan struct{}
}

type sleeper struct {
	until time.Time
	wake  chan struct{}
}

func newFakeClock() *fakeClock {
	return &fakeClock{
		now:      time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC),
		sleepers: make(map[*sleeper]struct{}),
		changed:  make(chan struct{}),
	}
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) Sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	c.mu.Lock()
	sl := &sleeper{until: c.now.Add(d), wake: make(chan struct{})}
	c.sleepers[sl] = struct{}{}
	close(c.changed)
	c.changed = make(chan struct{})
	c.mu.Unlock()
	select {
	case <-sl.wake:
		return nil
	case <-ctx.Done():
		c.mu.Lock()
		delete(c.sleepers, sl)
		c.mu.Unlock()
		return ctx.Err()
	}
}

// Advance moves the clock and wakes the sleepers whose time has come.
func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
	for sl := range c.sleepers {
		if !sl.until.After(c.now) {
			close(sl.wake)
			delete(c.sleepers, sl)
		}
	}
}

// awaitSleepers waits until n attempts are sleeping on the clock.
func (c *fakeClock) awaitSleepers(t *testing.T, n int) {
	t.Helper()
	timeout := time.NewTimer(10 * time.Second)
	defer timeout.Stop()
	for {
		c.mu.Lock()
		got, ch := len(c.sleepers), c.changed
		c.mu.Unlock()
		if got >= n {
			return
		}
		select {
		case <-ch:
		case <-timeout.C:
			t.Fatalf("%d attempts sleeping on the fake clock, want %d", got, n)
		}
	}
}

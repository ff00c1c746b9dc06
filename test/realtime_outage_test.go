package test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stagger-go/stagger"
	"github.com/stagger-go/stagger/budget"
	"github.com/stagger-go/stagger/interceptor"
	testingv1 "github.com/stagger-go/stagger/proto/stagger/testing/v1"
	"github.com/stagger-go/stagger/testserver"
)

// The Gate on real time, loopback TCP, a server that stays down for longer
// than the calls' deadlines: a call with a deadline waits through the
// outage's first three of its deadlines, held by the outage rule (reason
// "deferred"), never past its deadline, and later fails at once (the
// futility rule, reason "outage": issue 88, long outages fail fast); the
// first call after the server is back succeeds.
func TestRealTimeOutageHoldsThenFailsFast(t *testing.T) {
	srv := testserver.New(testserver.WithTCP())
	t.Cleanup(srv.Close)
	cfg := rtConfig(t, rtNoTimerFile)
	b, err := budget.New(budget.DefaultSettings())
	if err != nil {
		t.Fatal(err)
	}
	cc, err := srv.DialTCP(stagger.DialOptions(cfg, interceptor.WithBudget(b))...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	client := testingv1.NewTestServiceClient(cc)
	get := func(deadline time.Duration) (time.Duration, error) {
		ctx, cancel := context.WithTimeout(context.Background(), deadline)
		defer cancel()
		start := time.Now()
		_, err := client.Get(ctx, &testingv1.GetRequest{Script: &testingv1.Script{}})
		return time.Since(start), err
	}
	// A server that looked healthy: served, and no failure for a second
	// (the outage rule).
	for range 12 {
		if _, err := get(time.Second); err != nil {
			t.Fatal(err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	const deadline = 200 * time.Millisecond
	srv.SetOutage(true)
	down := time.Now()
	type call struct {
		at, took time.Duration
		err      error
	}
	var (
		mu    sync.Mutex
		calls []call
	)
	// 200 calls over 2 s: ten deadlines of outage. (At 400, the process
	// beside a CPU hog at -cpu=1 under -race fell so far behind that gRPC's
	// own deadlines fired 100 to 800 ms late.)
	spaced(200, 10*time.Millisecond, func(int) {
		at := time.Since(down)
		took, err := get(deadline)
		mu.Lock()
		calls = append(calls, call{at, took, err})
		mu.Unlock()
	})
	srv.SetOutage(false)
	var late, fast, outage int
	for _, c := range calls {
		if c.err == nil {
			t.Errorf("a call at %v into the outage succeeded", c.at)
			continue
		}
		if c.took > deadline+100*time.Millisecond {
			t.Errorf("a call at %v into the outage took %v, past its deadline of %v", c.at, c.took, deadline)
		}
		if c.at < 4*deadline {
			continue
		}
		late++
		if reasonOf(c.err) == "outage" {
			outage++
		}
		if c.took < deadline/2 {
			fast++
		}
	}
	// Most fail at once (a rare lone probe goes, and a call whose retry the
	// budget pays fails by its own attempts); allow the machine's load
	// more.
	if outage < late*7/10 || fast < late*7/10 {
		t.Errorf("of %d calls from four deadlines into the outage, %d failed with reason outage and %d within half their deadline, want 70 %% at least of each", late, outage, fast)
	}
	// The server is back: a call goes through at once.
	var ok bool
	for end := time.Now().Add(time.Second); time.Now().Before(end) && !ok; {
		_, err := get(deadline)
		ok = err == nil
	}
	if !ok {
		t.Error("no call succeeded within a second of the server's return")
	}
}

// A stream whose caller's context ends while the stream opens: the watch
// on an abandoned stream may run at once on its own goroutine and finish
// the stream while it is being set up (found by the soak: a data race on
// the watch's stop function). Every stream ends, once, and -race sees no
// race.
func TestRealTimeStreamCancelledAtOpen(t *testing.T) {
	_, client := rtBench(t, rtNoTimerFile)
	parallel(8, func(i int) {
		for r := range 100 {
			ctx, cancel := context.WithCancel(context.Background())
			go func() {
				time.Sleep(time.Duration((i+r)%7) * 20 * time.Microsecond)
				cancel()
			}()
			st, err := client.ListItems(ctx, &testingv1.ListItemsRequest{Script: &testingv1.Script{Key: fmt.Sprint("cancel-at-open-", i, "-", r), ResponseCount: 3}})
			if err != nil {
				continue
			}
			done := make(chan struct{})
			go func() {
				defer close(done)
				for {
					if _, err := st.Recv(); err != nil {
						return
					}
				}
			}()
			select {
			case <-done:
			case <-time.After(5 * time.Second):
				t.Errorf("stream %d/%d: no end within 5s of its cancellation", i, r)
				return
			}
		}
	})
}

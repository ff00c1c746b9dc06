//go:build go1.25

package test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/stagger-go/stagger"
	"github.com/stagger-go/stagger/budget"
	"github.com/stagger-go/stagger/interceptor"
	"github.com/stagger-go/stagger/policy"
	testingv1 "github.com/stagger-go/stagger/proto/stagger/testing/v1"
	"github.com/stagger-go/stagger/testserver"
)

// ownBudgetClient dials a new test server with cfg (nil: none), opts and a
// default budget of the client's own, bs (the process's is shared by the
// package's tests); the server and the connection close when the test
// ends.
func ownBudgetClient(t *testing.T, cfg *policy.Config, opts ...interceptor.Option) (*testserver.Server, *budget.Backends, testingv1.TestServiceClient) {
	t.Helper()
	srv := testserver.New()
	t.Cleanup(srv.Close)
	bs, err := budget.NewBackends(budget.DefaultSettings())
	if err != nil {
		t.Fatal(err)
	}
	cc, err := srv.Dial(stagger.DialOptions(cfg, append(opts, interceptor.WithDefaultBudgets(bs))...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	return srv, bs, testingv1.NewTestServiceClient(cc)
}

// heldCalls starts n calls through client, each with a 10 s deadline,
// against srv, served a second before its outage begins (so that the
// budget's Gates, bs's, see an outage and hold the retries), and returns
// once bs holds at least min of them; wait waits for their ends and returns, for
// each, when it ended, its code and its Report.
func heldCalls(t *testing.T, srv *testserver.Server, client testingv1.TestServiceClient, bs *budget.Backends, n, min int) (wait func() ([]time.Time, []codes.Code, []interceptor.Report)) {
	t.Helper()
	if _, err := client.Get(context.Background(), &testingv1.GetRequest{Script: &testingv1.Script{Key: "warm"}}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Second)
	srv.SetOutage(true)
	ends := make([]time.Time, n)
	codeOf := make([]codes.Code, n)
	reports := make([]interceptor.Report, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			_, err := client.Get(ctx, &testingv1.GetRequest{Script: &testingv1.Script{Key: fmt.Sprint("held-", i)}}, interceptor.WithReport(&reports[i]))
			ends[i], codeOf[i] = time.Now(), status.Code(err)
		}()
	}
	// The first attempts fail at once; their retries' pauses (1 s) end,
	// and the budget's Gate, seeing the backend down, holds them.
	time.Sleep(2 * time.Second)
	synctest.Wait()
	waiting := 0
	for _, s := range bs.States() {
		waiting += s.Waiting
	}
	if waiting < min {
		t.Fatalf("%d calls held, want %d of %d at least", waiting, min, n)
	}
	return func() ([]time.Time, []codes.Code, []interceptor.Report) {
		wg.Wait()
		return ends, codeOf, reports
	}
}

// checkReleased: every call that had not ended before the switch ended
// within 100 ms of it, with its last attempt's status (UNAVAILABLE),
// reason "disabled" and its wait's end "switch".
func checkReleased(t *testing.T, flipped time.Time, ends []time.Time, got []codes.Code, reports []interceptor.Report) {
	t.Helper()
	late := 0
	for i := range ends {
		if ends[i].Before(flipped) {
			continue
		}
		if d := ends[i].Sub(flipped); d > 100*time.Millisecond {
			late++
			if late == 1 {
				t.Errorf("call %d ended %v after the switch (%+v), want at once", i, d, reports[i])
			}
		}
		if got[i] != codes.Unavailable || reports[i].Reason.String() != "disabled" || reports[i].WaitEnd != "switch" {
			t.Errorf("call %d: %v, report %+v; want UNAVAILABLE, its last status, reason disabled, wait end switch", i, got[i], reports[i])
			return
		}
	}
	if late > 0 {
		t.Errorf("%d of %d held calls ended later than 100 ms after the switch", late, len(ends))
	}
}

// Turning the switch on ends every call the Gate holds at once, with its
// last status, as no retry would; the calls after it make one attempt.
func TestKillSwitchReleasesHeldCalls(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		defer interceptor.SetDisabled(interceptor.Disabled())
		interceptor.SetDisabled(false)
		srv, bs, client := ownBudgetClient(t, parse(t, retryFile))
		wait := heldCalls(t, srv, client, bs, 200, 200)

		flipped := time.Now()
		interceptor.SetDisabled(true)
		ends, got, reports := wait()
		checkReleased(t, flipped, ends, got, reports)

		// While it is on, a call's end says so whatever its code: a
		// dashboard of the ends by reason shows the switch.
		srv.SetOutage(false)
		var r interceptor.Report
		if _, err := client.Get(context.Background(), &testingv1.GetRequest{Script: &testingv1.Script{Key: "served"}}, interceptor.WithReport(&r)); err != nil ||
			r.Code != codes.OK || r.Reason.String() != "disabled" || !r.Disabled {
			t.Errorf("a call served with the switch on: %v, %+v; want OK, reason disabled", err, r)
		}
	})
}

// A policy file reloaded with "disabled": true is the switch: the held
// calls end at once when a call first follows the new file, and the calls
// that follow it make one attempt, reason "disabled"; reloaded without it,
// calls retry again.
func TestFileSwitchReleasesHeldCalls(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		src := policy.NewSource(parse(t, retryFile))
		var ended atomic.Int64
		srv, bs, client := ownBudgetClient(t, nil, interceptor.WithConfigSource(src),
			interceptor.WithCallHook(func(_ context.Context, e interceptor.Event) {
				if e.Kind == interceptor.EventEnd && e.Disabled {
					ended.Add(1)
				}
			}))
		wait := heldCalls(t, srv, client, bs, 200, 200)

		off := `{"disabled": true, ` + retryFile[1:]
		if err := src.Update(parse(t, off)); err != nil {
			t.Fatal(err)
		}
		flipped := time.Now()
		var r interceptor.Report
		_, err := client.Get(context.Background(), &testingv1.GetRequest{Script: &testingv1.Script{Key: "after"}}, interceptor.WithReport(&r))
		if status.Code(err) != codes.Unavailable || r.Attempts != 1 || !r.Disabled || r.Reason.String() != "disabled" {
			t.Errorf("a call after the reload: %v, %+v; want one attempt, UNAVAILABLE, Disabled, reason disabled", err, r)
		}
		ends, got, reports := wait()
		checkReleased(t, flipped, ends, got, reports)
		if n := ended.Load(); n != 1 {
			t.Errorf("%d EventEnds with Disabled, want 1 (the call that followed the file)", n)
		}

		if err := src.Update(parse(t, retryFile)); err != nil {
			t.Fatal(err)
		}
		srv.SetOutage(false)
		r = interceptor.Report{}
		if _, err := client.Get(context.Background(), &testingv1.GetRequest{Script: &testingv1.Script{Key: "on again", FailAttempts: 1}}, interceptor.WithReport(&r)); err != nil || r.Attempts != 2 || r.Disabled {
			t.Errorf("reloaded without the switch: %v, %+v; want a retry, then success", err, r)
		}
	})
}

// A hedged call whose attempts all failed waits for its next hedge in the
// Gate as a retry would: the switch ends that wait too.
func TestKillSwitchReleasesHeldHedges(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		defer interceptor.SetDisabled(interceptor.Disabled())
		interceptor.SetDisabled(false)
		cfg := parse(t, `{"methodConfig": [{"name": [{"service": "stagger.testing.v1.TestService"}],
			"hedgingPolicy": {"maxAttempts": 3, "hedgingDelay": "0.5s", "nonFatalStatusCodes": ["UNAVAILABLE"]}}]}`)
		srv, bs, client := ownBudgetClient(t, cfg)
		// A call's hedge may be in flight: its failure sends it to the
		// Gate after the switch, which ends it at once too.
		wait := heldCalls(t, srv, client, bs, 50, 45)

		flipped := time.Now()
		interceptor.SetDisabled(true)
		ends, got, reports := wait()
		checkReleased(t, flipped, ends, got, reports)
	})
}

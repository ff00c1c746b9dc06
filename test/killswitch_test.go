//go:build go1.25

package test

import (
	"context"
	"fmt"
	"io"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/stagger-go/stagger"
	"github.com/stagger-go/stagger/budget"
	"github.com/stagger-go/stagger/interceptor"
	"github.com/stagger-go/stagger/policy"
	testingv1 "github.com/stagger-go/stagger/proto/stagger/testing/v1"
	"github.com/stagger-go/stagger/testserver"
)

// With the process-wide switch on, a call that the file would retry (and
// whose budget would make its retry wait: the backend is down) makes one
// attempt and returns at once; the Report says the switch was on. Turned
// off again, the next call retries as the file says.
func TestKillSwitch(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		defer interceptor.SetDisabled(interceptor.Disabled())
		srv := testserver.New()
		defer srv.Close()
		// A default budget of its own (the process's is shared by the
		// package's tests), which holds retries while the backend is down.
		bs, err := budget.NewBackends(budget.DefaultSettings())
		if err != nil {
			t.Fatal(err)
		}
		cc, err := srv.Dial(stagger.DialOptions(parse(t, retryFile), interceptor.WithDefaultBudgets(bs))...)
		if err != nil {
			t.Fatal(err)
		}
		defer cc.Close()
		client := testingv1.NewTestServiceClient(cc)
		call := func(key string, fail int32) (interceptor.Report, time.Duration) {
			t.Helper()
			var r interceptor.Report
			start := time.Now()
			_, _ = client.Get(context.Background(), &testingv1.GetRequest{Script: &testingv1.Script{Key: key, FailAttempts: fail}}, interceptor.WithReport(&r))
			if got := len(srv.Attempts(key)); got != r.Attempts {
				t.Fatalf("%s: the server saw %d attempts, the report says %d", key, got, r.Attempts)
			}
			return r, time.Since(start)
		}

		interceptor.SetDisabled(true)
		if !interceptor.Disabled() {
			t.Fatal("Disabled() is false after SetDisabled(true)")
		}
		// The whole outage: every call fails; without the switch the
		// default budget's Gate would hold their retries.
		srv.SetOutage(true)
		for i := range 20 {
			r, took := call(fmt.Sprint("off-", i), 0)
			if r.Attempts != 1 || r.Retries != 0 || r.Deferred != 0 || took != 0 || !r.Disabled {
				t.Fatalf("switch on, call %d: %+v after %v; want 1 attempt, no wait, Disabled", i, r, took)
			}
			if !strings.Contains(r.String(), interceptor.DisableEnv) {
				t.Fatalf("switch on: the report %q does not name the switch", r)
			}
		}
		srv.SetOutage(false)
		if r, took := call("off-flaky", 2); r.Attempts != 1 || took != 0 {
			t.Fatalf("switch on, a flaky call: %+v after %v; want 1 attempt at once", r, took)
		}

		interceptor.SetDisabled(false)
		r, took := call("on-flaky", 1)
		if r.Attempts != 2 || r.Reason != policy.ReasonSuccess || r.Disabled {
			t.Fatalf("switch off again: %+v; want 2 attempts, success", r)
		}
		if took < time.Second { // the file's first pause
			t.Fatalf("switch off again: the call took %v; want its pause (1s)", took)
		}
	})
}

// The switch turns hedging off too, and a stream's retries: with it on, a
// hedged method's slow call sends no hedge, and a stream that fails before
// its first message is not reopened.
func TestKillSwitchHedgesAndStreams(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		defer interceptor.SetDisabled(interceptor.Disabled())
		srv := testserver.New()
		defer srv.Close()
		cfg := parse(t, `{"methodConfig": [{
			"name": [{"service": "stagger.testing.v1.TestService", "method": "Get"}],
			"hedgingPolicy": {"maxAttempts": 3, "hedgingDelay": "0.1s", "nonFatalStatusCodes": ["UNAVAILABLE"]}
		}, {
			"name": [{"service": "stagger.testing.v1.TestService", "method": "ListItems"}],
			"retryPolicy": {"maxAttempts": 3, "initialBackoff": "0.1s", "maxBackoff": "0.1s",
				"backoffMultiplier": 1, "retryableStatusCodes": ["UNAVAILABLE"]}
		}]}`)
		cc, err := srv.Dial(stagger.DialOptions(cfg, interceptor.WithBudget(nil))...)
		if err != nil {
			t.Fatal(err)
		}
		defer cc.Close()
		client := testingv1.NewTestServiceClient(cc)
		slow := &testingv1.Script{Delay: durationpb.New(time.Second)}
		list := func(key string) (items int, err error) {
			t.Helper()
			stream, err := client.ListItems(context.Background(), &testingv1.ListItemsRequest{Script: &testingv1.Script{Key: key, FailAttempts: 1, ResponseCount: 3}})
			if err != nil {
				return 0, err
			}
			for {
				if _, err := stream.Recv(); err != nil {
					if err == io.EOF {
						err = nil
					}
					return items, err
				}
				items++
			}
		}

		for _, on := range []bool{true, false} {
			interceptor.SetDisabled(on)
			name := fmt.Sprint("on-", on)
			slow.Key = "hedge-" + name
			var r interceptor.Report
			if _, err := client.Get(context.Background(), &testingv1.GetRequest{Script: slow}, interceptor.WithReport(&r)); err != nil {
				t.Fatal(err)
			}
			hedges := len(srv.Attempts(slow.Key)) - 1
			items, err := list("stream-" + name)
			attempts := len(srv.Attempts("stream-" + name))
			if on && (hedges != 0 || r.Hedges != 0 || !r.Disabled || attempts != 1 || err == nil) {
				t.Errorf("switch on: %d hedges (report %+v), a stream of %d attempts (%d items, %v); want no hedge, one attempt that fails", hedges, r, attempts, items, err)
			}
			if !on && (hedges == 0 || attempts != 2 || err != nil || items != 3) {
				t.Errorf("switch off: %d hedges, a stream of %d attempts (%d items, %v); want hedges, and 2 attempts that deliver 3 items", hedges, attempts, items, err)
			}
		}
	})
}

//go:build go1.25

package test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"testing/synctest"
	"time"

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

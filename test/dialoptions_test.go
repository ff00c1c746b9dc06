//go:build go1.25

// The package's //go:debug asynctimerchan=0, which synctest needs, is in
// interceptor_test.go.

package test

import (
	"context"
	"sync/atomic"
	"testing"
	"testing/synctest"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/stagger-go/stagger"
	"github.com/stagger-go/stagger/budget"
	"github.com/stagger-go/stagger/interceptor"
	"github.com/stagger-go/stagger/policy"
	testingv1 "github.com/stagger-go/stagger/proto/stagger/testing/v1"
	"github.com/stagger-go/stagger/testserver"
)

// The test of the root package's DialOptions. What the interceptors do with
// the options it installs is tested in the other files of this package,
// DialOptionsFromSource's reloads in source_test.go.

// TestDialOptions: one service config, given to grpc-go as a resolver would
// deliver it, is not applied once stagger is in; given to DialOptions, it
// retries, with the default budget of the connection's target and the
// interceptor options passed on.
func TestDialOptions(t *testing.T) {
	const file = `{"methodConfig": [{"name": [{"service": "stagger.testing.v1.TestService"}],
		"retryPolicy": {"maxAttempts": 4, "initialBackoff": "0.1s", "maxBackoff": "1s",
		"backoffMultiplier": 2, "retryableStatusCodes": ["UNAVAILABLE"]}}]}`
	cfg, err := policy.ParseConfig([]byte(file))
	if err != nil {
		t.Fatal(err)
	}
	t.Run("grpc-go's own retry is off", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			srv := testserver.New()
			defer srv.Close()
			cc, err := srv.Dial(append(stagger.DialOptions(nil), grpc.WithDefaultServiceConfig(file))...)
			if err != nil {
				t.Fatal(err)
			}
			defer cc.Close()
			_, err = testingv1.NewTestServiceClient(cc).Get(context.Background(), &testingv1.GetRequest{Script: &testingv1.Script{Key: "k", FailAttempts: 10}})
			if status.Code(err) != codes.Unavailable {
				t.Fatal(err)
			}
			if n := len(srv.Attempts("k")); n != 1 {
				t.Errorf("%d attempts, want 1: grpc-go retried", n)
			}
		})
	})
	t.Run("retries per the file, default budget", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			srv := testserver.New()
			defer srv.Close()
			var retries atomic.Int32
			hook := func(e interceptor.Event) {
				if e.Kind == interceptor.EventRetry {
					retries.Add(1)
				}
			}
			cc, err := srv.Dial(stagger.DialOptions(cfg, interceptor.WithHook(hook))...)
			if err != nil {
				t.Fatal(err)
			}
			defer cc.Close()
			// The default budget (budget.DefaultBackends) of cc's target,
			// for the Get method: its Allowed counts the retries it admitted.
			allowed := func() uint64 {
				return budget.DefaultBackends().Get(cc.Target(), testingv1.TestService_Get_FullMethodName).State().Allowed
			}
			before := allowed()
			if _, err := testingv1.NewTestServiceClient(cc).Get(context.Background(), &testingv1.GetRequest{Script: &testingv1.Script{Key: "k", FailAttempts: 1}}); err != nil {
				t.Fatal(err)
			}
			if n := len(srv.Attempts("k")); n != 2 {
				t.Errorf("%d attempts, want 2", n)
			}
			if n := retries.Load(); n != 1 {
				t.Errorf("the hook saw %d retries, want 1: DialOptions did not pass the interceptor options on", n)
			}
			if after := allowed(); after != before+1 {
				t.Errorf("default budget allowed %d -> %d, want one more: DialOptions did not install it for the connection's target", before, after)
			}
		})
	})
	// The README's form compiles.
	opts := append(stagger.DialOptions(cfg), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if len(opts) != 5 { // the interceptors, the header watch, grpc's retry off, the credentials
		t.Errorf("%d dial options", len(opts))
	}
}

//go:build go1.25

package test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"google.golang.org/grpc"

	"github.com/stagger-go/stagger/interceptor"
	"github.com/stagger-go/stagger/policy"
	testingv1 "github.com/stagger-go/stagger/proto/stagger/testing/v1"
	"github.com/stagger-go/stagger/testserver"
)

// TestOptionNotAppliedOncePerMethodEveryEngine (issue 71): a per-call
// option that cannot apply is reported once per method, whatever engine
// runs the method's calls: the unary loop, unary hedging, the retried
// stream, the hedged stream. Each case makes three calls, unary or stream,
// each carrying the options, and the hooks must hear one notice, with its
// reason (and, for options with no policy to apply to, their names).
func TestOptionNotAppliedOncePerMethodEveryEngine(t *testing.T) {
	const (
		retried = `{"methodConfig": [{"name": [{"service": "stagger.testing.v1.TestService"}], "idempotent": %v,
		"retryPolicy": {"maxAttempts": 3, "initialBackoff": "0.01s", "maxBackoff": "1s", "backoffMultiplier": 2, "retryableStatusCodes": ["UNAVAILABLE"]}}]}`
		hedged = `{"methodConfig": [{"name": [{"service": "stagger.testing.v1.TestService"}], "idempotent": true,
		"hedgingPolicy": {"maxAttempts": 2, "hedgingDelay": "1s", "nonFatalStatusCodes": ["UNAVAILABLE"]}}]}`
		none = `{"methodConfig": [{"name": [{"service": "stagger.testing.v1.Other"}],
		"retryPolicy": {"maxAttempts": 3, "initialBackoff": "0.01s", "maxBackoff": "1s", "backoffMultiplier": 2, "retryableStatusCodes": ["UNAVAILABLE"]}}]}`
	)
	backoff := interceptor.WithBackoff(policy.Backoff{Initial: time.Millisecond, Max: time.Millisecond, Multiplier: 1})
	timer := interceptor.WithPerAttemptTimeout(time.Second)
	pred := interceptor.WithPredicate(func(error) (retry, decided bool) { return false, false })
	for _, tc := range []struct {
		name   string
		file   string
		opts   []grpc.CallOption
		reason policy.Reason
		names  []string // the options a no-policy notice names
		// unaryApplies: a unary call applies the options (no notice);
		// a stream does not.
		unaryApplies bool
	}{
		{"retried, timer on a method not idempotent", fmt.Sprintf(retried, false), []grpc.CallOption{timer}, policy.ReasonNotIdempotent, nil, false},
		{"retried, timer on a method not idempotent, with a key", fmt.Sprintf(retried, false), []grpc.CallOption{timer, interceptor.WithIdempotencyKey("idempotency-key")}, policy.ReasonNotIdempotent, nil, true},
		{"retried, attempts above the cap", fmt.Sprintf(retried, true), []grpc.CallOption{interceptor.WithMaxAttempts(100)}, policy.ReasonAttempts, nil, false},
		{"retried, backoff that breaks a rule", fmt.Sprintf(retried, true), []grpc.CallOption{interceptor.WithBackoff(policy.Backoff{Initial: time.Millisecond})}, policy.ReasonInvalidOption, nil, false},
		{"hedged, options a hedging policy does not take", hedged, []grpc.CallOption{backoff, timer, pred}, policy.ReasonNoPolicy, []string{"WithPredicate", "WithBackoff", "WithPerAttemptTimeout"}, false},
		{"hedged, attempts above the cap", hedged, []grpc.CallOption{interceptor.WithMaxAttempts(100)}, policy.ReasonAttempts, nil, false},
		{"no policy", none, []grpc.CallOption{interceptor.WithMaxAttempts(3), backoff, pred}, policy.ReasonNoPolicy, []string{"WithMaxAttempts", "WithPredicate", "WithBackoff"}, false},
	} {
		for _, kind := range []string{"unary", "stream"} {
			t.Run(tc.name+"/"+kind, func(t *testing.T) {
				synctest.Test(t, func(t *testing.T) {
					var h hookLog
					srv := testserver.New()
					t.Cleanup(srv.Close)
					opts := []interceptor.Option{interceptor.WithConfig(parse(t, tc.file)), interceptor.WithHook(h.hook)}
					cc := srv.ClientConn(t, grpc.WithChainUnaryInterceptor(interceptor.UnaryClientInterceptor(opts...)),
						grpc.WithChainStreamInterceptor(interceptor.StreamClientInterceptor(opts...)), grpc.WithDisableRetry())
					c := testingv1.NewTestServiceClient(cc)
					for range 3 {
						var err error
						if kind == "unary" {
							_, err = c.Get(context.Background(), &testingv1.GetRequest{Script: &testingv1.Script{Key: "k"}}, tc.opts...)
						} else {
							err = runListItems(context.Background(), c, &testingv1.Script{Key: "k"}, 1, tc.opts...).err
						}
						if err != nil {
							t.Fatal(err)
						}
					}
					notices := h.kinds(interceptor.EventNotice)
					if tc.unaryApplies && kind == "unary" {
						if len(notices) != 0 {
							t.Fatalf("notices = %+v, want none: a unary call applies the options", notices)
						}
						return
					}
					if len(notices) != 1 || notices[0].Reason != tc.reason {
						t.Fatalf("notices = %+v, want one, reason %s", notices, tc.reason)
					}
					for _, name := range tc.names {
						if !strings.Contains(fmt.Sprint(notices[0].Err), name) {
							t.Errorf("the notice says %q, want it to name %s", notices[0].Err, name)
						}
					}
				})
			})
		}
	}
}

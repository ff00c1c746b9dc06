package staggerconnect_test

import (
	"context"
	"testing"

	"connectrpc.com/connect"

	staggerconnect "github.com/stagger-go/stagger/connect"
	"github.com/stagger-go/stagger/connect/internal/testservice"
	"github.com/stagger-go/stagger/interceptor"
	"github.com/stagger-go/stagger/policy"
	testingv1 "github.com/stagger-go/stagger/proto/stagger/testing/v1"
	"github.com/stagger-go/stagger/server"
)

func newHandler(t *testing.T, opts ...server.Option) *staggerconnect.Handler {
	t.Helper()
	h, err := staggerconnect.NewHandler(opts...)
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// TestKeyRunsOnce: a non-idempotent call whose first attempt ran and lost
// its answer to a reset is retried with its key, and the server side
// replays the first run's answer: the handler runs once.
func TestKeyRunsOnce(t *testing.T) {
	forEachProtocol(t, func(t *testing.T, p protocol) {
		store, err := server.NewMemoryStore(server.MemoryOptions{})
		if err != nil {
			t.Fatal(err)
		}
		side := newHandler(t, server.WithIdempotency(store, server.IdempotencyOptions{Header: "idempotency-key"}))
		ts := newTestServer(t, p.h2c, testservice.Middleware, connect.WithInterceptors(side))
		var rep interceptor.Report
		client := ts.testClient(p, newClient(t, retryFile, interceptor.WithIdempotencyKey("idempotency-key")))
		ctx := staggerconnect.WithCallOptions(context.Background(), interceptor.WithReport(&rep))
		resp, err := client.Write(ctx, connect.NewRequest(&testingv1.WriteRequest{Script: &testingv1.Script{Key: "k", ResetAttempts: 1}}))
		if err != nil {
			t.Fatal(err)
		}
		if rep.Attempts != 2 {
			t.Errorf("%d attempts, want 2", rep.Attempts)
		}
		if rec := ts.svc.Record("k"); rec.Runs != 1 || rec.Attempts != 1 {
			t.Errorf("the handler saw %d attempts and ran %d times, want 1 and 1", rec.Attempts, rec.Runs)
		}
		if got := resp.Msg.GetReply().GetAttempt(); got != 1 {
			t.Errorf("answer of attempt %d, want the first run's (1)", got)
		}
		if resp.Header().Get(server.ReplayedHeader) != "true" {
			t.Errorf("response header %v lacks %s", resp.Header(), server.ReplayedHeader)
		}
	})
}

// dontRetry asks, from inside the server side, that the caller not retry a
// request that carries x-dont-retry.
var dontRetry = connect.UnaryInterceptorFunc(func(next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		if req.Header().Get("x-dont-retry") != "" {
			server.DontRetry(ctx)
		}
		return next(ctx, req)
	}
})

func TestDontRetryPropagates(t *testing.T) {
	forEachProtocol(t, func(t *testing.T, p protocol) {
		ts := newTestServer(t, p.h2c, nil, connect.WithInterceptors(newHandler(t), dontRetry))
		var rep interceptor.Report
		client := ts.testClient(p, newClient(t, retryFile))
		ctx := staggerconnect.WithCallOptions(context.Background(), interceptor.WithReport(&rep))
		req := connect.NewRequest(&testingv1.GetRequest{Script: &testingv1.Script{Key: "k", FailAttempts: 9, Message: "down"}})
		req.Header().Set("x-dont-retry", "1")
		_, err := client.Get(ctx, req)
		if connect.CodeOf(err) != connect.CodeUnavailable {
			t.Errorf("error %v, want the handler's unavailable", err)
		}
		if rep.Attempts != 1 || rep.Reason != policy.ReasonPushback {
			t.Errorf("report %+v, want 1 attempt, reason pushback", rep)
		}
	})
}

func TestShedding(t *testing.T) {
	forEachProtocol(t, func(t *testing.T, p protocol) {
		ts := newTestServer(t, p.h2c, nil, connect.WithInterceptors(newHandler(t, server.WithConcurrencyLimit(1))))
		release := ts.svc.Hold("slow")
		client := ts.testClient(p)
		done := make(chan error, 1)
		go func() {
			_, err := client.Get(context.Background(), connect.NewRequest(&testingv1.GetRequest{Script: &testingv1.Script{Key: "slow"}}))
			done <- err
		}()
		defer func() {
			release()
			if err := <-done; err != nil {
				t.Errorf("the held call: %v", err)
			}
		}()
		for ts.svc.Record("slow").Attempts == 0 {
			runtimeGosched()
		}
		_, err := client.Get(context.Background(), connect.NewRequest(&testingv1.GetRequest{Script: &testingv1.Script{Key: "shed"}}))
		cerr, ok := asConnectError(err)
		if !ok || cerr.Code() != connect.CodeResourceExhausted {
			t.Fatalf("error %v, want resource_exhausted", err)
		}
		if cerr.Meta().Get(testservice.PushbackTrailer) == "" {
			t.Errorf("no pushback in %v", cerr.Meta())
		}
		if len(cerr.Details()) != 1 || cerr.Details()[0].Type() != "google.rpc.RetryInfo" {
			t.Errorf("details %v, want one RetryInfo", cerr.Details())
		}
		if got := ts.svc.Record("shed").Attempts; got != 0 {
			t.Errorf("the shed call reached the handler %d times", got)
		}
	})
}

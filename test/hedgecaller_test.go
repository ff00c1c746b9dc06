//go:build go1.25

package test

import (
	"context"
	"errors"
	"io"
	"testing"
	"testing/synctest"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/stagger-go/stagger/interceptor"
	"github.com/stagger-go/stagger/policy"
	testingv1 "github.com/stagger-go/stagger/proto/stagger/testing/v1"
	"github.com/stagger-go/stagger/testserver"
)

// callerDeadline is the caller's deadline in TestHedgeCallerDeadlineWithinSlack;
// the server answers nearDeadline after the call began, closer to it than
// the interceptor's slack for a report that beats the context's own timer.
const (
	callerDeadline = 100 * time.Millisecond
	nearDeadline   = callerDeadline - 500*time.Microsecond
)

// TestHedgeCallerDeadlineWithinSlack: a hedged attempt that fails with
// DEADLINE_EXCEEDED a moment before the caller's deadline (the server's
// clock, or a proxy that rounds grpc-timeout down, beat the caller's
// context) ended because the caller's deadline did, as a retried attempt's
// does: the call ends for the caller (policy.ReasonCaller), not as a
// failure the codes judge, and no hedge is sent into a deadline that is
// over, whether DEADLINE_EXCEEDED is non-fatal or not. A unary call and a
// stream alike. Before hedging asked the retried engine's caller rule, it
// ended "not retryable", or sent a second attempt.
func TestHedgeCallerDeadlineWithinSlack(t *testing.T) {
	early := func(ctx context.Context, _ any, _ *grpc.UnaryServerInfo, _ grpc.UnaryHandler) (any, error) {
		time.Sleep(nearDeadline)
		return nil, status.Error(codes.DeadlineExceeded, "the server's clock")
	}
	earlyStream := func(any, grpc.ServerStream, *grpc.StreamServerInfo, grpc.StreamHandler) error {
		time.Sleep(nearDeadline)
		return status.Error(codes.DeadlineExceeded, "the server's clock")
	}
	for _, nonFatal := range []string{`"UNAVAILABLE"`, `"UNAVAILABLE", "DEADLINE_EXCEEDED"`} {
		file := `{"methodConfig": [{
			"name": [{"service": "stagger.testing.v1.TestService"}], "idempotent": true,
			"hedgingPolicy": {"maxAttempts": 3, "hedgingDelay": "10s", "nonFatalStatusCodes": [` + nonFatal + `]}
		}]}`
		for _, kind := range []string{"unary", "stream"} {
			t.Run(kind+" non-fatal "+nonFatal, func(t *testing.T) {
				synctest.Test(t, func(t *testing.T) {
					var attempts int
					count := func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
						attempts++
						return early(ctx, req, info, h)
					}
					countStream := func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, h grpc.StreamHandler) error {
						attempts++
						return earlyStream(srv, ss, info, h)
					}
					srv := testserver.New(testserver.WithServerOptions(grpc.ChainUnaryInterceptor(count), grpc.ChainStreamInterceptor(countStream)))
					t.Cleanup(srv.Close)
					var hooks hookLog
					c := staggerClient(t, srv, file, []interceptor.Option{interceptor.WithHook(hooks.hook)})
					ctx, cancel := context.WithTimeout(context.Background(), callerDeadline)
					defer cancel()
					var rep interceptor.Report
					var err error
					if kind == "unary" {
						_, err = c.Get(ctx, &testingv1.GetRequest{Script: &testingv1.Script{Key: "k"}}, interceptor.WithReport(&rep))
					} else {
						var st testingv1.TestService_ListItemsClient
						st, err = c.ListItems(ctx, &testingv1.ListItemsRequest{Script: &testingv1.Script{Key: "k"}}, interceptor.WithReport(&rep))
						for err == nil {
							_, err = st.Recv()
						}
						if err == io.EOF {
							err = nil
						}
					}
					synctest.Wait()
					if status.Code(err) != codes.DeadlineExceeded {
						t.Fatalf("call ended with %v, want DEADLINE_EXCEEDED", err)
					}
					var e *interceptor.Error
					if !errors.As(err, &e) || e.Reason != policy.ReasonCaller {
						t.Errorf("call ended with %#v, want an *interceptor.Error for the caller (%v)", err, policy.ReasonCaller)
					}
					if rep.Reason != policy.ReasonCaller || rep.Attempts != 1 {
						t.Errorf("Report: reason %v after %d attempts, want %v after 1", rep.Reason, rep.Attempts, policy.ReasonCaller)
					}
					if attempts != 1 || len(hooks.kinds(interceptor.EventHedge)) != 0 {
						t.Errorf("server saw %d attempts, hooks %d hedges; want 1 attempt, no hedge", attempts, len(hooks.kinds(interceptor.EventHedge)))
					}
				})
			})
		}
	}
}

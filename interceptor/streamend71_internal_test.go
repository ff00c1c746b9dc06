//go:build go1.25

package interceptor

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/emptypb"

	"github.com/stagger-go/stagger/policy"
)

// TestCommittedStreamFailsAsCallerLeaves: a stream committed to an attempt
// (its headers came) whose server then fails it UNAVAILABLE, read by the
// caller after its context ended, ends with that status and ReasonCaller,
// whether the stream was retried or hedged: a committed attempt keeps its
// own status (the caller's replaces only a failure that would have been
// retried or hedged), by the one decision and the retried stream's outcome
// rule. The abandon watch, which would settle the stream with the caller's
// status, is stopped first, so the reader's end is the one judged. Before a
// hedged stream's end asked the call's decision, it ended CANCELED.
func TestCommittedStreamFailsAsCallerLeaves(t *testing.T) {
	const method = "/stagger.testing.v1.TestService/ListItems"
	for _, tc := range []struct{ name, policy string }{
		{"retried", `"retryPolicy": {"maxAttempts": 3, "initialBackoff": "1s", "maxBackoff": "1s", "backoffMultiplier": 1, "retryableStatusCodes": ["UNAVAILABLE"]}`},
		{"hedged", `"hedgingPolicy": {"maxAttempts": 3, "hedgingDelay": "10s", "nonFatalStatusCodes": ["UNAVAILABLE"]}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				cfg, err := policy.ParseConfig([]byte(`{"methodConfig": [{"name": [{"service": "stagger.testing.v1.TestService"}], "idempotent": true, ` + tc.policy + `}]}`))
				if err != nil {
					t.Fatal(err)
				}
				cc := bufconnServe(t, func(_ any, ss grpc.ServerStream) error {
					if err := ss.SendHeader(nil); err != nil {
						return err
					}
					return status.Error(codes.Unavailable, "the server's failure")
				})
				streamer := func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, opts ...grpc.CallOption) (grpc.ClientStream, error) {
					return cc.NewStream(ctx, desc, method, opts...)
				}
				ctx, cancel := context.WithCancel(context.Background())
				defer cancel()
				var rep Report
				k := newCore([]Option{WithConfig(cfg)})
				cs, err := k.stream(ctx, &grpc.StreamDesc{ServerStreams: true}, cc, method, streamer, []grpc.CallOption{WithReport(&rep)})
				if err != nil {
					t.Fatal(err)
				}
				s := cs.(*retryStream)
				if err := s.SendMsg(&emptypb.Empty{}); err != nil {
					t.Fatal(err)
				}
				if err := s.CloseSend(); err != nil {
					t.Fatal(err)
				}
				if md, err := s.Header(); md == nil || err != nil {
					t.Fatalf("Header: %v, %v; want the server's headers", md, err)
				}
				synctest.Wait() // the server's status is in
				s.mu.Lock()
				stop := s.stopAbandon
				s.mu.Unlock()
				stop()
				cancel()
				synctest.Wait()
				err = s.RecvMsg(new(emptypb.Empty))
				var e *Error
				if status.Code(err) != codes.Unavailable || !errors.As(err, &e) || e.Reason != policy.ReasonCaller {
					t.Errorf("RecvMsg: %v, want the server's UNAVAILABLE as an *Error for the caller (%v)", err, policy.ReasonCaller)
				}
				if rep.Code != codes.Unavailable || rep.Reason != policy.ReasonCaller || rep.Attempts != 1 {
					t.Errorf("Report: %v, %v after %d attempts; want %v, %v after 1", rep.Code, rep.Reason, rep.Attempts, codes.Unavailable, policy.ReasonCaller)
				}
			})
		})
	}
}

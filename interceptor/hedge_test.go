package interceptor_test

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/stagger-go/stagger/interceptor"
	"github.com/stagger-go/stagger/policy"
	testingv1 "github.com/stagger-go/stagger/proto/stagger/testing/v1"
)

// hedgeFile hedges Get: 3 attempts, 50ms apart.
const hedgeFile = `{"methodConfig": [{"name": [{"service": "stagger.testing.v1.TestService"}],
	"hedgingPolicy": {"maxAttempts": 3, "hedgingDelay": "0.05s", "nonFatalStatusCodes": ["UNAVAILABLE"]}}]}`

const hedgedMethod = testingv1.TestService_Get_FullMethodName

func hedgeOK(_ context.Context, _ string, _, reply any, _ *grpc.ClientConn, opts ...grpc.CallOption) error {
	if r, ok := reply.(*testingv1.GetResponse); ok {
		r.Reply = &testingv1.Reply{Attempt: 1}
	}
	for _, o := range opts {
		if h, ok := o.(grpc.HeaderCallOption); ok {
			*h.HeaderAddr = metadata.MD{}
		}
	}
	return nil
}

// A hedged method whose call's reply is not a protobuf message (each
// concurrent attempt needs a reply of its own) is not hedged: its attempts
// go one at a time into the caller's reply, the next only after a
// non-fatal failure, as grpc-go's retry would; the hooks hear why, once
// per method (grpc-go's interop case DoUnimplementedMethod, a nil reply,
// failed with "cannot hedge" instead of the server's UNIMPLEMENTED, and
// with its first attempt failed ended UNAVAILABLE).
func TestHedgeNonProtoReplyGoesOnce(t *testing.T) {
	cfg, err := policy.ParseConfig([]byte(hedgeFile))
	if err != nil {
		t.Fatal(err)
	}
	var notices []interceptor.Event
	icpt := interceptor.UnaryClientInterceptor(interceptor.WithConfig(cfg), interceptor.WithHook(func(e interceptor.Event) {
		if e.Kind == interceptor.EventNotice {
			notices = append(notices, e)
		}
	}))
	calls := 0
	unimplemented := status.Error(codes.Unimplemented, "unknown method")
	invoker := func(context.Context, string, any, any, *grpc.ClientConn, ...grpc.CallOption) error {
		calls++
		return unimplemented
	}
	for _, reply := range []any{&struct{ N int }{}, nil} {
		err = icpt(context.Background(), hedgedMethod, nil, reply, nil, invoker)
		if status.Code(err) != codes.Unimplemented {
			t.Fatalf("reply %T: err = %v, want the server's UNIMPLEMENTED", reply, err)
		}
	}
	if calls != 2 {
		t.Errorf("%d attempts for two calls, want one each", calls)
	}
	if len(notices) != 1 || notices[0].Reason != policy.ReasonReplyType || !notices[0].Hedging {
		t.Errorf("notices %+v, want one, hedging, reason %v", notices, policy.ReasonReplyType)
	}

	// The first attempt fails UNAVAILABLE (non-fatal) after more than the
	// hedging delay; the second, sent only then, answers into the
	// caller's own reply.
	var inFlight, most atomic.Int32
	calls = 0
	flaky := func(ctx context.Context, _ string, _, reply any, _ *grpc.ClientConn, _ ...grpc.CallOption) error {
		calls++
		most.Store(max(most.Load(), inFlight.Add(1)))
		defer inFlight.Add(-1)
		if calls == 1 {
			time.Sleep(100 * time.Millisecond) // twice the hedging delay
			return status.Error(codes.Unavailable, "down")
		}
		reply.(*struct{ N int }).N = calls
		return nil
	}
	reply := &struct{ N int }{}
	if err := icpt(context.Background(), hedgedMethod, nil, reply, nil, flaky); err != nil {
		t.Fatalf("err = %v, want the second attempt's success", err)
	}
	if calls != 2 || reply.N != 2 || most.Load() != 1 {
		t.Errorf("%d attempts, reply %d, %d at once; want 2 attempts one at a time, the second's reply", calls, reply.N, most.Load())
	}
}

// BenchmarkHedgedFirstAttemptWins: the cost of hedging a call whose first
// attempt succeeds before the hedging delay, against the same call on a
// method without a policy (stagger passes it through) and with a retry
// policy. The invoker is a fake: this is the interceptor's own cost.
func BenchmarkHedgedFirstAttemptWins(b *testing.B) {
	hedged, err := policy.ParseConfig([]byte(hedgeFile))
	if err != nil {
		b.Fatal(err)
	}
	retried, err := policy.ParseConfig([]byte(`{"methodConfig": [{"name": [{"service": "stagger.testing.v1.TestService"}],
	"retryPolicy": {"maxAttempts": 3, "initialBackoff": "0.1s", "maxBackoff": "1s",
	"backoffMultiplier": 2, "retryableStatusCodes": ["UNAVAILABLE"]}}]}`))
	if err != nil {
		b.Fatal(err)
	}
	// A policy allowing the most attempts a file may (1,000) costs what one
	// allowing three does: the results channel does not grow with maxAttempts.
	most, err := policy.ParseConfig([]byte(strings.Replace(hedgeFile, `"maxAttempts": 3`, `"maxAttempts": 1000`, 1)), policy.WithMaxAttemptsCap(policy.MaxAttemptsCapLimit))
	if err != nil {
		b.Fatal(err)
	}
	cases := []struct {
		name string
		cfg  *policy.Config
	}{
		{"unhedged-no-policy", nil},
		{"retry-policy", retried},
		{"hedged", hedged},
		{"hedged-1000-attempts", most},
	}
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			icpt := interceptor.UnaryClientInterceptor(interceptor.WithConfig(c.cfg))
			ctx := context.Background()
			reply := new(testingv1.GetResponse)
			for i := 0; i < b.N; i++ {
				if err := icpt(ctx, hedgedMethod, nil, reply, nil, hedgeOK); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// A retryable failure that comes as the caller cancels ends the call with
// the caller's CANCELED, as grpc-go's retry ends it (its backoff sees the
// context end), not with the failure a retry would have hidden; a failure
// the policy would not retry stays the server's. The same for a hedged
// call's non-fatal failure (grpc-go's interop case DoCancelAfterBegin, its
// first attempt refused, got UNAVAILABLE).
func TestCallerLeftAsARetryableFailureCame(t *testing.T) {
	for _, c := range []struct {
		file       string
		code, want codes.Code
	}{
		{benchFile, codes.Unavailable, codes.Canceled},
		{benchFile, codes.NotFound, codes.NotFound},
		{hedgeFile, codes.Unavailable, codes.Canceled},
		{hedgeFile, codes.NotFound, codes.NotFound},
	} {
		cfg, err := policy.ParseConfig([]byte(c.file))
		if err != nil {
			t.Fatal(err)
		}
		icpt := interceptor.UnaryClientInterceptor(interceptor.WithConfig(cfg))
		ctx, cancel := context.WithCancel(context.Background())
		calls := 0
		invoker := func(context.Context, string, any, any, *grpc.ClientConn, ...grpc.CallOption) error {
			calls++
			cancel() // the caller leaves as the server's answer comes
			return status.Error(c.code, "server")
		}
		err = icpt(ctx, hedgedMethod, nil, &testingv1.GetResponse{}, nil, invoker)
		if status.Code(err) != c.want || calls != 1 {
			t.Errorf("%v as the caller cancelled (hedging %v): %v after %d attempts, want %v after 1", c.code, c.file == hedgeFile, err, calls, c.want)
		}
	}
}

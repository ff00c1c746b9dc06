package test

import (
	"context"
	"io"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/stagger-go/stagger/breaker"
	"github.com/stagger-go/stagger/budget"
	"github.com/stagger-go/stagger/criticality"
	"github.com/stagger-go/stagger/interceptor"
	"github.com/stagger-go/stagger/policy"
	testingv1 "github.com/stagger-go/stagger/proto/stagger/testing/v1"
	"github.com/stagger-go/stagger/testserver"
)

// TestRealTimeProbeCallerLeavesInPause: over loopback TCP on real time,
// behind a half-open breaker and no budget, a call's first attempt goes as
// the probe and ends CANCELED (a proxy's: the breaker hears Other); its
// retry takes the probe, and the caller cancels at a random moment around
// the end of the retry's pause: before it (the retry is never sent), as
// it is sent, or while it runs. Whichever comes first, once the call has
// returned the breaker holds no probe for it: it is closed (the retry was
// served) or its half-open probe is free. A unary call and a stream.
func TestRealTimeProbeCallerLeavesInPause(t *testing.T) {
	const pause = 5 * time.Millisecond
	firstCanceled := func(ctx context.Context) error {
		md, _ := metadata.FromIncomingContext(ctx)
		if len(md.Get("grpc-previous-rpc-attempts")) == 0 {
			return status.Error(codes.Canceled, "cancelled by a proxy")
		}
		return nil
	}
	srv := testserver.New(testserver.WithTCP(), testserver.WithServerOptions(
		grpc.ChainUnaryInterceptor(func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
			if err := firstCanceled(ctx); err != nil {
				return nil, err
			}
			return handler(ctx, req)
		}),
		grpc.ChainStreamInterceptor(func(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
			if err := firstCanceled(ss.Context()); err != nil {
				return err
			}
			return handler(srv, ss)
		})))
	defer srv.Close()

	const brk = 10 * time.Millisecond
	bs, err := breaker.NewSet(breaker.Settings{FailureRatio: 0.5, MinimumThroughput: 2, BreakDuration: brk, MaxBreakDuration: brk, ProbeEvery: 1}, nil)
	if err != nil {
		t.Fatal(err)
	}
	var (
		mu      sync.Mutex
		leave   context.CancelFunc
		retries int
	)
	hook := func(_ context.Context, e interceptor.Event) {
		if e.Kind != interceptor.EventRetry {
			return
		}
		mu.Lock()
		retries++
		cancel := leave
		mu.Unlock()
		// Around the pause's end: before, as the retry goes, or after.
		time.AfterFunc(rand.N(2*pause), cancel)
	}
	p := policy.Policy{MaxAttempts: 2,
		Backoff:        policy.Backoff{Initial: pause, Max: pause, Multiplier: 1},
		RetryableCodes: policy.NewCodeSet(codes.Canceled)}
	opts := []interceptor.Option{interceptor.WithPolicy(p), interceptor.WithBudget(nil), interceptor.WithBreakers(bs),
		interceptor.WithCallHook(hook), interceptor.WithIdempotentMethods(func(string) bool { return true })}
	cc, err := srv.DialTCP(grpc.WithChainUnaryInterceptor(interceptor.UnaryClientInterceptor(opts...)),
		grpc.WithChainStreamInterceptor(interceptor.StreamClientInterceptor(opts...)))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	client := testingv1.NewTestServiceClient(cc)

	for _, tc := range []struct {
		name, method string
		call         func(ctx context.Context) error
	}{
		{"unary", testingv1.TestService_Get_FullMethodName, func(ctx context.Context) error {
			_, err := client.Get(ctx, &testingv1.GetRequest{})
			return err
		}},
		{"stream", testingv1.TestService_ListItems_FullMethodName, func(ctx context.Context) error {
			st, err := client.ListItems(ctx, &testingv1.ListItemsRequest{})
			if err != nil {
				return err
			}
			for {
				if _, err := st.Recv(); err == io.EOF {
					return nil
				} else if err != nil {
					return err
				}
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			br := bs.Get(cc.CanonicalTarget(), tc.method)
			guard := br.Guard(criticality.Unset, nil).(budget.GuardReturner)
			const calls = 40
			held, served := 0, 0
			mu.Lock()
			retries = 0
			mu.Unlock()
			for range calls {
				for i := 0; i < 4 && br.Snapshot().State != breaker.StateOpen; i++ {
					br.Record(budget.Failure, true, criticality.Unset, nil)
				}
				if s := br.Snapshot().State; s != breaker.StateOpen {
					t.Fatalf("breaker %v after failures, want open", s)
				}
				time.Sleep(brk + brk/2) // the break is over: the call's first attempt is the probe
				ctx, cancel := context.WithCancel(context.Background())
				mu.Lock()
				leave = cancel
				mu.Unlock()
				if err := tc.call(ctx); err == nil {
					served++
				}
				cancel()
				// The call has returned: nothing of it is in flight.
				switch ok, _ := br.AllowRetry(criticality.Unset, nil); {
				case !ok:
					held++
				case br.Snapshot().State == breaker.StateHalfOpen:
					guard.ReturnRetry() // the test's own yes
				}
			}
			mu.Lock()
			defer mu.Unlock()
			if retries != calls {
				t.Fatalf("%d retries announced in %d calls, want one each", retries, calls)
			}
			if held > 0 {
				t.Errorf("%d of %d calls left the breaker's half-open probe taken after they returned (%d served)", held, calls, served)
			}
		})
	}
}

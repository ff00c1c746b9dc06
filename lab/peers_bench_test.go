package lab_test

import (
	"context"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	failsafebudget "github.com/failsafe-go/failsafe-go/budget"
	"github.com/failsafe-go/failsafe-go/failsafegrpc"
	"github.com/failsafe-go/failsafe-go/retrypolicy"
	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors/retry"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/stagger-go/stagger"
	"github.com/stagger-go/stagger/interceptor"
	"github.com/stagger-go/stagger/policy"
	testingv1 "github.com/stagger-go/stagger/proto/stagger/testing/v1"
	"github.com/stagger-go/stagger/testserver"
)

// Side-by-side benchmarks of the retry layers BENCHMARKS.md compares. Every
// layer gets the same limit (4 attempts) and retries UNAVAILABLE; stagger
// runs with its default budget as stagger.DialOptions installs it.

// peerPolicy is stagger's policy for these benchmarks; its pause is 1 µs so
// that the one-retry benchmarks measure the retry, not the sleep.
var peerPolicy = policy.Policy{
	MaxAttempts: 4,
	Backoff:     policy.Backoff{Initial: time.Microsecond, Max: time.Microsecond, Multiplier: 2},
}

const peerServiceConfig = `{"methodConfig": [{"name": [{"service": "stagger.testing.v1.TestService"}],
  "retryPolicy": {"maxAttempts": 4, "initialBackoff": "0.000001s", "maxBackoff": "0.000001s",
    "backoffMultiplier": 2, "retryableStatusCodes": ["UNAVAILABLE"]}}]}`

func middlewareRetry() grpc.UnaryClientInterceptor {
	return retry.UnaryClientInterceptor(retry.WithMax(4), retry.WithCodes(codes.Unavailable),
		retry.WithBackoff(retry.BackoffExponentialWithJitter(time.Microsecond, 0.2)))
}

// failsafeRetry is failsafe-go's retry through its gRPC interceptor, with its
// default budget as in the lab (one per interceptor).
func failsafeRetry() grpc.UnaryClientInterceptor {
	return failsafegrpc.NewUnaryClientInterceptor[any](retrypolicy.NewBuilder[any]().
		HandleIf(func(_ any, err error) bool { return status.Code(err) == codes.Unavailable }).
		WithMaxAttempts(4).
		WithBackoff(time.Microsecond, 2*time.Microsecond).
		WithJitterFactor(0.2).
		WithBudget(failsafebudget.New()).
		ReturnLastFailure().
		Build())
}

func staggerUnary() grpc.UnaryClientInterceptor {
	return interceptor.UnaryClientInterceptor(interceptor.WithPolicy(peerPolicy))
}

func fakeOK(context.Context, string, any, any, *grpc.ClientConn, ...grpc.CallOption) error {
	return nil
}

// BenchmarkPeersFakeSuccess: the interceptor alone, around an invoker that
// succeeds at once (grpc-go's built-in retry lives inside grpc and cannot be
// measured without a connection: see BenchmarkPeersBufconn).
func BenchmarkPeersFakeSuccess(b *testing.B) {
	noInterceptor := func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		return invoker(ctx, method, req, reply, cc, opts...)
	}
	for _, c := range []struct {
		name string
		icpt grpc.UnaryClientInterceptor
	}{
		{"impl=none", noInterceptor},
		{"impl=stagger", staggerUnary()},
		{"impl=middleware", middlewareRetry()},
		{"impl=failsafe", failsafeRetry()},
	} {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			ctx := context.Background()
			for i := 0; i < b.N; i++ {
				if err := c.icpt(ctx, testingv1.TestService_Get_FullMethodName, nil, nil, nil, fakeOK); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// peerDialOptions are the four ways of dialing the benchmarks compare.
func peerDialOptions() []struct {
	name string
	opts []grpc.DialOption
} {
	return []struct {
		name string
		opts []grpc.DialOption
	}{
		{"impl=none", []grpc.DialOption{grpc.WithDisableRetry()}},
		{"impl=stagger", stagger.DialOptions(nil, interceptor.WithPolicy(peerPolicy))},
		{"impl=middleware", []grpc.DialOption{grpc.WithChainUnaryInterceptor(middlewareRetry()), grpc.WithDisableRetry()}},
		{"impl=failsafe", []grpc.DialOption{grpc.WithChainUnaryInterceptor(failsafeRetry()), grpc.WithDisableRetry()}},
		{"impl=grpc-go", []grpc.DialOption{grpc.WithDefaultServiceConfig(peerServiceConfig)}},
	}
}

// connectedClient dials srv with opts and makes one call, so that the
// connection is up before the timing starts; the connection closes with b.
func connectedClient(b *testing.B, srv *testserver.Server, opts []grpc.DialOption) testingv1.TestServiceClient {
	b.Helper()
	cc, err := srv.Dial(opts...)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { cc.Close() })
	client := testingv1.NewTestServiceClient(cc)
	if _, err := client.Get(context.Background(), &testingv1.GetRequest{Script: &testingv1.Script{}}); err != nil {
		b.Fatal(err)
	}
	return client
}

// BenchmarkPeersBufconn: a whole unary call over bufconn that succeeds at
// once, per retry layer.
func BenchmarkPeersBufconn(b *testing.B) {
	srv := testserver.New()
	defer srv.Close()
	for _, c := range peerDialOptions() {
		b.Run(c.name, func(b *testing.B) {
			client := connectedClient(b, srv, c.opts)
			ctx := context.Background()
			req := &testingv1.GetRequest{Script: &testingv1.Script{}}
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if _, err := client.Get(ctx, req); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// retryKeys numbers the one-retry calls: a key must never repeat, even
// across the runs the testing package makes with growing b.N, or the server
// would count the call's attempts from an old one and not fail it.
var retryKeys atomic.Int64

// BenchmarkPeersBufconnOneRetry: a call whose first attempt fails with
// UNAVAILABLE and whose second succeeds, over bufconn, pause 1 µs. Each
// call has its own script key, so the server numbers its attempts; "none"
// makes the two attempts by hand, for the baseline.
func BenchmarkPeersBufconnOneRetry(b *testing.B) {
	srv := testserver.New()
	defer srv.Close()
	for _, c := range peerDialOptions() {
		b.Run(c.name, func(b *testing.B) {
			client := connectedClient(b, srv, c.opts)
			ctx := context.Background()
			before := srv.Stats().Received
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				req := &testingv1.GetRequest{Script: &testingv1.Script{Key: strconv.FormatInt(retryKeys.Add(1), 10), FailAttempts: 1}}
				_, err := client.Get(ctx, req)
				if c.name == "impl=none" {
					_, err = client.Get(ctx, req)
				}
				if err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			if got := srv.Stats().Received - before; got != 2*int64(b.N) {
				b.Fatalf("the server received %d attempts for %d calls, want 2 per call", got, b.N)
			}
		})
	}
}

package interceptor_test

import (
	"context"
	"testing"

	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors/retry"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"

	"github.com/stagger-go/stagger/criticality"
	"github.com/stagger-go/stagger/interceptor"
	"github.com/stagger-go/stagger/policy"
)

// benchFile is a typical file: a retry policy and the A6 throttle.
const benchFile = `{"methodConfig": [{"name": [{"service": "stagger.testing.v1.TestService"}],
	"retryPolicy": {"maxAttempts": 4, "initialBackoff": "0.1s", "maxBackoff": "1s",
	"backoffMultiplier": 2, "retryableStatusCodes": ["UNAVAILABLE"]}}],
	"retryThrottling": {"maxTokens": 100, "tokenRatio": 0.1}}`

func okInvoker(context.Context, string, any, any, *grpc.ClientConn, ...grpc.CallOption) error {
	return nil
}

// benchBreakerFile is benchFile with a circuit breaker, and with adaptive
// throttling too.
var (
	benchBreakerFile  = benchFile[:len(benchFile)-1] + `, "circuitBreaker": {}}`
	benchThrottleFile = benchFile[:len(benchFile)-1] + `, "circuitBreaker": {}, "adaptiveThrottling": {}}`
)

// benchTimerFile is benchFile for an idempotent method with a per-attempt
// timeout: the timer's own cost on the success path.
const benchTimerFile = `{"methodConfig": [{"name": [{"service": "stagger.testing.v1.TestService"}],
	"idempotent": true,
	"retryPolicy": {"maxAttempts": 4, "initialBackoff": "0.1s", "maxBackoff": "1s",
	"backoffMultiplier": 2, "retryableStatusCodes": ["UNAVAILABLE"], "perAttemptRecvTimeout": "1s"}}],
	"retryThrottling": {"maxTokens": 100, "tokenRatio": 0.1}}`

// BenchmarkUnarySuccess: the interceptor alone, on a call that succeeds at
// once, beside go-grpc-middleware v2's retry interceptor, and with a
// circuit breaker, and adaptive throttling (their check on the success
// path: no allocation); and a call whose context names a criticality
// (what sending the header costs: the outgoing metadata).
func BenchmarkUnarySuccess(b *testing.B) {
	cfg, err := policy.ParseConfig([]byte(benchFile))
	if err != nil {
		b.Fatal(err)
	}
	cfgBreaker, err := policy.ParseConfig([]byte(benchBreakerFile))
	if err != nil {
		b.Fatal(err)
	}
	cfgThrottle, err := policy.ParseConfig([]byte(benchThrottleFile))
	if err != nil {
		b.Fatal(err)
	}
	cfgTimer, err := policy.ParseConfig([]byte(benchTimerFile))
	if err != nil {
		b.Fatal(err)
	}
	cases := []struct {
		name string
		icpt grpc.UnaryClientInterceptor
		ctx  context.Context
		// opts are the call's options: generated code passes
		// grpc.StaticMethod() on every call.
		opts []grpc.CallOption
	}{
		{"stagger", interceptor.UnaryClientInterceptor(interceptor.WithConfig(cfg)), nil, nil},
		{"stagger-breaker", interceptor.UnaryClientInterceptor(interceptor.WithConfig(cfgBreaker)), nil, nil},
		{"stagger-throttling", interceptor.UnaryClientInterceptor(interceptor.WithConfig(cfgThrottle)), nil, nil},
		{"stagger-criticality", interceptor.UnaryClientInterceptor(interceptor.WithConfig(cfg)),
			criticality.NewContext(context.Background(), criticality.Sheddable), nil},
		{"stagger-per-attempt-timeout", interceptor.UnaryClientInterceptor(interceptor.WithConfig(cfgTimer)), nil, nil},
		{"stagger-static-method", interceptor.UnaryClientInterceptor(interceptor.WithConfig(cfg)), nil, []grpc.CallOption{grpc.StaticMethod()}},
		{"middleware-retry", retry.UnaryClientInterceptor(retry.WithMax(4), retry.WithCodes(codes.Unavailable)), nil, nil},
	}
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			ctx := c.ctx
			if ctx == nil {
				ctx = context.Background()
			}
			for i := 0; i < b.N; i++ {
				if err := c.icpt(ctx, method, nil, nil, nil, okInvoker, c.opts...); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkUnarySuccessParallel is BenchmarkUnarySuccess from every
// GOMAXPROCS goroutine at once, as a busy client runs it: shared state (the
// method cache, the budget, the pooled attempt state) must not serialize.
func BenchmarkUnarySuccessParallel(b *testing.B) {
	cfg, err := policy.ParseConfig([]byte(benchFile))
	if err != nil {
		b.Fatal(err)
	}
	cases := []struct {
		name string
		icpt grpc.UnaryClientInterceptor
	}{
		{"stagger", interceptor.UnaryClientInterceptor(interceptor.WithConfig(cfg))},
		{"middleware-retry", retry.UnaryClientInterceptor(retry.WithMax(4), retry.WithCodes(codes.Unavailable))},
	}
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			ctx := context.Background()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					if err := c.icpt(ctx, method, nil, nil, nil, okInvoker); err != nil {
						b.Error(err)
						return
					}
				}
			})
		})
	}
}

// BenchmarkUnaryOneRetry: a first attempt that fails with UNAVAILABLE, a
// second that succeeds, no pause. Subtract BenchmarkUnaryTwoInvocations for
// the cost of the retry itself.
func BenchmarkUnaryOneRetry(b *testing.B) {
	b.ReportAllocs()
	icpt := interceptor.UnaryClientInterceptor(zeroPause(4), interceptor.WithRandom(zero))
	ctx := context.Background()
	var n int
	flaky := func(context.Context, string, any, any, *grpc.ClientConn, ...grpc.CallOption) error {
		n++
		if n%2 == 1 {
			return errUnavailable
		}
		return nil
	}
	for i := 0; i < b.N; i++ {
		if err := icpt(ctx, method, nil, nil, nil, flaky); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkUnaryTwoInvocations is the baseline of BenchmarkUnaryOneRetry:
// the same invoker called twice with no interceptor.
func BenchmarkUnaryTwoInvocations(b *testing.B) {
	b.ReportAllocs()
	ctx := context.Background()
	var n int
	flaky := func(context.Context, string, any, any, *grpc.ClientConn, ...grpc.CallOption) error {
		n++
		if n%2 == 1 {
			return errUnavailable
		}
		return nil
	}
	for i := 0; i < b.N; i++ {
		_ = flaky(ctx, method, nil, nil, nil)
		_ = flaky(ctx, method, nil, nil, nil)
	}
}

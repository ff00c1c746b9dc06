package lab

import (
	"context"
	"errors"
	"fmt"
	"time"

	failsafebudget "github.com/failsafe-go/failsafe-go/budget"
	"github.com/failsafe-go/failsafe-go/retrypolicy"
	"github.com/failsafe-go/failsafe-go/timeout"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/stagger-go/stagger/policy"
)

// staggerPolicy leaves RetryableCodes empty: stagger's own default is
// UNAVAILABLE and RESOURCE_EXHAUSTED from the server, the same codes the
// others get.
func staggerPolicy(c *Config) policy.Policy {
	return policy.Policy{MaxAttempts: c.MaxAttempts, Backoff: c.Backoff, PerAttemptRecvTimeout: perAttemptTimeout(c)}
}

func protoDuration(d time.Duration) string {
	return fmt.Sprintf("%.9fs", d.Seconds())
}

func serviceConfig(c *Config, throttle bool) string {
	s := fmt.Sprintf(`{"methodConfig": [{"name": [{"service": "stagger.testing.v1.TestService"}],
  "retryPolicy": {"maxAttempts": %d, "initialBackoff": %q, "maxBackoff": %q, "backoffMultiplier": %g,
    "retryableStatusCodes": ["UNAVAILABLE", "RESOURCE_EXHAUSTED"]}}]`,
		max(c.MaxAttempts, 2), protoDuration(c.Backoff.Initial), protoDuration(c.Backoff.Max), c.Backoff.Multiplier)
	if c.MaxAttempts < 2 {
		// grpc-go rejects maxAttempts below 2; one attempt means no policy.
		s = `{"methodConfig": [{"name": [{"service": "stagger.testing.v1.TestService"}]}]`
	}
	if throttle {
		s += `, "retryThrottling": {"maxTokens": 10, "tokenRatio": 0.1}`
	}
	return s + "}"
}

// failsafeRetry is failsafe-go's retry policy as its documentation builds
// one for gRPC: the codes every contender retries, the shared backoff with
// ±20 % jitter (failsafe-go's jitter factor, the same spread as A6's), its
// default retry budget (one per client connection, as stagger's), and the
// last failure returned as it is, so that the call ends with the server's
// status rather than failsafe-go's ExceededError.
func failsafeRetry(c *Config) retrypolicy.RetryPolicy[any] {
	return retrypolicy.NewBuilder[any]().
		HandleIf(func(_ any, err error) bool {
			code := status.Code(err)
			return err != nil && (code == codes.Unavailable || code == codes.ResourceExhausted || errors.Is(err, timeout.ErrExceeded))
		}).
		WithMaxAttempts(c.MaxAttempts).
		WithBackoffFactor(c.Backoff.Initial, c.Backoff.Max, c.Backoff.Multiplier).
		WithJitterFactor(0.2).
		WithBudget(failsafebudget.New()).
		ReturnLastFailure().
		Build()
}

// naiveRetry is the loop people write first: retry the listed codes after a
// fixed pause, until the attempts run out or the caller gives up; with a
// per-attempt timeout (perTry > 0), an attempt cut off by it is retried too.
func naiveRetry(attempts int, pause, perTry time.Duration) grpc.UnaryClientInterceptor {
	return func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		var err error
		for n := 1; ; n++ {
			err = invokeWithin(ctx, perTry, func(ctx context.Context) error { return invoker(ctx, method, req, reply, cc, opts...) })
			code := status.Code(err)
			retryable := code == codes.Unavailable || code == codes.ResourceExhausted || (perTry > 0 && code == codes.DeadlineExceeded)
			if err == nil || n >= attempts || !retryable || ctx.Err() != nil {
				return err
			}
			t := time.NewTimer(pause)
			select {
			case <-ctx.Done():
				t.Stop()
				return err
			case <-t.C:
			}
		}
	}
}

// invokeWithin runs one attempt, within d when d > 0.
func invokeWithin(ctx context.Context, d time.Duration, attempt func(context.Context) error) error {
	if d <= 0 {
		return attempt(ctx)
	}
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	return attempt(ctx)
}

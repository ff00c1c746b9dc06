package policy_test

import (
	"fmt"
	"time"

	"github.com/stagger-go/stagger/policy"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// An interceptor's loop, reduced to the decisions: the server fails twice
// with UNAVAILABLE, the second time asking for a 250 ms pushback, then
// succeeds. After the pushback the backoff sequence restarts.
func ExamplePolicy_Decide() {
	p := &policy.Policy{
		MaxAttempts:    4,
		Backoff:        policy.Backoff{Initial: 100 * time.Millisecond, Max: time.Second, Multiplier: 2, Jitter: policy.JitterNone},
		RetryableCodes: policy.NewCodeSet(codes.Unavailable),
	}
	unavailable := status.Error(codes.Unavailable, "down")
	results := []struct {
		err     error
		trailer metadata.MD
	}{
		{unavailable, nil},
		{unavailable, metadata.Pairs(policy.PushbackKey, "250")},
		{unavailable, nil},
		{nil, nil},
	}
	retry, prev := 1, p.Backoff.Initial
	for n, r := range results {
		v := p.Decide(&policy.Attempt{Number: n + 1, Err: r.err, Trailer: r.trailer, Retry: retry, Prev: prev, U: 0.5})
		if !v.Retry {
			fmt.Printf("attempt %d: stop (%v), budget hears %v\n", n+1, v.Reason, v.Record)
			break
		}
		fmt.Printf("attempt %d: retry after %v (pushback %v)\n", n+1, v.Pause, v.Pushback)
		retry, prev = p.NextBackoff(&policy.Attempt{Retry: retry}, v)
	}
	// Output:
	// attempt 1: retry after 100ms (pushback false)
	// attempt 2: retry after 250ms (pushback true)
	// attempt 3: retry after 100ms (pushback false)
	// attempt 4: stop (success), budget hears success
}

package policy

import (
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// decideSink keeps the compiler from dropping Decide.
var decideSink Verdict

func BenchmarkDecide(b *testing.B) {
	p := &Policy{
		MaxAttempts:    5,
		Backoff:        Backoff{Initial: 100 * time.Millisecond, Max: 5 * time.Second, Multiplier: 1.6},
		RetryableCodes: NewCodeSet(codes.Unavailable, codes.ResourceExhausted),
	}
	cases := []struct {
		name string
		a    Attempt
	}{
		{"success", Attempt{Number: 1}},
		{"retryable", Attempt{Number: 1, Err: status.Error(codes.Unavailable, "down"), Trailer: metadata.Pairs("x-other", "1")}},
		{"not_retryable", Attempt{Number: 1, Err: status.Error(codes.Internal, "bug")}},
		{"resource_exhausted", Attempt{Number: 2, Retry: 2, Err: status.Error(codes.ResourceExhausted, "quota")}},
		{"pushback", Attempt{Number: 1, Err: status.Error(codes.Unavailable, "down"), Trailer: metadata.Pairs(PushbackKey, "250")}},
		{"retry_info", Attempt{Number: 1, Err: decideWithDetails(codes.Unavailable, decideRetryInfo(time.Second))}},
	}
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			a := c.a
			a.U = 0.5
			b.ReportAllocs()
			for i := 0; i < b.N; i++ {
				decideSink = p.Decide(&a)
			}
		})
	}
}

package policy

import (
	"testing"

	"go.uber.org/goleak"
	"google.golang.org/grpc/codes"
)

// TestMain is the package's only TestMain.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestCodeSet(t *testing.T) {
	s := NewCodeSet(codes.Unavailable, codes.ResourceExhausted, codes.Code(17), codes.Code(1000))
	if got := s.Codes(); len(got) != 2 || got[0] != codes.ResourceExhausted || got[1] != codes.Unavailable {
		t.Errorf("Codes() = %v, want [ResourceExhausted Unavailable]", got)
	}
	for c := codes.Code(0); c <= 20; c++ {
		want := c == codes.Unavailable || c == codes.ResourceExhausted
		if s.Has(c) != want {
			t.Errorf("Has(%v) = %v, want %v", c, s.Has(c), want)
		}
	}
	if NewCodeSet().Codes() != nil {
		t.Error("empty set has codes")
	}
	if DefaultRetryableCodes != NewCodeSet(codes.Unavailable, codes.ResourceExhausted) {
		t.Errorf("DefaultRetryableCodes = %v", DefaultRetryableCodes.Codes())
	}
}

func TestReasonString(t *testing.T) {
	tests := []struct {
		r    Reason
		want string
	}{
		{ReasonNone, "retry"}, {ReasonSuccess, "success"}, {ReasonNotRetryable, "not retryable"},
		{ReasonAttempts, "attempts"}, {ReasonCommitted, "committed"}, {ReasonPushback, "pushback"},
		{ReasonDeadline, "deadline"}, {ReasonCaller, "caller"}, {ReasonBudget, "budget"},
		{ReasonNotIdempotent, "not idempotent"}, {Reason(200), "unknown"},
	}
	for _, tt := range tests {
		if got := tt.r.String(); got != tt.want {
			t.Errorf("Reason(%d).String() = %q, want %q", tt.r, got, tt.want)
		}
	}
}

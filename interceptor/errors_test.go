package interceptor

import (
	"testing"

	"github.com/stagger-go/stagger/policy"
)

// TestGaveUp: GaveUp is true exactly for the reasons that stop a failure the
// policy would otherwise retry.
func TestGaveUp(t *testing.T) {
	gaveUp := map[policy.Reason]bool{
		policy.ReasonAttempts: true, policy.ReasonBudget: true, policy.ReasonDeferred: true,
		policy.ReasonBreaker: true, policy.ReasonThrottled: true, policy.ReasonDeadline: true,
		policy.ReasonAmbiguous: true, policy.ReasonPushback: true, policy.ReasonRetriedRequest: true,
	}
	for r := policy.ReasonNone; r <= policy.ReasonNoPolicy; r++ {
		if got := (&Error{Reason: r}).GaveUp(); got != gaveUp[r] {
			t.Errorf("reason %v: GaveUp() = %v, want %v", r, got, gaveUp[r])
		}
	}
	if policy.ReasonRetriedRequest.String() != "retried request" {
		t.Errorf("ReasonRetriedRequest prints %q", policy.ReasonRetriedRequest)
	}
}

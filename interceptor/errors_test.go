package interceptor

import (
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/stagger-go/stagger/internal/callwords"
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

// TestErrorText: Error() is the last attempt's text for every reason that is
// not a give-up, and for a give-up says so, with the attempts and the
// reason; GRPCStatus is the server's status either way.
func TestErrorText(t *testing.T) {
	last := status.Error(codes.Unavailable, "payments: down")
	const text = "rpc error: code = Unavailable desc = payments: down"
	want := map[policy.Reason]string{
		policy.ReasonAttempts:       "stagger: gave up: max retries exhausted: failed after 3 attempts: " + text,
		policy.ReasonBudget:         "stagger: gave up: retry budget spent: failed after 3 attempts: " + text,
		policy.ReasonDeferred:       "stagger: gave up: retry deferred, no admission before the deadline: failed after 3 attempts: " + text,
		policy.ReasonOutage:         "stagger: gave up: backend down past the longest wait: failed after 3 attempts: " + text,
		policy.ReasonBreaker:        "stagger: gave up: circuit breaker open: failed after 3 attempts: " + text,
		policy.ReasonThrottled:      "stagger: gave up: throttled by the client: failed after 3 attempts: " + text,
		policy.ReasonDeadline:       "stagger: gave up: no retry fits before the deadline: failed after 3 attempts: " + text,
		policy.ReasonPushback:       "stagger: gave up: the server's pushback says stop: failed after 3 attempts: " + text,
		policy.ReasonRetriedRequest: "stagger: gave up: the request being served is a retry: retried at one layer: failed after 3 attempts: " + text,
		policy.ReasonAmbiguous:      "stagger: gave up: " + callwords.Ambiguous + ": failed after 3 attempts: " + text,
	}
	for r := policy.ReasonNone; r <= policy.ReasonReplyType; r++ {
		e := &Error{Attempts: 3, Reason: r, Err: last}
		w, ok := want[r]
		if !ok {
			w = text
		}
		if got := e.Error(); got != w {
			t.Errorf("reason %v: Error() = %q, want %q", r, got, w)
		}
		if st, ok := status.FromError(e); !ok || st.Code() != codes.Unavailable || st.Message() != "payments: down" {
			t.Errorf("reason %v: status.FromError = %v, %v, want the last attempt's", r, st, ok)
		}
	}
	for n, w := range map[int]string{0: "no attempt made", 1: "failed after 1 attempt", 2: "failed after 2 attempts"} {
		if got := (&Error{Attempts: n, Reason: policy.ReasonBreaker, Err: last}).Error(); got != "stagger: gave up: circuit breaker open: "+w+": "+text {
			t.Errorf("%d attempts: Error() = %q", n, got)
		}
	}
}

// A deferred retry's give-up names the rule that ended its wait and the
// one that held it, not a budget that may be full (issue 65).
func TestErrorTextNamesTheGatesRule(t *testing.T) {
	last := status.Error(codes.ResourceExhausted, "pricing: busy")
	for _, tt := range []struct{ end, held, want string }{
		{"hold", "", "retry deferred, not let go after its pause (the Gate's hold rule)"},
		{"deadline", "overload", "retry deferred, no admission before the deadline, held by the Gate's overload rule (most attempts refused for overload or slow)"},
		{"max-wait", "outage", "retry deferred the longest a call without a deadline waits (defer.maxWait), held by the Gate's outage rule (the backend is down)"},
		{"hopeless", "breaker", "retry deferred, none could finish before the deadline (the Gate's hopeless rule), held by the open circuit breaker"},
	} {
		e := &Error{Attempts: 2, Reason: policy.ReasonDeferred, Err: last, WaitEnd: tt.end, HeldBy: tt.held}
		want := "stagger: gave up: " + tt.want + ": failed after 2 attempts: " + last.Error()
		if got := e.Error(); got != want {
			t.Errorf("%s/%s: %q, want %q", tt.end, tt.held, got, want)
		}
	}
}

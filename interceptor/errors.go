package interceptor

import (
	"errors"
	"strconv"

	"github.com/stagger-go/stagger/internal/callwords"
	"github.com/stagger-go/stagger/policy"
	"google.golang.org/grpc/status"
)

// Error is the error a call returns after stagger ran it. It carries the last
// attempt's error unchanged: GRPCStatus returns that attempt's status as the
// server sent it (code, message, details), so status.FromError and
// status.Code see exactly what they would without stagger.
//
// An Error is immutable and safe for concurrent use.
type Error struct {
	// Attempts is the number of attempts made, the first included.
	Attempts int
	// Reason is why stagger stopped (policy.ReasonNotRetryable,
	// policy.ReasonBudget, ...).
	Reason policy.Reason
	// Err is the last attempt's error, or CANCELED when the caller cancelled
	// during a pause.
	Err error
	// WaitEnd and HeldBy, for Reason policy.ReasonDeferred: as Report's.
	WaitEnd, HeldBy string
}

// Error returns the last attempt's message, as grpc-go formats it, for a
// call that ended on an answer stagger does not retry: the same text as
// without stagger, which programs compare (grpc-go's interop case
// special_status_message does). When stagger gave up (GaveUp), it says so
// in front, with the attempts and the reason in a few words:
//
//	stagger: gave up: max retries exhausted: failed after 3 attempts: rpc error: code = Unavailable desc = payments: down
//	stagger: gave up: backend down past the longest wait: failed after 1 attempt: rpc error: ...
//	stagger: gave up: circuit breaker open: no attempt made: rpc error: ...
//
// With no attempt left the words are grpc-go's, so a search of logs for
// "max retries exhausted" finds both. GRPCStatus keeps the server's status
// unchanged either way.
func (e *Error) Error() string {
	words := callwords.GiveUp(e.Reason)
	if e.Reason == policy.ReasonDeferred {
		words = callwords.Deferred(e.WaitEnd, e.HeldBy)
	}
	if words == "" {
		return e.Err.Error()
	}
	after := "failed after " + strconv.Itoa(e.Attempts) + " attempts"
	switch e.Attempts {
	case 0: // the breaker or throttling refused the first attempt
		after = "no attempt made"
	case 1:
		after = "failed after 1 attempt"
	}
	return "stagger: gave up: " + words + ": " + after + ": " + e.Err.Error()
}

// Unwrap returns the last attempt's error.
func (e *Error) Unwrap() error { return e.Err }

// GRPCStatus returns the last attempt's status unchanged.
func (e *Error) GRPCStatus() *status.Status { return status.Convert(e.Err) }

// GaveUp reports whether stagger gave up on a failure it would otherwise
// have retried: no attempt was left, or the budget, a deferral, an outage,
// the circuit breaker or throttling, the caller's deadline, an ambiguous
// failure, the server's pushback or a retried request being served stopped
// it. It is false for a failure the policy does not retry, a committed
// attempt and the caller's own cancellation. Package server answers "do not
// retry" for a handler that returns such an error (its doc has the rules).
func (e *Error) GaveUp() bool { return callwords.GiveUp(e.Reason) != "" }

// Attempts returns the number of attempts stagger made for the call that
// returned err, or 0 when err does not come from stagger: nil (a success),
// or the error of a call no policy covers (returned unwrapped). WithReport
// counts the attempts of every call, successes included.
func Attempts(err error) int {
	var e *Error
	if errors.As(err, &e) {
		return e.Attempts
	}
	return 0
}

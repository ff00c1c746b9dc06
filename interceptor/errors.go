package interceptor

import (
	"errors"

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
}

// Error returns the last attempt's message, as grpc-go formats it. When
// stagger did not retry an ambiguous failure (policy.ReasonAmbiguous), it
// adds why: the status alone (UNAVAILABLE, a code the file may well list)
// does not say that the call was not retried on purpose. GRPCStatus keeps
// the server's message unchanged either way. Other reasons are not added:
// programs compare err.Error() with what grpc-go gives (grpc-go's own
// interop case DoSpecialStatusMessage does), so the text stays grpc-go's;
// the Report (Report.String), the log and the Error's fields say why.
func (e *Error) Error() string {
	if e.Reason == policy.ReasonAmbiguous {
		return e.Err.Error() + ambiguousNote
	}
	return e.Err.Error()
}

// ambiguousNote is what Error adds to a call ended as ambiguous.
const ambiguousNote = " (stagger: not retried: the request may have run on the server, which sent no status, " +
	"and the method is not known to be idempotent; mark it idempotent or send an idempotency key)"

// Unwrap returns the last attempt's error.
func (e *Error) Unwrap() error { return e.Err }

// GRPCStatus returns the last attempt's status unchanged.
func (e *Error) GRPCStatus() *status.Status { return status.Convert(e.Err) }

// GaveUp reports whether stagger gave up on a failure it would otherwise
// have retried: no attempt was left (policy.ReasonAttempts), or the budget,
// a deferral, an outage that outlived the deadlines (policy.ReasonOutage),
// the circuit breaker or throttling, the caller's deadline, an
// ambiguous failure, the server's pushback, or a retried request being
// served (policy.ReasonRetriedRequest) stopped it. It is false for a failure
// the policy does not retry, a committed attempt and the caller's own
// cancellation. stagger's server side (package server) answers its caller
// with "do not retry" (gRFC A6's negative pushback) when a handler returns
// such an error, so that layers above do not retry what this one already did.
func (e *Error) GaveUp() bool {
	switch e.Reason {
	case policy.ReasonAttempts, policy.ReasonBudget, policy.ReasonDeferred, policy.ReasonBreaker,
		policy.ReasonThrottled, policy.ReasonDeadline, policy.ReasonAmbiguous, policy.ReasonPushback,
		policy.ReasonRetriedRequest, policy.ReasonOutage:
		return true
	}
	return false
}

// Attempts returns the number of attempts stagger made for the call that
// returned err, or 0 when err does not come from stagger: nil (a success,
// however many attempts it took), and the error of a call no policy covers
// (reason no policy: it ran once, as without stagger, and its error is the
// server's, unwrapped). WithReport counts the attempts of every call,
// successes included.
func Attempts(err error) int {
	var e *Error
	if errors.As(err, &e) {
		return e.Attempts
	}
	return 0
}

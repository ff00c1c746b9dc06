package interceptor

import (
	"errors"
	"strconv"

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
	// WaitEnd and HeldBy, for Reason policy.ReasonDeferred, name the rule
	// of the Gate's wait contract that ended the retry's wait and the one
	// that held it past its pause ("" when none did), as Report does.
	WaitEnd, HeldBy string
}

// Error returns the last attempt's message, as grpc-go formats it, for a
// call that ended on an answer stagger does not retry (the server's
// non-retryable status, a committed attempt, the caller's own end): the
// same text as without stagger, which programs compare (grpc-go's interop
// case special_status_message does). When stagger gave up (GaveUp), it says
// so in front, with the attempts and the reason in a few words:
//
//	stagger: gave up: max retries exhausted: failed after 3 attempts: rpc error: code = Unavailable desc = payments: down
//	stagger: gave up: backend down past the longest wait: failed after 1 attempt: rpc error: ...
//	stagger: gave up: circuit breaker open: no attempt made: rpc error: ...
//
// Where grpc-go's own retry gives up for the same reason (no attempt left)
// the text after "stagger: gave up: " is grpc-go's, so a search of logs for
// grpc-go's "max retries exhausted" finds stagger's too. GRPCStatus keeps
// the server's status (code, message, details) unchanged either way, where
// grpc-go's wrapped error puts its whole text in the status message.
func (e *Error) Error() string {
	words := giveUpWords(e.Reason)
	if e.Reason == policy.ReasonDeferred {
		words = deferredWords(e.WaitEnd, e.HeldBy)
	}
	if words == "" {
		return e.Err.Error()
	}
	var after string
	switch e.Attempts {
	case 0: // the breaker or throttling refused the first attempt
		after = "no attempt made"
	case 1:
		after = "failed after 1 attempt"
	default:
		after = "failed after " + strconv.Itoa(e.Attempts) + " attempts"
	}
	return "stagger: gave up: " + words + ": " + after + ": " + e.Err.Error()
}

// giveUpWords says in a few words why stagger gave up for reason r, or ""
// when r is not a give-up (GaveUp).
func giveUpWords(r policy.Reason) string {
	switch r {
	case policy.ReasonAttempts:
		return "max retries exhausted" // grpc-go's words (stream.go, shouldRetry)
	case policy.ReasonBudget:
		return "retry budget spent"
	case policy.ReasonDeferred:
		return deferredWords("", "")
	case policy.ReasonOutage:
		return "backend down past the longest wait"
	case policy.ReasonBreaker:
		return "circuit breaker open"
	case policy.ReasonThrottled:
		return "throttled by the client"
	case policy.ReasonDeadline:
		return "no retry fits before the deadline"
	case policy.ReasonPushback:
		return "the server's pushback says stop"
	case policy.ReasonRetriedRequest:
		return "the request being served is a retry: retried at one layer"
	case policy.ReasonAmbiguous:
		return ambiguousNote
	}
	return ""
}

// deferredWords says why a retry that waited in the budget's Gate was not
// admitted: the rule that ended the wait (waitEnd) and the one that held
// it past its pause (held), as budget.Gate names them; the budget need
// not have been spent.
func deferredWords(waitEnd, held string) string {
	var s string
	switch waitEnd {
	case "hold":
		s = "retry deferred, not let go after its pause (the Gate's hold rule)"
	case "hopeless":
		s = "retry deferred, none could finish before the deadline (the Gate's hopeless rule)"
	case "max-wait":
		s = "retry deferred the longest a call without a deadline waits (defer.maxWait)"
	default:
		s = "retry deferred, no admission before the deadline"
	}
	switch held {
	case "":
	case "outage":
		s += ", held by the Gate's outage rule (the backend is down)"
	case "overload":
		s += ", held by the Gate's overload rule (most attempts refused for overload or slow)"
	case "breaker":
		s += ", held by the open circuit breaker"
	default:
		s += ", held by the Gate's " + held + " rule"
	}
	return s
}

// ambiguousNote is why stagger gave up on an ambiguous failure: the status
// alone (UNAVAILABLE, a code the file may well list) does not say that the
// call was not retried on purpose, nor what to do.
const ambiguousNote = "not retried: the request may have run on the server, which sent no status, " +
	"and the method is not known to be idempotent (mark it idempotent or send an idempotency key)"

// Unwrap returns the last attempt's error.
func (e *Error) Unwrap() error { return e.Err }

// GRPCStatus returns the last attempt's status unchanged.
func (e *Error) GRPCStatus() *status.Status { return status.Convert(e.Err) }

// GaveUp reports whether stagger gave up on a failure it would otherwise
// have retried: no attempt was left (policy.ReasonAttempts), or the budget,
// a deferral, an outage that outlived what MaxWait left the call (policy.ReasonOutage),
// the circuit breaker or throttling, the caller's deadline, an
// ambiguous failure, the server's pushback, or a retried request being
// served (policy.ReasonRetriedRequest) stopped it. It is false for a failure
// the policy does not retry, a committed attempt and the caller's own
// cancellation. stagger's server side (package server) answers its caller
// with "do not retry" (gRFC A6's negative pushback) when a handler returns
// such an error, so that layers above do not retry what this one already did.
func (e *Error) GaveUp() bool { return giveUpWords(e.Reason) != "" }

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

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
	words := giveUpWords[e.Reason]
	if e.Reason == policy.ReasonDeferred {
		words = deferredWords(e.WaitEnd, e.HeldBy)
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

// giveUpWords says why stagger gave up, by reason; a reason it lacks is no
// give-up (GaveUp).
var giveUpWords = map[policy.Reason]string{
	policy.ReasonAttempts:       "max retries exhausted", // grpc-go's words (stream.go, shouldRetry)
	policy.ReasonBudget:         "retry budget spent",
	policy.ReasonDeferred:       deferredWords("", ""),
	policy.ReasonOutage:         "backend down past the longest wait",
	policy.ReasonBreaker:        "circuit breaker open",
	policy.ReasonThrottled:      "throttled by the client",
	policy.ReasonDeadline:       "no retry fits before the deadline",
	policy.ReasonPushback:       "the server's pushback says stop",
	policy.ReasonRetriedRequest: "the request being served is a retry: retried at one layer",
	policy.ReasonAmbiguous:      ambiguousNote,
}

// The words of the Gate's rules that end a wait and hold it (Report.WaitEnd,
// HeldBy); the others are named as they are.
var (
	waitEndWords = map[string]string{
		"hold":     "retry deferred, not let go after its pause (the Gate's hold rule)",
		"hopeless": "retry deferred, none could finish before the deadline (the Gate's hopeless rule)",
		"max-wait": "retry deferred the longest a call without a deadline waits (defer.maxWait)",
	}
	heldByWords = map[string]string{
		"outage":   ", held by the Gate's outage rule (the backend is down)",
		"overload": ", held by the Gate's overload rule (most attempts refused for overload or slow)",
		"breaker":  ", held by the open circuit breaker",
	}
)

// deferredWords says why a retry that waited in the Gate was not admitted.
func deferredWords(waitEnd, held string) string {
	s, ok := waitEndWords[waitEnd]
	if !ok {
		s = "retry deferred, no admission before the deadline"
	}
	if h, ok := heldByWords[held]; ok {
		return s + h
	}
	if held != "" {
		return s + ", held by the Gate's " + held + " rule"
	}
	return s
}

// ambiguousNote: the status alone (UNAVAILABLE, a code the file may list)
// does not say that the call was not retried on purpose, nor what to do.
const ambiguousNote = "not retried: the request may have run on the server, which sent no status, " +
	"and the method is not known to be idempotent (mark it idempotent or send an idempotency key)"

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
func (e *Error) GaveUp() bool { return giveUpWords[e.Reason] != "" }

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

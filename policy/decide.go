package policy

import (
	"errors"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/stagger-go/stagger/budget"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// PushbackKey is the trailer in which a server asks the client to wait (gRFC A6).
const PushbackKey = "grpc-retry-pushback-ms"

// Decide says whether the attempt a is retried, and after what pause. It is a
// pure function of p and a; it does not consult a budget (the interceptor does,
// after Decide says Retry) and reads no clock.
//
// The rules apply in grpc-go's order, so a plain gRFC A6 policy counts the
// same throttle failures and stops at the same point:
//
//  1. success: no retry, the budget hears of a success;
//  2. the caller's own cancellation or deadline: never retried;
//  3. a committed attempt (response headers or a message arrived): final;
//  4. the grpc-retry-pushback-ms trailer: negative, malformed, out of int32
//     range or repeated stops retrying and counts as a failure even when the
//     code would not have been retried (grpc-go checks it first too);
//  5. the failure itself: an attempt stagger's own timer cut off is retried
//     whatever the codes; a RESOURCE_EXHAUSTED raised locally by grpc-go never
//     is; then the predicate, then the codes (listed, or stagger's defaults);
//     then a failure the codes would retry but that is ambiguous
//     (Attempt.Ambiguous: it may have run, and the call is not safe to
//     repeat) is not retried;
//  6. maxAttempts (a failure that is not retried for want of attempts still
//     counts as a failure, as in grpc-go);
//  7. the pause: a valid pushback (the trailer, else a RetryInfo detail) is
//     waited exactly and restarts the backoff sequence; a pushback above the
//     ceiling, or an invalid RetryInfo, stops; otherwise the backoff;
//  8. the caller's deadline: a pause that cannot end before it is not taken.
//
// A retry, and a stop by rule 4, 6, 7 or 8 or for ambiguity, tell the budget
// of a failure; other stops by rules 2, 3 and 5 tell it nothing (budget.Other), as grpc-go's
// throttle sees them.
func (p *Policy) Decide(a *Attempt) Verdict {
	if a.Err == nil {
		return Verdict{Reason: ReasonSuccess, Record: budget.Success}
	}
	if a.CallerDone {
		return Verdict{Reason: ReasonCaller, Record: budget.Other}
	}
	if a.Committed {
		return Verdict{Reason: ReasonCommitted, Record: budget.Other}
	}
	pushback, pb := ParsePushback(a.Trailer)
	if pb == PushbackInvalid {
		return Verdict{Reason: ReasonPushback, Record: budget.Failure}
	}
	st := statusOf(a.Err)
	if !a.TimedOut {
		if IsLocalResourceExhausted(st) {
			// Nothing the server did: the budget hears nothing of it.
			return Verdict{Reason: ReasonNotRetryable, Record: budget.Other}
		}
		if !p.retryable(a.Err, st) {
			return Verdict{Reason: ReasonNotRetryable, Record: budget.Other}
		}
		if a.Ambiguous {
			// A failure of the server or the path to it, as a retryable
			// code is: the budget hears of it.
			return Verdict{Reason: ReasonAmbiguous, Record: budget.Failure}
		}
	}
	if a.Number >= p.MaxAttempts {
		return Verdict{Reason: ReasonAttempts, Record: budget.Failure}
	}
	if pb == PushbackNone && st != nil {
		pushback, pb = RetryInfoDelay(st)
		if pb == PushbackInvalid {
			return Verdict{Reason: ReasonPushback, Record: budget.Failure}
		}
	}
	v := Verdict{Retry: true, Record: budget.Failure}
	if pb == PushbackValid {
		ceiling := p.PushbackCeiling
		if ceiling <= 0 {
			ceiling = DefaultPushbackCeiling
		}
		if pushback > ceiling {
			return Verdict{Reason: ReasonPushback, Record: budget.Failure}
		}
		v.Pause, v.Pushback = pushback, true
	} else {
		n, prev := a.Retry, a.Prev
		if n < 1 {
			n = 1
		}
		if n == 1 || prev <= 0 {
			prev = p.Backoff.Initial
		}
		v.Pause = p.Backoff.Delay(n, prev, a.U)
	}
	if a.HasDeadline && v.Pause >= a.Remaining {
		return Verdict{Reason: ReasonDeadline, Record: budget.Failure}
	}
	return v
}

// NextBackoff returns the Retry and Prev of the attempt that follows a, once
// Decide said v (a retry): after a pushback the backoff sequence restarts at
// retry 1 with prev back to Initial (gRFC A6: n counts from the last
// pushback); otherwise it advances by one, with prev the pause just taken.
func (p *Policy) NextBackoff(a *Attempt, v Verdict) (retry int, prev time.Duration) {
	if v.Pushback {
		return 1, p.Backoff.Initial
	}
	retry = a.Retry
	if retry < 1 {
		retry = 1
	}
	if retry < math.MaxInt {
		retry++
	}
	return retry, v.Pause
}

// retryable reports whether the failure err (whose status is st, nil when err
// carries none) is one the policy retries: the predicate first, then the codes.
func (p *Policy) retryable(err error, st *status.Status) bool {
	if p.Predicate != nil {
		if retry, decided := p.Predicate(err); decided {
			return retry
		}
	}
	code := codes.Unknown
	if st != nil {
		code = st.Code()
	}
	if p.RetryableCodes != 0 {
		return p.RetryableCodes.Has(code)
	}
	return DefaultRetryableCodes.Has(code)
}

// DefaultRetryableCodes are the codes stagger's default policy retries (a
// Policy whose RetryableCodes is the zero set): UNAVAILABLE, and
// RESOURCE_EXHAUSTED sent by the server. DEADLINE_EXCEEDED is retried only for
// an attempt stagger's own per-attempt timer cut off, which Decide knows from
// Attempt.TimedOut, not from the code.
const DefaultRetryableCodes = CodeSet(1<<codes.Unavailable | 1<<codes.ResourceExhausted)

// statusOf returns the status err carries, as status.FromError finds it, but
// without its copies: status.FromError clones the status proto of a wrapped
// error to replace its message, and Decide runs on every failed attempt. It
// returns nil when err carries no status (status.FromError would say Unknown).
func statusOf(err error) *status.Status {
	type grpcStatus interface{ GRPCStatus() *status.Status }
	if gs, ok := err.(grpcStatus); ok {
		return gs.GRPCStatus()
	}
	var gs grpcStatus
	if errors.As(err, &gs) {
		return gs.GRPCStatus()
	}
	return nil
}

// IsLocalResourceExhausted reports whether st is a RESOURCE_EXHAUSTED that
// grpc-go raises for a message over a size limit, rather than one a server
// sends because it is overloaded. Retrying those cannot help: the message will
// not shrink. grpc-go raises them on the client (sending or receiving) and on
// a server receiving too large a request; they are told apart from an
// overloaded server by grpc-go's own messages, as no code or detail marks
// them.
func IsLocalResourceExhausted(st *status.Status) bool {
	if st == nil || st.Code() != codes.ResourceExhausted {
		return false
	}
	msg := strings.TrimPrefix(st.Message(), "grpc: ")
	for _, p := range localResourceExhausted {
		if strings.HasPrefix(msg, p) {
			return true
		}
	}
	return false
}

// localResourceExhausted are the starts of grpc-go's size-limit messages
// (v1.64 onwards), after an optional "grpc: ". The client's own send check
// has no "grpc: " prefix.
var localResourceExhausted = [...]string{
	"trying to send message larger than max",
	"received message larger than max",
	"received message after decompression larger than max",
	"message too large",
}

// PushbackResult says what a server's pushback asked for.
type PushbackResult uint8

const (
	// PushbackNone: the server sent no pushback.
	PushbackNone PushbackResult = iota
	// PushbackValid: retry after exactly the returned pause.
	PushbackValid
	// PushbackInvalid: negative, malformed, out of range or repeated: stop
	// retrying (gRFC A6).
	PushbackInvalid
)

// ParsePushback reads the grpc-retry-pushback-ms trailer as gRFC A6 and
// grpc-go do: one value, a base-10 signed 32-bit integer of milliseconds (an
// optional sign, digits, nothing else). Negative, malformed or repeated is
// PushbackInvalid, and so is a value outside the int32 range (grpc-go v1.64
// reads a 64-bit int, but any such value is far above the pushback ceiling,
// which stops retrying too). It never returns a negative pause.
func ParsePushback(md metadata.MD) (time.Duration, PushbackResult) {
	vals := md[PushbackKey]
	switch len(vals) {
	case 0:
		return 0, PushbackNone
	case 1:
	default:
		return 0, PushbackInvalid
	}
	ms, err := strconv.ParseInt(vals[0], 10, 32)
	if err != nil || ms < 0 {
		return 0, PushbackInvalid
	}
	return time.Duration(ms) * time.Millisecond, PushbackValid
}

// RetryInfoDelay reads a google.rpc.RetryInfo detail of st, which stagger uses
// as pushback when there is no trailer. A negative or invalid delay is
// PushbackInvalid; more than one RetryInfo is PushbackInvalid too; a
// RetryInfo without a delay is PushbackNone. It does not allocate when st
// has no details (status.Status.Proto would copy the whole status).
func RetryInfoDelay(st *status.Status) (time.Duration, PushbackResult) {
	details := st.Details()
	if len(details) == 0 {
		return 0, PushbackNone
	}
	var found *errdetails.RetryInfo
	for _, d := range details {
		ri, ok := d.(*errdetails.RetryInfo)
		if !ok {
			continue // another detail, or one whose type is not linked in
		}
		if found != nil {
			return 0, PushbackInvalid
		}
		found = ri
	}
	rd := found.GetRetryDelay()
	if rd == nil {
		return 0, PushbackNone
	}
	if err := rd.CheckValid(); err != nil {
		return 0, PushbackInvalid
	}
	d := rd.AsDuration()
	if d < 0 {
		return 0, PushbackInvalid
	}
	return d, PushbackValid
}

package policy

import (
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
// The order of the rules follows grpc-go's retry: the caller's own end, then
// commit, then pushback, then the codes, then maxAttempts, then the deadline.
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
		// gRFC A6: an invalid pushback stops retrying and counts as a failure.
		return Verdict{Reason: ReasonPushback, Record: budget.Failure}
	}
	if !a.TimedOut && !p.retryable(a.Err) {
		return Verdict{Reason: ReasonNotRetryable, Record: budget.Other}
	}
	if pb == PushbackNone {
		if st, ok := status.FromError(a.Err); ok {
			pushback, pb = RetryInfoDelay(st)
		}
	}
	if a.Number >= p.MaxAttempts {
		return Verdict{Reason: ReasonAttempts, Record: budget.Failure}
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

// retryable reports whether err is a failure the policy retries, by the
// predicate first and then by the codes.
func (p *Policy) retryable(err error) bool {
	if p.Predicate != nil {
		if retry, decided := p.Predicate(err); decided {
			return retry
		}
	}
	st, _ := status.FromError(err)
	code := st.Code()
	if p.RetryableCodes != 0 {
		if code == codes.ResourceExhausted && IsLocalResourceExhausted(st) {
			return false
		}
		return p.RetryableCodes.Has(code)
	}
	switch code {
	case codes.Unavailable:
		return true
	case codes.ResourceExhausted:
		return !IsLocalResourceExhausted(st)
	}
	return false
}

// IsLocalResourceExhausted reports whether st is a RESOURCE_EXHAUSTED that
// grpc-go raised itself for a message over a size limit, rather than one the
// server sent. Retrying those cannot help: the message will not shrink.
func IsLocalResourceExhausted(st *status.Status) bool {
	if st.Code() != codes.ResourceExhausted {
		return false
	}
	msg := st.Message()
	return strings.HasPrefix(msg, "grpc: ") && strings.Contains(msg, "larger than max")
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

// ParsePushback reads the grpc-retry-pushback-ms trailer as grpc-go does: one
// value, a base-10 signed 32-bit integer of milliseconds. It never returns a
// negative pause.
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
// PushbackInvalid; more than one RetryInfo is PushbackInvalid too.
func RetryInfoDelay(st *status.Status) (time.Duration, PushbackResult) {
	p := st.Proto()
	if p == nil || len(p.Details) == 0 {
		return 0, PushbackNone
	}
	var found *errdetails.RetryInfo
	for _, d := range p.Details {
		var ri errdetails.RetryInfo
		if d.MessageIs(&ri) {
			if found != nil {
				return 0, PushbackInvalid
			}
			if err := d.UnmarshalTo(&ri); err != nil {
				return 0, PushbackInvalid
			}
			found = &ri
		}
	}
	if found == nil {
		return 0, PushbackNone
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

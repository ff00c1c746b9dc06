package budget

import (
	"strconv"
	"time"

	"github.com/stagger-go/stagger/criticality"
)

// Budget decides whether the process can afford one more attempt of a call (a
// retry or a hedge) to one backend. The interceptors share one Budget among
// every call to a backend (Backends keeps one per backend), or, given one
// with interceptor.WithBudget, among every call. A nil Budget means
// unlimited.
//
// Implementations must be safe for concurrent use. The interface has no hidden
// methods: users may implement it.
type Budget interface {
	// Record tells the budget how one attempt ended. The interceptors call it
	// once for every attempt that ends, successful or not, including the last
	// attempt of a call.
	Record(a Attempt)
	// Allow asks for one more attempt of a call. It returns true when the
	// attempt may be sent, and then the budget has spent what that attempt
	// costs; false when the budget refuses.
	Allow(r Request) bool
	// State reports the budget's state for metrics, logs and `stagger check`.
	State() State
}

// Outcome is how an attempt ended, as far as a budget cares.
type Outcome uint8

const (
	// Success: the attempt ended with status OK.
	Success Outcome = iota
	// Failure: the attempt failed in a way the policy counts as retryable
	// (gRFC A6 counts these against the throttle, even on the last attempt,
	// and so does a negative or malformed pushback).
	Failure
	// Other: the attempt ended another way that says nothing about the
	// server's health as the budget sees it: a non-retryable code, a failure
	// after commit, the caller's own cancellation or deadline.
	Other
)

// String returns "success", "failure" or "other".
func (o Outcome) String() string {
	switch o {
	case Success:
		return "success"
	case Failure:
		return "failure"
	case Other:
		return "other"
	}
	return "Outcome(" + strconv.Itoa(int(o)) + ")"
}

// Attempt describes one attempt that ended.
type Attempt struct {
	// Number counts the attempts of the call: 1 is the first attempt.
	Number int
	// Call identifies the call across its attempts, as Request.Call.
	Call uint64
	// Outcome is how it ended.
	Outcome Outcome
	// AfterTimeout: this attempt was a retry sent after the previous attempt
	// was cut off by stagger's per-attempt timer (a token bucket refunds the
	// larger timeout cost when such a retry succeeds).
	AfterTimeout bool
	// Hedge: this attempt was a hedge, sent while an earlier one was running.
	Hedge bool
	// Overload: the attempt's end says the server is overloaded: a
	// RESOURCE_EXHAUSTED it sent, a pushback, or stagger's per-attempt
	// timer cut the attempt off; or, for a success, it answered late (the
	// interceptors: after a quarter of its per-attempt timeout, a sign of
	// rising latency). A Gate then refuses retries after a per-attempt
	// timeout for a while, and after a failure for overload stops healing
	// retries and may take the server for one in an outage (see Gate,
	// the heal, outage and overload rules).
	Overload bool
	// Pushback: the server told when to retry (gRFC A6's
	// grpc-retry-pushback-ms) with the attempt's failure. A Gate obeys it
	// (the pause is the pushback's) and counts a failure for overload that
	// carries one only toward the share of attempts that were signs of
	// overload; one without a pushback holds retries by itself until
	// successes follow (see Gate, the overload rule).
	Pushback bool
	// Admission: how a Deferrer let this attempt go after the budget had
	// refused it (AdmitNone for every other attempt). A Gate paces its
	// releases and probes by how these end.
	Admission Admission
	// Final: the call's policy sends no attempt after this one (its
	// attempts are spent, no pause fits before its deadline, or the code
	// is not retried; a retry the budget then refuses does not count). A
	// Gate counts a call whose final retry failed as one that retrying did
	// not heal (see Gate).
	Final bool
	// Took is how long the attempt took, from when it left to its end,
	// when its caller measured it (zero otherwise): the interceptors do
	// for a retry a Deferrer let go (Admission not AdmitNone). A Gate
	// ends at once a wait that a retry taking as long as the latest such
	// retry that succeeded could not finish before its call's deadline
	// (see Gate, the end rule).
	Took time.Duration
	// Load is the backend's load report on the attempt's answer (zero:
	// none, or the interceptors held no trailer for it: a hedged
	// attempt's).
	Load Load
}

// Request asks for one more attempt.
type Request struct {
	// Number is the number of the attempt asked for: 2 is the first retry.
	Number int
	// Call identifies the call across its attempts (zero: unknown; the
	// interceptors number their calls): a Gate knows by it, with the
	// attempt's number, the call that goes on learning (see Gate, the
	// hold rule).
	Call uint64
	// AfterTimeout: the previous attempt was cut off by stagger's per-attempt
	// timer (a token bucket charges more for such a retry).
	AfterTimeout bool
	// Straggler (with AfterTimeout): the attempt cut off was a straggler,
	// not a sign of overload: its caller saw the server serve the method's
	// other attempts fast while it waited (the interceptors: an attempt
	// sent after it was served; or, nothing having been sent after it, the
	// method's latest attempt served, sent after the latest earlier one
	// whose per-attempt timer fired, took less than half its timeout). A
	// Gate admits such a retry that its budget refuses like a healing
	// retry, unpaid, and a slow success does not hold it back (see Gate,
	// the heal and overload rules).
	Straggler bool
	// Hedge: the attempt is a hedge.
	Hedge bool
	// Last: the attempt asked for is its call's last (the policy's
	// maxAttempts). A Gate does not spend it on a probe (see Gate).
	Last bool
	// Took is how long an attempt of the call's method took lately, when
	// its caller knows (zero: unknown): the interceptors know it from the
	// method's latest attempt of the call's criticality served within five
	// seconds, of those they time (every attempt under a per-attempt
	// timeout, and retries). A Gate ends at once a wait that an attempt taking that
	// long could not finish before its call's deadline (see Gate, the end rule).
	Took time.Duration
	// Waited is how long the call waited already in its earlier deferred
	// retries (the interceptors: Report.Deferred so far). A Gate bounds the
	// waits of a call without a deadline by DeferSettings.MaxWait in all,
	// not each (issue 63: calls without a deadline ran 19-25 s).
	Waited time.Duration
	// Unsent: the attempt before it failed without leaving the client (its
	// connection's attempts to connect were failing). A Gate's futility
	// rule waits twice as long before it turns such a retry away: the
	// outage it saw may be partly the connection's, which reconnects on its
	// own backoff after the server is back. The interceptors never ask for
	// such a retry: it waits for its connection instead (package doc).
	Unsent bool
	// Guard, when set, guards the call besides the budget (a circuit
	// breaker): a Gate lets the waiting retry go only when the guard allows
	// it too (see Gate, the guard rule).
	Guard Guard
	// Criticality is the call's criticality (Unset counts as CRITICAL).
	// Every budget kind of this package keeps a reserve by it, so that
	// the less critical are refused first: a retry or a hedge of level l
	// must leave a share of the budget's span, where the span is a token
	// bucket's Capacity (the tokens left after paying), the throttle's
	// upper half (MaxTokens/2 above gRFC A6's threshold of MaxTokens/2),
	// and the ratio's allowance (the retries left in the window):
	//
	//	SHEDDABLE       a quarter of the span
	//	SHEDDABLE_PLUS  an eighth
	//	CRITICAL        nothing: exactly as before levels existed (gRFC A6)
	//	CRITICAL_PLUS   may go a fifth of the span below CRITICAL's floor
	//
	// So a token bucket of 100 pays a SHEDDABLE retry while it holds at
	// least its cost plus 25 tokens, and a CRITICAL_PLUS one down to a
	// debt of 20 tokens that successes pay back before any other level
	// spends again; a throttle of 10 tokens allows SHEDDABLE retries above
	// 6.25 tokens and CRITICAL_PLUS ones above 4; a ratio whose window
	// allows 20 retries gives SHEDDABLE 15 of them and CRITICAL_PLUS 24.
	// The shares are tuning, not settings (a release may retune them). A
	// Gate also admits its waiting retries by criticality (Gate, the criticality rule).
	Criticality criticality.Level
}

// State is a snapshot of a budget, for metrics, logs and `stagger check`.
type State struct {
	// Kind names the budget kind: "throttle", "token-bucket", "ratio", or a
	// user's own.
	Kind string
	// Level is the budget's current level: tokens for "throttle" and
	// "token-bucket"; for "ratio", the retries it could allow now.
	Level float64
	// Capacity is the largest Level can be.
	Capacity float64
	// Allowed and Refused count the Allow calls answered true and false
	// (a Gate asks again for each waiting retry: each asking counts; the
	// retries a Gate refuses without asking its budget count in Refused).
	Allowed, Refused uint64
	// Waiting is the calls waiting in a Gate now; Deferred counts the
	// retries that began to wait, DeferAdmitted those that then went,
	// DeferGaveUp those whose wait ended otherwise (the gate's rules,
	// the deadline, the caller leaving, an eviction), so that Deferred =
	// DeferAdmitted + DeferGaveUp + Waiting; DeferTurnedAway counts the
	// retries refused at the door, which never waited (too many waiting,
	// an outage lasting). Zero for a budget without deferral.
	Waiting                                               int
	Deferred, DeferAdmitted, DeferGaveUp, DeferTurnedAway uint64
	// Health is a Gate's view of its server: "quiet" (nothing failed
	// since a success), "failing", "outage" or "recovering" (see Gate);
	// "" for a budget without a Gate.
	Health string
	// At is when the snapshot was taken, on the budget's clock.
	At time.Time
}

// Healths lists the values a Gate's State.Health takes, in the order a
// backend passes through them: the names a dashboard of its health needs
// before the backend has been in each.
func Healths() []string {
	out := make([]string, 0, phaseRecovering+1)
	for p := phaseQuiet; p <= phaseRecovering; p++ {
		out = append(out, p.String())
	}
	return out
}

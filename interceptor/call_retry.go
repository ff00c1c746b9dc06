package interceptor

import (
	"cmp"
	"context"
	"errors"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/stagger-go/stagger/balancer/elsewhere"
	"github.com/stagger-go/stagger/budget"
	"github.com/stagger-go/stagger/internal/chain"
	"github.com/stagger-go/stagger/internal/loadreport"
	"github.com/stagger-go/stagger/policy"
)

// record tells the breaker breakerO, then the budget a (nil: nothing): a
// Gate's waiters, woken by the budget's Record, must find the breaker's
// new state. The decision alone calls it; the fast path writes it out
// (recordFirstSuccess).
func (f *retryFacts) record(q *question, breakerO budget.Outcome, a *budget.Attempt) {
	if f.br != nil {
		f.br.Record(breakerO, q.first, f.crit, f.o)
	}
	if f.budget != nil && a != nil {
		a.Call = f.id
		f.budget.Record(*a)
	}
}

// afterAttempt applies the call's decision once its attempt ended with err
// (trailer: nil when it got no transport stream; committed: headers or a
// message arrived; timedOut: the timer cut it off): whether to retry and
// after what pause. It sets the call's reason, the backoff position and a
// wait in the Deferrer, and tells the hooks. It alone takes the retry the
// timer admitted (c.cut): it goes only for a timed-out attempt, else its
// admission is given back here.
func (c *call) afterAttempt(callCtx context.Context, err error, trailer metadata.MD, committed, timedOut bool) (retry bool, pause time.Duration) {
	cut := c.cut
	c.cut = timerCut{}
	if !timedOut {
		c.settle(cut.admission)
	}
	admission := c.admission
	c.admission = budget.AdmitNone
	q := question{kind: askEnded, n: c.attempt, err: err, trailer: trailer, committed: committed, timedOut: timedOut, first: c.attempt-c.unsent+c.before == 1,
		rec: budget.Attempt{Number: c.attempt - c.unsent, AfterTimeout: c.afterTimeout, Admission: admission, Took: took(admission, monoNow()-c.retryStart), Load: loadreport.Read(trailer)}}
	c.load = cmp.Or(q.rec.Load, c.load)
	switch {
	case err == nil:
		q.slow = c.slow
	case timedOut && cut.verdict.Retry:
		q.verdict, q.given, q.straggler = cut.verdict, true, cut.straggler
		c.admission = cut.admission
	default:
		q.unsent = c.isUnsent(err, committed, timedOut)
	}
	ans := c.shouldRetry(callCtx, &q)
	c.probe, c.awaitReady = ans.probe, ans.awaitReady
	if q.unsent {
		c.unsent++
	}
	v := ans.verdict
	switch {
	case err == nil:
		c.reason = policy.ReasonSuccess
		return false, 0
	case ans.unretried:
		c.reason = v.Reason
		if c.off {
			c.reason = policy.ReasonDisabled
		}
		return false, 0
	}
	if ans.callerEnd {
		c.callerEnd = callerErr(callCtx, err)
	}
	e := Event{Method: c.method, Attempt: c.attempt, Code: status.Code(err), Err: err, Pause: v.Pause, Pushback: v.Pushback, Reason: v.Reason}
	if c.hedged == nil && !c.hedgeOnTimeout {
		// One attempt at a time: the latest pick was this one's.
		e.Backend = elsewhere.Backend(callCtx)
	}
	if ans.wait != nil {
		c.deferReq = ans.wait
		e.Kind = EventDeferred
	}
	if !v.Retry {
		c.reason = v.Reason
		e.Kind, e.Pause = EventGiveUp, 0
		c.emit(callCtx, e)
		return false, 0
	}
	if e.Kind == 0 {
		e.Kind = c.retryKind()
	}
	c.emit(callCtx, e)
	if v.Pushback {
		// gRFC A6: the backoff sequence restarts after a pushback.
		c.retry, c.prev = 1, 0
	} else {
		c.retry, c.prev = c.retry+1, v.Pause
	}
	c.afterTimeout, c.pushback = timedOut, v.Pushback
	if q.given {
		// The timer's retry goes at once: its attempt ran on through
		// the pause before the timer cut it off.
		return true, 0
	}
	return true, max(v.Pause, 0)
}

// retryKind is the event of a retry that goes (a committed stream's:
// resume).
func (c *call) retryKind() EventKind {
	if c.resume {
		return EventResume
	}
	return EventRetry
}

// The askers of the call's one decision (question.kind).
const (
	// askEnded: an attempt ended and its answer is the call's: recorded,
	// and a retry is admitted or waits in the Deferrer (afterAttempt).
	askEnded uint8 = iota
	// askBeside: an attempt ended that decides nothing (another runs, or a
	// retry waits: hedgeOnPerTryTimeout): recorded, nothing admitted.
	askBeside
	// askVerdict: the per-attempt timer fires: would the policy retry?
	askVerdict
	// askAdmit: the timer's grace ends: does the retry (question.verdict)
	// go now? A budget that would make it wait has not admitted it.
	askAdmit
	// askHedge: hedging made attempt n > 1 due: the breaker, then the
	// budget (as a hedge), admit it; nothing is recorded.
	askHedge
	// askRaced: a hedged attempt failed before any commit: may the next
	// hedge go (nonFatalStatusCodes)? Recorded as a hedge.
	askRaced
	// askSettled: an attempt ended that needs no verdict (a hedge's
	// success, a loser): the breaker hears breakerO, the budget rec.
	askSettled
)

// question is one ask of the call's decision (shouldRetry).
type question struct {
	kind uint8
	// n is the attempt, err how it ended (errAttemptTimeout: the timer's).
	n                   int
	err                 error
	trailer             metadata.MD
	committed, timedOut bool
	// verdict, when given, was taken already (the timer's).
	verdict policy.Verdict
	given   bool
	// straggler, unsent: budget.Request's; slow: a late success
	// (budget.Attempt.Overload).
	straggler, unsent, slow bool
	// first: the call's first attempt (the breaker's); rec is what the
	// budget hears, but the outcome and the verdict's signs.
	first bool
	rec   budget.Attempt
	// nonFatal is the hedging policy's nonFatalStatusCodes (askRaced).
	nonFatal policy.CodeSet
	// breakerO is what the breaker hears (askSettled).
	breakerO budget.Outcome
}

// answer is the call's decision (shouldRetry).
type answer struct {
	verdict policy.Verdict
	// unretried: no retry policy, or the switch is on: nothing recorded.
	unretried bool
	// callerEnd: the caller left as a failure came that the policy would
	// have retried: the call ends with the caller's status.
	callerEnd bool
	// admission: how the budget let the retry go (askAdmit); wait: the
	// refused retry to wait for in the Deferrer (askEnded); probe: the
	// retry or hedge admitted holds the breaker's yes (its half-open
	// probe), which its outcome or giveBack returns; awaitReady: the
	// retry of an attempt that never left the client waits for its
	// connection, unpaid (call.waitReady).
	admission  budget.Admission
	wait       *budget.Request
	probe      bool
	awaitReady bool
}

// shouldRetry is the call's one decision (grpc-go's shouldRetry): here
// alone are the policy (Decide), the breaker and the budget asked for an
// attempt after the first and told how an attempt ended; the askers differ
// in q.kind, and a failure is judged by verdict after one caller rule
// (callerEnded). It writes nothing of the call (a stream's timer runs it
// on its own goroutine): the asker applies the answer. A retry is admitted
// by Decide (no pause past the deadline), the breaker, the budget, then
// the Deferrer's wait (which asks the breaker again); a hedge without a
// verdict.
func (f *retryFacts) shouldRetry(callCtx context.Context, q *question) (ans answer) {
	v := &ans.verdict
	switch {
	case q.kind == askHedge:
		v.Retry = true
		f.admit(q, &ans)
		return ans
	case q.kind == askSettled:
		f.record(q, q.breakerO, &q.rec)
		return ans
	case q.err == nil:
		v.Record, v.Reason = budget.Success, policy.ReasonSuccess
	case q.kind != askRaced && (!f.retrying || f.o.offNow()):
		// gRFC A6 counts failures only for methods with a retry policy:
		// the budget hears nothing of them, nor of a call switched off.
		ans.unretried = true
		switch {
		case f.retrying:
			v.Reason = policy.ReasonDisabled
		case f.pol == nil:
			v.Reason = policy.ReasonNoPolicy
		default:
			v.Reason = policy.ReasonAttempts
		}
	case q.given:
		*v = q.verdict
	default:
		caller := callerEnded(callCtx, q.err)
		*v = f.verdict(callCtx, q, caller)
		if caller && (q.kind == askEnded || q.kind == askRaced) && !contextCode(q.err) {
			// The failure came as the caller left: had it been retried,
			// the call ends with the caller's status (grpc-go's, in the
			// backoff), not the failure a retry would hide.
			ans.callerEnd = f.verdict(callCtx, q, false).Retry
		}
		if v.Retry && q.kind != askRaced && chain.RetriedRequest(f.ctx) {
			// Served for a caller that retries already: retry at one layer
			// (hedging's start rule stops its hedges itself).
			v.Retry, v.Reason = false, policy.ReasonRetriedRequest
		}
	}
	if q.kind == askEnded || q.kind == askBeside || q.kind == askRaced {
		o := breakerOutcome(callCtx, q.err, q.timedOut)
		if q.unsent { // it never left the client: no evidence of the server
			o, v.Record = budget.Other, budget.Other
		}
		var rec *budget.Attempt
		if f.budget != nil && !ans.unretried {
			a := q.rec
			a.Outcome = v.Record
			// A sign of overload, whether or not the attempt decides: a
			// RESOURCE_EXHAUSTED the server sent, or the timer cut it off
			// (not a straggler). A pushback alone is not one: it is obeyed as
			// the pause (budget.Gate, the overload rule). A hedged attempt's
			// question carries no trailer and no timer: none.
			a.Overload = q.slow || q.timedOut && !q.straggler || status.Code(q.err) == codes.ResourceExhausted && q.trailer != nil
			a.Pushback = v.Pushback
			if a.Overload && !a.Pushback {
				// The server said when to retry, on the last attempt too.
				_, pb := policy.ParsePushback(q.trailer)
				a.Pushback = pb == policy.PushbackValid
			}
			// An attempt beside another is not the call's last.
			a.Final = q.kind == askEnded && !v.Retry
			rec = &a
		}
		f.record(q, o, rec)
	}
	if v.Retry && (q.kind == askAdmit || q.kind == askEnded && !q.given) {
		f.admit(q, &ans)
	}
	return ans
}

// verdict is "retry or not" on q's failed attempt (caller: callerEnded):
// the policy's (Decide), or hedging's before any commit (raceVerdict).
func (f *retryFacts) verdict(callCtx context.Context, q *question, caller bool) policy.Verdict {
	if q.kind == askRaced {
		return raceVerdict(q, caller)
	}
	a := policy.Attempt{Number: q.n, Err: q.err, Trailer: q.trailer, Committed: q.committed, TimedOut: q.timedOut,
		Retry: f.retry, Prev: f.prev, CallerDone: caller, U: f.o.random.Float64()}
	a.Ambiguous = !f.repeatable && wireAmbiguous(q.trailer, q.committed)
	if dl, ok := callCtx.Deadline(); ok {
		a.Remaining, a.HasDeadline = time.Until(dl), true
	}
	return f.pol.Decide(&a)
}

// raceVerdict is Decide for a hedged attempt that failed (gRFC A6): the
// next hedge may go unless the caller left, the attempt committed, or its
// code is fatal. The budget hears a failure when it may go, else Other.
func raceVerdict(q *question, caller bool) policy.Verdict {
	switch {
	case caller:
		return policy.Verdict{Reason: policy.ReasonCaller, Record: budget.Other}
	case q.committed:
		return policy.Verdict{Reason: policy.ReasonCommitted, Record: budget.Other}
	case !q.nonFatal.Has(status.Code(q.err)):
		return policy.Verdict{Reason: policy.ReasonNotRetryable, Record: budget.Other}
	}
	return policy.Verdict{Retry: true, Record: budget.Failure}
}

// callID numbers the call from callIDs when it first asks for a retry.
func (f *retryFacts) callID() uint64 {
	if f.id == 0 {
		f.id = callIDs.Add(1)
	}
	return f.id
}

// admit asks the breaker, then the budget, for the retry ans.verdict makes
// or the hedge: at once (askAdmit: Admit), or, after an attempt ended, a
// retry a Deferrer refused waits (ans.wait). A breaker not closed lets it
// go only as its half-open probe. A refusal says ReasonBreaker or
// ReasonBudget.
func (f *retryFacts) admit(q *question, ans *answer) {
	var req budget.Request
	switch {
	case f.budget == nil:
	case q.kind == askHedge:
		req = budget.Request{Number: q.n, Hedge: true, Criticality: f.crit}
	default:
		req = budget.Request{Number: f.attempt + 1 - f.unsent, Call: f.callID(), AfterTimeout: q.timedOut, Last: f.attempt+1 >= f.pol.MaxAttempts, Criticality: f.crit, Straggler: q.straggler}
		if f.br != nil {
			req.Guard = f.br.Guard(f.crit, f.o)
		}
	}
	// The retry of an attempt that never left the client reaches the
	// server once: it waits for the connection, not for the budget.
	ans.awaitReady = q.unsent && q.kind == askEnded && f.budget != nil
	_, wait := f.budget.(budget.Deferrer)
	wait = wait && q.kind == askEnded && !ans.awaitReady
	ok := f.br == nil || f.br.Closed()
	probe := false
	if !ok && !wait && q.kind != askAdmit {
		// Not closed: the attempt goes only as the half-open probe.
		ok, _ = f.br.AllowRetry(f.crit, f.o)
		probe = ok
	}
	why := policy.ReasonBreaker
	if ok && f.budget != nil && !ans.awaitReady {
		why = policy.ReasonBudget
		if ad, admits := f.budget.(budget.Admitter); admits && q.kind == askAdmit {
			ans.admission, ok = ad.Admit(req)
		} else {
			ok = f.budget.Allow(req)
		}
	}
	switch {
	case ok:
		ans.probe = probe
	case wait:
		if f.pace != nil {
			req.Took = f.pace.Latency(time.Now(), f.crit.Index())
		}
		w := req
		ans.wait = &w
	default:
		if probe {
			// The budget refused what the breaker let go. A hedge that
			// then waits in the Deferrer asks the breaker again there
			// (goOnRefused puts its Guard in the Request).
			f.returnProbe()
		}
		ans.verdict.Retry, ans.verdict.Reason, ans.awaitReady = false, why, false
	}
}

// returnProbe gives the breaker back the yes its AllowRetry gave a retry
// or a hedge that is not sent, through its Guard as a Gate gives back a
// waiter's (budget.GuardReturner): the half-open probe is free at once,
// not after a break.
func (f *retryFacts) returnProbe() {
	if r, ok := f.br.Guard(f.crit, f.o).(budget.GuardReturner); ok {
		r.ReturnRetry()
	}
}

// giveBack gives back what the call's next retry was admitted with when
// it was never sent (the caller left in the pause, or the call ended
// otherwise first): the budget's admission (settle) and the breaker's
// probe. The loop's end and the stream's end call it; a retry that is sent
// (numberAttempt) carries both to its outcome.
func (c *call) giveBack() {
	c.settle(c.admission)
	c.admission = budget.AdmitNone
	if c.probe {
		c.probe = false
		c.returnProbe()
	}
}

// isUnsent reports whether the attempt that failed with err never left the
// client: UNAVAILABLE, uncommitted, while the connection failed to connect.
// grpc hands the failing picker to waiting calls just before it publishes
// TRANSIENT_FAILURE, so CONNECTING with grpc's dial error counts too.
func (c *call) isUnsent(err error, committed, timedOut bool) bool {
	if err == nil || timedOut || committed || c.cc == nil || status.Code(err) != codes.Unavailable {
		return false
	}
	switch c.cc.GetState() {
	case connectivity.TransientFailure:
		return true
	case connectivity.Connecting:
		return strings.Contains(status.Convert(err).Message(), "while dialing")
	}
	return false
}

// took is d, how long an attempt let go with adm took, when a Deferrer
// let it go (budget.Attempt.Took); else 0.
func took(adm budget.Admission, d time.Duration) time.Duration {
	if adm == budget.AdmitNone {
		return 0
	}
	return d
}

// breakerOutcome is what an attempt that ended with err tells a breaker,
// by WithBreakers' rule (Other too for a hedge the call cancelled).
func breakerOutcome(callCtx context.Context, err error, timedOut bool) budget.Outcome {
	if err == nil {
		return budget.Success
	}
	if !timedOut && callerEnded(callCtx, err) {
		return budget.Other
	}
	switch status.Code(err) {
	case codes.Unavailable, codes.ResourceExhausted, codes.DeadlineExceeded:
		return budget.Failure
	case codes.Canceled:
		return budget.Other
	}
	return budget.Success
}

// finish returns the call's final error: nil, err when stagger did not
// retry the method, else an *Error carrying it (or callerEnd).
func (c *call) finish(err error) error {
	if err == nil || !c.retrying {
		return err
	}
	if c.callerEnd != nil {
		err = c.callerEnd
	}
	return c.failed(c.attempt+c.before, err)
}

// end reports the call's end, with err, to the call hooks (EventEnd) and
// its Report; cc is nil for a front end.
func (c *call) end(cc *grpc.ClientConn, err error) {
	o := c.o
	if o == nil || len(o.callHooks) == 0 && o.report == nil {
		return
	}
	e := Event{Kind: EventEnd, Method: c.method, Attempt: c.attempt + c.before, Code: status.Code(err), Err: err, Reason: c.reason, Deferred: c.deferred, Hedging: c.hedged != nil, Criticality: c.crit, Disabled: c.off}
	if err == nil {
		e.Reason = policy.ReasonSuccess
	}
	if c.off {
		// Whatever its code: a dashboard shows the switch.
		e.Reason = policy.ReasonDisabled
	}
	if e.Attempt > 1 {
		if c.hedged != nil {
			e.Hedges = e.Attempt - 1
		} else {
			e.Retries = e.Attempt - 1
		}
	}
	if c.hedged == nil {
		e.Delay = c.pausedFor + c.deferred
	}
	e.Target, e.StaticMethod = c.target, c.static
	if len(o.callHooks) > 0 {
		e.CanonicalTarget = canonicalTarget(cc, c.target)
	}
	if r := o.report; r != nil {
		*r = Report{Attempts: e.Attempt, Retries: e.Retries, Hedges: e.Hedges, Delay: e.Delay, Pushback: c.pushedBack, Deferred: e.Deferred, WaitEnd: c.waitEnd, HeldBy: c.heldBy, Reason: e.Reason, Code: e.Code, Criticality: e.Criticality, TimerRefused: c.timerRefused, TimerReason: c.timerReason, Target: e.Target, Disabled: c.off, Load: c.load}
		if c.budget != nil && budgetEnded(e.Reason) {
			r.Budget = c.budget.State()
		}
		if c.br != nil && (e.Reason == policy.ReasonBreaker || e.Reason == policy.ReasonThrottled) {
			r.Breaker = c.br.SnapshotFor(c.o)
		}
	}
	for _, h := range o.callHooks {
		h(c.hookCtx(), e)
	}
}

// hookCtx is the caller's context, for the hooks (Background: none).
func (c *call) hookCtx() context.Context {
	if c.ctx == nil {
		return context.Background()
	}
	return c.ctx
}

// failed returns the *Error of a call that ended with err after attempts
// attempts. A give-up marks the request the call serves (stagger's server
// side), so its caller does not retry either.
func (c *call) failed(attempts int, err error) *Error {
	e := &Error{Attempts: attempts, Reason: c.reason, Err: err}
	if c.reason == policy.ReasonDeferred {
		e.WaitEnd, e.HeldBy = c.waitEnd, c.heldBy
	}
	if e.GaveUp() && c.ctx != nil {
		chain.GaveUp(c.ctx)
	}
	return e
}

// callerEnded reports whether the attempt that ended with err ended because
// the caller's context did, or err has a context's code and the deadline is
// at most callerDeadlineSlack away (the report can beat the context's own
// timer).
func callerEnded(callCtx context.Context, err error) bool {
	if callCtx.Err() != nil {
		return true
	}
	if !contextCode(err) {
		return false
	}
	dl, ok := callCtx.Deadline()
	return ok && time.Until(dl) <= callerDeadlineSlack
}

// contextCode reports whether err is CANCELED or DEADLINE_EXCEEDED.
func contextCode(err error) bool {
	code := status.Code(err)
	return code == codes.Canceled || code == codes.DeadlineExceeded
}

// callerErr is the error of a call the caller's context ended: CANCELED
// only when the caller cancelled, else DEADLINE_EXCEEDED, whatever the
// attempt ended with.
func callerErr(callCtx context.Context, err error) error {
	code, cause := codes.DeadlineExceeded, context.DeadlineExceeded
	if errors.Is(callCtx.Err(), context.Canceled) {
		code, cause = codes.Canceled, context.Canceled
	}
	if status.Code(err) == code {
		return err
	}
	return status.Error(code, cause.Error())
}

// attemptOutcome returns the error to decide on of an attempt (cutOff: the
// timer cut it off: errAttemptTimeout), and whether the timer cut it off.
// Once the caller's context ended, a context's code or a cut ends with
// callerErr; a status the server wrote is kept.
func attemptOutcome(callCtx context.Context, err error, cutOff bool) (error, bool) {
	switch {
	case err == nil:
		return nil, false
	case callerEnded(callCtx, err):
		if cutOff || contextCode(err) {
			return callerErr(callCtx, err), false
		}
		return err, false
	case cutOff:
		return errAttemptTimeout, true
	}
	return err, false
}

// wireAmbiguous reports whether a failed attempt was ambiguous (the package
// doc says what that is). trailer is nil when the attempt got no transport
// stream; committed: headers or a message arrived. A server's status without
// response headers is a Trailers-Only response, whose HEADERS frame carries
// content-type, which grpc-go keeps in the trailer; when the transport
// ended the stream (reset, EOF, GOAWAY) the trailer is empty.
func wireAmbiguous(trailer metadata.MD, committed bool) bool {
	return trailer != nil && !committed && len(trailer["content-type"]) == 0
}

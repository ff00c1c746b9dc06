package interceptor

import (
	"context"
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
	"github.com/stagger-go/stagger/policy"
)

// record tells the breaker (nil: none) breakerO of q's attempt, then the
// budget (nil: none) a (nil: nothing, as for a failure of a call without a
// retry policy). The breaker first: a Gate's waiters, woken by the budget's
// Record, must find the breaker's new state. Only the call's decision
// (shouldRetry) calls it; the fast path writes it out for a first
// attempt's success (recordFirstSuccess: a call there costs too much).
func (f *retryFacts) record(q *question, breakerO budget.Outcome, a *budget.Attempt) {
	if f.br != nil {
		f.br.Record(breakerO, q.first, f.crit, f.o)
	}
	if f.budget != nil && a != nil {
		f.budget.Record(*a)
	}
}

// afterAttempt applies the call's decision (shouldRetry) once its attempt
// ended with err: whether to send another and after what pause. trailer is
// the attempt's trailer metadata (pushback; nil when the attempt got no
// transport stream), committed says response headers or a message had
// arrived, timedOut that stagger's per-attempt timer cut it off. It sets
// what the answer changes of the call (its reason, the backoff sequence's
// position, a wait in the budget's Deferrer) and reports the retry or the
// give-up to the hooks and the logger.
func (c *call) afterAttempt(callCtx context.Context, err error, trailer metadata.MD, committed, timedOut bool) (retry bool, pause time.Duration) {
	admission := c.admission
	c.admission = budget.AdmitNone
	q := question{kind: askEnded, n: c.attempt, err: err, trailer: trailer, committed: committed, timedOut: timedOut, first: c.attempt+c.before == 1,
		rec: budget.Attempt{Number: c.attempt, AfterTimeout: c.afterTimeout, Admission: admission, Took: c.took(admission)}}
	grace := time.Duration(0)
	switch {
	case err == nil:
		// A slow success is a sign of overload (rising latency).
		q.slow = c.slow
	case timedOut && c.timerVerdict.Retry:
		// The per-attempt timer cut the attempt off and admitted the
		// retry as it did (attemptTimer): it goes as the timer's
		// admission let it (heal: unpaid, which its Attempt tells the
		// budget), after what is left of its pause.
		q.verdict, q.given, q.straggler = c.timerVerdict, true, c.timerStraggler
		grace, c.admission = c.timerGrace, c.timerAdmission
		c.timerVerdict, c.timerGrace, c.timerAdmission, c.timerStraggler = policy.Verdict{}, 0, budget.AdmitNone, false
	default:
		q.unsent = c.unsent(err, committed, timedOut)
	}
	ans := c.shouldRetry(callCtx, &q)
	v := ans.verdict
	switch {
	case err == nil:
		c.reason = policy.ReasonSuccess
		return false, 0
	case ans.unretried:
		c.reason = v.Reason
		if c.off {
			// The switch, on at the start.
			c.reason = policy.ReasonDisabled
		}
		return false, 0
	}
	if ans.callerEnd {
		c.callerEnd = callerErr(callCtx, err)
	}
	e := Event{Method: c.method, Attempt: c.attempt, Code: status.Code(err), Err: err, Pause: v.Pause, Pushback: v.Pushback, Reason: v.Reason}
	if c.hedged == nil && !c.hedgeOnTimeout {
		// Attempts one after the other: the latest pick was this attempt's.
		e.Backend = elsewhere.Backend(callCtx)
	}
	if ans.wait != nil {
		// Wait in pause, through the Deferrer, which asks the breaker too.
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
		e.Kind = EventRetry
		if c.resume {
			e.Kind = EventResume
		}
	}
	c.emit(callCtx, e)
	if v.Pushback {
		// gRFC A6: the backoff sequence restarts after a pushback.
		c.retry, c.prev = 1, 0
	} else {
		c.retry, c.prev = c.retry+1, v.Pause
	}
	c.afterTimeout, c.pushback = timedOut, v.Pushback
	return true, max(v.Pause-grace, 0)
}

// The askers of the call's one decision (question.kind).
const (
	// askEnded: an attempt ended and its answer is the call's: the
	// breaker and the budget hear how it ended, and a retry the policy
	// makes is admitted or waits in the budget's Deferrer (afterAttempt).
	askEnded uint8 = iota
	// askBeside: an attempt ended whose failure decides nothing (another
	// runs, or a retry waits: hedgeOnPerTryTimeout): the breaker and the
	// budget hear how, signs of overload included, and nothing is admitted.
	askBeside
	// askVerdict: the per-attempt timer fires and asks whether the
	// policy would retry the attempt cut off now; nothing is recorded or
	// admitted.
	askVerdict
	// askAdmit: the timer's grace ends and asks whether the retry the
	// policy would make (question.verdict) goes now: at once or not at
	// all (a budget that would make it wait has not admitted it).
	askAdmit
	// askHedge: hedging's start rule made attempt n (a hedge, n > 1) due:
	// the breaker, then the budget (as a hedge), admit it or not; no
	// verdict is taken and nothing is recorded (hedgeState.admitHedge).
	askHedge
	// askRaced: a hedged attempt ended in failure before any commit: the
	// hedging policy's nonFatalStatusCodes (question.nonFatal) decide
	// whether the next hedge may go, and the breaker and the budget hear
	// how, as a hedge (question.rec: hedgeState.judge).
	askRaced
	// askSettled: an attempt ended whose outcome needs no verdict (a
	// hedge's success, a loser cancelled after the commit, the attempts
	// drained as a call ends): the breaker hears question.breakerO, the
	// budget question.rec (recordHedge, unaryLoop.drain).
	askSettled
)

// question is one ask of the call's decision (shouldRetry).
type question struct {
	kind uint8
	// n is the attempt; err how it ended (nil: success;
	// errAttemptTimeout as its timer asks), trailer, committed and
	// timedOut as afterAttempt's.
	n                   int
	err                 error
	trailer             metadata.MD
	committed, timedOut bool
	// verdict, when given, was taken already (the timer's): the policy
	// is not asked again.
	verdict policy.Verdict
	given   bool
	// straggler: the timed-out attempt is a straggler (pace.straggler),
	// not a sign of overload (budget.Request.Straggler); unsent, that it
	// never left the client (budget.Request.Unsent); slow, that a success
	// came late (budget.Attempt.Overload).
	straggler, unsent, slow bool
	// first: the attempt is the call's first (the breaker's); rec is
	// what the budget hears of an attempt that ended, but its outcome
	// and what the verdict says.
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
	// unretried: the method is not retried (no retry policy, or the
	// switch is on): the breaker heard of the attempt, the budget did not.
	unretried bool
	// callerEnd: the caller left as a failure came that the policy would
	// have retried (askRaced: a non-fatal one): the call ends with the
	// caller's status.
	callerEnd bool
	// admission is how the budget let the retry go (askAdmit); wait, the
	// retry the budget refused, to wait for in its Deferrer (askEnded).
	admission budget.Admission
	wait      *budget.Request
}

// shouldRetry is the call's one decision (grpc-go's shouldRetry): every
// "retry or not" of a call that retries is asked here, and here alone are
// the policy (Decide), the circuit breaker and the budget asked for a
// retry and told how an attempt ended, the breaker first (a Gate's
// waiters, woken by the budget's Record, must find the breaker's new
// state). The askers differ only in q (question.kind). It reads the call's
// facts and writes none of them (a stream's timer runs it on a copy): what
// the answer changes of the call is the asker's to apply.
//
// The admission order of a retry: Decide (the caller's deadline included:
// no pause that outlasts it), then the breaker, then the budget, then the
// wait (a budget that defers; it asks the breaker again before it lets the
// retry go). The timer's retry went through the same order as the timer
// fired (askVerdict) and its grace ended (askAdmit). Every attempt after
// the first is admitted here: a hedge (askHedge) too, in the same order
// but without a verdict (the hedging policy's start rule made it due).
func (f *retryFacts) shouldRetry(callCtx context.Context, q *question) (ans answer) {
	v := &ans.verdict
	switch {
	case q.kind == askHedge:
		v.Retry = true
		f.admit(q, &ans)
		return ans
	case q.kind == askRaced:
		f.judgeRaced(callCtx, q, &ans)
		return ans
	case q.kind == askSettled:
		f.record(q, q.breakerO, &q.rec)
		return ans
	case q.err == nil:
		// Decide's answer for a success is fixed.
		v.Record, v.Reason = budget.Success, policy.ReasonSuccess
	case !f.retrying || f.o.offNow():
		// gRFC A6 counts failures only for methods with a retry policy:
		// the breaker hears of it, the budget does not. Nor does it of a
		// call the switch turned off.
		ans.unretried = true
		switch {
		case f.retrying:
			v.Reason = policy.ReasonDisabled
		case f.pol == nil:
			// Not "attempts": no retry was ever on offer.
			v.Reason = policy.ReasonNoPolicy
		default:
			v.Reason = policy.ReasonAttempts
		}
	case q.given:
		*v = q.verdict
	default:
		a := f.attemptFacts(callCtx, q.err, q.trailer, q.committed, q.timedOut)
		a.Number = q.n
		*v = f.pol.Decide(&a)
		if q.kind == askEnded && v.Reason == policy.ReasonCaller && !contextCode(q.err) {
			// The server's failure came as the caller left. Had the
			// policy retried it, the caller's leaving ended the call (in
			// grpc-go, during the backoff): it ends with the caller's
			// status, not the failure a retry would have hidden.
			a.CallerDone = false
			ans.callerEnd = f.pol.Decide(&a).Retry
		}
		if v.Retry && chain.RetriedRequest(f.ctx) {
			// Served for a caller that is retrying already: retry at one
			// layer.
			v.Retry, v.Reason = false, policy.ReasonRetriedRequest
		}
	}
	if q.kind == askEnded || q.kind == askBeside {
		f.recordEnd(callCtx, q, v, ans.unretried)
	}
	if v.Retry && (q.kind == askAdmit || q.kind == askEnded && !q.given) {
		f.admit(q, &ans)
	}
	return ans
}

// judgeRaced is shouldRetry for a hedged attempt that failed before any
// commit (askRaced): the next hedge may go (ans.verdict.Retry) unless the
// caller left (ReasonCaller; a non-fatal failure, which the next hedge
// would have hidden, gives way to the caller's status: ans.callerEnd, as
// afterAttempt's does), the attempt had committed (ReasonCommitted), or its
// code is fatal (ReasonNotRetryable). The breaker and the budget hear how
// it ended: a failure when the next hedge may go, else Other, as a hedge
// (q.rec) and, for the budget, without a verdict's signs.
func (f *retryFacts) judgeRaced(callCtx context.Context, q *question, ans *answer) {
	v := &ans.verdict
	nonFatal := q.nonFatal.Has(status.Code(q.err))
	switch {
	case callCtx.Err() != nil:
		v.Reason = policy.ReasonCaller
		ans.callerEnd = nonFatal && !contextCode(q.err)
	case q.committed:
		v.Reason = policy.ReasonCommitted
	case !nonFatal:
		v.Reason = policy.ReasonNotRetryable
	default:
		v.Retry = true
	}
	a := q.rec
	a.Outcome = budget.Other
	if v.Retry {
		a.Outcome = budget.Failure
	}
	f.record(q, breakerOutcome(callCtx, q.err, false), &a)
}

// recordEnd tells the breaker and the budget how the attempt of q ended,
// with v the policy's verdict on it; unretried: the budget hears nothing.
func (f *retryFacts) recordEnd(callCtx context.Context, q *question, v *policy.Verdict, unretried bool) {
	var rec *budget.Attempt
	if f.budget != nil && !unretried {
		a := q.rec
		a.Outcome = v.Record
		// A sign of overload, whether or not the attempt decides (a
		// Gate's overload rule counts both): the server refused the
		// attempt for it (RESOURCE_EXHAUSTED it sent), or stagger's timer
		// cut the attempt off, unless it cut a straggler (the method's
		// other attempts were served fast). A pushback is not one by
		// itself: its delay is obeyed as the pause (gRFC A6), and a
		// refusal that carries one holds retries only while most attempts
		// are signs (budget.Gate, the overload rule).
		a.Overload = q.slow || q.timedOut && !q.straggler || status.Code(q.err) == codes.ResourceExhausted && q.trailer != nil
		a.Pushback = v.Pushback
		if a.Overload && !a.Pushback {
			// The call's last attempt too: the server said when to retry.
			_, pb := policy.ParsePushback(q.trailer)
			a.Pushback = pb == policy.PushbackValid
		}
		// An attempt beside another ends nothing: not the call's last.
		a.Final = q.kind == askEnded && !v.Retry
		rec = &a
	}
	f.record(q, breakerOutcome(callCtx, q.err, q.timedOut), rec)
}

// admit asks the breaker, then the budget, for the retry ans.verdict
// makes, or the hedge (askHedge: the budget's Allow, as a hedge, which a
// refusal leaves to the hedging loop: hedgeState.admitHedge): at once
// (askAdmit: a closed breaker, the budget's Admit), or,
// after an attempt ended (askEnded), a retry a budget that defers refused
// waits (ans.wait); without one, a breaker that is not closed lets the
// retry go only as its half-open probe. A refusal ends the retry, for
// ReasonBreaker or ReasonBudget.
func (f *retryFacts) admit(q *question, ans *answer) {
	var req budget.Request
	switch {
	case f.budget == nil:
	case q.kind == askHedge:
		req = budget.Request{Number: q.n, Hedge: true, Criticality: f.crit}
	default:
		req = f.retryRequest(q.timedOut)
		req.Straggler, req.Unsent = q.straggler, q.unsent
	}
	_, wait := f.budget.(budget.Deferrer)
	wait = wait && q.kind == askEnded
	ok := f.br == nil || f.br.Closed()
	if !ok && !wait && q.kind != askAdmit {
		// A hedge due after the break asks as a retry would: it goes
		// only as the breaker's half-open probe, rather than never.
		ok, _ = f.br.AllowRetry(f.crit, f.o)
	}
	why := policy.ReasonBreaker
	if ok && f.budget != nil {
		why = policy.ReasonBudget
		if ad, admits := f.budget.(budget.Admitter); admits && q.kind == askAdmit {
			ans.admission, ok = ad.Admit(req)
		} else {
			ok = f.budget.Allow(req)
		}
	}
	switch {
	case ok:
	case wait:
		if f.pace != nil {
			req.Took = f.pace.latency(time.Now(), f.crit.Index())
		}
		w := req
		ans.wait = &w
	default:
		ans.verdict.Retry, ans.verdict.Reason = false, why
	}
}

// unsent reports whether the attempt that failed with err never left the
// client: UNAVAILABLE, uncommitted, while the connection's attempts to
// connect were failing (grpc fails a call at once then). The state is read
// after the failure: grpc hands the failing picker to waiting calls just
// before it publishes TRANSIENT_FAILURE, so CONNECTING with grpc's dial
// error counts too (TestRealTimeUnsentRetries' first run under -race read
// CONNECTING in one round of five).
func (c *call) unsent(err error, committed, timedOut bool) bool {
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

// took is how long the attempt that just ended took, for the budget
// (budget.Attempt.Took), when a Deferrer let it go (admission): the clock
// is read on that path only.
func (c *call) took(admission budget.Admission) time.Duration {
	if admission == budget.AdmitNone {
		return 0
	}
	return monoNow() - c.retryStart
}

// attemptFacts describes the attempt that just ended, for Decide.
func (c *retryFacts) attemptFacts(callCtx context.Context, err error, trailer metadata.MD, committed, timedOut bool) policy.Attempt {
	a := policy.Attempt{
		Number:    c.attempt,
		Err:       err,
		Trailer:   trailer,
		Committed: committed,
		TimedOut:  timedOut,
		Retry:     c.retry,
		Prev:      c.prev,
	}
	a.CallerDone = callerEnded(callCtx, err)
	a.Ambiguous = !c.repeatable && wireAmbiguous(trailer, committed)
	if dl, ok := callCtx.Deadline(); ok {
		a.Remaining, a.HasDeadline = time.Until(dl), true
	}
	a.U = c.o.random.Float64()
	return a
}

// retryRequest is what the budget is asked for the retry after c's current
// attempt; timedOut: the per-attempt timer cut that attempt off.
func (c *retryFacts) retryRequest(timedOut bool) budget.Request {
	req := budget.Request{Number: c.attempt + 1, AfterTimeout: timedOut, Last: c.attempt+1 >= c.pol.MaxAttempts, Criticality: c.crit}
	if c.br != nil {
		req.Guard = c.br.Guard(c.crit, c.o)
	}
	return req
}

// breakerOutcome is what an attempt that ended with err tells a circuit
// breaker: Success when the server answered (OK, or a code that says it
// works: NOT_FOUND, INVALID_ARGUMENT, ...), Failure for UNAVAILABLE,
// RESOURCE_EXHAUSTED and a DEADLINE_EXCEEDED that is not the caller's
// (stagger's per-attempt timer), Other when the caller ended the call.
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
		// Cancelled under the call (a hedge that lost, a reset): says
		// nothing of the server.
		return budget.Other
	}
	return budget.Success
}

// finish returns the call's final error: nil, err itself when stagger did not
// retry the method, or an *Error carrying it (or, when the caller left as
// a retryable failure came, the caller's status: callerEnd) and the number
// of attempts.
func (c *call) finish(err error) error {
	if err == nil || !c.retrying {
		return err
	}
	if c.callerEnd != nil {
		err = c.callerEnd
	}
	return c.failed(c.attempt+c.before, err)
}

// end reports the end of the call, with err its final error (nil: success),
// to the call hooks (EventEnd; WithHook's hooks do not hear it) and to the
// call's Report. It costs a branch when
// neither is there. cc is the connection, nil for a front end without one
// (package frontend: the target is then the context's).
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
		// Whatever its code: a dashboard of ends by reason shows the switch.
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
		*r = Report{Attempts: e.Attempt, Retries: e.Retries, Hedges: e.Hedges, Delay: e.Delay, Pushback: c.pushedBack, Deferred: e.Deferred, WaitEnd: c.waitEnd, HeldBy: c.heldBy, Reason: e.Reason, Code: e.Code, Criticality: e.Criticality, TimerRefused: c.timerRefused, TimerReason: c.timerReason, Target: e.Target, Disabled: c.off}
		if c.budget != nil && budgetEnded(e.Reason) {
			r.Budget = c.budget.State()
		}
		if c.br != nil && (e.Reason == policy.ReasonBreaker || e.Reason == policy.ReasonThrottled) {
			r.Breaker = c.br.SnapshotFor(c.o)
		}
	}
	if len(o.callHooks) > 0 {
		ctx := c.ctx
		if ctx == nil {
			ctx = context.Background()
		}
		for _, h := range o.callHooks {
			h(ctx, e)
		}
	}
}

// failed returns the *Error of a call that ended with err after attempts
// attempts, for reason c.reason. When stagger gave up retrying
// (Error.GaveUp), it marks the request the call was made for, if the call is
// made while serving one under stagger's server side, which then tells that
// request's caller not to retry.
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

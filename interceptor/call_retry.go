package interceptor

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/stagger-go/stagger/balancer/elsewhere"
	"github.com/stagger-go/stagger/breaker"
	"github.com/stagger-go/stagger/budget"
	"github.com/stagger-go/stagger/criticality"
	"github.com/stagger-go/stagger/internal/chain"
	"github.com/stagger-go/stagger/policy"
)

// recordOutcome is the one place an attempt's outcome is recorded: br
// (nil: none) hears breakerO (first: the call's first attempt), then b
// (nil: none) hears a (nil: nothing, as for a failure of a call without a
// retry policy). The breaker first: a Gate's waiters, woken by the
// budget's Record, must find the breaker's new state. Every engine records
// through it (call.record); the fast path writes it out for a first
// attempt's success (recordFirstSuccess: a call there costs too much).
func recordOutcome(br *breaker.Breaker, b budget.Budget, crit criticality.Level, o *options, first bool, breakerO budget.Outcome, a *budget.Attempt) {
	if br != nil {
		br.Record(breakerO, first, crit, o)
	}
	if b != nil && a != nil {
		b.Record(*a)
	}
}

// record is recordOutcome for c's breaker and budget.
func (c *call) record(first bool, breakerO budget.Outcome, a *budget.Attempt) {
	recordOutcome(c.br, c.budget, c.crit, c.o, first, breakerO, a)
}

// afterAttempt decides, once the attempt ended with err, whether to send
// another and after what pause. trailer is the attempt's trailer metadata
// (pushback; nil when the attempt got no transport stream), committed says
// response headers or a message had arrived, timedOut that stagger's
// per-attempt timer cut it off; trailer and committed also tell an
// ambiguous failure (wireAmbiguous), which a call not c.repeatable does not
// retry. It records the
// attempt in the budget, asks the budget before a retry, and reports the
// retry or the give-up to the hooks and the logger.
func (c *call) afterAttempt(callCtx context.Context, err error, trailer metadata.MD, committed, timedOut bool) (retry bool, pause time.Duration) {
	admission := c.admission
	c.admission = budget.AdmitNone
	first, breakerO := c.attempt+c.before == 1, breakerOutcome(callCtx, err, timedOut)
	if err == nil {
		// Decide's answer for a success is fixed: record it, stop. A slow
		// success is a sign of overload (rising latency). The fast path (unaryInterceptor) records
		// a first attempt's success without a call (recordFirstSuccess):
		// what changes here changes there.
		var a *budget.Attempt
		if c.budget != nil {
			a = &budget.Attempt{Number: c.attempt, Outcome: budget.Success, AfterTimeout: c.afterTimeout, Admission: admission, Overload: c.slow, Final: true, Took: c.took(admission)}
		}
		c.record(first, breakerO, a)
		c.reason = policy.ReasonSuccess
		return false, 0
	}
	if !c.retrying || c.o.offNow() {
		// gRFC A6 counts failures only for methods with a retry policy:
		// the breaker hears of it, the budget does not. Nor does it of a
		// call the switch turned off (the budget hears nothing then).
		c.record(first, breakerO, nil)
		c.reason = policy.ReasonAttempts
		switch {
		case c.off || c.retrying:
			// The switch, on at the start or turned on since (SetDisabled).
			c.reason = policy.ReasonDisabled
		case c.pol == nil:
			// Not "attempts": no retry was ever on offer.
			c.reason = policy.ReasonNoPolicy
		}
		return false, 0
	}
	// The admission order of a retry: Decide (the caller's deadline
	// included: no pause that outlasts it), then the circuit breaker, then
	// the budget, then the wait (a budget that defers; it asks the breaker
	// again before it lets the retry go). An attempt the per-attempt timer
	// cut off went through the same order when the timer fired and its
	// grace ended (timeoutVerdict, timeoutAdmit), which admitted the
	// retry: it goes, after what is left of its pause.
	var v policy.Verdict
	admitted := timedOut && c.timerVerdict.Retry
	grace := time.Duration(0)
	straggler := false
	if admitted {
		v, c.timerVerdict = c.timerVerdict, policy.Verdict{}
		grace, c.timerGrace = c.timerGrace, 0
		// The retry goes as the timer's admission let it (heal:
		// unpaid, which its Attempt tells the budget).
		c.admission, c.timerAdmission = c.timerAdmission, budget.AdmitNone
		straggler, c.timerStraggler = c.timerStraggler, false
	} else {
		a := c.attemptFacts(callCtx, err, trailer, committed, timedOut)
		v = c.pol.Decide(&a)
		if v.Reason == policy.ReasonCaller && !contextCode(err) {
			// The server's failure came as the caller left. Had the
			// policy retried it, the caller's leaving ended the call
			// (in grpc-go, during the backoff): it ends with the
			// caller's status, CANCELED or DEADLINE_EXCEEDED, not the
			// failure a retry would have hidden.
			a.CallerDone = false
			if c.pol.Decide(&a).Retry {
				c.callerEnd = callerErr(callCtx, err)
			}
		}
	}
	if v.Retry && !admitted && chain.RetriedRequest(c.ctx) {
		// Served for a caller that is retrying already: retry at one layer.
		v.Retry, v.Reason = false, policy.ReasonRetriedRequest
	}
	// The attempt's outcome, once Decide said what the budget records.
	var rec *budget.Attempt
	if c.budget != nil {
		// A sign of overload: the server refused the attempt for it
		// (RESOURCE_EXHAUSTED it sent), or stagger's timer cut the attempt
		// off, unless it cut a straggler (the method's other attempts were
		// served fast). A pushback is not one by itself: its delay is
		// obeyed as the pause (gRFC A6), and a refusal that carries one
		// holds retries only while most attempts are signs (budget.Gate,
		// the overload rule).
		overload := timedOut && !straggler || status.Code(err) == codes.ResourceExhausted && trailer != nil
		told := v.Pushback
		if overload && !told {
			// The call's last attempt too: the server said when to retry.
			_, pb := policy.ParsePushback(trailer)
			told = pb == policy.PushbackValid
		}
		rec = &budget.Attempt{Number: c.attempt, Outcome: v.Record, AfterTimeout: c.afterTimeout, Admission: admission, Overload: overload, Pushback: told, Final: !v.Retry, Took: c.took(admission)}
	}
	c.record(first, breakerO, rec)
	e := Event{Method: c.method, Attempt: c.attempt, Code: status.Code(err), Err: err, Pause: v.Pause, Pushback: v.Pushback, Reason: v.Reason}
	if err != nil && c.hedged == nil && !c.hedgeOnTimeout {
		// Attempts one after the other: the latest pick was this attempt's.
		e.Backend = elsewhere.Backend(callCtx)
	}
	if v.Retry && !admitted && (c.budget != nil || c.br != nil) {
		req := c.retryRequest(timedOut)
		req.Unsent = c.unsent(err, committed, timedOut)
		_, defers := c.budget.(budget.Deferrer)
		breakerOK := true
		if c.br != nil {
			if breakerOK = c.br.Closed(); !breakerOK && !defers {
				// No Gate to wait in: the retry goes only as the
				// half-open breaker's probe.
				breakerOK, _ = c.br.AllowRetry(c.crit, c.o)
			}
		}
		if !breakerOK || (c.budget != nil && !c.budget.Allow(req)) {
			if defers {
				// Wait in pause, through the Deferrer, which asks the
				// breaker too.
				if c.pace != nil {
					req.Took = c.pace.latency(time.Now(), c.crit.Index())
				}
				c.deferReq = &req
				e.Kind = EventDeferred
			} else {
				v.Retry, v.Reason = false, policy.ReasonBudget
				if !breakerOK {
					v.Reason = policy.ReasonBreaker
				}
				e.Reason = v.Reason
			}
		}
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
	// A retry the timer admitted after its grace waits what is left of
	// its pause.
	return true, max(v.Pause-grace, 0)
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

// timeoutVerdict decides, as the per-attempt timer of c's current attempt
// fires, whether the policy would retry it: the verdict is the one
// afterAttempt then follows (its pause included), once timeoutAdmit admits
// the retry. The policy would retry when Decide retries an attempt cut off
// at this moment (attempts left, a pause that ends before the caller's
// deadline, the caller still there) and the call is not served for a
// caller that retries already. timeoutAdmit then admits the retry when the
// circuit breaker is closed and the budget admits it at once (Allow; a
// budget that would defer it has not admitted it). Otherwise nothing was
// spent (Allow admits only a retry that then goes), and the attempt runs
// on: its own answer is judged as if it had had no timer. Both run where
// the timer decides (attemptTimer.take: a unary call's loop, a stream's
// timer goroutine on a copy of the call's retryFacts); they emit no event
// (afterAttempt does).
//
// The budget is asked before it hears how the attempt ended: the attempt
// has not ended yet, and if it runs on it ends on its own later.
func (c *retryFacts) timeoutVerdict(callCtx context.Context) (v policy.Verdict, ok bool) {
	if !c.retrying {
		return v, false
	}
	a := c.attemptFacts(callCtx, errAttemptTimeout, nil, false, true)
	if v = c.pol.Decide(&a); !v.Retry {
		return v, false
	}
	return v, !chain.RetriedRequest(c.ctx)
}

// timeoutAdmit is timeoutVerdict's second half: see there. straggler
// says the attempt is a straggler (pace.straggler: the method's other
// attempts were served fast meanwhile), which a Gate admits unpaid while
// retries heal (budget.Request.Straggler). It returns how the retry was
// admitted (heal: by the Gate, unpaid; the retry's Attempt says so),
// or, when it was not, why: ReasonBreaker or ReasonBudget.
func (c *retryFacts) timeoutAdmit(straggler bool) (budget.Admission, policy.Reason) {
	if c.br != nil && !c.br.Closed() {
		return budget.AdmitNone, policy.ReasonBreaker
	}
	if c.budget == nil {
		return budget.AdmitNone, policy.ReasonNone
	}
	req := c.retryRequest(true)
	req.Straggler = straggler
	ok := false
	adm := budget.AdmitNone
	if ad, admits := c.budget.(budget.Admitter); admits {
		adm, ok = ad.Admit(req)
	} else {
		ok = c.budget.Allow(req)
	}
	if !ok {
		return budget.AdmitNone, policy.ReasonBudget
	}
	return adm, policy.ReasonNone
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

// admitFirst finds the call's circuit breaker (for cc's target) and asks it
// for the first attempt. It returns nil, or the call's final error when the
// breaker is open or throttling rejected the attempt: UNAVAILABLE, with a
// message that names the breaker, as an *Error of no attempts whose
// Unwrap reaches the *breaker.Refusal.
func (c *call) admitFirst(ctx context.Context, cc *grpc.ClientConn, grpcOpts []grpc.CallOption) error {
	c.cc = cc
	if c.breakers == nil {
		return nil
	}
	c.br = findBreaker(c.breakers, c.brCache, cc, callTarget(ctx, cc), c.method)
	err := c.br.Admit(c.crit, c.o)
	if err == nil {
		if cc != nil && !c.br.Settings().NoPacing && waitsForReady(c.fileOpts, grpcOpts) {
			holdUntilReady(ctx, cc, c.br)
		}
		return nil
	}
	return c.refused(ctx, err)
}

// findBreaker returns the breaker in bs of a call of method on target,
// cc's (nil: a front end's), through cache (nil: none), the method's cache
// of the first target it was called on; bs keys it by the canonical
// target (canonicalTarget), as the budgets are.
func findBreaker(bs *breaker.Set, cache *atomic.Pointer[breakerRef], cc *grpc.ClientConn, target, method string) *breaker.Breaker {
	if cache != nil {
		if r := cache.Load(); r != nil && r.target == target {
			return r.b
		}
	}
	br := bs.Get(canonicalTarget(cc, target), method)
	if cache != nil {
		// The first target only: a method called on several targets
		// looks the others up, rather than allocate on every switch.
		cache.CompareAndSwap(nil, &breakerRef{target: target, b: br})
	}
	return br
}

// refused returns the final error of a call whose breaker (c.br) refused
// its first attempt with err, and tells the hooks and the logger.
func (c *call) refused(ctx context.Context, err error) error {
	reason := policy.ReasonBreaker
	if errors.Is(err, breaker.ErrThrottled) {
		reason = policy.ReasonThrottled
	}
	refused := &refusedError{st: status.New(codes.Unavailable, err.Error()), err: err}
	c.reason = reason
	c.emit(ctx, Event{Kind: EventGiveUp, Method: c.method, Code: codes.Unavailable, Err: refused, Reason: reason})
	return c.failed(0, refused)
}

// waitsForReady reports whether a call with the file's options, then the
// caller's, waits for a ready connection (grpc.WaitForReady(true)); the last
// one given wins, as in grpc.
func waitsForReady(fileOpts, opts []grpc.CallOption) bool {
	wfr := false
	for _, list := range [2][]grpc.CallOption{fileOpts, opts} {
		for _, o := range list {
			if ff, ok := o.(grpc.FailFastCallOption); ok {
				wfr = !ff.FailFast
			}
		}
	}
	return wfr
}

// holdUntilReady holds a waitForReady call's first attempt until cc is
// ready, as grpc would; when the wait saw a connection attempt fail
// (TRANSIENT_FAILURE: the server was gone, not a first connection), it then
// holds it for the start br.Pace gives it, so that the calls that queued
// during an outage reach the recovering server at the pace the process sent
// them instead of all at once. An idle connection is asked to connect. It
// returns when the attempt may go, or when ctx ends (the attempt then fails
// at once with the caller's status, as it would in grpc).
func holdUntilReady(ctx context.Context, cc *grpc.ClientConn, br *breaker.Breaker) {
	held := false
	for {
		s := cc.GetState()
		switch s {
		case connectivity.Ready:
		case connectivity.Shutdown:
			return
		default:
			if s == connectivity.Idle {
				cc.Connect()
			}
			held = held || s == connectivity.TransientFailure
			if !cc.WaitForStateChange(ctx, s) {
				return
			}
			continue
		}
		break
	}
	if !held {
		return
	}
	if d := br.Pace(); d > 0 {
		t := time.NewTimer(d)
		defer t.Stop()
		select {
		case <-t.C:
		case <-ctx.Done():
		}
	}
}

// refusedError is a call stagger refused before its first attempt: the
// status the caller sees, and why (a *breaker.Refusal).
type refusedError struct {
	st  *status.Status
	err error
}

func (e *refusedError) Error() string              { return e.st.Err().Error() }
func (e *refusedError) GRPCStatus() *status.Status { return e.st }
func (e *refusedError) Unwrap() error              { return e.err }

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

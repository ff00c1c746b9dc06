package interceptor

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/stagger-go/stagger/balancer/elsewhere"
	"github.com/stagger-go/stagger/breaker"
	"github.com/stagger-go/stagger/budget"
	"github.com/stagger-go/stagger/criticality"
	"github.com/stagger-go/stagger/policy"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// Maintainers: the decision loop is written once, in this file (start,
// nextAttempt, the per-attempt timer, attemptOutcome) and call_retry.go
// (afterAttempt, pause, finish), and every engine (unary, stream, hedging)
// runs it:
//
//	var c call
//	callCtx, cancel, grpcOpts, run := k.start(ctx, method, opts, &c) // k *core from newCore(opts)
//	defer cancel()
//	if !run { /* disabled: pass through on callCtx with grpcOpts */ }
//	for {
//		actx, acancel, timer := c.nextAttempt(callCtx) // attempt number, previous-attempts header, per-attempt timer
//		err := ...                                     // run the attempt on actx with c.fileOpts, then grpcOpts
//		err, timedOut := attemptOutcome(callCtx, err, c.stopTimer(timer)) // stop first, then judge
//		acancel()
//		retry, pause := c.afterAttempt(callCtx, err, trailer, committed, timedOut)
//		if !retry { return c.finish(err) }      // *Error with attempts and reason
//		if err := c.pause(callCtx, pause, err); err != nil { return err }
//	}
//
// c.retrying false means the method has no retry policy: run one attempt and
// call afterAttempt so the budget hears of it. c.fileOpts are the file's
// waitForReady and message size limits for the method (cached per method and
// file, so they cost no allocation); pass them before the caller's options so
// that the caller's win, as in grpc-go. Keep c on the stack: hand a copy to
// anything that may outlive the call's goroutine (the hedging engine does).
// afterAttempt records the attempt in the budget, consults Decide and the
// budget, and emits the events; pause is deadline- and cancel-aware. A
// stream sets committed at the first header or message; a hedge asks the
// budget itself (budget.Request.Hedge) and reuses start, finish and the
// events. A stream whose c.hedged is set goes to k.hedgeStream
// (hedgestream.go).
//
// The per-attempt timer is the one decision taken off the call's goroutine:
// when it fires, call.timeoutVerdict (call_retry.go) runs on the timer's
// goroutine, on a copy of the call taken by nextAttempt, and asks Decide
// whether the policy would retry; if so, after the retry's pause (the
// attempt runs on through it: attemptTimer), call.timeoutAdmit asks the
// breaker and the budget, in afterAttempt's order, whether the retry can go
// now. Only then does the timer cut the attempt off; stopTimer hands the
// verdict it admitted to afterAttempt, which follows it without asking the
// budget again (Allow spends). Otherwise the attempt runs on and ends as any
// attempt does. Unary and stream attempts share it through nextAttempt and
// stopTimer. One race remains, and is accepted: a unary reply that arrives
// as the timer cuts the attempt off is still the call's success, and the
// retry the budget paid for does not go (as when a caller cancels in a
// pause).
//
// What the interceptors know of the wire, per attempt, comes from the call
// options grpc already fills (no stats.Handler, which would cost about 15
// allocations per call inside grpc-go): a grpc.Header option (headers
// arrived: committed), a grpc.Trailer option (pushback; nil when the attempt
// got no transport stream; a server's Trailers-Only status keeps its
// content-type there, a stream the transport ended leaves it empty), and for
// streams ClientStream.Header and Trailer. The interceptors installed by
// hand know exactly what stagger.DialOptions's know. They cannot see when
// the first response header of a unary call arrives before its reply (hence
// the unary per-attempt timer covers the whole attempt).

// call is one logical call's retry state: the loop every interceptor (unary,
// stream, hedging) runs is
//
//	c.start(...); for { ctx := c.nextAttempt(); err := run(ctx); retry, pause := c.afterAttempt(...); if !retry { return c.finish(err) }; c.pause(...) }
//
// It is used by one goroutine at a time and lives no longer than the call.
type call struct {
	o      *options
	method string
	// retrying: pol applies and allows more than one attempt. When false the
	// call runs once and stagger only records it in the budget.
	retrying bool
	// pol is shared (a methodInfo's) and never modified; nil when the method
	// has no retry policy.
	pol    *policy.Policy
	budget budget.Budget
	// perAttempt is the per-attempt timeout actually applied: 0 when the
	// policy sets none or the method is not known to be idempotent.
	perAttempt time.Duration
	// repeatable: the call may run twice on the server (the method is
	// known to be idempotent, or the call carries an idempotency key), so
	// an ambiguous failure (wireAmbiguous) is retried as gRFC A6 says.
	repeatable bool
	// attempt is the number of the attempt running or just ended.
	attempt int
	// before counts the attempts sent before attempt restarted at 1, and
	// resume says a retry resumes a committed stream (EventResume): a
	// resumable stream restarts the count at each attempt that delivers a
	// message (resume.go). The call's attempts are before + attempt.
	before int
	resume bool
	// retry and prev are the backoff sequence's position (policy.Attempt).
	retry int
	prev  time.Duration
	// slow: the attempt that just ended ran slowAnswer-th of perAttempt or
	// longer before it answered (stopTimer): a success that slow tells the
	// budget the server's latency is rising (budget.Attempt.Overload).
	slow bool
	// afterTimeout: the running attempt follows one cut off by perAttempt.
	afterTimeout bool
	// timerVerdict is the retry the per-attempt timer admitted when it cut
	// the attempt off (stopTimer); afterAttempt follows it. timerGrace is
	// the part of its pause that the attempt ran on for before the cut:
	// afterAttempt pauses only what is left.
	timerVerdict policy.Verdict
	timerGrace   time.Duration
	// pace is the method's (plan.pace): the timer asks it whether
	// the server is slow for every attempt.
	pace *pace
	// retryStart is when the running attempt left (monoNow), if it is a
	// retry: for budget.Attempt.Took (a retry a Deferrer let go) and
	// served.
	retryStart time.Duration
	// hedgeOnTimeout: the policy's hedgeOnPerTryTimeout applies (unary
	// calls, timeoutHedge); timerEvents is then where a timer that admitted
	// a retry sends it, instead of cutting its attempt off.
	hedgeOnTimeout bool
	timerEvents    chan<- hedgeResult
	// deferReq is the retry the budget refused, set while the call is to
	// wait for it (pause waits through the budget's Deferrer); admission is
	// how the running attempt was let go after such a wait, for the budget
	// to hear when it ends; deferred is how long the call has waited.
	deferReq  *budget.Request
	admission budget.Admission
	deferred  time.Duration
	// paused is the time spent in pauses between attempts (backoff,
	// pushback), for EventEnd's Delay.
	paused time.Duration
	// reason is why the loop stopped.
	reason policy.Reason
	// fileOpts are the file's call options for the method (waitForReady,
	// message size limits); each attempt passes them before the caller's,
	// so that the caller's win, as in grpc-go.
	fileOpts []grpc.CallOption
	// hedged is the method's file entry when it hedges: the unary
	// interceptor hands the call to the hedging engine (hedge.go), the stream
	// interceptor to the hedged stream (hedgestream.go).
	hedged *policy.Method
	// breakers guard the method (nil: none); br is the call's breaker,
	// found by admitFirst.
	breakers *breaker.Set
	br       *breaker.Breaker
	brCache  *atomic.Pointer[breakerRef]
	// ctx is the caller's context: the request a server is serving, when the
	// call is made under stagger's server side (internal/chain), is found
	// through it only when an attempt fails.
	ctx context.Context
	// crit is the call's criticality as named, resolved once by start
	// (see WithCriticality); Unset, which counts as Critical, when
	// nothing names one. The budget and the breaker admit the call by it.
	crit criticality.Level
}

// noCancel stands in for a cancel func when no context was made.
func noCancel() {}

// start prepares c for a call of method. It returns the context every attempt
// derives from (the caller's, with the criticality header, the file's
// timeout and the idempotency key applied), its cancel func, and the
// caller's grpc options without stagger's Options; each attempt passes
// c.fileOpts before them. run is false when stagger is disabled for the
// call: send it as is on callCtx (the caller's context, with the
// criticality header when the call names one), with grpcOpts.
//
// With no per-call Option, no criticality, no timeout, no idempotency key
// and no limits in the file, start allocates nothing.
func (k *core) start(ctx context.Context, method string, opts []grpc.CallOption, c *call) (callCtx context.Context, cancel context.CancelFunc, grpcOpts []grpc.CallOption, run bool) {
	o := &k.opts
	grpcOpts = opts
	for i, opt := range opts {
		if _, ok := opt.(Option); ok {
			o, grpcOpts = perCall(o, opts, i)
			break
		}
	}
	c.o, c.method, c.ctx = o, method, ctx
	cfg := o.config()
	if k.refusals != nil {
		k.logRefusal()
	}
	mi := k.method(cfg, method)
	m := mi.m
	// base is what every attempt's context derives from: the caller's,
	// with the call's criticality header when something named one.
	base := ctx
	if c.crit = callCriticality(ctx, o, m); c.crit != criticality.Unset {
		base = metadata.AppendToOutgoingContext(ctx, criticality.Header, c.crit.String())
	}
	if o.disabled {
		return base, noCancel, grpcOpts, false
	}
	c.fileOpts = mi.opts
	pl := &mi.plan
	if o != &k.opts {
		p := k.plan(o, cfg, m, method)
		p.pace = mi.plan.pace
		pl = &p
	}
	c.pol, c.retrying, c.budget, c.perAttempt, c.hedged, c.repeatable, c.breakers, c.brCache = pl.pol, pl.retrying, pl.budget, pl.perAttempt, pl.hedged, pl.repeatable, pl.breakers, pl.brCache
	c.hedgeOnTimeout = pl.hedgeOnTimeout
	c.pace = pl.pace
	c.retry = 1

	callCtx, cancel = base, noCancel
	if m != nil {
		if m.Timeout > 0 {
			if dl, ok := ctx.Deadline(); !ok || time.Until(dl) > m.Timeout {
				callCtx, cancel = context.WithTimeout(base, m.Timeout)
			}
		}
	}
	if o.idemKey != "" && !hasOutgoing(callCtx, o.idemKey) {
		callCtx = metadata.AppendToOutgoingContext(callCtx, o.idemKey, newIdempotencyKey())
	}
	if c.retrying || c.hedged != nil {
		// The backends the call's attempts go to, for the stagger_elsewhere
		// load-balancing policy's picker; nothing (no allocation) unless the
		// policy is in use in the process.
		callCtx = elsewhere.NewCallContext(callCtx)
	}
	if pl.notice {
		if _, seen := k.noticed.Load(method); !seen {
			if _, seen := k.noticed.LoadOrStore(method, struct{}{}); !seen {
				c.emit(ctx, Event{Kind: EventNotice, Method: method, Reason: policy.ReasonNotIdempotent})
			}
		}
	}
	if pl.capped > 0 {
		if _, seen := k.capNoticed.LoadOrStore(method, struct{}{}); !seen {
			c.emit(ctx, Event{Kind: EventNotice, Method: method, Attempt: pl.capped, Reason: policy.ReasonAttempts, Hedging: pl.hedged != nil})
		}
	}
	return callCtx, cancel, grpcOpts, true
}

// callCriticality resolves the criticality of a call of a method whose
// file entry is m (nil: none) under options o, in WithCriticality's order:
// Unset when nothing names one (the call is CRITICAL, and sends nothing).
func callCriticality(ctx context.Context, o *options, m *policy.Method) criticality.Level {
	if o.callCrit.Valid() {
		return o.callCrit
	}
	if l, ok := criticality.FromContext(ctx); ok && l.Valid() {
		return l
	}
	if m != nil && m.Criticality.Valid() {
		return m.Criticality
	}
	if o.crit.Valid() {
		return o.crit
	}
	return criticality.Unset
}

// nextAttempt starts the next attempt and returns its context: callCtx
// itself for a first attempt without a per-attempt timeout, else a child
// carrying the attempt number (AttemptFromContext), the
// grpc-previous-rpc-attempts header and, when the call has one, stagger's
// per-attempt timer (nil otherwise). cancel ends the attempt's context; call
// it once the attempt is over, after timer.stop.
func (c *call) nextAttempt(callCtx context.Context) (ctx context.Context, cancel context.CancelFunc, timer *attemptTimer) {
	c.attempt++
	ctx = callCtx
	if c.attempt > 1 {
		ctx = metadata.AppendToOutgoingContext(ctx, previousAttemptsKey, strconv.Itoa(c.attempt-1))
		ctx = context.WithValue(ctx, attemptKey{}, c.attempt)
	}
	if c.attempt > 1 {
		// A retry: the clock is read on this path already (the pause),
		// and how long it takes tells the Gate how long one would
		// (served, budget.Request.Took).
		c.retryStart = monoNow()
	}
	if c.perAttempt > 0 {
		timer = startAttemptTimer(callCtx, ctx, c)
		return timer.ctx, timer.cancel, timer
	}
	return ctx, noCancel, nil
}

// served notes that the attempt that just ended, under the per-attempt
// timer at (nil: none), was served (answered with success): see
// attemptTimer.served; without a timer, only a retry is timed.
func (c *call) served(at *attemptTimer) {
	switch {
	case at != nil:
		// at.took: stopTimer measured it, on this goroutine.
		at.served(at.took)
	case c.pace != nil && c.attempt > 1 && c.retryStart != 0:
		took := monoNow() - c.retryStart
		c.pace.answer(monoBase.Add(c.retryStart), took, c.crit.Index())
	}
}

// monoBase is the origin of monoNow.
var monoBase = time.Now()

// monoNow is the time since monoBase on the monotonic clock: a time in 8
// bytes, for the fields the call struct (kept on the stack, and copied by
// the per-attempt timer) holds.
func monoNow() time.Duration { return time.Since(monoBase) }

// stopTimer stops the attempt's timer (see attemptTimer.stop) and reports
// whether it cut the attempt off; when it did, the retry it admitted as it
// fired becomes c.timerVerdict, for afterAttempt. It sets c.slow: the
// attempt ran a slowAnswer-th of its timer or longer.
func (c *call) stopTimer(at *attemptTimer) (cutOff bool) {
	if at != nil {
		at.took = time.Since(at.start)
	}
	c.slow = at != nil && at.took >= c.perAttempt/slowAnswer
	if at.stop() {
		return false
	}
	c.timerVerdict, c.timerGrace = at.verdict, at.grace
	return true
}

// attemptTimer is stagger's own per-attempt timer (perAttemptRecvTimeout,
// with grpc C-core's meaning): it fires unless it was stopped first (at the
// first response header or message, or when the attempt ended on its own).
// When it fires it asks whether the policy would retry an attempt cut off
// now (call.timeoutVerdict, on a copy of the call as the attempt started).
// When it would not, the attempt runs on, as if it had no timer, and ends
// on its own. When it would, the attempt still runs on through the retry's
// pause (its grace: the retry could not go sooner anyway), and only at the
// pause's end does the timer decide, once, whether the retry goes now
// (call.timeoutAdmit: the breaker and the budget). When it goes, the
// attempt is cut off (its context cancelled) and the retry follows at
// once; when it does not, the attempt runs on. An attempt that answers in
// its grace is the call's answer, and nothing was spent on a retry: a slow
// server gets no retry of the work it is about to finish, and the budget
// and the Gate get a pause's more evidence (other calls' slow answers,
// rule 5) before they are asked. Firing (with its decision) and stopping
// exclude each other: one atomic state, and a mutex that stop waits on
// while a decision runs. So whether the timer cut an attempt off is a fact the timer
// records, never read after the fact from ctx.Err() or a status code, which
// races with the wire: a server's reply can arrive before a context reports
// done, and the other way round.
//
// It is not a context deadline: the attempt's context keeps the caller's
// deadline, which is all the server sees (grpc-timeout), so the server can
// never answer DEADLINE_EXCEEDED for stagger's timer.
type attemptTimer struct {
	state atomic.Int32
	// waited: the timer waited a period more, the server being slow for
	// every attempt (decide); only then may its retry go as a scout.
	waited bool
	// mu is held by fire while it decides; stop waits on it.
	mu sync.Mutex
	// t fires the timer; graceT ends its grace (state timerGrace).
	t, graceT *time.Timer
	ctx       context.Context
	cancel    context.CancelFunc
	// callCtx is the call's context and c a copy of the call as the
	// attempt started: what the decision reads, so that the call's
	// goroutine and the timer's share nothing they write.
	callCtx context.Context
	c       call
	// verdict is the retry the policy would make when the timer fired
	// (state timerGrace), and the one admitted when it cut the attempt off
	// (state timerFired); grace is how long after firing it cut it off.
	// Both are written before the state, read after it.
	verdict policy.Verdict
	grace   time.Duration
	// start is when the timer was armed (stopTimer measures from it);
	// fired how long after it the timer fired, and took how long the
	// attempt took, once stopTimer measured it (zero before; the call's
	// goroutine's only).
	start       time.Time
	fired, took time.Duration
}

// errAttemptTimeout replaces the CANCELED an attempt ends with when
// stagger's per-attempt timer cut it off. The call retries it; it is the
// call's error only when the retry cannot go after all (the caller's
// deadline passed in the pause), and then says DEADLINE_EXCEEDED, as grpc
// C-core does.
var errAttemptTimeout = status.Error(codes.DeadlineExceeded, "interceptor: attempt cut off by the per-attempt timeout (perAttemptRecvTimeout)")

const (
	timerArmed int32 = iota
	// timerDeciding: fire is deciding, under mu.
	timerDeciding
	// timerGrace: it fired, the policy would retry, and the attempt runs
	// on through the retry's pause (until graceT fires).
	timerGrace
	// timerFired: it cut the attempt off (a retry was admitted).
	timerFired
	// timerRanOn: it fired, no retry could go, and the attempt runs on.
	timerRanOn
	timerStopped
)

// startAttemptTimer arms the per-attempt timer of c's current attempt,
// whose context derives from ctx; callCtx is the call's context.
func startAttemptTimer(callCtx, ctx context.Context, c *call) *attemptTimer {
	at := &attemptTimer{callCtx: callCtx, c: *c, start: time.Now()}
	if c.pace != nil {
		c.pace.send(at.start)
	}
	at.ctx, at.cancel = context.WithCancel(ctx)
	// Under mu: fire, which waits for it, may re-arm at.t (decide).
	at.mu.Lock()
	at.t = time.AfterFunc(c.perAttempt, at.fire)
	at.mu.Unlock()
	return at
}

func (at *attemptTimer) fire() {
	at.mu.Lock()
	if !at.state.CompareAndSwap(timerArmed, timerDeciding) {
		at.mu.Unlock()
		return
	}
	var v policy.Verdict
	ok := false
	if at.ctx.Err() == nil {
		// Not for an attempt already ended from above (a hedge that lost):
		// no retry follows it.
		v, ok = at.c.timeoutVerdict(at.callCtx)
	}
	next := timerRanOn
	switch {
	case ok && at.c.timerEvents != nil:
		if next = at.decide(v); next != timerFired {
			break
		}
		// hedgeOnPerTryTimeout: the attempt runs on beside the retry. Sent
		// before the state leaves timerDeciding, so that the attempt's
		// stop, which waits for the decision, comes after it: the loop
		// hears of the retry before it hears the attempt ended.
		at.c.timerEvents <- hedgeResult{n: at.c.attempt, fired: true, verdict: v}
		next = timerRanOn
	case ok && v.Pause > 0:
		// The grace: the attempt runs on through the retry's pause.
		at.verdict, at.fired, next = v, time.Since(at.start), timerGrace
		at.graceT = time.AfterFunc(v.Pause, at.cut)
	case ok:
		next = at.decide(v)
	}
	at.state.Store(next)
	at.mu.Unlock()
	if next == timerFired {
		at.cancel()
	}
}

// cut ends the grace: the retry goes now, and the attempt is cut off, when
// the breaker and the budget admit it; else the attempt runs on.
func (at *attemptTimer) cut() {
	at.mu.Lock()
	if !at.state.CompareAndSwap(timerGrace, timerDeciding) {
		at.mu.Unlock()
		return
	}
	next := timerRanOn
	if at.ctx.Err() == nil {
		at.grace = time.Since(at.start) - at.fired
		next = at.decide(at.verdict)
	}
	at.state.Store(next)
	at.mu.Unlock()
	if next == timerFired {
		at.cancel()
	}
}

// decide says, under mu, whether the retry v goes now, and returns the
// timer's next state. While the server is slow for every attempt
// (pace.slowForAll) the retry would only join the queue the attempt waits
// in: the timer waits another period (timerArmed, re-armed), and asks again
// then, when the evidence may have changed. Otherwise the retry goes when
// the breaker and the budget admit it (call.timeoutAdmit: timerFired, with
// v as the verdict), and when they do not the attempt runs on
// (timerRanOn).
func (at *attemptTimer) decide(v policy.Verdict) int32 {
	if p := at.c.pace; p != nil && p.slowForAll(at.start, time.Now(), at.c.perAttempt/slowAnswer) && (!at.waited || !p.scout(time.Now(), at.c.perAttempt)) {
		at.waited = true
		at.t.Reset(at.c.perAttempt)
		return timerArmed
	}
	if !at.c.timeoutAdmit() {
		return timerRanOn
	}
	at.verdict = v
	return timerFired
}

// stop stops the timer unless it fired first. It reports whether the
// attempt was not cut off: true for a nil timer, for one stopped now or
// before, and for one that fired and let the attempt run on; false once it
// cut the attempt off. An attempt must call it before judging its outcome:
// a failure that ends an attempt whose timer is still armed is the
// attempt's own, even if the timer would have fired a moment later.
func (at *attemptTimer) stop() bool {
	if at == nil {
		return true
	}
	for {
		switch st := at.state.Load(); st {
		case timerArmed, timerGrace:
			if at.state.CompareAndSwap(st, timerStopped) {
				// Armed, or in its grace (graceT is then set, before
				// the state).
				at.t.Stop()
				if st == timerGrace {
					at.graceT.Stop()
				}
				return true
			}
		case timerDeciding:
			// Wait for the decision (an empty critical section: the wait is the point).
			at.mu.Lock()
			at.mu.Unlock()
		default:
			return st != timerFired
		}
	}
}

// served notes, once the attempt was answered with success (a unary reply,
// a stream's first response header), that the server served it
// (pace.answer): none of this method's attempts sent before it and still
// waiting is queued in front of it, in a server that serves in order.
// Nothing for a nil timer or an attempt cut off or ended from above.
// took is how long the attempt took to be served.
func (at *attemptTimer) served(took time.Duration) {
	if at == nil || at.c.pace == nil || at.ctx.Err() != nil || at.state.Load() == timerFired {
		return
	}
	at.c.pace.answer(at.start, took, at.c.crit.Index())
}

// slowAnswer: an attempt that answers after a slowAnswer-th of its
// per-attempt timeout or later is a sign of overload (rising latency) when
// it succeeds: the Gate then refuses timeout retries for a while, so that
// its next timer lets the slow attempt run on instead of cutting it off.
// In the lab's slowdown-90 (BENCHMARKS.md, issue 29) the server's work
// wasted on attempts cut off fell from 5.5 % (no such sign) to 3.4 % at a
// half and 2.3 % at a quarter, as more processes saw a slow success before
// their own first timer fired (slowdown: 98.8 %, 99.9 %, 100 %); pace
// covers the processes whose first timer fires before they saw one (0.1 %
// wasted). It is also how young an attempt sent after a timed-out one may
// be and still say nothing of the server (pace.slowForAll's minAge).
const slowAnswer = 4

// callerDeadlineSlack is how close to the caller's deadline an attempt may
// end with CANCELED or DEADLINE_EXCEEDED and still be taken for the caller's
// deadline. grpc-go rounds grpc-timeout up, so a server's DEADLINE_EXCEEDED
// for the caller's deadline arrives after it on the client's clock; the
// slack covers the client's own timers firing late (a loaded machine) and
// proxies that round the other way.
const callerDeadlineSlack = time.Millisecond

// callerEnded reports whether the attempt that ended with err ended because
// the caller's context did: it was cancelled, or its deadline passed; or err
// is CANCELED or DEADLINE_EXCEEDED and the deadline is at most
// callerDeadlineSlack away (the server's or grpc's report of the deadline
// can arrive before the context's own timer says so). stagger's timer is
// not the caller: the attempt must have passed stop.
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

// contextCode reports whether err's code is one a context ending makes:
// CANCELED or DEADLINE_EXCEEDED.
func contextCode(err error) bool {
	code := status.Code(err)
	return code == codes.Canceled || code == codes.DeadlineExceeded
}

// callerErr is the error a call the caller's context ended returns: CANCELED
// only when the caller cancelled; DEADLINE_EXCEEDED when its deadline passed,
// whatever the attempt ended with (grpc reports a context cancelled by
// stagger, or one whose deadline and cancellation race, as CANCELED).
func callerErr(callCtx context.Context, err error) error {
	if errors.Is(callCtx.Err(), context.Canceled) {
		if status.Code(err) == codes.Canceled {
			return err
		}
		return status.Error(codes.Canceled, context.Canceled.Error())
	}
	if status.Code(err) == codes.DeadlineExceeded {
		return err
	}
	return status.Error(codes.DeadlineExceeded, context.DeadlineExceeded.Error())
}

// attemptOutcome classifies the end of an attempt whose timer (nil: none)
// has been stopped: it returns the error to decide on and whether stagger's
// timer cut the attempt off. An attempt the timer cut off ends with
// errAttemptTimeout (DEADLINE_EXCEEDED, as in grpc C-core) rather than the
// CANCELED grpc reports; one the caller's context ended with a context's
// code ends with callerErr. A status the server wrote as the caller's
// deadline passed is kept as it is (the call still ends, reason caller).
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

// wireAmbiguous reports whether a failed attempt may have run on the server
// and ended without a status from it, from the two facts grpc's call options
// give: trailer is the attempt's trailer metadata, nil when the attempt got
// no transport stream (grpc fills grpc.Trailer, and ClientStream.Trailer
// answers, only for an attempt that got one: a refused connection or no
// ready transport leaves it nil, and such an attempt never left the
// client); committed says response headers or a message arrived.
//
// An attempt that got a stream sent its request headers, so the server may
// have started the handler (the safe side: a stream whose headers never
// left counts too). Whether the server then wrote a status is told by
// content-type: a server's status without response headers is a
// Trailers-Only response, whose one HEADERS frame carries content-type
// (required by the gRPC protocol), and grpc-go keeps it in the attempt's
// trailer (v1.64 through v1.85); when the transport ended the stream (reset,
// EOF, GOAWAY, RST_STREAM) the trailer is empty. A committed attempt is
// final anyway (gRFC A6). Reading these costs nothing: the interceptors ask
// grpc for the trailer for pushback already, and a stats.Handler, which
// would see the same facts (OutHeader, InTrailer), costs about 15
// allocations per call inside grpc whether it does anything or not.
func wireAmbiguous(trailer metadata.MD, committed bool) bool {
	return trailer != nil && !committed && len(trailer["content-type"]) == 0
}

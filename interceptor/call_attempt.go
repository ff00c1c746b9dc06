package interceptor

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	"github.com/stagger-go/stagger/balancer/elsewhere"
	"github.com/stagger-go/stagger/breaker"
	"github.com/stagger-go/stagger/budget"
	"github.com/stagger-go/stagger/criticality"
	"github.com/stagger-go/stagger/internal/frontend"
	"github.com/stagger-go/stagger/policy"
)

// Maintainers: a call's decision is written once: start and numberAttempt
// here, attemptOutcome (call_outcome.go), the one decision shouldRetry and
// its appliers afterAttempt and finish (call_retry.go), pause and
// waitDeferred (call_wait.go). A unary call that may send more than one
// attempt runs on its loop (unaryLoop, unary_loop.go), which owns it:
// attempts, timers and the caller's context send it events, and it alone
// decides, commits and returns the result that runUnary ends the call
// with. The fast path (unaryInterceptor) runs a call that needs nothing
// else without a call until its first attempt ends; a failure builds one
// as start would (unaryGoOn), and the loop's first step takes that attempt
// up. A stream runs the same decision from its own engines (stream.go,
// hedgestream.go):
//
//	var c call
//	callCtx, cancel, grpcOpts, run := k.start(ctx, cc, method, opts, &c)
//	defer cancel()
//	if !run { /* disabled: pass through on callCtx with grpcOpts */ }
//	for {
//		actx, acancel, timer := c.nextAttempt(callCtx)
//		err := ...                  // on actx, with c.fileOpts before grpcOpts (the caller's win)
//		err, timedOut := attemptOutcome(callCtx, err, c.stopTimer(timer))
//		acancel()
//		retry, pause := c.afterAttempt(callCtx, err, trailer, committed, timedOut)
//		if !retry { return c.finish(err) }
//		if err := c.pause(callCtx, pause, err); err != nil { return err }
//	}
//
// c.retrying false means the method has no retry policy: one attempt,
// which afterAttempt records. Keep c on the stack: whatever holds it while
// its content escapes holds it by value (unaryLoop.own).
//
// What the interceptors know of the wire, per attempt, comes from the call
// options grpc already fills (a stats.Handler would cost about 15
// allocations per call inside grpc-go): grpc.Header (headers arrived:
// committed), grpc.Trailer (pushback; nil when the attempt got no
// transport stream; see wireAmbiguous), and for streams
// ClientStream.Header and Trailer. They cannot see when the first
// response header of a unary call arrives before its reply (hence the
// unary per-attempt timer covers the whole attempt).

// call is one logical call's retry state (see above). It is used by one
// goroutine at a time and lives no longer than the call.
type call struct {
	retryFacts
	method string
	// off: the process-wide switch (SetDisabled) was on when the call
	// started; it runs once (switchOff).
	off bool
	// byKey: repeatable only because the call carries an idempotency key
	// (the method is not known to be idempotent).
	byKey bool
	// before counts the attempts sent before attempt restarted at 1, and
	// resume says a retry resumes a committed stream (EventResume): a
	// resumable stream restarts the count at each attempt that delivers a
	// message (resume.go). The call's attempts are before + attempt.
	before int
	resume bool
	// slow: the attempt that just ended ran slowSuccessPart-th of perAttempt or
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
	// timerAdmission is how the budget admitted that retry (heal: a
	// Gate let a straggler's retry go unpaid), and timerStraggler says the
	// attempt cut off was a straggler (pace.straggler), not a sign of
	// overload; timerRefused counts the attempts of the call whose timer
	// fired and ran on because the breaker or the budget refused the
	// retry (Report.TimerRefused).
	timerAdmission budget.Admission
	timerStraggler bool
	timerRefused   int
	timerReason    policy.Reason
	// retryStart is when the running attempt left (monoNow), if it is a
	// retry: for budget.Attempt.Took (a retry a Deferrer let go) and
	// served.
	retryStart time.Duration
	// hedgeOnTimeout: the policy's hedgeOnPerTryTimeout applies (unary
	// calls: the loop's beside mode).
	hedgeOnTimeout bool
	// deferReq is the retry the budget refused, set while the call is to
	// wait for it (pause waits through the budget's Deferrer); admission is
	// how the running attempt was let go after such a wait, for the budget
	// to hear when it ends; deferred is how long the call has waited, and
	// waitEnd the rule that ended a wait that admitted nothing.
	deferReq  *budget.Request
	admission budget.Admission
	deferred  time.Duration
	waitEnd   string
	// heldBy is the rule of the Gate that held that wait past its pause
	// ("" when none did); inGate, how long the call's retries waited in
	// the Deferrer in all, pauses included (budget.Request.Waited).
	heldBy string
	inGate time.Duration
	// cc is the call's connection (nil: not known).
	cc *grpc.ClientConn
	// waitedHedge is the hedge that waited in the budget's Deferrer as a
	// retry (hedgeState.waitHedge), 0 if none, and waitedAdmission how it
	// was let go: it tells the budget it ended as a retry.
	waitedHedge     int
	waitedAdmission budget.Admission
	// callerEnd, when set, is the call's final error: the caller left as
	// an attempt failed that the policy would have retried (afterAttempt).
	callerEnd error
	// pausedFor is the time spent in pauses between attempts (backoff,
	// pushback; a wait in the budget's Deferrer counts here up to the
	// pause it was asked for), for EventEnd's Delay; pushedBack, the part
	// that pushbacks asked for, and pushback says the pending pause is a
	// pushback's.
	pausedFor, pushedBack time.Duration
	pushback              bool
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
	// breakers guard the method (nil: none); brCache is the method's
	// cache of one of them.
	breakers *breaker.Set
	brCache  *atomic.Pointer[breakerRef]
	// target is the call's backend (callTarget).
	target string
	// static: the call carried grpc.StaticMethodCallOption (Event.StaticMethod).
	static bool
}

// retryFacts is what a decision on the call's next attempt reads of it
// beside the attempt's own facts: the plan, the admissions' owners and the
// backoff sequence's position. A stream's per-attempt timer decides on a
// copy of it, taken as its attempt starts (startStreamTimer), and never
// sees the rest of the call, which the call's goroutine writes meanwhile.
type retryFacts struct {
	o *options
	// ctx is the caller's context: the request a server is serving, when the
	// call is made under stagger's server side (internal/chain), is found
	// through it only when an attempt fails.
	ctx context.Context
	// retrying: pol applies and allows more than one attempt. When false the
	// call runs once and stagger only records it in the budget.
	retrying bool
	// pol is shared (a methodInfo's) and never modified; nil when the method
	// has no retry policy.
	pol    *policy.Policy
	budget budget.Budget
	// br is the call's breaker (nil: none), found by admitFirst.
	br *breaker.Breaker
	// crit is the call's criticality as named, resolved once by start
	// (see WithCriticality); Unset, which counts as Critical, when
	// nothing names one. The budget and the breaker admit the call by it.
	crit criticality.Level
	// perAttempt is the per-attempt timeout actually applied: 0 when the
	// policy sets none or the call may not run twice (neither repeatable
	// nor, for a stream, known to be idempotent).
	perAttempt time.Duration
	// repeatable: the call may run twice on the server (the method is
	// known to be idempotent, or the call carries an idempotency key), so
	// an ambiguous failure (wireAmbiguous) is retried as gRFC A6 says.
	repeatable bool
	// attempt is the number of the attempt running or just ended.
	attempt int
	// retry and prev are the backoff sequence's position (policy.Attempt).
	retry int
	prev  time.Duration
	// pace is the method's (plan.pace): the timer asks it whether
	// the server is slow for every attempt.
	pace *pace
}

// budget returns the budget of a call of the method on target, cc's (nil:
// a front end's), from bs, through the method's cache of the first target
// it was called on (until bs forgets it). bs keys it by the canonical
// target (canonicalTarget), as the metrics' grpc.target is, so that two
// spellings of one backend ("localhost:8080" and "dns:///localhost:8080"
// through grpc.NewClient) share one budget and one Gate, as they share
// one server; the cache, by the target as dialled, finds it without
// that lookup.
func (mi *methodInfo) budget(bs *budget.Backends, cc *grpc.ClientConn, target, method string) budget.Budget {
	r := mi.bud.Load()
	if r != nil && r.set == bs && r.target == target {
		if b, ok := r.slot.Budget(); ok {
			return b
		}
	}
	key := canonicalTarget(cc, target)
	s := bs.Slot(key, method)
	b, ok := s.Budget()
	if !ok {
		// Forgotten as soon as made (a set at its caps, adding fast).
		return bs.Get(key, method)
	}
	if r == nil || r.set != bs || r.target == target {
		// The first target only (and the set of the current file): a
		// method called on several targets looks the others up, rather
		// than allocate on every switch.
		mi.bud.CompareAndSwap(r, &budgetRef{set: bs, target: target, slot: s})
	}
	return b
}

// callTarget is the backend of a call: cc's target, or, for a front end
// that has no ClientConn, the one it named (internal/frontend).
func callTarget(ctx context.Context, cc *grpc.ClientConn) string {
	if cc != nil {
		return cc.Target()
	}
	return frontend.Target(ctx)
}

// staticMethod reports whether opts hold grpc.StaticMethodCallOption, which
// generated code passes for the methods it registers (Event.StaticMethod).
func staticMethod(opts []grpc.CallOption) bool {
	for _, opt := range opts {
		if _, ok := opt.(grpc.StaticMethodCallOption); ok {
			return true
		}
	}
	return false
}

// canonicalTargets maps a ClientConn's target as dialled to its canonical
// form (Event.CanonicalTarget), so that a call's end does not build the
// string again; canonicalTargetsMax bounds it, for a process that dials
// many short-lived addresses: past it the map starts afresh.
var (
	canonicalTargets    sync.Map
	canonicalTargetsLen atomic.Int64
)

const canonicalTargetsMax = 1024

// canonicalTarget returns cc's canonical target (ClientConn.CanonicalTarget),
// or target for a front end without a ClientConn. It is keyed by the target
// as dialled: two ClientConns that dial one string under different default
// schemes (grpc.Dial's passthrough, grpc.NewClient's dns) share the first
// one's, and so its budget and breaker too (methodInfo.budget,
// findBreaker): one string names one server.
func canonicalTarget(cc *grpc.ClientConn, target string) string {
	if cc == nil {
		return target
	}
	if v, ok := canonicalTargets.Load(target); ok {
		return v.(string)
	}
	canon := cc.CanonicalTarget()
	if canonicalTargetsLen.Add(1) > canonicalTargetsMax {
		canonicalTargets.Range(func(k, _ any) bool { canonicalTargets.Delete(k); return true })
		canonicalTargetsLen.Store(1)
	}
	canonicalTargets.Store(target, canon)
	return canon
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
func (k *core) start(ctx context.Context, cc *grpc.ClientConn, method string, opts []grpc.CallOption, c *call) (callCtx context.Context, cancel context.CancelFunc, grpcOpts []grpc.CallOption, run bool) {
	o, grpcOpts := k.callOptions(opts)
	cfg := o.config()
	if k.refusals != nil {
		k.logRefusal()
	}
	return k.startWith(ctx, cc, method, o, grpcOpts, cfg, k.method(cfg, method), c)
}

// callOptions returns the call's options (the interceptor's, or a copy with
// the call's Options applied, or with another retry library's option
// noted: options.foreign) and its grpc options without stagger's.
func (k *core) callOptions(opts []grpc.CallOption) (*options, []grpc.CallOption) {
	for i, opt := range opts {
		switch opt.(type) {
		case grpc.StaticMethodCallOption:
			// Generated code passes it on every call: the common case
			// first, without a call.
			continue
		case Option:
			return perCall(&k.opts, opts, i)
		}
		if foreignRetryOption(opt) {
			return perCall(&k.opts, opts, i)
		}
	}
	return &k.opts, opts
}

// startWith is start once the call's options o, its grpc options, the file
// cfg and the method's entry mi (k.method(cfg, method)) are resolved.
func (k *core) startWith(ctx context.Context, cc *grpc.ClientConn, method string, o *options, grpcOpts []grpc.CallOption, cfg *policy.Config, mi *methodInfo, c *call) (callCtx context.Context, cancel context.CancelFunc, _ []grpc.CallOption, run bool) {
	c.o, c.method, c.ctx = o, method, ctx
	c.static = staticMethod(grpcOpts)
	m := mi.m
	// base is what every attempt's context derives from: the caller's,
	// with the call's criticality header when something named one.
	base := ctx
	if c.crit = callCriticality(ctx, o, m); c.crit != criticality.Unset {
		base = metadata.AppendToOutgoingContext(ctx, criticality.Header, c.crit.String())
	}
	if o.disabled {
		if o.report != nil {
			grpcOpts = disabledReport(o.report, callTarget(ctx, cc), c.crit, grpcOpts)
		}
		return base, noCancel, grpcOpts, false
	}
	pl := &mi.plan
	if o != &k.opts {
		p := k.plan(o, cfg, m, method)
		p.pace = mi.plan.pace
		pl = &p
	}
	if c.off = offFor(cfg); c.off {
		p := switchOff(pl)
		pl = &p
	}
	target := callTarget(ctx, cc)
	b := pl.budget
	if pl.budgets != nil {
		b = mi.budget(pl.budgets, cc, target, method)
	}
	c.follow(mi, pl, target, b)

	callCtx, cancel = withMethodTimeout(ctx, base, m)
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
		k.noticeNoTimer(ctx, c)
	}
	if pl.capped > 0 && k.firstNotice(method, policy.ReasonAttempts, 0) {
		c.emit(ctx, Event{Kind: EventNotice, Method: method, Attempt: pl.capped, Reason: policy.ReasonAttempts, Hedging: pl.hedged != nil})
	}
	switch {
	case pl.unapplied == policy.ReasonNoPolicy:
		if err := k.firstUnapplied(method, pl.unappliedOpts); err != nil {
			c.emit(ctx, Event{Kind: EventNotice, Method: method, Reason: pl.unapplied, Err: err, Hedging: pl.hedged != nil})
		}
	case pl.unapplied != policy.ReasonNone && k.firstNotice(method, pl.unapplied, 0):
		c.emit(ctx, Event{Kind: EventNotice, Method: method, Reason: pl.unapplied, Hedging: pl.hedged != nil})
	}
	if pl.invalid != nil && k.firstNotice(method, policy.ReasonInvalidOption, 0) {
		c.emit(ctx, Event{Kind: EventNotice, Method: method, Reason: policy.ReasonInvalidOption, Err: pl.invalid, Hedging: pl.hedged != nil})
	}
	if o.foreign && !c.off && k.firstNotice(method, policy.ReasonForeignOption, 0) {
		c.emit(ctx, Event{Kind: EventNotice, Method: method, Reason: policy.ReasonForeignOption, Hedging: pl.hedged != nil})
	}
	return callCtx, cancel, grpcOpts, true
}

// follow fills in what c takes from its plan pl (mi's, or one made for the
// call's own Options), its target and its budget b (pl.budget, or the
// target's in pl.budgets); c.o, c.method, c.ctx and c.crit are set already.
func (c *call) follow(mi *methodInfo, pl *plan, target string, b budget.Budget) {
	c.fileOpts = mi.opts
	c.pol, c.retrying, c.budget, c.perAttempt, c.hedged, c.repeatable, c.breakers, c.brCache = pl.pol, pl.retrying, b, pl.perAttempt, pl.hedged, pl.repeatable, pl.breakers, pl.brCache
	c.target = target
	c.hedgeOnTimeout, c.byKey = pl.hedgeOnTimeout, pl.byKey
	c.pace = pl.pace
	c.retry = 1
}

// withMethodTimeout applies the file's timeout for the method (m; nil:
// none) to base, a context derived from ctx, unless ctx ends sooner.
func withMethodTimeout(ctx, base context.Context, m *policy.Method) (context.Context, context.CancelFunc) {
	if m != nil && m.Timeout > 0 {
		if dl, ok := ctx.Deadline(); !ok || time.Until(dl) > m.Timeout {
			return context.WithTimeout(base, m.Timeout)
		}
	}
	return base, noCancel
}

// noticeNoTimer tells the logger and hooks, once per method and
// interceptor, that the policy's per-attempt timeout is not applied: the
// call may not run twice.
func (k *core) noticeNoTimer(ctx context.Context, c *call) {
	if k.firstOf(&k.noticed, c.method) {
		c.emit(ctx, Event{Kind: EventNotice, Method: c.method, Reason: policy.ReasonNotIdempotent})
	}
}

// firstNotice reports whether the notice of method with reason (and, for
// ReasonNoPolicy, of the option opt; 0 otherwise) is the first the
// interceptor gives (an option not applied as given: each is reported
// once per method).
func (k *core) firstNotice(method string, reason policy.Reason, opt retryOption) bool {
	type key struct {
		method string
		reason policy.Reason
		opt    retryOption
	}
	return k.firstOf(&k.optionNoticed, key{method, reason, opt})
}

// firstUnapplied returns the error an EventNotice with ReasonNoPolicy
// carries, naming the options of set not reported yet for method; nil
// when every one was.
func (k *core) firstUnapplied(method string, set retryOption) error {
	var names []string
	for i, name := range retryOptionNames {
		if opt := retryOption(1) << i; set&opt != 0 && k.firstNotice(method, policy.ReasonNoPolicy, opt) {
			names = append(names, name)
		}
	}
	if len(names) == 0 {
		return nil
	}
	return fmt.Errorf("interceptor: %s not applied: no retry policy for the method", strings.Join(names, ", "))
}

// firstOf reports whether key is new to m, one of the sets of notices
// given (noticed, optionNoticed), and adds it. The sets together hold at
// most noticeMax keys (firstIn).
func (k *core) firstOf(m *sync.Map, key any) bool {
	return firstIn(m, &k.noticeN, noticeMax, key)
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

// numberAttempt numbers the next attempt and returns its context: parent
// itself for a first attempt, else a child carrying the attempt number
// (AttemptFromContext) and the grpc-previous-rpc-attempts header.
func (c *call) numberAttempt(parent context.Context) context.Context {
	c.attempt++
	if c.attempt == 1 {
		return parent
	}
	ctx := metadata.AppendToOutgoingContext(parent, previousAttemptsKey, strconv.Itoa(c.attempt-1))
	ctx = context.WithValue(ctx, attemptKey{}, c.attempt)
	// A retry: the clock is read on this path already (the pause), and
	// how long it takes tells the Gate how long one would (served,
	// budget.Request.Took).
	c.retryStart = monoNow()
	return ctx
}

// served notes that the attempt that just ended, a retry with no
// per-attempt timer, was served (answered with success): see pace.answer.
func (c *call) served() {
	if c.pace != nil && c.attempt > 1 && c.retryStart != 0 {
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

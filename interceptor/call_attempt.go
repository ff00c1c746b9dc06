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
	"github.com/stagger-go/stagger/internal/foreignretry"
	"github.com/stagger-go/stagger/internal/frontend"
	"github.com/stagger-go/stagger/internal/idemkey"
	"github.com/stagger-go/stagger/policy"
)

// call is one logical call's retry state. One goroutine uses it at a time;
// whatever holds it while its content escapes holds it by value
// (unaryLoop.own), so it can stay on the stack. What it knows of the wire
// comes from the options grpc fills (grpc.Header: the only sign an
// attempt committed; grpc.Trailer: nil when the attempt got no transport
// stream): a stats.Handler would cost allocations per call in grpc-go.
type call struct {
	retryFacts
	// runPlan is the call's own copy of its method's.
	runPlan
	method string
	// before counts the attempts sent before attempt restarted at 1.
	before int
	// cut is the retry the per-attempt timer admitted as it cut the
	// attempt off, for afterAttempt.
	cut timerCut
	// timerRefused counts the attempts whose timer fired and ran on, the
	// retry refused for timerReason (Report.TimerRefused).
	timerRefused int
	// retryStart is when the running retry left (monoNow).
	retryStart time.Duration
	// deferReq is the refused retry to wait for in the budget's Deferrer;
	// admission how the next or running attempt was let go; deferred how
	// long the call waited past its pauses, waitEnd and heldBy the Gate's
	// rules that ended or held a wait, inGate the time it waited in all;
	// load the latest load report its attempts carried (Report.Load).
	deferReq *budget.Request
	load     budget.Load
	deferred time.Duration
	waitEnd  string
	heldBy   string
	inGate   time.Duration
	cc       *grpc.ClientConn
	// callerEnd, when set, is the call's final error: the caller left as a
	// failure came that the policy would have retried.
	callerEnd error
	// pausedFor is the time spent in pauses (EventEnd's Delay), pushedBack
	// the part pushbacks asked for.
	pausedFor, pushedBack time.Duration
	target                string
	// The small fields last, packed: a hedged call's copy is allocated, and
	// its size class shows (BenchmarkHedgedFirstAttemptWins). off: the
	// switch was on as the call started; resume: a retry resumes a
	// committed stream; slow: the attempt just ended ran a
	// pace.SlowPart-th of perAttempt or longer; afterTimeout: the running
	// attempt follows one the timer cut off; pushback: the pending pause is
	// one; static: the call carried grpc.StaticMethodCallOption; probe:
	// the next retry, admitted and not yet sent, holds the breaker's yes
	// (giveBack).
	off, resume, slow, afterTimeout, pushback, static, probe bool
	timerReason, reason                                      policy.Reason
	admission                                                budget.Admission
}

// retryFacts is what a decision on the call's next attempt reads of it
// (a stream's timer decides on a copy): the plan's retryPlan, the
// admissions' owners and the backoff sequence's position.
type retryFacts struct {
	// retryPlan is the call's copy of its method's, with its backend's budget.
	retryPlan
	o *options
	// ctx is the caller's context (internal/chain reads it on a failure).
	ctx context.Context
	br  *breaker.Breaker
	// crit is the call's criticality (Unset counts as Critical).
	crit criticality.Level
	// attempt is the number of the attempt running or just ended; retry and
	// prev the backoff sequence's position (policy.Attempt).
	attempt int
	retry   int
	prev    time.Duration
	// id identifies the call to its budget (budget.Request.Call; zero
	// until callID numbers it).
	id uint64
}

// callIDs numbers the calls that ask for a retry, in the process.
var callIDs atomic.Uint64

// budget returns the budget in bs of a call of the method on target (cc
// nil: a front end's), through the method's cache of the first target. bs
// keys it by the canonical target: two spellings share one budget.
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
		return bs.Get(key, method)
	}
	if r == nil || r.set != bs || r.target == target {
		// The first target only: others are looked up, not allocated for.
		mi.bud.CompareAndSwap(r, &budgetRef{set: bs, target: target, slot: s})
	}
	return b
}

func callTarget(ctx context.Context, cc *grpc.ClientConn) string {
	if cc != nil {
		return cc.Target()
	}
	return frontend.Target(ctx)
}

func staticMethod(opts []grpc.CallOption) bool {
	for _, opt := range opts {
		if _, ok := opt.(grpc.StaticMethodCallOption); ok {
			return true
		}
	}
	return false
}

// canonicalTargets caches ClientConn.CanonicalTarget by the target as
// dialled (one string names one server); past canonicalTargetsMax entries
// it starts afresh.
var (
	canonicalTargets    sync.Map
	canonicalTargetsLen atomic.Int64
)

const canonicalTargetsMax = 1024

// canonicalTarget returns cc's canonical target, or target for a front end.
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

func noCancel() {}

// start prepares c for a call of method. It returns the context every
// attempt derives from (criticality header, the file's timeout and the
// idempotency key applied), its cancel func, and the caller's grpc options
// without stagger's; run false: send the call as is (Disable). The common
// case allocates nothing.
func (k *core) start(ctx context.Context, cc *grpc.ClientConn, method string, opts []grpc.CallOption, c *call) (callCtx context.Context, cancel context.CancelFunc, grpcOpts []grpc.CallOption, run bool) {
	o, grpcOpts := k.callOptions(opts)
	cfg := o.config()
	if k.files.Source != nil {
		k.files.Reload(nil)
	}
	return k.startWith(ctx, cc, method, o, grpcOpts, cfg, k.method(cfg, method), c)
}

// callOptions returns the call's options (the interceptor's, or a copy
// with the call's Options applied) and its grpc options without stagger's.
func (k *core) callOptions(opts []grpc.CallOption) (*options, []grpc.CallOption) {
	for i, opt := range opts {
		switch opt.(type) {
		case grpc.StaticMethodCallOption:
			// Generated code passes it on every call.
			continue
		case Option:
			return perCall(&k.opts, opts, i)
		}
		if foreignretry.IsOption(opt) {
			return perCall(&k.opts, opts, i)
		}
	}
	return &k.opts, opts
}

// startWith is start with the options, the file and the method resolved.
func (k *core) startWith(ctx context.Context, cc *grpc.ClientConn, method string, o *options, grpcOpts []grpc.CallOption, cfg *policy.Config, mi *methodInfo, c *call) (callCtx context.Context, cancel context.CancelFunc, _ []grpc.CallOption, run bool) {
	c.o, c.method, c.ctx = o, method, ctx
	c.static = staticMethod(grpcOpts)
	m := mi.m
	// base carries the criticality header when something named one.
	base := ctx
	if c.crit = callCriticality(ctx, o, m); c.crit != criticality.Unset {
		base = withCriticality(ctx, c.crit)
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
		p.pace, p.fileOpts = mi.plan.pace, mi.plan.fileOpts
		if !o.breakersSet && o.state == k.opts.state {
			p.breakers, p.brCache = mi.plan.breakers, mi.plan.brCache
		}
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
	c.follow(pl, target, b)

	callCtx, cancel = withMethodTimeout(ctx, base, m)
	if o.idemKey != "" {
		// A key the caller's metadata carries already is the call's.
		if md, _ := metadata.FromOutgoingContext(callCtx); len(md.Get(o.idemKey)) == 0 {
			callCtx = metadata.AppendToOutgoingContext(callCtx, o.idemKey, idemkey.New())
		}
	}
	if c.retrying || c.hedged != nil {
		// The stagger_elsewhere balancer's context (free while unused).
		callCtx = elsewhere.NewCallContext(callCtx)
	}
	if pl.notice {
		k.noticeUnapplied(ctx, c, policy.ReasonNotIdempotent)
	}
	notice := func(reason policy.Reason, attempt int, err error) {
		c.emit(ctx, Event{Kind: EventNotice, Method: method, Attempt: attempt, Reason: reason, Err: err, Hedging: pl.hedged != nil})
	}
	if pl.capped > 0 && k.firstNotice(method, policy.ReasonAttempts, 0) {
		notice(policy.ReasonAttempts, pl.capped, nil)
	}
	switch {
	case pl.unapplied == policy.ReasonNoPolicy:
		if err := k.firstUnapplied(method, pl.unappliedOpts); err != nil {
			notice(pl.unapplied, 0, err)
		}
	case pl.unapplied != policy.ReasonNone && k.firstNotice(method, pl.unapplied, 0):
		notice(pl.unapplied, 0, nil)
	}
	if pl.invalid != nil && k.firstNotice(method, policy.ReasonInvalidOption, 0) {
		notice(policy.ReasonInvalidOption, 0, pl.invalid)
	}
	if o.foreign && !c.off && k.firstNotice(method, policy.ReasonForeignOption, 0) {
		notice(policy.ReasonForeignOption, 0, nil)
	}
	return callCtx, cancel, grpcOpts, true
}

// follow fills in what c takes from its plan, its target and its budget.
func (c *call) follow(pl *plan, target string, b budget.Budget) {
	c.retryPlan, c.runPlan, c.budget = pl.retryPlan, pl.runPlan, b
	c.target, c.retry = target, 1
}

// withMethodTimeout applies the file's timeout (m; nil: none) to base,
// unless ctx ends sooner.
func withMethodTimeout(ctx, base context.Context, m *policy.Method) (context.Context, context.CancelFunc) {
	if m != nil && m.Timeout > 0 {
		if dl, ok := ctx.Deadline(); !ok || time.Until(dl) > m.Timeout {
			return context.WithTimeout(base, m.Timeout)
		}
	}
	return base, noCancel
}

// noticeUnapplied tells the hooks, once per method, why a part of its
// policy is not applied: the per-attempt timeout, or hedging (c.hedged).
func (k *core) noticeUnapplied(ctx context.Context, c *call, why policy.Reason) {
	if k.noticed.first(c.method) {
		c.emit(ctx, Event{Kind: EventNotice, Method: c.method, Reason: why, Hedging: c.hedged != nil})
	}
}

// firstNotice reports whether the notice of method with reason (and, for
// ReasonNoPolicy, the option opt) is the first given.
func (k *core) firstNotice(method string, reason policy.Reason, opt retryOption) bool {
	type key struct {
		method string
		reason policy.Reason
		opt    retryOption
	}
	return k.noticed.first(key{method, reason, opt})
}

// firstUnapplied returns the error of an EventNotice with ReasonNoPolicy,
// naming the options of set not reported yet for method (nil: none).
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

// callCriticality resolves a call's criticality in WithCriticality's order;
// Unset when nothing names one.
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

// withCriticality returns ctx with crit's header. Its callers test crit
// first: a call to it on the success path costs (BenchmarkPeersFakeSuccess).
func withCriticality(ctx context.Context, crit criticality.Level) context.Context {
	return metadata.AppendToOutgoingContext(ctx, criticality.Header, crit.String())
}

// numberAttempt numbers the next attempt and returns its context: parent
// for the first, else a child with its number and gRFC A6's header.
func (c *call) numberAttempt(parent context.Context) context.Context {
	c.attempt++
	if c.attempt == 1 {
		return parent
	}
	// Sent: its outcome reaches the breaker (giveBack has none to return).
	c.probe = false
	ctx := metadata.AppendToOutgoingContext(parent, previousAttemptsKey, strconv.Itoa(c.attempt-1))
	ctx = context.WithValue(ctx, attemptKey{}, c.attempt)
	// The clock is read on a retry's path already (the pause).
	c.retryStart = monoNow()
	return ctx
}

// served notes that a retry without a per-attempt timer was served.
func (c *call) served() {
	if c.pace != nil && c.attempt > 1 && c.retryStart != 0 {
		took := monoNow() - c.retryStart
		c.pace.Answer(monoBase.Add(c.retryStart), took, c.crit.Index())
	}
}

var monoBase = time.Now()

// monoNow is the monotonic time since monoBase, in 8 bytes.
func monoNow() time.Duration { return time.Since(monoBase) }

type attemptKey struct{}

// AttemptFromContext returns the number of the attempt ctx belongs to (2 for
// the first retry, 3 for the second, ...) and true, when stagger sent the
// attempt as a retry, for the interceptors after stagger in the chain. For
// a first attempt it returns 1 and false: stagger leaves first attempts'
// contexts untouched, so a call that succeeds at once costs no allocation.
func AttemptFromContext(ctx context.Context) (n int, ok bool) {
	if v, ok := ctx.Value(attemptKey{}).(int); ok {
		return v, true
	}
	return 1, false
}

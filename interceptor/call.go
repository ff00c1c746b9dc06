package interceptor

import (
	"fmt"
	"maps"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"google.golang.org/grpc"

	"github.com/stagger-go/stagger/breaker"
	"github.com/stagger-go/stagger/budget"
	"github.com/stagger-go/stagger/internal/bounded"
	"github.com/stagger-go/stagger/internal/filelog"
	"github.com/stagger-go/stagger/internal/foreignretry"
	"github.com/stagger-go/stagger/internal/pace"
	"github.com/stagger-go/stagger/internal/quantile"
	"github.com/stagger-go/stagger/internal/refusedlog"
	"github.com/stagger-go/stagger/policy"
)

// previousAttemptsKey is gRFC A6's count of the attempts before this one.
const previousAttemptsKey = "grpc-previous-rpc-attempts"

// core is what the unary and stream interceptors share.
type core struct {
	opts options
	// noticed holds the notices given (noticeUnapplied, firstNotice);
	// ambiguous the methods whose ambiguous give-up was logged at warn.
	noticed   saidOnce
	ambiguous saidOnce
	// methods caches what the current file says of each method.
	methods   atomic.Pointer[methodCache]
	methodsMu sync.Mutex
	// latencies holds each adaptive hedged method's histogram.
	latencies bounded.Map[string, *quantile.Histogram]
	// files says the file's warnings and reloads.
	files filelog.Reporter
	// followed is the last config of the source a call followed.
	followed atomic.Pointer[policy.Config]
}

// methodCache is copied on write; it belongs to one *policy.Config.
type methodCache struct {
	cfg    *policy.Config
	byName map[string]*methodInfo
	// byData finds a method by where its name's bytes live, without
	// hashing: generated stubs pass the same constant string. An entry keeps
	// its string alive, so the address cannot be reused meanwhile.
	byData [methodSlots]methodSlot
}

type methodSlot struct {
	data *byte
	n    int
	mi   *methodInfo
}

func slotOf(method string) int {
	return int((uintptr(unsafe.Pointer(unsafe.StringData(method)))>>4 ^ uintptr(len(method))) % methodSlots)
}

// methodInfo is what a file says of one method, resolved once.
type methodInfo struct {
	m *policy.Method
	// plan is the method's plan under the interceptor's own options.
	plan plan
	// br and bud cache the breaker and the budget of the first target.
	br  atomic.Pointer[breakerRef]
	bud atomic.Pointer[budgetRef]
	// attempt is the method's own unaryAttempt, for one call at a time
	// (attemptHeld), cheaper than the pool (BENCHMARKS.md, "Issue 45: the
	// success path"); on cache lines of their own.
	_           [cacheLine]byte
	attemptHeld atomic.Uint32
	attempt     unaryAttempt
	_           [cacheLine]byte
	// fast: a call under the interceptor's own options may take the fast
	// path; timeout: the file sets the method a timeout.
	fast, timeout bool
}

// budgetRef is the budget of one target in one budget.Backends.
type budgetRef struct {
	set    *budget.Backends
	target string
	slot   *budget.Slot
}

// breakerRef is the breaker of one target.
type breakerRef struct {
	target string
	b      *breaker.Breaker
}

// plan is what a call of one method does, given the options and the file:
// what a retry decision reads (retryPlan), what the call reads as it runs
// (runPlan), and what only its start reads.
type plan struct {
	retryPlan
	runPlan
	// budgets keeps one budget per backend (start picks the call's).
	budgets *budget.Backends
	// capped is the bound WithMaxAttempts was lowered to (0: none).
	capped int
	// invalid is why a WithBackoff or WithPerAttemptTimeout was not applied.
	invalid error
	// unapplied says why a policy given in code is not applied;
	// unappliedOpts, with ReasonNoPolicy, the call's options that were not.
	unapplied     policy.Reason
	unappliedOpts retryOption
	// notice: a per-attempt timeout is set but the call may not run twice.
	notice bool
}

// retryPlan is the part of a plan a decision reads (retryFacts).
type retryPlan struct {
	// pol is the retry policy with the options' overrides (nil: none),
	// shared: never modified.
	pol *policy.Policy
	// budget is the calls' budget, or the one of the call's backend.
	budget budget.Budget
	// perAttempt is the per-attempt timeout applied (0: none).
	perAttempt time.Duration
	// pace is the methodInfo's (start takes it for a plan made per call).
	pace *pace.Evidence
	// retrying: pol allows more than one attempt; repeatable: the call may
	// run twice on the server, so an ambiguous failure (wireAmbiguous) is
	// retried.
	retrying, repeatable bool
}

// runPlan is the part of a plan the call reads as it runs, and no
// decision does.
type runPlan struct {
	// hedged is the method's file entry when it hedges.
	hedged *policy.Method
	// brCache is the methodInfo's (nil for a plan made per call).
	breakers *breaker.Set
	brCache  *atomic.Pointer[breakerRef]
	// fileOpts, the file's waitForReady and message size limits, passed
	// before the caller's options, are the methodInfo's.
	fileOpts []grpc.CallOption
	// byKey: the call may run twice only by its idempotency key.
	hedgeOnTimeout, byKey bool
}

// plan resolves what cfg's entry m (nil: none) makes a call of method with
// options o do.
func (k *core) plan(o *options, cfg *policy.Config, m *policy.Method, method string) plan {
	var pl plan
	// A call that read the config before a reload builds nothing for the
	// State that the reload dropped.
	keep := o.source == nil || cfg == o.source.Config()
	switch {
	case o.budgetSet:
		pl.budget = o.budget
	case cfg.BudgetSettings().Kind != budget.KindNone:
		pl.budgets = k.stateOf(o).budgets(cfg, keep)
	case o.fallbacks != nil:
		pl.budgets = o.fallbacks
	default:
		pl.budget = o.fallback
	}
	switch {
	case o.breakersSet:
		pl.breakers = o.breakers
	case o == &k.opts || o.state != k.opts.state:
		pl.breakers = k.stateOf(o).breakers(cfg, m, keep)
	} // else the method's (startWith): kept or not, one per settings
	p := o.policy
	if p != nil && p != k.opts.policy && m != nil && (m.Retry != nil || m.Hedging != nil) {
		// The call's own WithPolicy: the file's entry wins, and says so.
		pl.unapplied = policy.ReasonOverridden
	}
	switch {
	case m != nil && m.Retry != nil:
		p = m.Retry
	case m != nil && m.Hedging != nil:
		// Hedged methods are the hedging engine's: no retries.
		pl.hedged, p = m, nil
		if o.foreignMax == 1 {
			// retry.Disable() left on the call: its one attempt alone.
			pl.hedged = nil
			break
		}
		if o.maxAttempts > 0 || o.codesSet || o.foreignMax > 0 {
			// A copy of the entry: the file's is shared.
			mm, h := *m, *m.Hedging
			h.MaxAttempts, pl.capped = callAttempts(o, cfg, h.MaxAttempts)
			if o.codesSet {
				h.NonFatalCodes = o.codes
			}
			mm.Hedging = &h
			pl.hedged = &mm
		}
	}
	if p == nil {
		// The call's own retry options, on a method without a retry policy.
		if pl.unappliedOpts = k.callRetryOptions(o, pl.hedged != nil); pl.unappliedOpts != 0 {
			pl.unapplied = policy.ReasonNoPolicy
		}
		return pl
	}
	inCode := p == o.policy
	if o.maxAttempts > 0 || o.predicate != nil || o.codesSet || o.backoffSet || o.perAttemptSet || o.foreignMax > 0 {
		q := *p
		q.MaxAttempts, pl.capped = callAttempts(o, cfg, p.MaxAttempts)
		if o.backoffSet {
			if err := o.backoff.Validate(); err != nil {
				pl.invalid = fmt.Errorf("interceptor: WithBackoff not applied: %w", err)
			} else {
				q.Backoff = o.backoff
			}
		}
		if o.perAttemptSet {
			if o.perAttempt < 0 {
				pl.invalid = fmt.Errorf("interceptor: WithPerAttemptTimeout not applied: perAttemptRecvTimeout: must be >= 0, got %v", o.perAttempt)
			} else {
				q.PerAttemptRecvTimeout = o.perAttempt
			}
		}
		if o.predicate != nil {
			q.Predicate = o.predicate
		}
		if o.codesSet {
			q.RetryableCodes = o.codes
			if o.codes == 0 {
				// To a Policy the empty set means stagger's defaults.
				q.Predicate = retryNoCode(q.Predicate)
			}
		}
		p = &q
	}
	pl.pol, pl.retrying = p, p.MaxAttempts >= 2
	if !pl.retrying {
		if inCode && o.maxAttempts == 0 && o.foreignMax == 0 && onlyRetriesUse(p) {
			pl.unapplied = policy.ReasonOneAttempt
		}
		return pl
	}
	// A call with an idempotency key may run twice, as an idempotent one.
	idempotent := k.idempotent(o, m, method)
	pl.repeatable = idempotent || o.idemKey != ""
	pl.byKey = !idempotent && o.idemKey != ""
	if p.PerAttemptRecvTimeout > 0 {
		if pl.repeatable {
			pl.perAttempt = p.PerAttemptRecvTimeout
			pl.hedgeOnTimeout = p.HedgeOnPerTryTimeout
		} else {
			pl.notice = true
		}
	}
	return pl
}

// retryOption names one of a call's retry options, for notices.
type retryOption uint8

const (
	optMaxAttempts retryOption = 1 << iota
	optCodes
	optPredicate
	optBackoff
	optPerAttempt
)

var retryOptionNames = [...]string{"WithMaxAttempts", "WithCodes", "WithPredicate", "WithBackoff", "WithPerAttemptTimeout"}

// callRetryOptions returns the retry options the call's own options set
// beyond the interceptor's; of a hedged method, those it does not take.
func (k *core) callRetryOptions(o *options, hedged bool) retryOption {
	if o == &k.opts {
		return 0
	}
	var set retryOption
	if !hedged {
		if o.maxAttempts > 1 && o.maxAttempts != k.opts.maxAttempts {
			set |= optMaxAttempts
		}
		if o.codesSet && !k.opts.codesSet {
			set |= optCodes
		}
	}
	if o.predicate != nil && k.opts.predicate == nil {
		set |= optPredicate
	}
	if o.backoffSet && !k.opts.backoffSet {
		set |= optBackoff
	}
	if o.perAttemptSet && !k.opts.perAttemptSet {
		set |= optPerAttempt
	}
	return set
}

// onlyRetriesUse reports whether p sets something only a retry uses: a
// policy in code with fewer than 2 attempts that sets one was most likely
// meant to retry (MaxAttempts 1 alone says "no retry").
func onlyRetriesUse(p *policy.Policy) bool {
	return p.PerAttemptRecvTimeout > 0 || p.HedgeOnPerTryTimeout || p.RetryableCodes != 0 ||
		p.Backoff != (policy.Backoff{}) || p.Predicate != nil || p.PushbackCeiling != 0
}

// callAttempts is own, a policy's maxAttempts, as the call's options set
// it: a WithMaxAttempts bounded by the cap in force (cfg's, or own when
// larger; capped is the bound when it was above it), then lowered by a
// go-grpc-middleware option left on the call.
func callAttempts(o *options, cfg *policy.Config, own int) (attempts, capped int) {
	attempts = own
	if o.maxAttempts > 0 {
		bound := max(cfg.MaxAttemptsCap(), own)
		attempts = min(o.maxAttempts, bound)
		if o.maxAttempts > bound {
			capped = bound
		}
	}
	if o.foreignMax > 0 {
		attempts = min(attempts, o.foreignMax)
	}
	return attempts, capped
}

// retryNoCode makes WithCodes() retry no code pred leaves to the codes.
func retryNoCode(pred policy.Predicate) policy.Predicate {
	return func(err error) (retry, decided bool) {
		if pred != nil {
			if retry, decided := pred(err); decided {
				return retry, true
			}
		}
		return false, true
	}
}

// method returns what cfg (nil: no file) says of method.
func (k *core) method(cfg *policy.Config, method string) *methodInfo {
	if mc := k.methods.Load(); mc != nil && mc.cfg == cfg {
		if e := &mc.byData[slotOf(method)]; e.data == unsafe.StringData(method) && e.n == len(method) && e.data != nil {
			return e.mi
		}
	}
	return k.methodMiss(cfg, method)
}

func (k *core) methodMiss(cfg *policy.Config, method string) *methodInfo {
	mc := k.methods.Load()
	if mc != nil && mc.cfg == cfg {
		if mi, ok := mc.byName[method]; ok {
			return mi
		}
	}
	if k.opts.source != nil {
		k.follow()
		if s, ok := k.opts.source.(servedSource); ok {
			s.Served(method)
		}
	}
	mi := &methodInfo{m: cfg.Method(method)}
	mi.plan = k.plan(&k.opts, cfg, mi.m, method)
	mi.plan.brCache = &mi.br
	mi.plan.pace = new(pace.Evidence)
	if mi.m != nil {
		mi.plan.fileOpts = methodCallOptions(mi.m)
	}
	// fast: nothing only unarySlow does (plan sets hedgeOnTimeout only
	// with a per-attempt timeout).
	pl, o := &mi.plan, &k.opts
	mi.fast = !o.disabled && o.idemKey == "" && pl.hedged == nil && pl.perAttempt == 0 && !pl.notice && pl.capped == 0 && pl.unapplied == policy.ReasonNone && pl.invalid == nil && !cfg.Disabled()
	mi.attempt.init()
	mi.timeout = mi.m != nil && mi.m.Timeout > 0
	if w := &k.opts.state.said.warned; cfg != nil && w.Load() != cfg && w.Swap(cfg) != cfg {
		k.files.Warnings(cfg)
	}
	k.fileSwitch(cfg)
	if cfg != nil && (mc == nil || mc.cfg != cfg || len(mc.byName) < methodCacheMax) {
		k.files.NearlyNamed(cfg, method)
	}
	k.methodsMu.Lock()
	defer k.methodsMu.Unlock()
	next := &methodCache{cfg: cfg, byName: map[string]*methodInfo{}}
	if mc = k.methods.Load(); mc != nil && mc.cfg == cfg {
		if len(mc.byName) >= methodCacheMax {
			return mi
		}
		next.byName, next.byData = maps.Clone(mc.byName), mc.byData
	}
	next.byName[method] = mi
	if len(method) > 0 {
		next.byData[slotOf(method)] = methodSlot{data: unsafe.StringData(method), n: len(method), mi: mi}
	}
	k.methods.Store(next)
	return mi
}

func newCore(opts []Option) *core {
	k := &core{opts: buildOptions(opts)}
	k.opts.ambiguous = &k.ambiguous
	if k.opts.logger != nil {
		k.opts.summary = refusedlog.New(k.opts.logger)
	}
	if k.opts.state == nil {
		k.opts.state = NewState()
	}
	k.files.Logger, k.files.First = k.opts.logger, k.firstLoud
	k.files.Source, _ = k.opts.source.(*policy.Source)
	return k
}

// stateOf returns the State that keeps a call's budgets and breakers.
func (k *core) stateOf(o *options) *State {
	if o.state != nil {
		return o.state
	}
	return k.opts.state
}

// follow tells the State when the source moved to a new config (on a
// method cache miss), so that what only the old one used is dropped.
func (k *core) follow() {
	next := k.opts.source.Config()
	prev := k.followed.Load()
	if next == prev || next == nil || !k.followed.CompareAndSwap(prev, next) {
		return
	}
	k.opts.state.moved(prev, next)
}

// perCall copies o and applies the call's Options, and returns the call's
// grpc options without them.
func perCall(base *options, opts []grpc.CallOption, first int) (*options, []grpc.CallOption) {
	o := new(options)
	*o = *base
	rest := make([]grpc.CallOption, first, len(opts)-1)
	copy(rest, opts[:first])
	for _, opt := range opts[first:] {
		if so, ok := opt.(Option); ok {
			if so.apply != nil {
				so.apply(o)
			}
			continue
		}
		if foreignretry.IsOption(opt) {
			o.foreign = true
			if n := foreignretry.Attempts(opt); n > 0 {
				// The last one wins, as the middleware applies them.
				o.foreignMax = n
			}
		}
		rest = append(rest, opt)
	}
	return o, rest
}

// methodCallOptions is m's waitForReady and message size limits.
func methodCallOptions(m *policy.Method) []grpc.CallOption {
	var out []grpc.CallOption
	if m.WaitForReady != nil {
		out = append(out, grpc.WaitForReady(*m.WaitForReady))
	}
	if m.MaxRequestMessageBytes != nil {
		out = append(out, grpc.MaxCallSendMsgSize(*m.MaxRequestMessageBytes))
	}
	if m.MaxResponseMessageBytes != nil {
		out = append(out, grpc.MaxCallRecvMsgSize(*m.MaxResponseMessageBytes))
	}
	return out
}

// idempotent decides whether method may run more than once: the call's
// option, then the file, then the proto's idempotency_level.
func (k *core) idempotent(o *options, m *policy.Method, method string) bool {
	switch {
	case o.idempotent != 0:
		return o.idempotent > 0
	case m != nil && m.Idempotent != nil:
		return *m.Idempotent
	}
	return policy.IdempotencyOf(method).Safe() || o.safe != nil && o.safe(method)
}

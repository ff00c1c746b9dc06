package interceptor

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/stagger-go/stagger/budget"
	"github.com/stagger-go/stagger/internal/chain"
	"github.com/stagger-go/stagger/policy"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// previousAttemptsKey is gRFC A6's header naming how many attempts came
// before this one; grpc-go writes it only when its own retry runs.
const previousAttemptsKey = "grpc-previous-rpc-attempts"

// core is what the unary and stream interceptors share: the options built once
// and the per-method notices already given.
type core struct {
	opts options
	// noticed holds the methods already reported as not idempotent, so the
	// logger and hooks hear of each once.
	noticed sync.Map
	// capNoticed holds the methods whose WithMaxAttempts was reported
	// capped.
	capNoticed sync.Map
	// methods caches what the current file says of each method, so a call
	// costs one map lookup and no allocation for the file's call options.
	methods   atomic.Pointer[methodCache]
	methodsMu sync.Mutex
	// hedgeLatency holds each hedged method's *latencyHistogram, for the
	// adaptive hedging delay (hedge.go).
	hedgeLatency sync.Map
	// warned is the last file whose warnings went to the logger, so each
	// file (each reload) is reported once, when a call first follows it.
	warned atomic.Pointer[policy.Config]
}

// methodCache is copied on write; it belongs to one *policy.Config.
type methodCache struct {
	cfg    *policy.Config
	byName map[string]*methodInfo
	// byData finds a method name by where its bytes live, without hashing
	// them: generated stubs pass the same constant string on every call.
	// An entry keeps its string alive, so its address cannot be reused by
	// another string while the entry exists.
	byData [methodSlots]methodSlot
}

const methodSlots = 64

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
	// opts are the file's waitForReady and message size limits as grpc
	// call options.
	opts []grpc.CallOption
	// plan is the method's plan under the interceptor's own options (k.opts),
	// so that a call without per-call Options copies it and decides nothing.
	plan plan
	// br caches the breaker of the first target the method was called on
	// (plan.breakers'), so that a call need not look it up.
	br atomic.Pointer[breakerRef]
}

// breakerRef is the breaker of one target.
type breakerRef struct {
	target string
	b      *budget.Breaker
}

// plan is what a call of one method does, given the options and the file:
// the parts of call that start fills in before the first attempt.
type plan struct {
	// pol is the retry policy with the options' overrides applied; nil when
	// the method has none. It is shared and never modified.
	pol      *policy.Policy
	retrying bool
	budget   budget.Budget
	// perAttempt as in call; notice: the policy sets a per-attempt timeout
	// that is not applied because the method is not known to be idempotent.
	perAttempt time.Duration
	notice     bool
	hedged     *policy.Method
	// repeatable as in call.
	repeatable bool
	// breakers guard the method's calls (nil: none); brCache is the
	// methodInfo's cache of one of them (nil for a plan made per call).
	breakers *budget.Breakers
	brCache  *atomic.Pointer[breakerRef]
	// capped is the bound WithMaxAttempts was lowered to (0: it was not):
	// start says so once per method (EventNotice, ReasonAttempts).
	capped int
}

// plan resolves, for a call of method with options o, what cfg's entry m
// (nil when none matches) makes it do.
func (k *core) plan(o *options, cfg *policy.Config, m *policy.Method, method string) plan {
	var pl plan
	if o.budgetSet {
		pl.budget = o.budget
	} else if pl.budget = cfg.Budget(); pl.budget == nil {
		pl.budget = o.fallback
	}
	if o.breakersSet {
		pl.breakers = o.breakers
	} else {
		pl.breakers = cfg.Breakers(m)
	}
	p := o.policy
	switch {
	case m != nil && m.Retry != nil:
		p = m.Retry
	case m != nil && m.Hedging != nil:
		// Hedged methods are the hedging engine's (hedge.go): no retries.
		pl.hedged, p = m, nil
		if o.maxAttempts > 0 || o.codesSet {
			// A copy of the entry: the file's is shared.
			mm, h := *m, *m.Hedging
			if o.maxAttempts > 0 {
				h.MaxAttempts, pl.capped = boundAttempts(o.maxAttempts, cfg, h.MaxAttempts)
			}
			if o.codesSet {
				h.NonFatalCodes = o.codes
			}
			mm.Hedging = &h
			pl.hedged = &mm
		}
	}
	if p == nil {
		return pl
	}
	if o.maxAttempts > 0 || o.predicate != nil || o.codesSet {
		q := *p
		if o.maxAttempts > 0 {
			q.MaxAttempts, pl.capped = boundAttempts(o.maxAttempts, cfg, p.MaxAttempts)
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
		return pl
	}
	idempotent := k.idempotent(o, m, method)
	pl.repeatable = idempotent || o.idemKey != ""
	if p.PerAttemptRecvTimeout > 0 {
		if idempotent {
			pl.perAttempt = p.PerAttemptRecvTimeout
		} else {
			pl.notice = true
		}
	}
	return pl
}

// boundAttempts bounds n, a maxAttempts given in code (WithMaxAttempts), by
// the cap in force: cfg's (policy.DefaultMaxAttemptsCap without a file), or
// own, the policy's own maxAttempts, when that is larger (a policy.Policy
// given in code is not capped). capped is the bound when n was above it,
// else 0.
func boundAttempts(n int, cfg *policy.Config, own int) (attempts, capped int) {
	bound := cfg.MaxAttemptsCap()
	if own > bound {
		bound = own
	}
	if n > bound {
		return bound, bound
	}
	return n, 0
}

// retryNoCode makes WithCodes() retry no code: it decides, as not
// retryable, every error pred (nil: none) leaves to the codes.
func retryNoCode(pred policy.Predicate) policy.Predicate {
	if pred == nil {
		return retryNone
	}
	return func(err error) (retry, decided bool) {
		if retry, decided := pred(err); decided {
			return retry, true
		}
		return false, true
	}
}

func retryNone(error) (retry, decided bool) { return false, true }

// methodCacheMax bounds the cache: a program that makes up method names at
// run time must not grow it without end. Past it, lookups go to the file.
const methodCacheMax = 4096

// method returns what cfg (nil: no file) says of method.
func (k *core) method(cfg *policy.Config, method string) *methodInfo {
	mc := k.methods.Load()
	if mc != nil && mc.cfg == cfg {
		if e := &mc.byData[slotOf(method)]; e.data == unsafe.StringData(method) && e.n == len(method) && e.data != nil {
			return e.mi
		}
		if mi, ok := mc.byName[method]; ok {
			return mi
		}
	}
	mi := &methodInfo{m: cfg.Method(method)}
	if mi.m != nil {
		mi.opts = methodCallOptions(mi.m, nil)
	}
	mi.plan = k.plan(&k.opts, cfg, mi.m, method)
	mi.plan.brCache = &mi.br
	if cfg != nil && k.warned.Load() != cfg && k.warned.Swap(cfg) != cfg {
		k.opts.logWarnings(cfg)
	}
	k.methodsMu.Lock()
	defer k.methodsMu.Unlock()
	mc = k.methods.Load()
	var old map[string]*methodInfo
	if mc != nil && mc.cfg == cfg {
		old = mc.byName
	}
	if len(old) >= methodCacheMax {
		return mi
	}
	m := make(map[string]*methodInfo, len(old)+1)
	for name, x := range old {
		m[name] = x
	}
	m[method] = mi
	next := &methodCache{cfg: cfg, byName: m}
	if mc != nil && mc.cfg == cfg {
		next.byData = mc.byData
	}
	if len(method) > 0 {
		next.byData[slotOf(method)] = methodSlot{data: unsafe.StringData(method), n: len(method), mi: mi}
	}
	k.methods.Store(next)
	return mi
}

func newCore(opts []Option) *core {
	return &core{opts: buildOptions(opts)}
}

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
	// afterTimeout: the running attempt follows one cut off by perAttempt.
	afterTimeout bool
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
	breakers *budget.Breakers
	br       *budget.Breaker
	brCache  *atomic.Pointer[breakerRef]
	// ctx is the caller's context: the request a server is serving, when the
	// call is made under stagger's server side (internal/chain), is found
	// through it only when an attempt fails.
	ctx context.Context
}

// noCancel stands in for a cancel func when no context was made.
func noCancel() {}

// start prepares c for a call of method. It returns the context every attempt
// derives from (the caller's, with the file's timeout and the idempotency key
// applied), its cancel func, and the caller's grpc options without stagger's
// Options; each attempt passes c.fileOpts before them. run is false when
// stagger is disabled for the call: send it as is, with grpcOpts.
//
// With no per-call Option, no timeout, no idempotency key and no limits in
// the file, start allocates nothing.
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
	if o.disabled {
		return ctx, noCancel, grpcOpts, false
	}
	cfg := o.config()
	mi := k.method(cfg, method)
	m := mi.m
	c.fileOpts = mi.opts
	pl := &mi.plan
	if o != &k.opts {
		p := k.plan(o, cfg, m, method)
		pl = &p
	}
	c.pol, c.retrying, c.budget, c.perAttempt, c.hedged, c.repeatable, c.breakers, c.brCache = pl.pol, pl.retrying, pl.budget, pl.perAttempt, pl.hedged, pl.repeatable, pl.breakers, pl.brCache
	c.retry = 1

	callCtx, cancel = ctx, noCancel
	if m != nil {
		if m.Timeout > 0 {
			if dl, ok := ctx.Deadline(); !ok || time.Until(dl) > m.Timeout {
				callCtx, cancel = context.WithTimeout(ctx, m.Timeout)
			}
		}
	}
	if o.idemKey != "" && !hasOutgoing(callCtx, o.idemKey) {
		callCtx = metadata.AppendToOutgoingContext(callCtx, o.idemKey, newIdempotencyKey())
	}
	if pl.notice {
		if _, seen := k.noticed.Load(method); !seen {
			if _, seen := k.noticed.LoadOrStore(method, struct{}{}); !seen {
				o.emit(ctx, Event{Kind: EventNotice, Method: method, Reason: policy.ReasonNotIdempotent})
			}
		}
	}
	if pl.capped > 0 {
		if _, seen := k.capNoticed.LoadOrStore(method, struct{}{}); !seen {
			o.emit(ctx, Event{Kind: EventNotice, Method: method, Attempt: pl.capped, Reason: policy.ReasonAttempts, Hedging: pl.hedged != nil})
		}
	}
	return callCtx, cancel, grpcOpts, true
}

// perCall copies o and applies the call's Options, and returns the call's
// grpc options without them. Only calls that carry Options pay for it.
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
		rest = append(rest, opt)
	}
	return o, rest
}

// methodCallOptions puts the file's waitForReady and message size limits
// before the caller's options, so that the caller's win.
func methodCallOptions(m *policy.Method, opts []grpc.CallOption) []grpc.CallOption {
	if m.WaitForReady == nil && m.MaxRequestMessageBytes == nil && m.MaxResponseMessageBytes == nil {
		return opts
	}
	out := make([]grpc.CallOption, 0, len(opts)+3)
	if m.WaitForReady != nil {
		out = append(out, grpc.WaitForReady(*m.WaitForReady))
	}
	if m.MaxRequestMessageBytes != nil {
		out = append(out, grpc.MaxCallSendMsgSize(*m.MaxRequestMessageBytes))
	}
	if m.MaxResponseMessageBytes != nil {
		out = append(out, grpc.MaxCallRecvMsgSize(*m.MaxResponseMessageBytes))
	}
	return append(out, opts...)
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
	return policy.IdempotencyOf(method).Safe()
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
	if c.perAttempt > 0 {
		timer = startAttemptTimer(ctx, c.perAttempt)
		return timer.ctx, timer.cancel, timer
	}
	return ctx, noCancel, nil
}

// attemptTimer is stagger's own per-attempt timer (perAttemptRecvTimeout,
// with grpc C-core's meaning): when it fires it cancels the attempt's
// context, unless it was stopped first (at the first response header or
// message, or when the attempt ended on its own). Firing and stopping
// exclude each other (one atomic state), so whether the timer cut an
// attempt off is a fact the timer records, never read after the fact from
// ctx.Err() or a status code, which races with the wire: a server's reply can
// arrive before a context reports done, and the other way round.
//
// It is not a context deadline: the attempt's context keeps the caller's
// deadline, which is all the server sees (grpc-timeout), so the server can
// never answer DEADLINE_EXCEEDED for stagger's timer.
type attemptTimer struct {
	state  atomic.Int32
	t      *time.Timer
	ctx    context.Context
	cancel context.CancelFunc
}

// errAttemptTimeout replaces the CANCELED an attempt ends with when
// stagger's per-attempt timer cut it off, so a call that runs out of
// attempts that way says DEADLINE_EXCEEDED, as grpc C-core does.
var errAttemptTimeout = status.Error(codes.DeadlineExceeded, "interceptor: attempt cut off by the per-attempt timeout (perAttemptRecvTimeout)")

const (
	timerArmed int32 = iota
	timerFired
	timerStopped
)

func startAttemptTimer(ctx context.Context, d time.Duration) *attemptTimer {
	at := new(attemptTimer)
	at.ctx, at.cancel = context.WithCancel(ctx)
	at.t = time.AfterFunc(d, at.fire)
	return at
}

func (at *attemptTimer) fire() {
	if at.state.CompareAndSwap(timerArmed, timerFired) {
		at.cancel()
	}
}

// stop stops the timer unless it fired first. It reports whether the
// attempt was not cut off: true for a nil timer, and for one stopped now or
// before; false once it fired. An attempt must call it before judging its
// outcome: a failure that ends an attempt whose timer is still armed is the
// attempt's own, even if the timer would have fired a moment later.
func (at *attemptTimer) stop() bool {
	if at == nil {
		return true
	}
	if at.state.CompareAndSwap(timerArmed, timerStopped) {
		at.t.Stop()
		return true
	}
	return at.state.Load() == timerStopped
}

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
	if c.br != nil {
		// Before the budget: a Gate's waiters, woken by the budget's
		// Record, must find the breaker's new state.
		c.br.Record(breakerOutcome(callCtx, err, timedOut), c.attempt+c.before == 1, c.o)
	}
	if err == nil {
		// Decide's answer for a success is fixed: record it, stop.
		if c.budget != nil {
			c.budget.Record(budget.Attempt{Number: c.attempt, Outcome: budget.Success, AfterTimeout: c.afterTimeout, Admission: admission})
		}
		c.reason = policy.ReasonSuccess
		return false, 0
	}
	if !c.retrying {
		// gRFC A6 counts failures only for methods with a retry policy.
		c.reason = policy.ReasonAttempts
		return false, 0
	}
	// The admission order of a retry: Decide (the caller's deadline
	// included: no pause that outlasts it), then the circuit breaker, then
	// the budget, then the wait (a budget that defers; it asks the breaker
	// again before it lets the retry go).
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
	v := c.pol.Decide(&a)
	if c.budget != nil {
		c.budget.Record(budget.Attempt{Number: c.attempt, Outcome: v.Record, AfterTimeout: c.afterTimeout, Admission: admission})
	}
	if v.Retry && chain.RetriedRequest(c.ctx) {
		// Served for a caller that is retrying already: retry at one layer.
		v.Retry, v.Reason = false, policy.ReasonRetriedRequest
	}
	e := Event{Method: c.method, Attempt: c.attempt, Code: status.Code(err), Err: err, Pause: v.Pause, Pushback: v.Pushback, Reason: v.Reason}
	if v.Retry && (c.budget != nil || c.br != nil) {
		req := budget.Request{Number: c.attempt + 1, AfterTimeout: timedOut, Last: c.attempt+1 >= c.pol.MaxAttempts}
		_, defers := c.budget.(budget.Deferrer)
		breakerOK := true
		if c.br != nil {
			req.Breaker, req.Listener = c.br, c.o
			if breakerOK = c.br.Closed(); !breakerOK && !defers {
				// No Gate to wait in: the retry goes only as the
				// half-open breaker's probe.
				breakerOK, _ = c.br.AllowRetry(c.o)
			}
		}
		if !breakerOK || (c.budget != nil && !c.budget.Allow(req)) {
			if defers {
				// Wait in pause, through the Deferrer, which asks the
				// breaker too.
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
		c.o.emit(callCtx, e)
		return false, 0
	}
	if e.Kind == 0 {
		e.Kind = EventRetry
		if c.resume {
			e.Kind = EventResume
		}
	}
	c.o.emit(callCtx, e)
	if v.Pushback {
		// gRFC A6: the backoff sequence restarts after a pushback.
		c.retry, c.prev = 1, 0
	} else {
		c.retry, c.prev = c.retry+1, v.Pause
	}
	c.afterTimeout = timedOut
	return true, v.Pause
}

// pause waits d before the next attempt. It returns nil when the wait ended,
// or the call's final error when callCtx ended first: CANCELED when the
// caller cancelled (at once, not after d), else last, the last attempt's
// error (Decide never chooses a pause that outlasts the deadline, so this is
// the rare timer that fired late).
func (c *call) pause(callCtx context.Context, d time.Duration, last error) error {
	if c.deferReq != nil {
		return c.waitDeferred(callCtx, d, last)
	}
	if d > 0 {
		start := time.Now()
		t := time.NewTimer(d)
		select {
		case <-t.C:
		case <-callCtx.Done():
			t.Stop()
		}
		c.paused += time.Since(start)
	}
	switch callCtx.Err() {
	case nil:
		return nil
	case context.Canceled:
		err := status.Error(codes.Canceled, context.Canceled.Error())
		c.reason = policy.ReasonCaller
		c.o.emit(callCtx, Event{Kind: EventGiveUp, Method: c.method, Attempt: c.attempt, Code: codes.Canceled, Err: err, Reason: policy.ReasonCaller})
		return c.finish(err)
	default:
		c.reason = policy.ReasonDeadline
		c.o.emit(callCtx, Event{Kind: EventGiveUp, Method: c.method, Attempt: c.attempt, Code: status.Code(last), Err: last, Reason: policy.ReasonDeadline})
		return c.finish(last)
	}
}

// waitDeferred is pause for a retry the budget refused: it waits, through
// the budget's Deferrer, for an admission no sooner than d. It returns nil
// when admitted (the next attempt tells the budget how it was let go), or
// the call's final error: CANCELED when the caller cancelled; last, reason
// deferred, when no retry could start before the deadline or a call without
// one waited the limit; last, reason budget, when too many calls wait.
func (c *call) waitDeferred(callCtx context.Context, d time.Duration, last error) error {
	req := *c.deferReq
	c.deferReq = nil
	start := time.Now()
	adm, err := c.budget.(budget.Deferrer).Wait(callCtx, req, d)
	waited := time.Since(start)
	c.deferred += waited
	e := Event{Method: c.method, Attempt: c.attempt, Code: status.Code(last), Err: last, Deferred: c.deferred, Admission: adm}
	if err == nil {
		c.admission = adm
		e.Kind = EventRetry
		if c.resume {
			e.Kind = EventResume
		}
		c.o.emit(callCtx, e)
		return nil
	}
	e.Kind = EventGiveUp
	switch {
	case errors.Is(callCtx.Err(), context.Canceled):
		last = status.Error(codes.Canceled, context.Canceled.Error())
		e.Code, e.Err, e.Reason = codes.Canceled, last, policy.ReasonCaller
	case errors.Is(err, budget.ErrTooManyWaiting):
		e.Reason = policy.ReasonBudget
	default:
		e.Reason = policy.ReasonDeferred
	}
	c.reason = e.Reason
	c.o.emit(callCtx, e)
	return c.finish(last)
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
// Unwrap reaches the *budget.Refusal.
func (c *call) admitFirst(ctx context.Context, cc *grpc.ClientConn, grpcOpts []grpc.CallOption) error {
	if c.breakers == nil {
		return nil
	}
	target := ""
	if cc != nil {
		target = cc.Target()
	}
	if c.brCache != nil {
		if r := c.brCache.Load(); r != nil && r.target == target {
			c.br = r.b
		}
	}
	if c.br == nil {
		c.br = c.breakers.Get(target, c.method)
		if c.brCache != nil {
			// The first target only: a method called on several targets
			// looks the others up, rather than allocate on every switch.
			c.brCache.CompareAndSwap(nil, &breakerRef{target: target, b: c.br})
		}
	}
	err := c.br.Admit(c.o)
	if err == nil {
		if cc != nil && !c.br.Settings().NoPacing && waitsForReady(c.fileOpts, grpcOpts) {
			c.holdUntilReady(ctx, cc)
		}
		return nil
	}
	reason := policy.ReasonBreaker
	if errors.Is(err, budget.ErrThrottled) {
		reason = policy.ReasonThrottled
	}
	refused := &refusedError{st: status.New(codes.Unavailable, err.Error()), err: err}
	c.reason = reason
	c.o.emit(ctx, Event{Kind: EventGiveUp, Method: c.method, Code: codes.Unavailable, Err: refused, Reason: reason})
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
// holds it for the start c.br.Pace gives it, so that the calls that queued
// during an outage reach the recovering server at the pace the process sent
// them instead of all at once. An idle connection is asked to connect. It
// returns when the attempt may go, or when ctx ends (the attempt then fails
// at once with the caller's status, as it would in grpc).
func (c *call) holdUntilReady(ctx context.Context, cc *grpc.ClientConn) {
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
	if d := c.br.Pace(); d > 0 {
		t := time.NewTimer(d)
		defer t.Stop()
		select {
		case <-t.C:
		case <-ctx.Done():
		}
	}
}

// refusedError is a call stagger refused before its first attempt: the
// status the caller sees, and why (a *budget.Refusal).
type refusedError struct {
	st  *status.Status
	err error
}

func (e *refusedError) Error() string              { return e.st.Err().Error() }
func (e *refusedError) GRPCStatus() *status.Status { return e.st }
func (e *refusedError) Unwrap() error              { return e.err }

// finish returns the call's final error: nil, err itself when stagger did not
// retry the method, or an *Error carrying it and the number of attempts.
func (c *call) finish(err error) error {
	if err == nil || !c.retrying {
		return err
	}
	return c.failed(c.attempt+c.before, err)
}

// end reports the end of the call, with err its final error (nil: success),
// to the call hooks (EventEnd; WithHook's hooks do not hear it) and to the
// call's Report. It costs a branch when
// neither is there. cc is the connection, nil when unknown.
func (c *call) end(cc *grpc.ClientConn, err error) {
	o := c.o
	if o == nil || len(o.callHooks) == 0 && o.report == nil {
		return
	}
	e := Event{Kind: EventEnd, Method: c.method, Attempt: c.attempt + c.before, Code: status.Code(err), Err: err, Reason: c.reason, Deferred: c.deferred, Hedging: c.hedged != nil}
	if err == nil {
		e.Reason = policy.ReasonSuccess
	}
	if e.Attempt > 1 {
		if c.hedged != nil {
			e.Hedges = e.Attempt - 1
		} else {
			e.Retries = e.Attempt - 1
		}
	}
	if c.hedged == nil {
		e.Delay = c.paused + c.deferred
	}
	if cc != nil {
		e.Target = cc.Target()
	}
	if r := o.report; r != nil {
		*r = Report{Attempts: e.Attempt, Retries: e.Retries, Hedges: e.Hedges, Delay: e.Delay, Reason: e.Reason, Code: e.Code}
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
	if e.GaveUp() && c.ctx != nil {
		chain.GaveUp(c.ctx)
	}
	return e
}

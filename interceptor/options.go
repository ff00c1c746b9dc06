package interceptor

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors/logging"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"

	"github.com/stagger-go/stagger/breaker"
	"github.com/stagger-go/stagger/budget"
	"github.com/stagger-go/stagger/criticality"
	"github.com/stagger-go/stagger/policy"
)

// ConfigSource hands out the current policy file; policy.Source implements it,
// so a file reloaded on disk takes effect on the next call.
type ConfigSource interface {
	Config() *policy.Config
}

// Option configures the interceptors. The same type serves when building an
// interceptor and on a single call: passed as a grpc.CallOption it applies to
// that call only, on top of the interceptor's options, and is removed before
// the call reaches grpc. Every option works in both places; options that make
// most sense per call (Disable, Idempotent, WithMaxAttempts, WithCodes,
// WithBackoff, WithPerAttemptTimeout) say so. A call's option that cannot
// take effect as given is reported once per method (EventNotice), never
// dropped in silence.
//
// An Option is an immutable value, safe for concurrent use.
type Option struct {
	grpc.EmptyCallOption
	apply func(*options)
}

// options holds every setting; the interceptor keeps one, built once, and a
// call copies it only when it carries options of its own.
type options struct {
	cfg       *policy.Config
	source    ConfigSource
	policy    *policy.Policy
	budget    budget.Budget
	budgetSet bool
	// fallback (one for every backend) or fallbacks (one per backend) is
	// the budget when neither WithBudget nor the file gives one.
	fallback  budget.Budget
	fallbacks *budget.Backends
	logger    logging.Logger
	hooks     []func(Event)
	callHooks []func(context.Context, Event)
	report    *Report
	idemKey   string
	predicate policy.Predicate
	// maxAttempts overrides the policy's when > 0.
	maxAttempts int
	// codes, when codesSet, replace the policy's retryable codes (a hedging
	// policy's non-fatal codes); the empty set retries no code.
	codes    policy.CodeSet
	codesSet bool
	// backoff, when backoffSet, replaces the policy's backoff
	// (WithBackoff); perAttempt, when perAttemptSet, its per-attempt
	// timeout (WithPerAttemptTimeout; 0: none).
	backoff       policy.Backoff
	backoffSet    bool
	perAttempt    time.Duration
	perAttemptSet bool
	// foreign: the call carried another retry library's call option
	// (go-grpc-middleware's); foreignMax, the attempts the last of them
	// that sets any allows (retry.Disable: 1; WithMax(n): n; 0: none
	// said), which lower the policy's and never raise them.
	foreign    bool
	foreignMax int
	disabled   bool
	// idempotent: 0 unknown (ask the file, then the proto), 1 yes, -1 no.
	idempotent int8
	// safe (WithIdempotentMethods) says a method is idempotent beside the
	// proto registry.
	safe   func(method string) bool
	random policy.Random
	// replaySize bounds each stream's replay buffer in bytes (0: the
	// default); replayLimit caps the bytes held by every stream sharing it.
	replaySize  int
	replayLimit *ReplayLimit
	// breakers, when breakersSet, replace the file's circuit breakers.
	breakers    *breaker.Set
	breakersSet bool
	// state keeps the file's budgets and breakers (WithState; newCore
	// makes one when none is given).
	state *State
	// resume holds the resume functions by method (WithResume); copied on
	// write, so calls may share it.
	resume map[string]ResumeFunc
	// ambiguous is the core's set of methods whose ambiguous give-up was
	// logged at warning level (nil for options not built by newCore).
	ambiguous *sync.Map
	// ambiguousN counts ambiguous's methods: at most noticeMax.
	ambiguousN *atomic.Int64
	// summary counts, for the logger, the calls that ended for want of a
	// retry their budget refused (nil without a logger, or for options
	// not built by newCore).
	summary *refusedSummary
	// crit is the interceptor's default criticality and callCrit the
	// call's own (WithCriticality given when building the interceptor, or
	// on the call); Unset when not given.
	crit, callCrit criticality.Level
}

// WithConfig makes the interceptor follow the policy file cfg: each method's
// retry policy, timeout, waitForReady and message size limits, and the
// budgets and circuit breakers the file declares, built from its settings
// on first use, per backend, and kept in the interceptor's State
// (WithState). A nil cfg means no file.
func WithConfig(cfg *policy.Config) Option {
	return Option{apply: func(o *options) { o.cfg, o.source = cfg, nil }}
}

// WithConfigSource is WithConfig for a file that can change: src.Config() is
// read at the start of every call, so a reload applies to the next call and
// never to a call in flight. src.Config() may return nil (no file). A reload
// that keeps the budget settings keeps every backend's budget state, and one
// that changes them starts afresh (State).
func WithConfigSource(src ConfigSource) Option {
	return Option{apply: func(o *options) { o.cfg, o.source = nil, src }}
}

// WithPolicy retries, with p, the methods the policy file does not match (or
// all methods when there is no file). p is copied. On a call, it applies to
// that call when the file has no entry for its method; where the file has
// one, the entry decides and the logger and hooks say so once per method
// (EventNotice, policy.ReasonOverridden); WithBackoff,
// WithPerAttemptTimeout, WithMaxAttempts and WithCodes change the entry's
// policy for one call. A p with fewer than 2 attempts
// retries nothing: one that sets what only retries use (a per-attempt
// timeout, codes, a backoff) is reported the same way
// (policy.ReasonOneAttempt), unless WithMaxAttempts gives it attempts.
func WithPolicy(p policy.Policy) Option {
	return Option{apply: func(o *options) { o.policy = &p }}
}

// WithBudget makes b the retry budget of every call, whatever its backend,
// in place of the budgets the file declares; a nil b means unlimited.
//
// The file's budgets and stagger.DialOptions' default are kept per backend
// (budget.Backends: each target its tokens, each of its methods its Gate),
// as grpc-go keeps one throttle per channel and Envoy one budget per
// cluster: with one budget for the process, a healthy flaky backend's
// healed retries paid for a retry storm on a down one beside it
// (BENCHMARKS.md, "Per backend"). One b across backends is an explicit
// choice: its tokens and, for a Gate, what it learns of the servers'
// health are then shared by every backend the calls go to.
func WithBudget(b budget.Budget) Option {
	return Option{apply: func(o *options) { o.budget, o.budgetSet = b, true }}
}

// WithBreakers makes bs the circuit breakers (and adaptive throttling)
// that guard every call, in place of those the file's circuitBreaker and
// adaptiveThrottling give; a nil bs turns them off. Build bs once with
// breaker.NewSet and share it, as a budget: a breaker sees what the
// calls it guards see.
//
// A policy file's circuitBreaker and adaptiveThrottling (or WithBreakers in
// code) guard calls with breaker.Breaker: one per connection target and
// method (scope METHOD, the default: one failing method, or one whose keys
// fail, does not stop the others; M. Brooker measured breakers turning
// such partial failures into complete ones) or one per target (scope
// TARGET). The file's breakers are built from its settings by the
// interceptors and kept in their State, as its budgets are, shared by the
// interceptors that share the State and kept across reloads with unchanged
// settings. Per-backend ejection is gRPC's outlier detection
// load-balancing policy (gRFC A50), configured in the service config's
// loadBalancingConfig for grpc-go to apply; stagger does not re-implement
// it.
//
// The admission order of a call: the breaker and throttling before the
// first attempt; for a retry, Decide (the caller's deadline included), then
// the breaker, then the budget, then the wait. While a breaker is open a
// first attempt fails at once, UNAVAILABLE with a message that names the
// breaker and says when it probes next, as an *Error of no attempts and
// reason breaker (errors.Is(err, breaker.ErrOpen)); a retry is
// refused: with a deferring budget (budget.Gate, the default's) it waits,
// within its deadline, and the gate lets it go only as the breaker allows
// (budget.Request.Guard): the breaker's half-open probe is the gate's
// probe, one attempt, a new call's first or a waiting retry, whichever asks
// first. Without a deferring budget a refused retry ends its call (reason
// breaker), unless it can go as the probe. A hedge is admitted as such a
// retry is: a closed breaker is not asked; one that is not closed lets it
// go only as its half-open probe, else hedging stops (reason breaker). What counts as a failure: UNAVAILABLE,
// RESOURCE_EXHAUSTED and DEADLINE_EXCEEDED that is not the caller's; the
// caller's own cancellation or deadline counts for nothing; any other
// status is an answer from a working server.
//
// Adaptive throttling (the SRE book's client-side throttling) rejects first
// attempts locally, reason throttled, with probability max(0, (requests −
// K × accepts) / (requests + 1)) over the breaker's window; retries are the
// budget's to admit.
//
// waitForReady calls (the file's waitForReady or grpc.WaitForReady(true))
// guarded by a breaker are held by stagger while their connection is not
// ready, as grpc would hold them; when the wait saw a connection attempt
// fail (the server was gone), each then waits for its start from
// breaker.Breaker.Pace: one at a time, at the rate the server answered over
// the window, instead of all at once when the connection comes back.
// circuitBreaker.paceReconnect false turns that off.
//
// State changes reach the hooks and the logger (EventBreaker) of the
// interceptor whose call's attempt or asking made them, after every lock is
// released; breaker.Set.Snapshots gives every breaker's state for
// metrics. The breaker's check on a call's success path is one atomic load
// to admit and one mutex to record, with no allocation.
func WithBreakers(bs *breaker.Set) Option {
	return Option{apply: func(o *options) { o.breakers, o.breakersSet = bs, true }}
}

// WithDefaultBudget makes b the budget of calls whose file declares none
// (read per call, so it follows a reloaded file) when WithBudget is not
// given, one b for every backend (see WithBudget). WithDefaultBudgets keeps
// one per backend.
func WithDefaultBudget(b budget.Budget) Option {
	return Option{apply: func(o *options) { o.fallback, o.fallbacks = b, nil }}
}

// WithDefaultBudgets makes bs's budgets, one per backend, the budgets of
// calls whose file declares none (read per call, so it follows a reloaded
// file) when WithBudget is not given. stagger.DialOptions uses it to
// install budget.DefaultBackends. A nil bs means unlimited.
func WithDefaultBudgets(bs *budget.Backends) Option {
	return Option{apply: func(o *options) { o.fallback, o.fallbacks = nil, bs }}
}

// WithLogger logs what stagger does through l: any go-grpc-middleware v2
// logging.Logger (its slog, zap, zerolog, ... adapters fit).
//
// Every message is a constant (a log pipeline can group, count and
// rate-limit lines by it); what changes from line to line goes in
// attributes. What happens to one call is at debug level: one line per
// event but EventEnd (retries, give-ups, hedges, hedge ends, deferrals,
// resumes), so that an outage, which makes such events by the thousand,
// writes nothing above debug per call. Their fields: grpc.method,
// stagger.event (the kind: "retry", "give up", "hedge", "hedge won", ...),
// stagger.attempt, grpc.code; then stagger.pause for a retry, a hedge or a
// deferral, and stagger.pushback (true) when the pause is the server's;
// stagger.backend, the address the failed attempt went to, when the
// stagger_elsewhere policy picked it (Event.Backend); stagger.reason when
// the event has a reason (a give-up, a notice, a hedge stop);
// stagger.deferred and stagger.admission after a wait for the budget;
// grpc.target (the backend) but for a retry or a hedge;
// stagger.budget.level, stagger.gate and stagger.budget.waiting when the
// budget refused or deferred a retry. Durations are strings in
// time.Duration's format ("1.5s", "250ms"), so a JSON handler prints them
// readably rather than as integer nanoseconds.
//
// The calls that end because their budget refused a retry or ended its
// wait (reasons budget, deferred and outage), and the hedges it refused,
// are summed up at warn level instead, at most one line per backend per
// 10 seconds: "stagger: calls ended without the retry their budget
// refused, ..." with grpc.target (the backend's canonical target, which
// keys its budget: two spellings of one backend share a line, within one
// interceptor), the counts per reason since the
// backend's last such line (stagger.budget_refused, stagger.wait_ended,
// stagger.outage, stagger.hedges_refused), stagger.interval (the time
// since that line; absent on a backend's first), and the budget's latest
// state (stagger.budget.level, stagger.gate). A backend's first such call
// is said at once, the ones after it when its 10 seconds end (a timer,
// armed only while a count waits). The summary goes to the interceptor's
// logger, not to one given on a single call. So does, at info level, the
// line that says a backend begins to hold calls, at its first deferred
// retry (EventDeferred, not a hedge's) and at its first after 10 seconds
// without one: "stagger: a backend begins to hold calls: ..." with
// grpc.target, grpc.method (that call's) and stagger.gate (its Gate's
// health then), so an outage that holds calls shows when it begins, not
// only as they end.
//
// At warn level too, once each: a circuit breaker that opens (a breaker's
// other changes at info; stagger.breaker, stagger.to, stagger.from,
// stagger.failures, stagger.answered, stagger.break), and each notice
// (EventNotice: an option or a part of the policy not applied, once per
// method).
//
// The logger also gets, at warn level, the warnings of the policy file
// (policy.Config.Warnings: a misspelt key, a service or method the program's
// protos do not declare, each with its "did you mean"), once per file when a
// call first follows it, and again after a reload: "stagger: policy file
// warning (stagger.warning)" with stagger.warning, stagger.field and, when
// known, stagger.file, stagger.line and stagger.column. Hooks do not get
// them; they are not events of a call. Without a logger, the likely typos
// among them (policy.Warning.Typo: an unknown key near a known one, a
// service or method name that a linked proto nearly declares) still go to
// slog.Default(), each once per State (WithState: the unary and the stream
// interceptor of one stagger.DialOptions share one, so they say it once
// between them), for a typo silently turns a
// method's retries off. So does a call to a method the file nearly names
// without naming it (policy.Config.NearlyNamed): "stagger: the policy file
// nearly names the method ...", with grpc.method (the first such call's)
// and stagger.name, once per service when the name is a misspelt service,
// once per method when it is a misspelt method of the call's service. So
// do the notices (EventNotice: a per-call option, or a part of the policy,
// not applied), once per method, at warn level.
//
// Two failures that would otherwise make no sound reach it too: the first
// ambiguous give-up of each method (policy.ReasonAmbiguous), at warn level
// ("stagger: not retried: ..."), and a reload the config source refused (a
// file that does not parse; policy.Source.Refused), once, at error level,
// on the next call: "stagger: policy file not reloaded, ..." with
// stagger.error and stagger.file. Without a logger, slog.Default() hears
// of each refused reload at error level, once in the process
// (policy.Source.ClaimRefused), from the first call that follows the
// Source after it. So, at error level, is a reload with warnings (a good
// file that names no known method or turns a method's retries off;
// policy.Source.Warned), when a call first follows its config: "stagger:
// policy file reloaded with warnings: ..." with stagger.file and
// stagger.warnings, once per State with a logger, once in the process
// without (policy.Source.ClaimWarned).
func WithLogger(l logging.Logger) Option {
	return Option{apply: func(o *options) { o.logger = l }}
}

// WithHook calls fn on every retry, every give-up and every notice, with a
// copy of the event. fn runs on the call's goroutine, outside every lock
// stagger holds; it must be quick and safe for concurrent use. Several hooks
// may be given; they run in order.
func WithHook(fn func(Event)) Option {
	return Option{apply: func(o *options) {
		if fn != nil {
			o.hooks = append(o.hooks[:len(o.hooks):len(o.hooks)], fn)
		}
	}}
}

// WithCallHook is WithHook for hooks that need the call: fn also receives
// the context the caller passed to the call (its trace span, its baggage),
// and, besides every event WithHook's hooks receive, the EventEnd of every
// call.
// For EventBreaker, which no one call owns, it is context.Background(). It
// runs after the hooks of WithHook, under the same rules; an exporter of
// metrics or traces is built on it (the nested module
// github.com/stagger-go/stagger/otel).
func WithCallHook(fn func(ctx context.Context, e Event)) Option {
	return Option{apply: func(o *options) {
		if fn != nil {
			o.callHooks = append(o.callHooks[:len(o.callHooks):len(o.callHooks)], fn)
		}
	}}
}

// DefaultIdempotencyHeader is the header name to give WithIdempotencyKey
// unless the server reads another: the one stagger's server side
// (server.WithIdempotency) reads by default, and the IETF Idempotency-Key
// draft's.
const DefaultIdempotencyHeader = "idempotency-key"

// WithIdempotencyKey sends, on every attempt of a call, the metadata header
// named header with a random value made once per call, so a server can tell a
// retried write it already applied. A call whose outgoing metadata already
// carries header keeps the caller's key (one derived from the request, say,
// which also de-duplicates the caller's own retries) and gets none added.
// The server must de-duplicate the key (server.WithIdempotency does, for
// unary calls). An empty header turns it off.
//
// A unary call with a key counts as idempotent wherever stagger could run
// it twice: a failure that may have run on the server is retried, with the
// same key; an attempt is retried after response headers too (gRFC A6
// would commit it: see the package documentation); the per-attempt timer
// may cut an attempt off and retry it; and a hedging policy hedges it. The
// server answers the repeats from the first request's outcome, or makes
// them wait while it runs.
//
// A stream with a key does not count as idempotent for the per-attempt
// timer and hedging, because stagger's server side does not de-duplicate
// streams (server.WithIdempotency runs a keyed stream as it would without
// the option): a stream of a method not known to be idempotent runs without
// the timer and unhedged, as without a key (the logger and hooks say so
// once per method). Only a stream's failure that may have run on the
// server before any response (reason "ambiguous") is retried for its key,
// as for a unary call. Mark a stream's method idempotent, or register a
// resume function (WithResume), to retry it further.
func WithIdempotencyKey(header string) Option {
	return Option{apply: func(o *options) { o.idemKey = header }}
}

// WithPredicate decides, before the status codes, for errors the codes cannot
// classify (see policy.Predicate). It replaces the policy's own predicate.
// Hedging does not use it (its nonFatalStatusCodes decide): on a call to a
// hedged method it does nothing, and the hooks hear so once per method.
func WithPredicate(p policy.Predicate) Option {
	return Option{apply: func(o *options) { o.predicate = p }}
}

// WithMaxAttempts sets the number of attempts, the first included (3 means
// at most 2 retries), in place of the policy's retry or hedging policy's;
// useful per call. n < 2 means no retry (no hedge). It changes nothing for a
// method without a policy.
//
// n is bounded, as a policy file's maxAttempts is, by the cap in force: the
// cap the file was parsed with (policy.WithMaxAttemptsCap; gRFC A6's 5,
// policy.DefaultMaxAttemptsCap, without a file or a raised cap), or the
// policy's own maxAttempts when it is larger (a policy.Policy given in
// code is not capped, so a call may ask for as many attempts as it has).
// A larger n is lowered to that bound, and the logger and hooks hear of it
// once per method and interceptor (an EventNotice, Reason
// policy.ReasonAttempts, Attempt the bound applied).
func WithMaxAttempts(n int) Option {
	return Option{apply: func(o *options) {
		if n < 1 {
			n = 1
		}
		o.maxAttempts = n
	}}
}

// WithCodes makes cs the status codes the call retries, in place of the
// retry policy's retryableStatusCodes (policy.Policy.RetryableCodes); for
// a method that hedges it replaces the hedging policy's nonFatalStatusCodes,
// the codes after which the next hedge goes at once and the call goes on
// (any other failure ends it), as gRFC A6 treats them. It is go-grpc-middleware's
// retry.WithCodes, and is meant per call. It changes nothing for a method
// without a policy, and it changes no other rule of the policy: the caller's
// own deadline or cancellation is never retried, whatever cs holds
// (CANCELED and DEADLINE_EXCEEDED in cs retry only attempts that failed with
// those codes while the caller's context was still live); a committed
// attempt, maxAttempts, pushback and the budget still apply; an attempt cut
// off by stagger's per-attempt timeout is retried as before, whatever the
// codes; a predicate (WithPredicate, policy.Policy.Predicate) still decides
// first for the errors it decides.
//
// With no code, WithCodes() retries (hedging: goes on after) no status
// code: it does not mean the policy's codes or stagger's defaults. codes.OK
// in cs is ignored, as are codes grpc does not define (above
// codes.Unauthenticated): a success ends the call and is never retried, so
// WithCodes(codes.OK) retries nothing.
func WithCodes(cs ...codes.Code) Option {
	set := policy.NewCodeSet(cs...) &^ policy.NewCodeSet(codes.OK)
	return Option{apply: func(o *options) { o.codes, o.codesSet = set, true }}
}

// WithBackoff makes b the backoff of the call's retry policy, in place of
// the file's (initialBackoff, maxBackoff, backoffMultiplier, jitter) or
// the WithPolicy's; meant per call, as go-grpc-middleware's
// retry.WithBackoff. It applies to whatever policy retries the method,
// the file's entry included, and changes no other rule (pushback still
// restarts the sequence from b.Initial; a pause that cannot end before the
// caller's deadline is not taken). A b that breaks a rule
// (policy.Backoff.Validate: Initial and Max above 0, a finite Multiplier
// above 0, a known Jitter) is not applied: the policy's backoff stays, and
// the logger and hooks hear why once per method (EventNotice,
// policy.ReasonInvalidOption, Err naming the field). On a method without a
// retry policy (none in the file, no WithPolicy; a hedged method) it is
// reported too (policy.ReasonNoPolicy).
func WithBackoff(b policy.Backoff) Option {
	return Option{apply: func(o *options) { o.backoff, o.backoffSet = b, true }}
}

// WithPerAttemptTimeout makes d the per-attempt timeout
// (perAttemptRecvTimeout) of the call's retry policy, in place of the
// file's or the WithPolicy's; meant per call, where go-grpc-middleware's
// retry.WithPerRetryTimeout was. It applies to whatever policy retries the
// method, the file's entry included; d = 0 turns the policy's timeout off
// for the call. The timer keeps its rules (UnaryClientInterceptor): it
// cuts an attempt off only when the retry can go, it is the client's own
// (the server sees the caller's deadline, not d), and it applies only to
// a method known to be idempotent or a unary call with an idempotency key
// (Idempotent() on the same call marks it), else the call runs without it
// and the logger and hooks say so once per method
// (policy.ReasonNotIdempotent). A negative d is not applied
// (policy.ReasonInvalidOption); on a method without a retry policy it is
// reported as WithBackoff is (policy.ReasonNoPolicy).
func WithPerAttemptTimeout(d time.Duration) Option {
	return Option{apply: func(o *options) { o.perAttempt, o.perAttemptSet = d, true }}
}

// Disable turns stagger off; meant per call: the call goes to grpc once,
// untouched but for its criticality header (WithCriticality), which a
// chain must keep. No hook hears of it; WithReport on the same call gets
// one attempt and reason policy.ReasonDisabled (see Report.Disabled).
// SetDisabled (or the environment variable DisableEnv) turns stagger off
// in the whole process, a policy file's "disabled" for the calls that
// follow the file.
func Disable() Option {
	return Option{apply: func(o *options) { o.disabled = true }}
}

// Idempotent marks the call's method as safe to run more than once, whatever
// the file and the proto say; meant per call. It lets a per-attempt timeout
// apply.
func Idempotent() Option {
	return Option{apply: func(o *options) { o.idempotent = 1 }}
}

// NotIdempotent marks the call's method as unsafe to run more than once,
// whatever the file and the proto say; meant per call.
func NotIdempotent() Option {
	return Option{apply: func(o *options) { o.idempotent = -1 }}
}

// WithIdempotentMethods names, in code, the methods safe to run more than
// once beside the proto registry's idempotency_level: a method (its full
// name, "/pkg.Service/Method") is idempotent when either says so. It is
// asked only when neither the call (Idempotent, NotIdempotent) nor the
// file's "idempotent" decides. safe must be quick and safe for concurrent
// use; nil asks the registry alone. The connect-go front end passes the
// idempotency of each procedure's Spec through it.
func WithIdempotentMethods(safe func(method string) bool) Option {
	return Option{apply: func(o *options) { o.safe = safe }}
}

// WithCriticality names the criticality of calls (package criticality:
// how much a call matters when a server or a client must shed work).
// Given when building an interceptor it is the default of its calls; given
// on a call it is that call's, whatever else says otherwise. A level that
// is not one of the four (criticality.Unset included) names none.
//
// A call's criticality is resolved once, when it starts, from the first of:
//
//  1. WithCriticality on the call;
//  2. the call's context (criticality.FromContext): the criticality of the
//     request a server is serving, which stagger's server side puts in the
//     handler's context when the request carried one, or one the caller
//     set with criticality.NewContext;
//  3. the policy file's "criticality" for the method (policy.Method);
//  4. WithCriticality given when building the interceptor;
//  5. none: the call is CRITICAL.
//
// The context wins over the file so that criticality propagates down a
// call chain as Google's RPC stack propagates it: a server cannot raise
// the criticality of the work it does for a request, so a SHEDDABLE
// request stays SHEDDABLE at every layer below it, whatever their files
// say, and a client cannot make its bulk work CRITICAL_PLUS by routing it
// through a server whose file says so. The file names the criticality of
// calls that no request carried one for: those a process starts on its own
// (the edge of a chain, a batch job, a server's background work) and those
// made while serving a request that named none. Only code can override
// it, per call (1).
//
// A call whose criticality comes from 1 to 4 sends it on every attempt
// (hedges included), in the metadata header criticality.Header
// (stagger-criticality: SHEDDABLE), for the server to read: stagger's
// server side sheds by it and hands it on to the calls its handler makes,
// so a criticality named at the top, CRITICAL included, is the one every
// layer below sees. It costs the call its outgoing metadata (4
// allocations). A call that none of them names sends nothing and costs
// nothing (no allocation); the server takes it for CRITICAL. A call made
// with Disable sends the header too, so that a chain keeps its
// criticality. The budget hears the criticality of every retry and hedge
// it is asked for (budget.Request.Criticality); Event.Criticality and
// Report.Criticality give it.
func WithCriticality(l criticality.Level) Option {
	return Option{apply: func(o *options) { o.callCrit = l }}
}

// WithRandom draws the backoff jitter from r (tests pin it); nil is the
// default, math/rand/v2's generator.
func WithRandom(r policy.Random) Option {
	return Option{apply: func(o *options) { o.random = r }}
}

func buildOptions(opts []Option) options {
	var o options
	for _, opt := range opts {
		if opt.apply != nil {
			opt.apply(&o)
		}
	}
	// WithCriticality given to the interceptor is its default, below the
	// context and the file; perCall keeps a call's own apart.
	o.crit, o.callCrit = o.callCrit, criticality.Unset
	return o
}

// config returns the file the call follows, or nil.
func (o *options) config() *policy.Config {
	if o.source != nil {
		return o.source.Config()
	}
	return o.cfg
}

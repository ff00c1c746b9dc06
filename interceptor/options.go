package interceptor

import (
	"context"
	"time"

	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors/logging"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"

	"github.com/stagger-go/stagger/breaker"
	"github.com/stagger-go/stagger/budget"
	"github.com/stagger-go/stagger/criticality"
	"github.com/stagger-go/stagger/internal/fence"
	"github.com/stagger-go/stagger/internal/refusedlog"
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
// the call reaches grpc. Every option works in both places; those meant per
// call say so. A call's option that cannot take effect as given is reported
// once per method (EventNotice), never dropped in silence: WithMaxAttempts,
// WithCodes, WithPredicate, WithBackoff and WithPerAttemptTimeout, meant per
// call as go-grpc-middleware's retry options, change a method's retry or
// hedging policy and nothing for a method without one (policy.ReasonNoPolicy);
// a hedged method takes only WithMaxAttempts and WithCodes.
//
// An Option is an immutable value, safe for concurrent use.
type Option struct {
	grpc.EmptyCallOption
	apply func(*options)
}

// options holds every setting; a call copies the interceptor's only when it
// carries options of its own.
type options struct {
	cfg         *policy.Config
	source      ConfigSource
	policy      *policy.Policy
	budget      budget.Budget
	fallback    budget.Budget    // WithDefaultBudget
	fallbacks   *budget.Backends // WithDefaultBudgets
	logger      logging.Logger
	hooks       []func(Event)
	callHooks   []func(context.Context, Event)
	report      *Report
	idemKey     string
	predicate   policy.Predicate
	maxAttempts int // > 0: overrides the policy's
	codes       policy.CodeSet
	backoff     policy.Backoff
	perAttempt  time.Duration
	// The ...Set flags say the option was given: its zero value means something.
	budgetSet, codesSet, backoffSet, perAttemptSet, breakersSet bool

	// foreign: the call carried go-grpc-middleware's retry options;
	// foreignMax, the attempts the last that says any allows (0: none said),
	// lowers the policy's, never raises them.
	foreign     bool
	foreignMax  int
	disabled    bool
	idempotent  int8 // 0 unknown (ask the file, then the proto), 1 yes, -1 no
	safe        func(method string) bool
	random      policy.Random
	replaySize  int
	replayLimit *ReplayLimit
	breakers    *breaker.Set
	state       *State
	resume      map[string]ResumeFunc // copied on write, so calls may share it
	// ambiguous (the methods whose ambiguous give-up was logged) and
	// summary are nil for options not built by newCore.
	ambiguous *saidOnce
	summary   *refusedlog.Summary
	// crit is the interceptor's default, callCrit the call's; Unset when not given.
	crit, callCrit criticality.Level
}

// WithConfig makes the interceptor follow the policy file cfg: each method's
// retry policy, timeout, waitForReady and message size limits, and the
// budgets and circuit breakers it declares (kept in a State, which has the
// rules). A nil cfg means no file.
func WithConfig(cfg *policy.Config) Option {
	return Option{apply: func(o *options) { o.cfg, o.source = cfg, nil }}
}

// WithConfigSource is WithConfig for a file that can change: src.Config() is
// read at the start of every call, so a reload applies to the next call and
// never to a call in flight; it may return nil (no file). What a reload keeps
// of the budgets and breakers, State says.
func WithConfigSource(src ConfigSource) Option {
	return Option{apply: func(o *options) { o.cfg, o.source = nil, src }}
}

// WithPolicy retries, with p (copied), the methods the policy file does not
// match, or all methods when there is no file. A method the file has an
// entry for follows the entry (a notice, policy.ReasonOverridden). A p with
// fewer than 2 attempts retries nothing (policy.ReasonOneAttempt).
func WithPolicy(p policy.Policy) Option {
	p.Predicate = fence.NewPredicate(p.Predicate)
	return Option{apply: func(o *options) { o.policy = &p }}
}

// WithBudget makes b the retry budget of every call, whatever its backend,
// in place of the budgets the file declares; a nil b means unlimited. The
// file's budgets and stagger.DialOptions' default are kept per backend
// (budget.Backends), so that a healthy backend's retries do not pay for a
// storm on a down one beside it (BENCHMARKS.md, "Per backend"); one b
// shares its tokens and its Gate's view of health across backends.
func WithBudget(b budget.Budget) Option {
	return Option{apply: func(o *options) { o.budget, o.budgetSet = b, true }}
}

// WithBreakers makes bs the circuit breakers and adaptive throttling that
// guard every call (package breaker has their rules), in place of the
// file's circuitBreaker and adaptiveThrottling; a nil bs turns them off.
// Build bs once with breaker.NewSet and share it, as a budget. Per-backend
// ejection is gRPC's outlier detection (gRFC A50), not stagger's.
//
// The admission order of a call: the breaker and throttling before the first
// attempt; for a retry, Decide (the caller's deadline included), the breaker,
// the budget, then the wait. An open breaker fails a first attempt at once:
// UNAVAILABLE, naming the breaker and its next probe, an *Error of no
// attempts, reason breaker (errors.Is(err, breaker.ErrOpen)); throttling
// rejects one with reason throttled, and never a retry. A refused retry waits
// in a deferring budget (budget.Gate), within its deadline, until the breaker
// lets it go (budget.Request.Guard: the half-open probe is the first attempt
// or waiting retry to ask); without one it ends its call (reason breaker)
// unless it can go as the probe. A hedge is admitted as such a retry, else
// hedging stops. A breaker counts as failures UNAVAILABLE, RESOURCE_EXHAUSTED
// and a DEADLINE_EXCEEDED not the caller's; the caller's own end counts for
// nothing; any other status is an answer from a working server.
//
// stagger holds waitForReady calls guarded by a breaker while their connection
// is not ready, then starts them at breaker.Breaker.Pace's rate (unless
// circuitBreaker.paceReconnect is false). State changes reach the hooks and
// logger (EventBreaker) of the interceptor whose call made them. On the success
// path a breaker costs one atomic load, one mutex, no allocation.
func WithBreakers(bs *breaker.Set) Option {
	return Option{apply: func(o *options) { o.breakers, o.breakersSet = bs, true }}
}

// WithDefaultBudget makes b, one for every backend (see WithBudget), the
// budget of calls whose file declares none (read per call), when WithBudget
// is not given. WithDefaultBudgets keeps one per backend.
func WithDefaultBudget(b budget.Budget) Option {
	return Option{apply: func(o *options) { o.fallback, o.fallbacks = b, nil }}
}

// WithDefaultBudgets is WithDefaultBudget with one budget per backend, bs's;
// stagger.DialOptions installs budget.DefaultBackends with it. A nil bs
// means unlimited.
func WithDefaultBudgets(bs *budget.Backends) Option {
	return Option{apply: func(o *options) { o.fallback, o.fallbacks = nil, bs }}
}

// WithLogger logs what stagger does through l, any go-grpc-middleware v2
// logging.Logger (its slog, zap, zerolog, ... adapters fit). Messages are
// constants, so a pipeline can group and rate-limit by them; what changes
// goes in attributes, durations as strings ("250ms").
//
// Debug: one line per event of a call but EventEnd. Attributes: grpc.method,
// stagger.event (EventKind.String), stagger.attempt, grpc.code;
// stagger.pause (a retry, hedge or deferral) and stagger.pushback (true:
// the server's); stagger.backend (Event.Backend); stagger.reason, and
// stagger.error for a notice's Err; stagger.criticality when named and not
// CRITICAL; stagger.deferred and stagger.admission after a budget wait;
// grpc.target but for a retry or a hedge; stagger.budget.level,
// stagger.gate and stagger.budget.waiting when the budget refused or
// deferred a retry.
//
// Warn, summed up per backend (grpc.target, the canonical target that keys
// its budget) in at most one line per 10 seconds, the first at once, to the
// interceptor's logger: "stagger: calls ended without the retry their
// budget refused, ...", with the counts since that line
// (stagger.budget_refused, stagger.wait_ended, stagger.outage,
// stagger.hedges_refused), stagger.interval (since the last line), the
// budget's latest stagger.budget.level and stagger.gate. Info, at a
// backend's first deferred retry and its first after 10 seconds without
// one: "stagger: a backend begins to hold calls: ..." (grpc.target,
// grpc.method, stagger.gate).
//
// Warn, once each: a breaker that opens (its other changes at info;
// stagger.breaker, stagger.to, stagger.from, stagger.failures,
// stagger.answered, stagger.break); each notice (EventNotice); the first
// ambiguous give-up of each method; the file's warnings
// (policy.Config.Warnings) when a call first follows it (stagger.warning,
// stagger.field and, when known, stagger.file, stagger.line,
// stagger.column); a method the file nearly names (policy.Config.NearlyNamed;
// grpc.method, stagger.name). Error, once, on the next call: a reload the
// Source refused (policy.Source.Refused; stagger.error, stagger.file) or
// warned of (policy.Source.Warned; stagger.file, stagger.warnings).
//
// Without a logger, slog.Default() hears the notices; the likely typos
// (policy.Warning.Typo) and nearly named methods, once per State; the
// refused and warned reloads, once in the process.
func WithLogger(l logging.Logger) Option {
	return Option{apply: func(o *options) { o.logger = fence.NewLogger(l) }}
}

// WithHook calls fn with a copy of every event but EventEnd. fn runs on a
// goroutine of the call, outside every lock stagger holds; it must be quick
// and safe for concurrent use (a panic skips the event: see the package
// doc). Several hooks may be given; they run in order.
func WithHook(fn func(Event)) Option {
	return Option{apply: func(o *options) {
		if fn != nil {
			o.hooks = append(o.hooks[:len(o.hooks):len(o.hooks)], fence.NewHook(fn))
		}
	}}
}

// WithCallHook is WithHook for hooks that need the call: fn also receives the
// context the caller passed to the call (its trace span, its baggage;
// context.Background() for EventBreaker, which no call owns) and the EventEnd
// of every call. It runs after the hooks of WithHook, under the same rules.
func WithCallHook(fn func(ctx context.Context, e Event)) Option {
	return Option{apply: func(o *options) {
		if fn != nil {
			o.callHooks = append(o.callHooks[:len(o.callHooks):len(o.callHooks)], fence.NewCallHook(fn))
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
// retried write it already applied; a call whose outgoing metadata carries
// header keeps the caller's key. The server must de-duplicate the key
// (server.WithIdempotency does, for unary calls). An empty header turns it off.
//
// A unary call with a key counts as idempotent wherever stagger could run
// it twice: an ambiguous failure is retried with the same key, an attempt
// is retried after response headers too (gRFC A6 would commit it), the
// per-attempt timer applies, and a hedging policy hedges it. A stream with
// a key does not count as idempotent (server.WithIdempotency does not
// de-duplicate streams): only its ambiguous failure before any response is
// retried for its key.
func WithIdempotencyKey(header string) Option {
	return Option{apply: func(o *options) { o.idemKey = header }}
}

// WithPredicate decides, before the status codes, for errors the codes cannot
// classify (see policy.Predicate). It replaces the policy's own predicate.
// Hedging does not use it (its nonFatalStatusCodes decide).
func WithPredicate(p policy.Predicate) Option {
	return Option{apply: func(o *options) { o.predicate = fence.NewPredicate(p) }}
}

// WithMaxAttempts sets the number of attempts, the first included (3 means at
// most 2 retries), in place of the retry or hedging policy's. n < 2 means no
// retry (no hedge). n is bounded by the cap the file was parsed with
// (policy.WithMaxAttemptsCap; policy.DefaultMaxAttemptsCap without a file), or
// the policy's own maxAttempts when larger: a larger n is lowered to it, with a
// notice (policy.ReasonAttempts, Attempt the bound).
func WithMaxAttempts(n int) Option {
	return Option{apply: func(o *options) { o.maxAttempts = max(n, 1) }}
}

// WithCodes makes cs the status codes the call retries, in place of the retry
// policy's retryableStatusCodes (a hedging policy's nonFatalStatusCodes). It
// changes no other rule (a predicate still decides first; an attempt the
// per-attempt timer cut off is retried whatever the codes). WithCodes() retries
// no code; codes.OK and codes grpc does not define are ignored.
func WithCodes(cs ...codes.Code) Option {
	set := policy.NewCodeSet(cs...) &^ policy.NewCodeSet(codes.OK)
	return Option{apply: func(o *options) { o.codes, o.codesSet = set, true }}
}

// WithBackoff makes b the backoff of the call's retry policy, the file's entry
// or WithPolicy's. It changes no other rule. A b that fails
// policy.Backoff.Validate is not applied (a notice, policy.ReasonInvalidOption,
// Err naming the field).
func WithBackoff(b policy.Backoff) Option {
	return Option{apply: func(o *options) { o.backoff, o.backoffSet = b, true }}
}

// WithPerAttemptTimeout makes d the per-attempt timeout (perAttemptRecvTimeout)
// of the call's retry policy, the file's entry or WithPolicy's
// (go-grpc-middleware's retry.WithPerRetryTimeout). d = 0 turns the timeout off
// for the call. The timer keeps its rules (UnaryClientInterceptor; Idempotent
// lets it apply). A negative d is not applied (policy.ReasonInvalidOption).
func WithPerAttemptTimeout(d time.Duration) Option {
	return Option{apply: func(o *options) { o.perAttempt, o.perAttemptSet = d, true }}
}

// Disable turns stagger off; meant per call: the call goes to grpc once,
// untouched but for its criticality header (WithCriticality), which a chain
// must keep. No hook hears of it; Report.Disabled says what WithReport gets.
// SetDisabled turns stagger off in the whole process.
func Disable() Option {
	return Option{apply: func(o *options) { o.disabled = true }}
}

// Idempotent marks the call's method as safe to run more than once, whatever
// the file and the proto say; meant per call. It lets a per-attempt timeout
// and hedging apply.
func Idempotent() Option {
	return Option{apply: func(o *options) { o.idempotent = 1 }}
}

// NotIdempotent marks the call's method as unsafe to run more than once,
// whatever the file and the proto say; meant per call.
func NotIdempotent() Option {
	return Option{apply: func(o *options) { o.idempotent = -1 }}
}

// WithIdempotentMethods names, in code, the methods ("/pkg.Service/Method")
// safe to run more than once beside the proto registry's idempotency_level,
// asked when neither the call (Idempotent, NotIdempotent) nor the file
// decides. safe must be quick and safe for concurrent use.
func WithIdempotentMethods(safe func(method string) bool) Option {
	return Option{apply: func(o *options) { o.safe = fence.NewSafe(safe) }}
}

// WithCriticality names the criticality of calls (package criticality):
// given when building an interceptor, its calls' default; on a call, that
// call's. A level that is not one of the four names none. A call's
// criticality is resolved once, when it starts, from the first of:
//
//  1. WithCriticality on the call;
//  2. the call's context (criticality.FromContext), where stagger's server
//     side puts the request it serves: so a server cannot raise the
//     criticality of its work for a request, as in Google's RPC stack;
//  3. the policy file's "criticality" for the method;
//  4. WithCriticality given when building the interceptor;
//  5. none: the call is CRITICAL.
//
// A call named by 1 to 4 sends it on every attempt, hedges and Disable
// included, in the header criticality.Header, for the server to shed by and
// hand on (it allocates the call's outgoing metadata: BENCHMARKS.md, "Options
// that add to a success"); a call none names sends and allocates nothing. The
// budget hears it (budget.Request.Criticality), as do Event and Report.
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
	// The interceptor's WithCriticality is its default, below context and file.
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

package interceptor

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors/logging"
	"github.com/stagger-go/stagger/breaker"
	"github.com/stagger-go/stagger/budget"
	"github.com/stagger-go/stagger/criticality"
	"github.com/stagger-go/stagger/policy"
	"google.golang.org/grpc/codes"
)

// EventKind says what an Event reports.
type EventKind uint8

const (
	// EventRetry: an attempt failed and another follows after Pause.
	EventRetry EventKind = iota + 1
	// EventGiveUp: an attempt failed and the call ends with its error;
	// Reason says why.
	EventGiveUp
	// EventNotice: stagger did not apply part of the policy or of an
	// Option; Reason says which (policy.ReasonNotIdempotent: a per-attempt
	// timeout, or hedging when Hedging; ReasonAttempts: lowered to Attempt;
	// ReasonOverridden, ReasonOneAttempt, ReasonNoPolicy,
	// ReasonInvalidOption, ReasonForeignOption, ReasonReplyType), and Err
	// names the options or the rule broken. Each is reported once per
	// method and interceptor (the first 1,024 of an interceptor, so made-up
	// method names cannot grow its memory), to the hooks and the logger, or
	// to slog.Default() at warn level without a logger.
	EventNotice
	// EventHedge: a hedge (Attempt, 2 or more) is sent, Pause after the
	// attempt before it; Code and Err are the non-fatal failure that sent it
	// early, if any; Pushback: it waited the server's pushback.
	EventHedge
	// EventHedgeStop: no further hedge is sent for the call (Attempt is the
	// hedge not sent); Reason says why. The attempts in flight go on; after
	// a budget's refusal, should they all fail non-fatally, the next
	// attempt still goes, as a retry would.
	EventHedgeStop
	// EventHedgeWon: attempt Attempt of a call that sent hedges succeeded
	// (of a stream: the stream committed to it); the others were cancelled.
	EventHedgeWon
	// EventDeferred: an attempt failed, the policy would retry it, and the
	// budget refused the retry now: the call waits for a later admission
	// (budget.Deferrer), no sooner than Pause. An EventRetry (with Deferred
	// and Admission set) or an EventGiveUp (reason deferred, caller or
	// budget) follows.
	EventDeferred
	// EventBreaker: a circuit breaker changed state (Breaker says how);
	// Method is the breaker's key.
	EventBreaker
	// EventEnd: the call ended, once per call that stagger ran (a unary call
	// when it returns, a stream when it ends), with its Report's facts and
	// Err. It reaches the hooks of WithCallHook only.
	EventEnd
	// EventResume: an attempt of a resumable server stream (WithResume)
	// failed after the stream committed, and the stream resumes after
	// Pause with the request the method's resume function builds; as
	// EventRetry otherwise. Attempt counts since the last attempt that
	// delivered a message (see WithResume, "Counting").
	EventResume
	// EventTimerRanOn: attempt Attempt's per-attempt timer fired and the
	// policy would have retried it, but Reason (policy.ReasonBudget,
	// ReasonBreaker) refused the retry, so the attempt runs on past the
	// timeout (Code is DEADLINE_EXCEEDED, the timer's). A slow-for-all wait
	// (the server slow for every attempt) is not reported: the timer asks again.
	EventTimerRanOn
)

var eventKindNames = [...]string{"", "retry", "give up", "notice", "hedge", "hedge stop", "hedge won", "deferred", "breaker", "end", "resume", "timer ran on"}

// String returns "retry", "give up", "notice", "hedge", "hedge stop",
// "hedge won", "deferred", "breaker", "end", "resume" or "timer ran on".
func (k EventKind) String() string {
	if int(k) < len(eventKindNames) && k > 0 {
		return eventKindNames[k]
	}
	return "unknown"
}

// Event is what hooks receive. Each hook gets its own copy.
type Event struct {
	Kind EventKind
	// Method is the full method name, "/pkg.Service/Method".
	Method string
	// Attempt is the number of the attempt that just ended (1 = first); a
	// resumable stream counts from the last attempt that delivered a
	// message (which is 1). EventEnd: the call's attempts, all of them.
	Attempt int
	// Code is that attempt's status code; Err its error.
	Code codes.Code
	Err  error
	// Pause is the pause before the next attempt (EventRetry only).
	Pause time.Duration
	// Pushback: Pause is the server's pushback.
	Pushback bool
	// Reason: why the call gives up (EventGiveUp), or what was not applied
	// (EventNotice); ReasonNone for EventRetry.
	Reason policy.Reason
	// Deferred is how long the call waited for the budget before this
	// retry (EventRetry) or before giving up (EventGiveUp); Admission says
	// what let the retry go.
	Deferred  time.Duration
	Admission budget.Admission
	// Hedging: the event comes from a method whose policy hedges.
	Hedging bool
	// Breaker is the state change an EventBreaker reports.
	Breaker breaker.Change
	// Backend is the address the failed attempt went to, when the
	// stagger_elsewhere load-balancing policy (package balancer/elsewhere)
	// picked it, in EventRetry, EventDeferred, EventGiveUp and EventResume;
	// "" otherwise and for hedged calls, whose attempts run at once.
	Backend string
	// Retries, Hedges and Delay: EventEnd only (see Report).
	Retries, Hedges int
	Delay           time.Duration
	// Target is the call's backend, its ClientConn's target as dialled (or
	// its front end's), in every event of a call (see Report.Target).
	Target string
	// CanonicalTarget is grpc.ClientConn.CanonicalTarget, as gRFC A66's
	// grpc.target records it; Target for a front end without a ClientConn.
	// EventEnd only.
	CanonicalTarget string
	// StaticMethod: the call carried grpc.StaticMethodCallOption, as
	// generated code does; grpc-go's OpenTelemetry plugin records the
	// method of a call without it as "other".
	StaticMethod bool
	// Budget is the state of the call's budget when it refused or
	// deferred a retry (EventDeferred, and EventGiveUp for reasons budget,
	// deferred and outage); zero otherwise.
	Budget budget.State
	// Criticality is the call's criticality as named (Report.Criticality);
	// criticality.Unset in an EventBreaker, which belongs to no call.
	Criticality criticality.Level
	// Disabled: EventEnd of a call made while the switch was on (see
	// Report.Disabled).
	Disabled bool
}

// BreakerChanged makes options a breaker.Listener: a breaker's state
// change becomes an EventBreaker.
func (o *options) BreakerChanged(ch breaker.Change) {
	o.emit(context.Background(), Event{Kind: EventBreaker, Method: ch.Key, Breaker: ch})
}

// logWarnings tells the logger what the parse of cfg found: a file with
// such a mistake is valid, so without this line it would fail silently.
func (k *core) logWarnings(cfg *policy.Config) {
	for _, w := range cfg.Warnings() {
		if k.opts.logger == nil && (!w.Typo || !k.firstLoud(w.Path+": "+w.Message)) {
			continue
		}
		fields := []any{"stagger.field", w.Path}
		if w.Line > 0 {
			fields = append(fields, "stagger.line", w.Line, "stagger.column", w.Column)
		}
		if w.File != "" {
			fields = append(fields, "stagger.file", w.File)
		}
		k.opts.warnLoud(msgPolicyWarning, append(fields, "stagger.warning", w.Message)...)
	}
	k.logWarnedReload(cfg)
}

// logNearlyNamed says that cfg nearly names method without naming it: a
// typo silently leaves the method without its policy. A misspelt service
// is said once, not once per method.
func (k *core) logNearlyNamed(cfg *policy.Config, method string) {
	name := cfg.NearlyNamed(method)
	if name == "" {
		return
	}
	key := method
	if svc := method[:strings.LastIndexByte(method, '/')+1]; !strings.HasPrefix(name, svc) {
		key = svc
	}
	if !k.firstLoud("call " + key + " " + name) {
		return
	}
	k.opts.warnLoud(msgNearlyNamed, "grpc.method", method, "stagger.name", name)
}

// loudMax and noticeMax bound the sets of what was said once: a program
// that makes up method names must not grow them without end.
const (
	loudMax   = 1024
	noticeMax = 1024
)

// firstLoud reports whether msg is said for the first time by the
// interceptors sharing k's State.
func (k *core) firstLoud(msg string) bool {
	s := &k.opts.state.said
	return firstIn(&s.loud, &s.loudN, loudMax, msg)
}

// firstIn reports whether key is new to m and adds it; n counts m's keys,
// at most bound: past it, what was not said is not said.
func firstIn(m *sync.Map, n *atomic.Int64, bound int64, key any) bool {
	if _, seen := m.Load(key); seen || n.Load() >= bound {
		return false
	}
	if _, seen := m.LoadOrStore(key, struct{}{}); seen {
		return false
	}
	n.Add(1)
	return true
}

// warnLoud logs at warn level through the logger, else slog.Default().
func (o *options) warnLoud(msg string, fields ...any) {
	if o.logger != nil {
		o.logger.Log(context.Background(), logging.LevelWarn, msg, fields...)
		return
	}
	slog.Default().Warn(msg, fields...)
}

func (o *options) firstAmbiguous(method string) bool {
	return o.ambiguous != nil && firstIn(o.ambiguous, o.ambiguousN, noticeMax, method)
}

// emit fills in what every event of c carries and runs the hooks and the
// logger.
func (c *call) emit(ctx context.Context, e Event) {
	e.Criticality, e.StaticMethod = c.crit, c.static
	if e.Target == "" {
		e.Target = c.target
	}
	if c.budget != nil && (e.Kind == EventDeferred || e.Kind == EventGiveUp && budgetEnded(e.Reason)) {
		e.Budget = c.budget.State()
	}
	c.o.emit(ctx, e)
}

// budgetEnded reports whether reason r ends a call for its budget.
func budgetEnded(r policy.Reason) bool {
	return r == policy.ReasonBudget || r == policy.ReasonDeferred || r == policy.ReasonOutage
}

// emit runs the hooks and the logger; the caller holds no lock. Without a
// logger a notice goes to slog.Default(): what a caller asked for is never
// dropped in silence.
func (o *options) emit(ctx context.Context, e Event) {
	for _, h := range o.hooks {
		h(e)
	}
	for _, h := range o.callHooks {
		h(ctx, e)
	}
	switch {
	case o.logger != nil:
		o.log(ctx, o.logger, e)
	case e.Kind == EventNotice:
		o.log(ctx, slogDefault, e)
	}
}

// slogDefault is slog.Default() as a logging.Logger, read at each line
// (a program may set it after building the interceptor); the two
// packages' levels have the same values.
var slogDefault = logging.LoggerFunc(func(ctx context.Context, l logging.Level, msg string, fields ...any) {
	slog.Default().Log(ctx, slog.Level(l), msg, fields...)
})

// log writes e's line to l, at the levels and with the fields WithLogger
// lists.
func (o *options) log(ctx context.Context, l logging.Logger, e Event) {
	level, msg := logging.LevelDebug, msgRetrying
	switch e.Kind {
	case EventGiveUp:
		msg = msgGivingUp
		switch {
		case budgetEnded(e.Reason) && o.summary != nil:
			o.summary.count(e)
		case e.Reason == policy.ReasonAmbiguous && o.firstAmbiguous(e.Method):
			// The caller sees a status its file may list as retryable:
			// say once per method, where it is heard, why it was not.
			level, msg = logging.LevelWarn, msgAmbiguous
		}
	case EventNotice:
		level, msg = logging.LevelWarn, msgNoTimer
		switch {
		case e.Reason == policy.ReasonAttempts:
			msg = msgCapped
		case e.Reason == policy.ReasonOverridden:
			msg = msgOverridden
		case e.Reason == policy.ReasonNoPolicy:
			msg = msgNoPolicy
		case e.Reason == policy.ReasonOneAttempt:
			msg = msgOneAttempt
		case e.Reason == policy.ReasonInvalidOption:
			msg = msgInvalidOption
		case e.Reason == policy.ReasonForeignOption:
			msg = msgForeignOption
		case e.Hedging:
			msg = msgNoHedging
		}
	case EventHedge:
		msg = msgHedging
	case EventHedgeStop:
		msg = msgNoMoreHedges
		if e.Reason == policy.ReasonBudget && o.summary != nil {
			o.summary.count(e)
		}
	case EventHedgeWon:
		msg = msgHedgeWon
	case EventDeferred:
		msg = msgDeferred
		if !e.Hedging && o.summary != nil {
			o.summary.held(e)
		}
	case EventResume:
		msg = msgResuming
	case EventTimerRanOn:
		msg = msgTimerRanOn
	case EventBreaker:
		level = logging.LevelInfo
		if e.Breaker.To == breaker.StateOpen {
			level = logging.LevelWarn
		}
		l.Log(ctx, level, msgBreaker, "stagger.breaker", e.Method, "stagger.to", e.Breaker.To.String(), "stagger.from", e.Breaker.From.String(),
			"stagger.failures", e.Breaker.Failures, "stagger.answered", e.Breaker.Answered, "stagger.break", e.Breaker.Break.String())
		return
	}
	fields := make([]any, 0, 20)
	fields = append(fields,
		"grpc.method", e.Method,
		"stagger.event", e.Kind.String(),
		"stagger.attempt", e.Attempt,
		"grpc.code", e.Code.String(),
	)
	switch e.Kind {
	case EventRetry, EventHedge, EventDeferred:
		fields = append(fields, "stagger.pause", e.Pause.String())
		if e.Pushback {
			fields = append(fields, "stagger.pushback", true)
		}
	}
	if e.Backend != "" {
		fields = append(fields, "stagger.backend", e.Backend)
	}
	if e.Reason != policy.ReasonNone {
		// ReasonNone's name, "retry", says nothing stagger.event does not.
		fields = append(fields, "stagger.reason", e.Reason.String())
	}
	if e.Kind == EventNotice && e.Err != nil {
		fields = append(fields, "stagger.error", e.Err.Error())
	}
	if e.Criticality.Valid() && e.Criticality != criticality.Critical {
		fields = append(fields, "stagger.criticality", e.Criticality.String())
	}
	if e.Deferred > 0 || e.Admission != budget.AdmitNone {
		fields = append(fields, "stagger.deferred", e.Deferred.String(), "stagger.admission", e.Admission.String())
	}
	if e.Target != "" && e.Kind != EventRetry && e.Kind != EventHedge {
		fields = append(fields, "grpc.target", e.Target)
	}
	if e.Budget.Kind != "" {
		fields = append(fields, "stagger.budget.level", e.Budget.Level)
		if e.Budget.Health != "" {
			fields = append(fields, "stagger.gate", e.Budget.Health)
		}
		if e.Budget.Waiting > 0 {
			fields = append(fields, "stagger.budget.waiting", e.Budget.Waiting)
		}
	}
	l.Log(ctx, level, msg, fields...)
}

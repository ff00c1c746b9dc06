package interceptor

import (
	"context"
	"log/slog"

	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors/logging"

	"github.com/stagger-go/stagger/breaker"
	"github.com/stagger-go/stagger/budget"
	"github.com/stagger-go/stagger/criticality"
	"github.com/stagger-go/stagger/internal/bounded"
	"github.com/stagger-go/stagger/internal/callwords"
	"github.com/stagger-go/stagger/internal/fence"
	"github.com/stagger-go/stagger/internal/refusedlog"
	"github.com/stagger-go/stagger/policy"
)

// The messages the logger and slog.Default() get: constants, by
// WithLogger's rule, which TestLogMessagesAreConstant holds every call to.
// A line says its kind's message; a notice, its reason's.
var (
	kindMsgs = [...]string{
		EventRetry:      "stagger: retrying",
		EventGiveUp:     "stagger: giving up",
		EventHedge:      "stagger: hedging",
		EventHedgeStop:  "stagger: no more hedges",
		EventHedgeWon:   "stagger: hedge won",
		EventDeferred:   msgDeferred,
		EventBreaker:    "stagger: circuit breaker changed state (stagger.to)",
		EventResume:     "stagger: resuming stream",
		EventTimerRanOn: "stagger: per-attempt timeout not applied: the retry was refused, the attempt runs on",
	}
	noticeMsgs = map[policy.Reason]string{
		policy.ReasonNotIdempotent: "stagger: per-attempt timeout not applied: method not known to be idempotent",
		policy.ReasonAttempts:      "stagger: WithMaxAttempts above the cap: lowered to the cap (stagger.attempt)",
		policy.ReasonOverridden:    "stagger: the call's WithPolicy not applied: the policy file's entry for the method decides",
		policy.ReasonNoPolicy:      "stagger: the call's WithMaxAttempts, WithCodes, WithPredicate, WithBackoff or WithPerAttemptTimeout not applied: no retry policy for the method (no file entry, no WithPolicy; a hedged method takes only WithMaxAttempts and WithCodes)",
		policy.ReasonOneAttempt:    "stagger: WithPolicy allows one attempt (MaxAttempts below 2): its per-attempt timeout, codes and backoff do nothing",
		policy.ReasonInvalidOption: "stagger: the call's WithBackoff or WithPerAttemptTimeout not applied: its value breaks a rule (stagger.error); the policy's own stays",
		policy.ReasonForeignOption: "stagger: a go-grpc-middleware retry option on the call: retry.Disable() is read as one attempt and WithMax(n) as at most n, its others do nothing: use interceptor.Disable, WithMaxAttempts, WithCodes, WithBackoff, WithPerAttemptTimeout, WithPredicate",
		policy.ReasonReplyType:     "stagger: hedging not applied: the call's reply is not a protobuf message, so its attempts go one at a time",
	}
)

const (
	msgAmbiguous   = "stagger: " + callwords.Ambiguous
	msgNoHedging   = "stagger: hedging not applied: method not known to be idempotent"
	msgDeferred    = "stagger: retry deferred: the budget refused it now, the call waits for a later admission"
	msgSwitchedOff = "stagger: switched off: each call is sent once, with no retry, no hedge and no wait; held calls end with their last status (stagger.switch)"
	msgSwitchedOn  = "stagger: switched back on: calls retry by their policy again (stagger.switch)"
)

// firstLoud reports whether msg is said first among k's State's sharers.
func (k *core) firstLoud(msg string) bool { return k.opts.state.said.loud.first(msg) }

// saidOnce is the set of what was said once (a notice, a warn line), by
// key. It holds at most saidMax keys: past the bound, what was not said is
// not said. Safe for concurrent use; its zero value is empty.
type saidOnce struct{ bounded.Map[any, struct{}] }

func (s *saidOnce) first(key any) bool {
	_, added := s.Get(key, saidMax, func() struct{} { return struct{}{} })
	return added
}

func (o *options) firstAmbiguous(method string) bool {
	return o.ambiguous != nil && o.ambiguous.first(method)
}

// slogDefault is slog.Default() as a logging.Logger, read at each line (a
// program may set it later); the two packages' levels have one value.
var slogDefault = logging.LoggerFunc(func(ctx context.Context, l logging.Level, msg string, fields ...any) {
	fence.Run(fence.Logger, func() { slog.Default().Log(ctx, slog.Level(l), msg, fields...) })
})

// log writes e's line to l, at WithLogger's levels and with its fields.
func (o *options) log(ctx context.Context, l logging.Logger, e Event) {
	level, msg := logging.LevelDebug, kindMsgs[e.Kind]
	switch e.Kind {
	case EventGiveUp:
		switch {
		case budgetEnded(e.Reason) && o.summary != nil:
			o.summary.Count(summaryTarget(e.Target), e.Reason, e.Budget)
		case e.Reason == policy.ReasonAmbiguous && o.firstAmbiguous(e.Method):
			// The caller sees a status its file may list as retryable:
			// say once per method, where it is heard, why it was not.
			level, msg = logging.LevelWarn, msgAmbiguous
		}
	case EventNotice:
		level, msg = logging.LevelWarn, noticeMsgs[e.Reason]
		if e.Hedging && e.Reason == policy.ReasonNotIdempotent {
			msg = msgNoHedging
		}
	case EventHedgeStop:
		if e.Reason == policy.ReasonBudget && o.summary != nil {
			o.summary.CountHedge(summaryTarget(e.Target), e.Budget)
		}
	case EventDeferred:
		if !e.Hedging && o.summary != nil {
			o.summary.Held(summaryTarget(e.Target), e.Method, e.Budget.Health)
		}
	case EventBreaker:
		level = logging.LevelInfo
		if e.Breaker.To == breaker.StateOpen {
			level = logging.LevelWarn
		}
		l.Log(ctx, level, msg, "stagger.breaker", e.Method, "stagger.to", e.Breaker.To.String(), "stagger.from", e.Breaker.From.String(),
			"stagger.failures", e.Breaker.Failures, "stagger.answered", e.Breaker.Answered, "stagger.break", e.Breaker.Break.String())
		return
	}
	fields := append(make([]any, 0, 20),
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
	fields = refusedlog.BudgetFields(fields, e.Budget)
	if e.Budget.Kind != "" && e.Budget.Waiting > 0 {
		fields = append(fields, "stagger.budget.waiting", e.Budget.Waiting)
	}
	l.Log(ctx, level, msg, fields...)
}

// summaryTarget returns the canonical target of target's budget (the
// call's lookup filled the cache; else target), so two spellings of one
// backend share a summary line.
func summaryTarget(target string) string {
	if v, ok := canonicalTargets.Load(target); ok {
		return v.(string)
	}
	return target
}

// servedSource is the part of policy.Source that hears which methods the
// process calls: a reload naming them names a method, linked or not.
type servedSource interface {
	Served(fullMethod string)
}

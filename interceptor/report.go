package interceptor

import (
	"time"

	"google.golang.org/grpc/codes"

	"github.com/stagger-go/stagger/breaker"
	"github.com/stagger-go/stagger/budget"
	"github.com/stagger-go/stagger/criticality"
	"github.com/stagger-go/stagger/internal/callwords"
	"github.com/stagger-go/stagger/policy"
)

// Report is what WithReport fills in when a call ends: the same facts as
// its EventEnd. A Report is a plain value, written once (WithReport); it
// is not safe to read while it is written.
type Report struct {
	// Attempts is the number of attempts sent, hedges included (0 when a
	// circuit breaker or the budget refused the call before its first).
	Attempts int
	// Retries is the attempts after the first of a call that retries;
	// Hedges the attempts after the first of a hedged call. At most one of
	// them is non-zero.
	Retries, Hedges int
	// Delay is the time the call spent between attempts with none running:
	// its pauses (backoff, pushback) and budget waits; 0 for hedged calls,
	// whose attempts overlap. Pushback is the part of it that the
	// server's pushbacks asked for (gRFC A6's grpc-retry-pushback-ms).
	Delay, Pushback time.Duration
	// Deferred is the time the call waited in its budget's Gate past the
	// pauses its refused retries were due after (part of Delay). WaitEnd,
	// when such a wait admitted nothing and ended the call, is the rule
	// that ended it (budget.Gate): "hold", "hopeless", "max-wait",
	// "futility", "room", "criticality", "deadline", "caller", or "switch"
	// (SetDisabled); HeldBy, the rule that held the wait past its pause:
	// "outage", "overload" or "breaker".
	Deferred time.Duration
	WaitEnd  string
	HeldBy   string
	// Reason is why the call ended: policy.ReasonSuccess, or why it gave up.
	Reason policy.Reason
	// Code is the call's final status code.
	Code codes.Code
	// Criticality is the call's criticality as named (WithCriticality);
	// criticality.Unset when nothing named one (the call is CRITICAL).
	Criticality criticality.Level
	// TimerRefused counts the attempts that ran on past their timeout
	// because the retry was refused (EventTimerRanOn); TimerReason is the
	// latest refusal's reason, ReasonNone when none was refused.
	TimerRefused int
	TimerReason  policy.Reason
	// Target is the call's backend (its ClientConn's target, as dialled),
	// whose budget and Gate its retries went through (kept under its
	// canonical target: two spellings of one backend share them).
	Target string
	// Budget is the state of the backend's budget when the call ended
	// because it refused or deferred a retry (Reason budget, deferred or
	// outage); zero otherwise.
	Budget budget.State
	// Breaker is the state of the call's circuit breaker when it ended the
	// call (Reason breaker or throttled); zero otherwise.
	Breaker breaker.Snapshot
	// Load is the latest load report (budget.Load) on the call's attempts
	// (zero: none; a hedged call's are not read); EventEnd has none.
	Load budget.Load
	// Disabled: the switch was on when the call started (SetDisabled):
	// stagger sent it once, and Reason is policy.ReasonDisabled whatever
	// its Code. A call the switch ended while it ran has that Reason, not
	// Disabled. A call with Disable has one attempt, that Reason, its Code
	// (when grpc finishes it), Target and Criticality, and nothing else.
	Disabled bool
}

// String is the Report in one line, naming only what happened; "" for a
// zero Report (written by callwords.Report, which mirrors its fields).
func (r Report) String() string { return callwords.Report(r).String(DisableEnv) }

// WithReport fills r in when the call ends; meant per call. r must stay
// untouched until the call returns (a stream: until it ends); the
// interceptor writes it once, on the goroutine that ends the call.
func WithReport(r *Report) Option {
	return Option{apply: func(o *options) { o.report = r }}
}

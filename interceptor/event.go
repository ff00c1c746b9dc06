package interceptor

import (
	"context"
	"time"

	"github.com/stagger-go/stagger/breaker"
	"github.com/stagger-go/stagger/budget"
	"github.com/stagger-go/stagger/criticality"
	"github.com/stagger-go/stagger/internal/fence"
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
	// method names cannot grow its memory); WithLogger says where it is logged.
	EventNotice
	// EventHedge: a hedge (Attempt, 2 or more) is sent, Pause after the
	// attempt before it; Code and Err are the non-fatal failure that sent it
	// early, if any; Pushback: it waited the server's pushback.
	EventHedge
	// EventHedgeStop: no further hedge is sent for the call (Attempt is the
	// hedge not sent); Reason says why. What follows: UnaryClientInterceptor.
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
	// EventRetry otherwise.
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

// Event is what hooks receive. Each hook gets its own copy, which it may
// keep and read from any goroutine; nothing writes it after the hook.
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
	// Pause is the pause before the next attempt (EventRetry, EventResume;
	// EventDeferred: at least), or since the attempt before (EventHedge).
	Pause time.Duration
	// Pushback: Pause is the server's pushback.
	Pushback bool
	// Reason: as the event's kind says; ReasonNone for EventRetry.
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
	// Target: as Report.Target (or the front end's), in every event of a call.
	Target string
	// CanonicalTarget is grpc.ClientConn.CanonicalTarget, as gRFC A66's
	// grpc.target records it; Target for a front end without a ClientConn.
	// EventEnd only.
	CanonicalTarget string
	// StaticMethod: the call carried grpc.StaticMethodCallOption, as
	// generated code does; grpc-go's OpenTelemetry plugin records the
	// method of a call without it as "other".
	StaticMethod bool
	// Budget: as Report.Budget, in EventDeferred and such an EventGiveUp.
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

// emit fills in what every event of c carries, and emits it.
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

// emit runs the hooks and the logger; the caller holds no lock.
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

// RecoveredPanics returns the number of panics of user code recovered in
// the process (the package doc lists where user code is fenced).
func RecoveredPanics() int64 { return fence.Panics() }

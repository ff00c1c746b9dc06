// Package callwords holds the words in which package interceptor's errors
// and Reports say how a call ended: why stagger gave up, why a retry that
// waited in the Gate was not admitted, and a Report in one line.
package callwords

import (
	"cmp"
	"fmt"
	"strings"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/stagger-go/stagger/breaker"
	"github.com/stagger-go/stagger/budget"
	"github.com/stagger-go/stagger/criticality"
	"github.com/stagger-go/stagger/policy"
)

// Ambiguous: the status alone (UNAVAILABLE, a code the file may list) does
// not say that the call was not retried on purpose, nor what to do.
const Ambiguous = "not retried: the request may have run on the server, which sent no status, " +
	"and the method is not known to be idempotent (mark it idempotent or send an idempotency key)"

// giveUp says why stagger gave up, by reason; a reason it lacks is no
// give-up (interceptor.Error.GaveUp).
var giveUp = map[policy.Reason]string{
	policy.ReasonAttempts:       "max retries exhausted", // grpc-go's words (stream.go, shouldRetry)
	policy.ReasonBudget:         "retry budget spent",
	policy.ReasonDeferred:       Deferred("", ""),
	policy.ReasonOutage:         "backend down past the longest wait",
	policy.ReasonBreaker:        "circuit breaker open",
	policy.ReasonThrottled:      "throttled by the client",
	policy.ReasonDeadline:       "no retry fits before the deadline",
	policy.ReasonPushback:       "the server's pushback says stop",
	policy.ReasonRetriedRequest: "the request being served is a retry: retried at one layer",
	policy.ReasonAmbiguous:      Ambiguous,
}

// GiveUp says why stagger gave up for reason r; "" when r is no give-up.
func GiveUp(r policy.Reason) string { return giveUp[r] }

// The words of the Gate's rules that end a wait and hold it (Report.WaitEnd,
// HeldBy); the others are named as they are.
var (
	waitEndWords = map[string]string{
		"hold":     "retry deferred, not let go after its pause (the Gate's hold rule)",
		"hopeless": "retry deferred, none could finish before the deadline (the Gate's hopeless rule)",
		"max-wait": "retry deferred the longest a call without a deadline waits (defer.maxWait)",
	}
	heldByWords = map[string]string{
		"outage":   ", held by the Gate's outage rule (the backend is down)",
		"overload": ", held by the Gate's overload rule (most attempts refused for overload or slow)",
		"breaker":  ", held by the open circuit breaker",
	}
)

// Deferred says why a retry that waited in the Gate was not admitted.
func Deferred(waitEnd, held string) string {
	s, ok := waitEndWords[waitEnd]
	if !ok {
		s = "retry deferred, no admission before the deadline"
	}
	if h, ok := heldByWords[held]; ok {
		return s + h
	}
	if held != "" {
		return s + ", held by the Gate's " + held + " rule"
	}
	return s
}

// Report is interceptor.Report's fields, in its order, so that one
// converts to the other (its doc says what each means).
type Report struct {
	Attempts        int
	Retries, Hedges int
	Delay, Pushback time.Duration
	Deferred        time.Duration
	WaitEnd         string
	HeldBy          string
	Reason          policy.Reason
	Code            codes.Code
	Criticality     criticality.Level
	TimerRefused    int
	TimerReason     policy.Reason
	Target          string
	Budget          budget.State
	Breaker         breaker.Snapshot
	Load            budget.Load
	Disabled        bool
}

// String is the Report in one line, naming only what happened; "" for a
// zero Report. disableEnv is the switch's environment variable.
func (r Report) String(disableEnv string) string {
	if r == (Report{}) {
		return ""
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%d attempts", r.Attempts)
	switch {
	case r.Retries > 0:
		fmt.Fprintf(&b, " (%d retries)", r.Retries)
	case r.Hedges > 0:
		fmt.Fprintf(&b, " (%d hedges)", r.Hedges)
	}
	fmt.Fprintf(&b, ", ended: %s, code %s", r.Reason, r.Code)
	if r.Target != "" {
		fmt.Fprintf(&b, ", backend %s", r.Target)
	}
	if s := r.Budget; s.Kind != "" {
		b.WriteString(" (")
		if s.Health != "" {
			fmt.Fprintf(&b, "its Gate sees it %s, ", cmp.Or(healthWords[s.Health], s.Health))
		}
		fmt.Fprintf(&b, "budget %.1f of %.0f", s.Level, s.Capacity)
		if s.Waiting > 0 {
			fmt.Fprintf(&b, ", %d calls waiting", s.Waiting)
		}
		b.WriteString(")")
	}
	if r.Breaker.Key != "" {
		fmt.Fprintf(&b, " (breaker %s, %d of %d first attempts failed in its window", r.Breaker.State, r.Breaker.Failures, r.Breaker.Requests)
		if r.Breaker.ThrottleP > 0 {
			fmt.Fprintf(&b, ", throttling %.0f%% of first attempts", 100*r.Breaker.ThrottleP)
		}
		b.WriteString(")")
	}
	if r.Load.Reported {
		fmt.Fprintf(&b, ", backend reports %.0f%% utilization", 100*r.Load.Utilization)
	}
	if r.Delay > 0 {
		fmt.Fprintf(&b, ", paused %v", r.Delay)
	}
	var parts []string
	if r.Pushback > 0 {
		parts = append(parts, fmt.Sprintf("%v by the server's pushback", r.Pushback))
	}
	if r.Deferred > 0 {
		parts = append(parts, fmt.Sprintf("%v waiting in the Gate", r.Deferred))
	}
	if r.WaitEnd != "" {
		w := "wait ended: " + r.WaitEnd
		if r.HeldBy != "" {
			w += ", held by the " + r.HeldBy + " rule"
		}
		parts = append(parts, w)
	}
	if len(parts) > 0 {
		b.WriteString(" (" + strings.Join(parts, "; ") + ")")
	}
	if r.Disabled {
		b.WriteString(", stagger switched off (" + disableEnv + ", SetDisabled or the policy file's \"disabled\"): one attempt, no wait")
	}
	if r.Criticality.Valid() {
		fmt.Fprintf(&b, ", criticality %s", r.Criticality)
	}
	if r.TimerRefused > 0 {
		fmt.Fprintf(&b, ", %d attempts ran past their timeout (%s refused the retry)", r.TimerRefused, r.TimerReason)
	}
	return b.String()
}

// healthWords says the Gate's health in a Report; failing and recovering say themselves.
var healthWords = map[string]string{"quiet": "healthy", "outage": "down"}

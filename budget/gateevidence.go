package budget

import (
	tune "github.com/stagger-go/stagger/internal/gatetune"
	"math/bits"
	"time"
)

// evidence is what a Gate has learnt of the server, for the heal,
// overload, outage and hopeless rules. Owned by the gate's lock.
type evidence struct {
	// lastRetry is when a retry last reached the server.
	lastRetry time.Time
	// calls holds the outcomes of the latest tune.HealWindow calls that
	// retried and ended, bit 0 the latest (1: healed), below a marker bit
	// that counts them (zero: none yet).
	calls uint16
	// retryOut: a retry the budget paid for is out until then, unless its
	// attempt is recorded first.
	retryOut time.Time
	// retryFails counts the retries that failed since an attempt last
	// succeeded; seen: an attempt ever succeeded.
	retryFails int
	seen       bool
	// An attempt failed for overload, or one succeeded slowly, until
	// overloadUntil and slowUntil.
	overloadUntil, slowUntil time.Time
	// lastFail is when the latest streak of failures a success ended
	// last reached the server (at first, the start).
	lastFail time.Time
	// runs is how many failures in a row the server's flakiness makes: the
	// longest streak a success ended, decaying by tune.RunDecay.
	runs float64
	// okTook is how long the latest deferred retry that succeeded took,
	// at okAt.
	okTook time.Duration
	okAt   time.Time
}

// learn keeps what a says of whether retries heal and of overload; it
// changes no phase.
func (e *evidence) learn(now time.Time, a Attempt) {
	if a.Overload {
		// A slow success holds timeout retries back; a failure for
		// overload, retries that heal too (the overload rule).
		e.slowUntil = now.Add(tune.OverloadHold)
		if a.Outcome != Success {
			e.overloadUntil = e.slowUntil
		}
	}
	if a.Number > 1 && !a.Hedge {
		e.retryOut = time.Time{}
	}
	if a.Number > 1 && !a.Hedge && (a.Outcome == Success || a.Outcome == Failure) {
		e.lastRetry = now
		if a.Outcome == Failure {
			e.retryFails++
		}
		// A call's outcome, once: a failed retry with attempts left says
		// nothing yet, so the evidence does not depend on which retries
		// the gate lets go.
		if a.Outcome == Success || a.Final {
			e.called(a.Outcome == Success)
		}
	}
	if a.Outcome == Success {
		e.retryFails, e.seen = 0, true
	}
}

// ended: a success ended a streak of n failures in a row.
func (e *evidence) ended(n int) {
	if n > 0 {
		e.runs = max(float64(n), e.runs*tune.RunDecay)
	}
}

// beyond reports whether a streak of n failures is longer than the
// server's flakiness makes: a flaky server that goes down is down.
func (e *evidence) beyond(n int) bool {
	return e.seen && float64(n) >= 2*e.runs+tune.OutageStreak
}

// called: a call that retried ended, healed or not.
func (e *evidence) called(healed bool) {
	n, c := e.callsN(), max(e.calls, 1)<<1
	if healed {
		c |= 1
	}
	if n == tune.HealWindow {
		c = c&(1<<tune.HealWindow-1) | 1<<tune.HealWindow
	}
	e.calls = c
}

// callsN is how many calls that retried and ended are kept.
func (e *evidence) callsN() int { return max(bits.Len16(e.calls)-1, 0) }

// healed is how many of them healed.
func (e *evidence) healed() int { return max(bits.OnesCount16(e.calls)-1, 0) }

// heals reports whether the heal rule applies: no recent overload, and
// enough of the latest calls that retried healed; or, until calls say,
// an attempt succeeded and not tune.HealMinSamples retries failed since.
func (e *evidence) heals(now time.Time) bool {
	if e.overloaded(now) {
		return false
	}
	if !e.callsKnown() {
		return e.seen && e.retryFails < tune.HealMinSamples
	}
	won := e.healed()
	return won > 0 && float64(won) >= tune.HealMinShare*float64(e.callsN())
}

// healsServing is heals for a server that serves (nothing failed since a
// success): what the calls said goes stale tune.HealStale after the latest
// streak of failures ended (a server back from an outage must not keep the
// outage's evidence, whatever retries it serves since).
func (e *evidence) healsServing(now time.Time) bool {
	if e.callsKnown() && now.Sub(e.lastFail) > tune.HealStale && !e.overloaded(now) {
		return e.seen && e.retryFails < tune.HealMinSamples
	}
	return e.heals(now)
}

// callsKnown reports whether the calls say whether retrying heals.
func (e *evidence) callsKnown() bool {
	return e.callsN() >= tune.HealMinSamples || e.healed() > 0
}

// untold reports whether no retry has told anything yet, nor is about to:
// while a paid retry is out, another would only probe what it will tell
// (at p = 1 and a thousand processes, each sent such probes beside its
// one paid retry).
func (e *evidence) untold(now time.Time) bool {
	return e.retryFails == 0 && e.calls <= 1 && !now.Before(e.retryOut)
}

// known reports whether the process knows whether retrying heals.
func (e *evidence) known() bool {
	return e.callsKnown() || e.retryFails >= tune.HealMinSamples
}

// down reports whether the process knows that retries do not heal (a
// fresh process gives a retry its chance first).
func (e *evidence) down(now time.Time) bool {
	return !e.heals(now) && (e.callsN() >= tune.HealMinSamples && e.healed() == 0 || e.retryFails >= tune.HealMinSamples)
}

func (e *evidence) overloaded(now time.Time) bool {
	return now.Before(e.overloadUntil)
}

// succeeded: a deferred retry succeeded now after took.
func (e *evidence) succeeded(now time.Time, took time.Duration) {
	e.okTook, e.okAt = took, now
}

// retryTakes is how long a retry of w takes by the evidence (zero:
// unknown): its method's latest attempt, or the latest deferred retry
// that succeeded within tune.OverloadHold when longer.
func (e *evidence) retryTakes(now time.Time, w *waiterView) time.Duration {
	took := w.took
	if now.Before(e.okAt.Add(tune.OverloadHold)) {
		took = max(took, e.okTook)
	}
	return took
}

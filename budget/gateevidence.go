package budget

import (
	tune "github.com/stagger-go/stagger/internal/gatetune"
	"math/bits"
	"time"
)

// evidence is what a Gate has learnt of the server: whether retrying heals
// the calls that retried (the heal rule), whether it is overloaded (the
// overload rule), whether it looked healthy before a streak of failures
// (the outage rule), and how long a deferred retry that succeeded took
// (the hopeless rule). Its fields are owned by the gate's lock.
type evidence struct {
	// lastRetry is when a retry last reached the server.
	lastRetry time.Time
	// healBits holds the outcomes of the latest healN calls that retried
	// and ended (bit 0 the latest; 1: a retry succeeded, 0: the final one
	// failed).
	healBits uint8
	healN    int
	// callAt is when the latest call that retried ended.
	callAt time.Time
	// retryFails counts the retries that failed since an attempt last
	// succeeded; seen: an attempt ever succeeded.
	retryFails int
	seen       bool
	// An attempt failed for overload, or one succeeded slowly, until
	// overloadUntil and slowUntil.
	overloadUntil, slowUntil time.Time
	// lastFail is when an attempt last failed (at first, when the first
	// was recorded); healthy: the streak of failures began after a
	// success and tune.HealthyGap without failures.
	lastFail time.Time
	healthy  bool
	// runs is the longest streak of failures that a success ended,
	// decaying by tune.RunDecay with each such streak: how many failures in a
	// row the server's flakiness makes.
	runs float64
	// okTook is how long the latest deferred retry that succeeded took
	// (Attempt.Took), at okAt.
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
	if a.Number > 1 && !a.Hedge && (a.Outcome == Success || a.Outcome == Failure) {
		e.lastRetry = now
		if a.Outcome == Failure {
			e.retryFails++
		}
		// A call's outcome, once: healed by the retry that succeeded,
		// or not by the final one that failed. A failed retry with
		// attempts left says nothing yet, so the evidence does not
		// depend on which retries the gate lets go.
		if a.Outcome == Success || a.Final {
			e.healBits <<= 1
			if a.Outcome == Success {
				e.healBits |= 1
			}
			e.healN = min(e.healN+1, tune.HealWindow)
			e.callAt = now
		}
	}
	if a.Outcome == Success {
		e.retryFails, e.seen = 0, true
	}
}

// failed: an attempt failed now, the first of a streak when first. A
// streak counts towards an outage only when the server looked healthy
// before it.
func (e *evidence) failed(now time.Time, first bool) {
	if first {
		e.healthy = e.seen && now.Sub(e.lastFail) >= tune.HealthyGap
	}
	e.lastFail = now
}

// ended: a success ended a streak of n failures in a row.
func (e *evidence) ended(n int) {
	if n > 0 {
		e.runs = max(float64(n), e.runs*tune.RunDecay)
	}
}

// beyond reports whether a streak of n failures in a row is longer than
// the server's flakiness makes them: more than twice its longest recent
// run, plus tune.OutageStreak. A server that fails a share of its attempts
// all along and then goes down is down, not flaky.
func (e *evidence) beyond(n int) bool {
	return e.seen && float64(n) >= 2*e.runs+tune.OutageStreak
}

// healed is how many of the latest healN calls that retried were healed.
func (e *evidence) healed() int {
	return bits.OnesCount8(e.healBits & uint8(1<<e.healN-1))
}

// heals reports whether the heal rule lets retries go after their pause,
// when no failure for overload is recent: of the latest calls that retried
// and ended, at least tune.HealMinShare were healed; or, until calls say
// (callsKnown), the server served an attempt and not tune.HealMinSamples
// retries in a row failed since.
func (e *evidence) heals(now time.Time) bool {
	if e.overloaded(now) {
		return false
	}
	if !e.callsKnown() {
		return e.seen && e.retryFails < tune.HealMinSamples
	}
	won := e.healed()
	return won > 0 && float64(won) >= tune.HealMinShare*float64(e.healN)
}

// healsServing is heals for a server that serves: nothing failed since an
// attempt succeeded. What the calls that retried said goes stale
// tune.HealStale after the latest of them ended: a server back from an outage
// that serves every attempt retries no call, and must not keep the
// outage's evidence that retries do not heal.
func (e *evidence) healsServing(now time.Time) bool {
	if e.callsKnown() && now.Sub(e.callAt) > tune.HealStale && !e.overloaded(now) {
		return e.seen && e.retryFails < tune.HealMinSamples
	}
	return e.heals(now)
}

// callsKnown reports whether the calls that retried say whether retrying
// heals: one was healed, or tune.HealMinSamples ended.
func (e *evidence) callsKnown() bool {
	return e.healN >= tune.HealMinSamples || e.healed() > 0
}

// untold reports whether no retry has told anything of whether retrying
// heals: none failed, and no call that retried ended.
func (e *evidence) untold() bool { return e.retryFails == 0 && e.healN == 0 }

// known reports whether the process knows whether retrying heals: the
// calls say, or the latest tune.HealMinSamples retries failed and nothing
// succeeded since.
func (e *evidence) known() bool {
	return e.callsKnown() || e.retryFails >= tune.HealMinSamples
}

// down reports whether the process knows that retries do not heal: they do
// not heal, and none of the latest calls that retried (tune.HealMinSamples at
// least) was healed, or the latest tune.HealMinSamples retries failed with
// nothing succeeding since. A fresh process does not take a flaky server
// for a down one before a retry had its chance, nor does one whose retries
// heal some calls, fewer than tune.HealMinShare.
func (e *evidence) down(now time.Time) bool {
	return !e.heals(now) && (e.healN >= tune.HealMinSamples && e.healed() == 0 || e.retryFails >= tune.HealMinSamples)
}

// overloaded reports whether an attempt failed for overload within
// tune.OverloadHold.
func (e *evidence) overloaded(now time.Time) bool {
	return now.Before(e.overloadUntil)
}

// succeeded: a deferred retry (admitted by the gate) succeeded now after
// took; the hopeless rule reads it for tune.OverloadHold.
func (e *evidence) succeeded(now time.Time, took time.Duration) {
	e.okTook, e.okAt = took, now
}

// retryTakes is how long a retry of a wait w takes by the evidence at now:
// its method's latest attempt (Request.Took), or the latest deferred retry
// that succeeded within tune.OverloadHold when longer (zero: unknown).
func (e *evidence) retryTakes(now time.Time, w *waiterView) time.Duration {
	took := w.took
	if now.Before(e.okAt.Add(tune.OverloadHold)) {
		took = max(took, e.okTook)
	}
	return took
}

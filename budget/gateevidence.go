package budget

import (
	"math/bits"
	"time"

	tune "github.com/stagger-go/stagger/internal/gatetune"
)

// evidence is what a Gate has learnt of the server, for the heal,
// overload, outage and hopeless rules.
type evidence struct {
	// calls holds the outcomes of the latest tune.HealWindow calls that
	// retried and ended, bit 0 the latest (1: healed), below a marker bit
	// that counts them (zero: none yet).
	calls uint16
	// retryFails counts the retries that failed since an attempt last
	// succeeded; seen: an attempt ever succeeded.
	retryFails int
	seen       bool
	// lastRetry is when a retry last reached the server; retryOut, until
	// when one the budget paid for is out (unless recorded first).
	lastRetry, retryOut time.Time
	// Until signUntil an attempt failed for overload lately (the overload
	// rule's strain: no retry heals unpaid), until slowUntil one did or
	// succeeded slowly; signs holds whether each attempt recorded since
	// the strain began (at most the latest tune.OverloadWindow, bit 0 the
	// latest) was a sign of overload, below a marker bit that counts them.
	signUntil, slowUntil time.Time
	signs                uint64
	// Until heldUntil a failure for overload came without a pushback
	// during a return (gateState.observe): it holds retries by itself.
	heldUntil time.Time
	// short is the share of the backend's room for retries that its
	// answers say is gone (the overload rule's estimate, zero at a
	// strain's start): a failure for overload without a pushback halves
	// what is left, once per attempt time (only an attempt that began
	// after the latest cut, at cutAt, cuts: the others met the same
	// load), and each success gives tune.RoomCut*(1-tune.RoomCut) back.
	short float64
	cutAt time.Time
	// lastFail is when the latest streak of failures that a success ended
	// last reached the server (at first, the start).
	lastFail time.Time
	// runs is how many failures in a row the server's flakiness makes: the
	// longest streak a success ended, decaying by tune.RunDecay.
	runs float64
	// learnNext is the number of the retry that goes on learning, and
	// learnCall its call (Attempt.Call), until learnUntil, after a probe
	// with attempts left failed at a server never seen to serve (the hold
	// rule): another call's retry of the same number is not it, and
	// another call's failed retry does not take the turn while it is
	// taken (learn); zero: none, or its wait ended (hasTurn).
	learnNext  int
	learnCall  uint64
	learnUntil time.Time
	// okTook is how long the latest deferred retry that succeeded took, at
	// okAt.
	okTook time.Duration
	okAt   time.Time
}

// learn keeps what a says of whether retries heal and of overload. It
// writes e in place, where the pacer's transitions return a new value:
// copying the evidence (about 250 bytes) cost 18 ns a Record, 13 %.
func (e *evidence) learn(now time.Time, a Attempt) {
	if a.Overload {
		// A slow success holds timeout retries back; a failure for
		// overload, retries that heal too, and starts counting what
		// share of attempts are signs of it (the overload rule).
		e.slowUntil = now.Add(tune.OverloadHold)
		if a.Outcome != Success {
			if !e.strained(now) {
				e.signs, e.short, e.cutAt = 0, 0, time.Time{}
			}
			e.signUntil = e.slowUntil
			if !a.Pushback && !now.Add(-a.Took).Before(e.cutAt) {
				e.short, e.cutAt = 1-(1-e.short)*tune.RoomCut, now
			}
		}
	}
	if e.strained(now) {
		e.signs = pushed(e.signs, tune.OverloadWindow, a.Overload)
	}
	if a.Number > 1 && !a.Hedge {
		e.retryOut = time.Time{}
		if a.Outcome == Success || a.Outcome == Failure {
			e.lastRetry = now
			// A probe with attempts left, at a server never seen to
			// serve, says nothing yet of whether retries heal: its
			// call's next attempt goes on learning (the hold rule's
			// probe went on a call's second attempt of three, failed,
			// and made retries known to fail at a server that serves
			// every third: lab flaky-quiet failed every call in 3 runs
			// of 6). Any other retry that failed counts.
			if a.Outcome == Failure && (e.seen || a.Final || a.Admission != admitProbe) {
				e.retryFails++
			}
			switch {
			case a.Outcome != Failure:
			case e.seen || a.Final:
				e.learnNext = 0
			case e.learnNext != 0 && a.Call != e.learnCall && now.Before(e.learnUntil):
				// Another call learns (it has the turn, and its time has
				// not run out): the turn stays its own until its call
				// ends (taken over, its wait ended at its hold time, and
				// each paid retry that failed took the turn again).
			case a.Admission != admitProbe:
				// A retry not sent to learn (the budget paid for it)
				// failed after its call's first attempt: the evidence of
				// an outage. Its call goes on as the one that learns,
				// held (the hold rule), for the longest probe gap at
				// most; the others' waits end (a fleet of fresh
				// processes each sending such a call's every attempt
				// pays that per process: BENCHMARKS.md, A fleet of any
				// size).
				e.learnNext, e.learnCall, e.learnUntil = a.Number+1, a.Call, now.Add(tune.ProbeGapMax)
			default:
				e.learnNext, e.learnCall, e.learnUntil = a.Number+1, a.Call, now.Add(tune.QuietGapMax)
			}
			// A call's outcome, once: a failed retry with attempts left
			// says nothing yet, so the evidence does not depend on which
			// retries the gate lets go.
			if a.Outcome == Success || a.Final {
				e.calls = uint16(pushed(uint64(e.calls), tune.HealWindow, a.Outcome == Success))
			}
		}
	}
	if a.Outcome == Success {
		e.short = max(e.short-tune.RoomCut*(1-tune.RoomCut), 0)
		e.retryFails, e.seen = 0, true
	}
}

// hasTurn reports whether call's retry number is the one that goes on
// learning: when its wait ends without going, the turn is free
// (Gate.moveLocked), for that call learns no more.
func (e *evidence) hasTurn(number int, call uint64) bool {
	return e.learnNext != 0 && number == e.learnNext && call == e.learnCall
}

// pushed is the window w (its bits below a marker bit that counts them,
// bit 0 the latest; zero: empty) with b added as the latest, keeping the
// latest n.
func pushed(w uint64, n int, b bool) uint64 {
	c := max(w, 1) << 1
	if b {
		c |= 1
	}
	if bits.Len64(c)-1 > n {
		c = c&(1<<n-1) | 1<<n
	}
	return c
}

// runsAfter is runs once a success ended a streak of n failures in a row
// (n > 0).
func (e *evidence) runsAfter(n int) float64 { return max(float64(n), e.runs*tune.RunDecay) }

// callsN is how many calls that retried and ended are kept; healed, how
// many of them healed.
func (e *evidence) callsN() int { return max(bits.Len16(e.calls)-1, 0) }
func (e *evidence) healed() int { return max(bits.OnesCount16(e.calls)-1, 0) }

// heals reports whether the heal rule applies: no recent sign of overload, and
// enough of the latest calls that retried healed; or, until calls say,
// an attempt succeeded and not tune.Evidence retries failed since.
// For a server that serves (stale), what the calls said goes stale
// tune.Calm after the latest streak of failures ended: back from an
// outage, it must not keep the outage's evidence.
func (e *evidence) heals(now time.Time, stale bool) bool {
	if e.strained(now) {
		return false
	}
	if !e.callsKnown() || stale && now.Sub(e.lastFail) > tune.Calm {
		return e.seen && e.retryFails < tune.Evidence
	}
	return e.healed() > 0 && float64(e.healed()) >= tune.HealMinShare*float64(e.callsN())
}

// callsKnown reports whether the calls say whether retrying heals; known,
// whether the process knows it.
func (e *evidence) callsKnown() bool { return e.callsN() >= tune.Evidence || e.healed() > 0 }
func (e *evidence) known() bool      { return e.callsKnown() || e.retryFails >= tune.Evidence }

// untold reports whether no retry has told anything yet, nor is about to:
// while a paid retry is out, another would only probe what it will tell.
func (e *evidence) untold(now time.Time) bool {
	return e.retryFails == 0 && e.calls <= 1 && !now.Before(e.retryOut)
}

// strained reports whether an attempt failed for overload within
// tune.OverloadHold; overloaded, whether, besides, tune.RoomCut of the
// room for retries or more is gone (failures for overload without a
// pushback took it and successes did not give it back yet), one came
// during a return within tune.OverloadHold (heldUntil), or more than
// tune.OverloadShare of the attempts since (of the latest
// tune.OverloadWindow, counted as at least that many) were
// signs of it: a backend that tells when to retry and still serves most
// attempts is not overloaded (the overload rule).
func (e *evidence) strained(now time.Time) bool { return now.Before(e.signUntil) }
func (e *evidence) overloaded(now time.Time) bool {
	return e.strained(now) && (now.Before(e.heldUntil) || e.short >= tune.RoomCut ||
		float64(bits.OnesCount64(e.signs)-1) > tune.OverloadShare*float64(max(bits.Len64(e.signs)-1, tune.OverloadWindow)))
}

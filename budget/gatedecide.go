package budget

import (
	"time"

	"github.com/stagger-go/stagger/internal/clock"
	tune "github.com/stagger-go/stagger/internal/gatetune"
)

// admitEnd is a decision's answer for a wait that ends without admission
// (decision.end says by which rule); never an Attempt's.
const admitEnd Admission = 255

// decision is what the rules say of one waiting retry at one moment: how it
// goes now (before its guard and the budget are asked; admitEnd: its wait
// ends, by the rule end), or AdmitNone with next, when asking again could
// change the answer without news (zero: only news will); hold: the wait is
// held from now on (the hold rule, or an open guard); own, with AdmitNone,
// the retry's own time (a call held through an outage goes back no sooner
// than backAfter) when it has not come: whatever the pacer says, the retry
// waits for it, so the grant loop keys it by that alone, not by the
// pacer's time that news moves. (In an outage: its pause after the latest
// that reached the backend, or its last chance, when that binds.)
type decision struct {
	how  Admission
	next time.Time
	own  time.Time
	hold bool
	end  *waitEnd
	// heldBy names the rule that holds the wait, with hold.
	heldBy string
}

// decide is the rules' decision for the waiting retry w at now. While its
// guard is open (as it was when last asked) the guard says when the retry
// goes, as the gate's probe once the pacer's lease is free, and the gate
// holds the wait (the guard rule). It changes nothing: the grant loop
// applies it.
func (s *gateState) decide(now time.Time, w *waiterView) decision {
	end, why := s.endAt(now, w)
	switch {
	case ended(now, end):
		return decision{how: admitEnd, end: why}
	case now.Before(w.earliest):
		return decision{next: clock.Earlier(w.earliest, end)} // its pause
	}
	d := s.decideRules(now, w, end)
	switch {
	case !w.guardOpen || d.how != AdmitNone && d.how != admitEnd:
		return d
	case s.pace.leased(now):
		return decision{next: clock.Earlier(s.pace.until, end), hold: true, heldBy: heldGuard}
	}
	return decision{how: admitProbe, hold: true, heldBy: heldGuard}
}

// endAt is when w's wait ends, whatever else happens, and by which rule:
// the hopeless rule's time, when a retry taking as long as its method's
// latest attempt, or the latest deferred retry that succeeded (within
// tune.OverloadHold) when longer, would no longer finish before the
// deadline; else its limit, tune.WaitSlack before its deadline (no retry
// starts with less), or DeferSettings.MaxWait after it began without
// one (zero: never, a view without either). The one piece of arithmetic
// by which a wait ends (the hold rule ends it by its own time, holdAt); a
// last chance goes lead before the deadline (lastChanceAt).
func (s *gateState) endAt(now time.Time, w *waiterView) (time.Time, *waitEnd) {
	if w.deadline.IsZero() {
		return w.limit, errWaitLimit
	}
	limit := w.deadline.Add(-tune.WaitSlack)
	if took := max(w.took, s.tookNow(now)); took > tune.WaitSlack {
		return w.deadline.Add(-took).Add(1), errHopeless
	}
	return limit, errDeadline
}

// ended reports whether a wait that ends at end (zero: never) ended by now.
func ended(now, end time.Time) bool { return !end.IsZero() && !now.Before(end) }

// lastChanceAt is when w, whose call has a deadline, goes as its last
// chance: lead before the deadline.
func (w *waiterView) lastChanceAt(lead time.Duration) time.Time { return w.deadline.Add(-lead) }

// tookNow is the latest deferred retry that succeeded's time, within
// tune.OverloadHold of it (else 0): the hopeless rule's floor.
func (s *gateState) tookNow(now time.Time) time.Duration {
	if now.Before(s.ev.okAt.Add(tune.OverloadHold)) {
		return s.ev.okTook
	}
	return 0
}

func (s *gateState) decideRules(now time.Time, w *waiterView, endAt time.Time) decision {
	held := w.held
	// The heal rule, but during a return: then every waiting retry goes at
	// the return's pace, one that began to wait just before it too (those
	// went at once: a fleet's 20 processes sent 35 in the return's first
	// 100 ms, 1.13-1.21x the capacity; 1.04-1.08x without).
	if !held && s.phase != phaseOutage && s.pace.backAt.IsZero() && s.ev.heals(now, false) {
		return decision{how: admitHeal}
	}
	if !held && !now.Before(w.holdAt) {
		if s.phase != phaseOutage && !s.ev.overloaded(now) {
			// The hold rule: a probe, or the end of the wait. A process
			// that no retry told anything probes too, and so does one
			// that does not know yet whether retries heal, one call at
			// a time: else one whose budget refuses its retries never
			// learns that they heal (issue 62's quiet process).
			if !s.ev.seen && now.Before(s.ev.retryOut) {
				// A paid retry is out: wait for what it tells.
				return decision{next: clock.Earlier(s.ev.retryOut, endAt)}
			}
			learn := s.ev.seen || s.ev.untold(now) || s.ev.learns(now, w.number)
			if learn && !s.pace.leased(now) {
				return decision{how: admitProbe}
			}
			return decision{how: admitEnd, end: errWaitEnded}
		}
		held = true
	}
	d := decision{hold: held && !w.held}
	if d.hold {
		d.heldBy = heldOverload
		if s.phase == phaseOutage {
			d.heldBy = heldOutage
		}
	}
	if d.how, d.next, d.own = s.decideByPhase(now, w, held); d.how == AdmitNone {
		if !held {
			d.next = clock.Earlier(d.next, w.holdAt)
		}
		d.next = clock.Earlier(d.next, endAt)
	}
	return d
}

// decideByPhase is the release rule while the server serves, the probe and
// last-chance rules while it fails. With AdmitNone it says when to ask
// again, and own, the retry's own time that has not come (its back time
// after an outage; zero: none).
func (s *gateState) decideByPhase(now time.Time, w *waiterView, held bool) (how Admission, next, own time.Time) {
	if !s.phase.failing() {
		next := s.pace.next
		if s.pace.heldThrough(w, held) {
			if back := s.pace.backAfter(w); now.Before(back) {
				own = back
			}
			next = clock.Later(next, own)
		}
		if !now.Before(next) {
			return admitRelease, time.Time{}, time.Time{}
		}
		return AdmitNone, next, own
	}
	if s.pace.leased(now) {
		return AdmitNone, s.pace.until, time.Time{} // the settling rule
	}
	if w.lone {
		return admitProbe, time.Time{}, time.Time{} // the futility rule's lone probe
	}
	// Until retries are known to heal or not, a failed first attempt says
	// nothing: only retries' own outcomes space the probes, and only a
	// call's last attempt probes (its outcome settles the call), or any
	// retry while none has told anything yet.
	reached, known := s.lastReached, s.ev.known()
	if !known {
		reached = s.ev.lastRetry
	}
	// mine: when w's own part of due (its pause after the latest that
	// reached the backend, its last chance) comes; the rest is the
	// pacer's (the probe gap), shared by every waiter. In an outage,
	// until mine, w is held back by itself: own (the grant loop puts
	// such waiters back in the heads when the outage begins or ends).
	how, due, mine := AdmitNone, time.Time{}, time.Time{}
	if known && (!w.last || w.deadline.IsZero()) || !known && (w.last || s.ev.untold(now)) {
		how, due, mine = admitProbe, reached.Add(max(w.pause, s.pace.gap)), reached.Add(w.pause)
	} else if !known && held {
		// With no news the estimate goes back to unknown: once nothing
		// reached the backend for the probe gap and tune.QuietLulls
		// times the latest interval between its answers, any held retry goes
		// to learn, one at a time (a burst that ended the load left held
		// retries no success would ever release; one not held goes by
		// the hold rule).
		how, due, mine = admitProbe, s.lastReached.Add(max(w.pause, s.pace.gap, tune.QuietLulls*s.lull)), s.lastReached.Add(w.pause)
	}
	if !w.deadline.IsZero() {
		lastMine := clock.Later(w.lastChanceAt(s.pace.lead()), reached.Add(w.pause))
		last := clock.Later(lastMine, s.pace.failedAt.Add(s.pace.gap))
		if s.phase == phaseOutage && !s.pace.failedAt.Before(s.streakAt) {
			// A last chance is a probe: once one failed in this outage,
			// the next waits for the probe gap after the latest that
			// reached the backend too, so a long outage's failed calls
			// retry one at a time between the new calls' failures, not
			// each at its deadline (the first still goes: until a retry
			// fails in it, failed first attempts say nothing of retries).
			last = clock.Later(last, reached.Add(s.pace.gap))
		}
		if how == AdmitNone || last.Before(due) {
			how, due, mine = admitLast, last, lastMine
		}
	}
	if now.Before(due) {
		if s.phase != phaseOutage || !now.Before(mine) {
			return AdmitNone, due, time.Time{}
		}
		// Within the outage nothing brings due sooner (the latest that
		// reached the backend and the gap only grow): due is w's own.
		return AdmitNone, due, due
	}
	return how, time.Time{}, time.Time{}
}

package budget

import (
	"time"

	"github.com/stagger-go/stagger/internal/clock"
)

// rule names a Gate's rule (see Gate): the one that decided, in a
// decision, and the names `stagger check` prints.
type rule uint8

const (
	ruleNone rule = iota
	ruleHeal
	ruleProbe
	ruleLastChance
	ruleRelease
	ruleGuard
	ruleOutage
	ruleOverload
	ruleHold
	ruleHopeless
	ruleSettling
	ruleCriticality
	ruleFutility
)

func (r rule) String() string {
	return [...]string{"none", "heal", "probe", "last-chance", "release", "guard", "outage", "overload", "hold", "hopeless", "settling", "criticality", "futility"}[r]
}

// admitEnd is a decision's answer for a wait that ends without admission
// (the hold and hopeless rules); never an Attempt's.
const admitEnd Admission = 255

// decision is what the rules say of one waiting retry at one moment, and
// what the state must do to stand by it (apply does it). decide computes
// it without changing anything.
type decision struct {
	// how the retry goes now (AdmitHeal, AdmitRelease, AdmitProbe,
	// AdmitLast), before the guard and the budget are asked; AdmitNone
	// when not now, with next when asking again could change the answer
	// without news (zero: only news will); admitEnd when its wait ends.
	how  Admission
	next time.Time
	// by is the rule that decided.
	by rule
	// hold: the hold rule (or an open guard) holds the wait from now on.
	hold bool
	// free: the probe slot lapsed (the settling rule); free it.
	free bool
	// draw: the wait's spread is needed and not drawn: apply draws it, and
	// the decision is taken again.
	draw bool
}

// decide is the rules' decision for the waiting retry w at now, whose
// guard is open when guardOpen. It reads the state and w and changes
// neither.
func (s *gateState) decide(now time.Time, w *waiterView, guardOpen bool) decision {
	d := s.decideRules(now, w)
	if guardOpen && (d.how == AdmitNone || d.how == admitEnd) {
		// While the guard is open it alone says when the retry goes (its
		// half-open probe), and the gate holds the wait (the guard rule).
		d.how, d.next, d.by, d.hold = AdmitProbe, time.Time{}, ruleGuard, true
	}
	return d
}

// decideRules is decide before the guard rule.
func (s *gateState) decideRules(now time.Time, w *waiterView) decision {
	end, endAt := s.hopeless(now, w)
	if end {
		return decision{how: admitEnd, by: ruleHopeless}
	}
	var d decision
	held := w.held
	if !held && s.phase != phaseOutage && s.ev.heals(now) {
		return decision{how: AdmitHeal, by: ruleHeal}
	}
	if !held && !now.Before(w.holdAt) {
		if s.phase != phaseOutage && !s.ev.overloaded(now) {
			// Past its hold time, with no outage or overload to wait
			// for: a probe, or the end of the wait. It probes a server
			// that has served, and one that has not while no retry has
			// told the process anything (none failed or settled a
			// call): otherwise a process that never saw a success (a
			// server that fails every first attempt and serves
			// retries, once a retry that got a non-retryable answer
			// spent its budget) would never send the retry that tells.
			d.free = s.slot.lapsed(now)
			d.by = ruleHold
			mayProbe := s.ev.seen || s.ev.untold()
			if mayProbe && (s.slot.out == 0 || d.free) {
				d.how = AdmitProbe
			} else {
				d.how = admitEnd
			}
			return d
		}
		held, d.hold = true, true
	}
	s.decideByPhase(now, w, held, &d)
	if d.how == AdmitNone && !held && (d.next.IsZero() || d.next.After(w.holdAt)) {
		d.next = w.holdAt
	}
	if d.how == AdmitNone && !endAt.IsZero() && (d.next.IsZero() || endAt.Before(d.next)) {
		d.next = endAt
	}
	return d
}

// decideByPhase fills d by the release rule while the server serves, and
// by the probe and last-chance rules while it fails.
func (s *gateState) decideByPhase(now time.Time, w *waiterView, held bool, d *decision) {
	if !s.phase.failing() {
		d.by = ruleRelease
		if !now.Before(s.pace.full) {
			d.how = AdmitRelease
			return
		}
		d.next = s.pace.full
		if s.heldThrough(w, held) {
			// Held through an outage, with a deadline: its own pause after
			// the server came back, and a share of what its deadline leaves.
			if !w.drawn {
				d.draw = true
				return
			}
			back := clock.Later(s.pace.backAfter(w, s.slot.lead()), s.pace.backNext)
			if !now.Before(back) {
				d.how, d.next = AdmitRelease, time.Time{}
			} else if back.Before(d.next) {
				d.next = back
			}
		}
		return
	}
	d.free = s.slot.lapsed(now)
	if s.slot.out > 0 && !d.free {
		d.next, d.by = s.slot.until, ruleSettling
		return
	}
	// Until the process knows whether retries heal (the heal rule), first
	// attempts that fail say nothing about it: only retries' own outcomes
	// hold a probe back, and only a call's last attempt probes, as its
	// outcome settles the call either way; but while no retry has told
	// the process anything, any retry may be that probe (a first call
	// refused with a pushback waited for its last chance, its deadline
	// less 50 ms, when the server asked for a retry 20 ms later).
	reached := s.lastReached
	known := s.ev.known()
	if !known {
		reached = s.ev.lastRetry
	}
	var due time.Time
	if known && (!w.last || w.deadline.IsZero()) || !known && (w.last || s.ev.untold()) {
		due, d.how, d.by = reached.Add(max(w.pause, s.slot.probeGap)), AdmitProbe, ruleProbe
	}
	if !w.deadline.IsZero() {
		last := clock.Later(w.deadline.Add(-s.slot.lead()), s.slot.failedAt.Add(s.slot.lastGap), reached.Add(w.pause))
		if d.how == AdmitNone || last.Before(due) {
			due, d.how, d.by = last, AdmitLast, ruleLastChance
		}
	}
	if now.Before(due) {
		d.how, d.next = AdmitNone, due
	}
}

// apply makes the state and w stand by d, decided at now: the one place a
// decision changes anything.
func (s *gateState) apply(now time.Time, w *waiterView, d decision) {
	if d.hold {
		w.held = true
	}
	if d.free {
		s.slot.out = 0
	}
	if d.draw {
		w.spread, w.drawn = s.rand(), true
	}
}

// decideAndApply decides for w at now, applies the decision and, when it
// needed w's spread drawn, decides again with it.
func (s *gateState) decideAndApply(now time.Time, w *waiterView, guardOpen bool) decision {
	d := s.decide(now, w, guardOpen)
	s.apply(now, w, d)
	if d.draw {
		d = s.decide(now, w, guardOpen)
		s.apply(now, w, d)
	}
	return d
}

// hopeless reports whether w's wait cannot end well (the hopeless rule): a
// retry taking as long as the evidence says (evidence.retryTakes) would
// not finish before its call's deadline. When not, at is when it will be,
// if the evidence stands (zero: never).
func (s *gateState) hopeless(now time.Time, w *waiterView) (hopeless bool, at time.Time) {
	if w.deadline.IsZero() {
		return false, time.Time{}
	}
	took := s.ev.retryTakes(now, w)
	if took <= 0 {
		return false, time.Time{}
	}
	at = w.deadline.Add(-took).Add(1)
	if !now.Before(at) {
		return true, time.Time{}
	}
	return false, at
}

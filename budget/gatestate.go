package budget

import (
	tune "github.com/stagger-go/stagger/internal/gatetune"
	"time"
)

// phase is where a Gate stands (see Gate). observe, enter and forget are
// its only transitions; gate_table_test.go tests every one.
type phase uint8

const (
	phaseQuiet      phase = iota // nothing failed since a success seen while nobody waited
	phaseFailing                 // the last attempt that reached the server failed
	phaseOutage                  // the outage rule's streak of failures
	phaseRecovering              // a success after failures: the release rule
)

func (p phase) String() string {
	return [...]string{"quiet", "failing", "outage", "recovering"}[p]
}

// failing reports whether the probe and last-chance rules apply (else
// the release rule).
func (p phase) failing() bool { return p == phaseFailing || p == phaseOutage }

// gateState is the estimator's and the scheduler's state, owned by the
// gate's lock: the phase and its streak, the evidence, the probe slot, the
// release pace. A waiting retry's decision is computed by decide
// (gatedecide.go), which changes nothing.
type gateState struct {
	phase phase
	rand  func() float64
	// streak counts the failures since the last success, from streakAt.
	streak   int
	streakAt time.Time
	// lastReached is when an attempt last reached the server (or a retry
	// was refused after its attempt ended).
	lastReached time.Time
	// span is the longest wait of the retries that began to wait since
	// the server last served (the futility rule).
	span time.Duration
	ev   evidence
	slot probeSlots
	pace releasePace
}

// newGateState starts at now: failures that make an outage must follow
// tune.HealthyGap without failures, counted from the start.
func newGateState(now time.Time, rand func() float64) gateState {
	return gateState{rand: rand, pace: newReleasePace(now), ev: evidence{lastFail: now}}
}

// forget: a success was seen while nobody waited; what the failures
// before it left no longer counts.
func (s *gateState) forget(now time.Time) {
	s.ended()
	s.pace.gain, s.slot.gap = tune.ReleaseGainStart, 0
	s.streak, s.span = 0, 0
	s.ev.retryFails, s.ev.seen = 0, true
	if s.phase == phaseOutage {
		s.pace.set(now, s.rand())
		s.back(now)
	}
	s.phase = phaseQuiet
}

// ended: a success ends the streak of failures, if any.
func (s *gateState) ended() {
	if s.streak > 0 {
		s.ev.ended(s.streak)
		s.ev.lastFail = s.lastReached
	}
}

// settled reports whether forget would change nothing and Allow would
// refuse no retry without asking the budget: the Gate's fast paths.
func (s *gateState) settled(now time.Time) bool {
	return !now.Before(s.ev.slowUntil) && s.phase == phaseQuiet && s.streak == 0 && s.span == 0 && s.ev.seen && s.ev.retryFails == 0 &&
		s.pace.gain == tune.ReleaseGainStart && s.slot.gap == 0
}

// back: an outage ended now; unless the server is overloaded, the calls
// held through it go back (the release rule).
func (s *gateState) back(now time.Time) {
	if !s.ev.overloaded(now) {
		s.pace.back(now, s.streakAt, s.rand())
	}
}

// observe: an attempt ended with outcome a.
func (s *gateState) observe(now time.Time, a Attempt) {
	s.ev.learn(now, a)
	probing := a.Admission.probing()
	if probing {
		s.slot.report(now, a.Took)
	}
	if a.Admission == admitRelease {
		s.pace.answered(a.Took, a.Outcome == Success)
	}
	switch a.Outcome {
	case Success:
		if a.Took > 0 && a.Admission != AdmitNone {
			s.ev.succeeded(now, a.Took)
		}
		s.ended()
		s.lastReached = now
		s.streak, s.span = 0, 0
		if s.phase == phaseOutage {
			// Release from a credit drawn at random, or a whole one when
			// a deferred retry found the server back.
			s.back(now)
			s.pace.gain = tune.ReleaseGainStart
			if c := s.rand(); probing {
				s.pace.set(now, 1)
			} else {
				s.pace.set(now, c)
			}
		}
		if s.phase.failing() {
			s.phase = phaseRecovering
		}
		if a.Admission != AdmitNone {
			s.pace.grow()
		}
		s.slot.halve()
		s.pace.set(now, s.pace.credits(now)+s.pace.gain)
	case Failure:
		s.lastReached = now
		if s.streak == 0 {
			s.streakAt, s.pace.entered = now, 0
		}
		// The outage rule: a streak after calm, of a server whose retries
		// do not heal (or that is overloaded), or, with retries failing in
		// it, beyond its flakiness or lasting longer than the calls' waits
		// (a server that served, then failed every call for a deadline;
		// under overload no retry goes to fail, and the streak suffices).
		// Healthy: a success was seen, and the streak began tune.HealthyGap
		// after the one before it ended.
		ovl, retriesFailed := s.ev.overloaded(now), s.ev.retryFails >= tune.HealMinSamples
		healthy := s.ev.seen && s.streakAt.Sub(s.ev.lastFail) >= tune.HealthyGap
		lasting := s.ev.seen && s.span > 0 && now.Sub(s.streakAt) >= s.span && (retriesFailed || ovl)
		if s.streak++; s.streak >= tune.OutageStreak && ((healthy || ovl) && s.ev.down(now) || s.ev.beyond(s.streak) && retriesFailed || lasting) {
			s.phase = phaseOutage
		} else if s.phase != phaseOutage {
			s.phase = phaseFailing
		}
		if probing {
			s.slot.failed(now)
		} else if s.slot.since++; a.Number > 1 || s.ev.known() {
			// Until retries are known to heal or not, a failed first
			// attempt says nothing of it.
			s.slot.stretch()
		}
		if a.Admission == admitRelease || a.Admission == AdmitBudget || a.Admission == admitHeal {
			s.pace.shrink()
		}
	}
}

// outlook is what a failure can change of the waiting retries' decisions
// other than putting them off: a failure that leaves it as it was wakes
// nobody, each asks again at its own next time (with a thousand waiting,
// every failure woke them all).
type outlook struct {
	phase                          phase
	heals, known, untold, ovl, out bool
}

func (s *gateState) outlook(now time.Time) outlook {
	return outlook{s.phase, s.ev.heals(now), s.ev.known(), s.ev.untold(now), s.ev.overloaded(now), now.Before(s.ev.retryOut)}
}

// enter: a retry refused after its attempt failed now begins to wait
// with pause, at most span.
func (s *gateState) enter(now time.Time, pause, span time.Duration) {
	s.lastReached = now
	s.span = max(s.span, span)
	s.pace.entered++
	if !s.phase.failing() {
		s.phase = phaseFailing
	}
	s.slot.enter(pause)
}

// futile reports whether a retry that begins to wait now would wait in
// vain (the futility rule).
func (s *gateState) futile(now time.Time) bool {
	return s.phase == phaseOutage && s.span > 0 && now.Sub(s.streakAt) >= time.Duration(tune.FutileFactor*float64(s.span))
}

// tooLate reports whether the futility rule's lone waiter, with pause and
// deadline (zero: none), would wait in vain: fewer than tune.FutileEvery
// failures since a probe failed, the streak's failures arriving faster
// than its pause (no quiet time will come: each puts its probe off), or
// no probe or last chance before its deadline as things stand.
func (s *gateState) tooLate(now time.Time, pause time.Duration, deadline time.Time, last bool) bool {
	if s.slot.since < tune.FutileEvery || now.Sub(s.streakAt) < time.Duration(s.streak)*pause {
		return true
	}
	if deadline.IsZero() {
		return false
	}
	w := waiterView{pause: pause, deadline: deadline, last: last, held: true}
	how, next := s.decideByPhase(now, &w, true)
	return how == AdmitNone && (next.IsZero() || next.After(deadline.Add(-s.slot.lead())))
}

// admit: the waiting retry w goes now as how (a decision's answer, or
// AdmitBudget for a probe or last chance the budget paid for).
func (s *gateState) admit(now time.Time, w *waiterView, how Admission) {
	switch how {
	case admitRelease:
		if s.heldThrough(w, w.held) {
			s.pace.wentBack(now)
		}
		if c := s.pace.credits(now); c >= 1 {
			s.pace.set(now, c-1)
		}
		return
	case admitHeal:
		return
	}
	s.slot.take(now, w)
}

// heldThrough reports whether w, a call with a deadline held (as held
// says), was held through the latest outage: it goes back at the back
// pace, without a credit.
func (s *gateState) heldThrough(w *waiterView, held bool) bool {
	return held && !w.deadline.IsZero() && w.holdAt.Before(s.pace.backAt)
}

// unadmit gives back what admit took for w's admission how, never used.
func (s *gateState) unadmit(now time.Time, w *waiterView, how Admission) {
	switch {
	case how == admitRelease:
		s.pace.set(now, 1)
		if s.heldThrough(w, w.held) {
			s.pace.backNext = s.pace.backNext.Add(-s.pace.backEvery)
		}
	case how.probing():
		s.slot.until = time.Time{}
	}
}

// probing reports whether an admission holds the probe slot.
func (a Admission) probing() bool {
	return a == admitProbe || a == AdmitBudget || a == admitLast
}

// waiterView is what the rules read of a waiting retry.
type waiterView struct {
	pause    time.Duration
	deadline time.Time
	last     bool
	// holdAt is when the wait ends unless held (the hold rule).
	holdAt time.Time
	held   bool
	// took is Request.Took.
	took time.Duration
	// spread, uniform in [0, 1), places the call's return after an outage
	// within what its deadline leaves.
	spread float64
}

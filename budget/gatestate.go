package budget

import (
	tune "github.com/stagger-go/stagger/internal/gatetune"
	"time"
)

// phase is where a Gate stands (see Gate). gateState's event methods
// (observe, enter, forget) are its only transitions; gate_table_test.go
// tests every one.
type phase uint8

const (
	// phaseQuiet: nothing failed since the last success seen while nobody
	// waited (or ever); what earlier failures left is forgotten.
	phaseQuiet phase = iota
	// phaseFailing: the last attempt that reached the server failed (or a
	// retry was just refused after its attempt failed), fewer than
	// tune.OutageStreak in a row.
	phaseFailing
	// phaseOutage: tune.OutageStreak or more failures in a row, no success
	// between, retries known not to heal, and the server looked healthy
	// before them or failed for overload (the outage rule).
	phaseOutage
	// phaseRecovering: an attempt succeeded after failures; waiting
	// retries go on release credits (the release rule), or heal.
	phaseRecovering
)

func (p phase) String() string {
	return [...]string{"quiet", "failing", "outage", "recovering"}[p]
}

// failing reports whether the last attempt that reached the server failed
// (the probe and last-chance rules apply; else the release rule).
func (p phase) failing() bool { return p == phaseFailing || p == phaseOutage }

// gateState is a Gate's state under its lock, in named parts: the phase
// and the streak of failures that moves it; the evidence (heal, overload,
// health); the probe slot and its gaps; the release pace. Its event
// methods take the time and start no goroutine; a waiting retry's
// decision is computed by decide, which changes nothing, and applied by
// apply (gatedecide.go).
type gateState struct {
	phase phase
	rand  func() float64
	// streak counts the failures since the last success.
	streak int
	// lastReached is when an attempt last reached the server (or a retry
	// was refused after its attempt ended).
	lastReached time.Time
	// span is the longest wait (what its deadline left, or MaxWait) of the
	// retries that began to wait since the server last served (the
	// futility rule).
	span time.Duration
	// streakAt is when the streak of failures began; in an outage, when
	// the outage began (its streak ends only with it).
	streakAt time.Time
	ev       evidence
	slot     probeSlots
	pace     releasePace
}

func newGateState(now time.Time, rand func() float64) gateState {
	return gateState{rand: rand, pace: newReleasePace(now)}
}

// forget: a success was seen while nobody waited, so what the failures
// before it left (gaps, gain, streak) no longer counts. After an outage
// the first credit is drawn at random, as the release rule says.
func (s *gateState) forget(now time.Time) {
	s.ev.ended(s.streak)
	s.pace.gain, s.slot.probeGap, s.slot.lastGap = tune.ReleaseGainStart, 0, 0
	s.streak, s.span = 0, 0
	s.ev.retryFails, s.ev.seen = 0, true
	if s.phase == phaseOutage {
		s.pace.restart(now, s.rand())
		s.back(now)
	}
	s.phase = phaseQuiet
}

// settled reports whether a first attempt's success, recorded while nobody
// waits, would change nothing (forget would leave the state as it is), and
// Allow would refuse no retry without asking the budget (no outage, no
// recent overload or slow success): the Gate's fast paths.
func (s *gateState) settled(now time.Time) bool {
	return !now.Before(s.ev.slowUntil) && s.phase == phaseQuiet && s.streak == 0 && s.span == 0 && s.ev.seen && s.ev.retryFails == 0 &&
		s.pace.gain == tune.ReleaseGainStart && s.slot.probeGap == 0 && s.slot.lastGap == 0
}

// back: an outage ended now. Unless the server is overloaded, the calls
// held through it that have a deadline go back after their pause (the
// release rule).
func (s *gateState) back(now time.Time) {
	if !s.ev.overloaded(now) {
		s.pace.back(now, s.rand())
	}
}

// observe: an attempt ended with outcome a.
func (s *gateState) observe(now time.Time, a Attempt) {
	s.ev.learn(now, a)
	probing := a.Admission.probing()
	if probing {
		s.slot.report(now, a.Took)
	}
	if a.Admission == AdmitRelease {
		s.pace.answered(a.Took, a.Outcome == Success)
	}
	switch a.Outcome {
	case Success:
		if a.Took > 0 && a.Admission != AdmitNone {
			s.ev.succeeded(now, a.Took)
		}
		s.lastReached = now
		s.ev.ended(s.streak)
		s.streak, s.span = 0, 0
		if s.phase == phaseOutage {
			// The server is back: release slowly, from a credit drawn at
			// random, or at once when a deferred retry found it back.
			s.back(now)
			s.pace.gain = tune.ReleaseGainStart
			s.pace.restart(now, s.rand())
			if probing {
				s.pace.credits = 1
			}
		}
		if s.phase.failing() {
			s.phase = phaseRecovering
		}
		if a.Admission != AdmitNone {
			s.pace.grow()
		}
		s.slot.halve()
		s.pace.accrue(now, s.pace.gain)
	case Failure:
		s.lastReached = now
		if s.streak == 0 {
			s.streakAt = now
		}
		s.ev.failed(now, s.streak == 0)
		// Failures in a row make an outage (the outage rule), unless
		// retries heal (a flaky server fails several attempts in a row as
		// a matter of course), or the server was failing a share of its
		// attempts all along and is not overloaded; but a streak beyond
		// what its flakiness makes, in which retries failed too, is an
		// outage whatever the calls before it said.
		if s.streak++; s.streak >= tune.OutageStreak && ((s.ev.healthy || s.ev.overloaded(now)) && s.ev.down(now) || s.ev.beyond(s.streak) && s.ev.retryFails >= tune.HealMinSamples) {
			// The outage began with the streak's first failure (streakAt):
			// the calls that failed from then on have been waiting since.
			s.phase = phaseOutage
			s.pace.credits = 0
		} else if s.phase != phaseOutage {
			s.phase = phaseFailing
		}
		if probing {
			s.slot.failed(now)
		} else if s.slot.since++; a.Number > 1 || s.ev.known() {
			// Until the process knows whether retries heal, first
			// attempts that fail say nothing of it.
			s.slot.stretch()
		}
		if a.Admission == AdmitRelease || a.Admission == AdmitBudget || a.Admission == AdmitHeal {
			s.pace.shrink()
		}
	}
}

// outlook is what a failure can change of the waiting retries' decisions
// other than putting them off: a failure that leaves it as it was (the
// phase, whether retries heal or are known to, overload) only moves the
// probe and last-chance times later (lastReached, the gaps), so the
// waiters need not be woken: each asks again at its own next time. With
// a thousand retries waiting in an outage, every failure woke them all.
type outlook struct {
	phase                     phase
	heals, known, untold, ovl bool
}

func (s *gateState) outlook(now time.Time) outlook {
	return outlook{s.phase, s.ev.heals(now), s.ev.known(), s.ev.untold(), s.ev.overloaded(now)}
}

// enter: a retry refused by the budget, after its attempt ended now, begins
// to wait with pause, at most span. Its attempt is the latest evidence, and
// a failure.
func (s *gateState) enter(now time.Time, pause, span time.Duration) {
	s.lastReached = now
	s.span = max(s.span, span)
	s.pace.enter(now)
	if !s.phase.failing() {
		s.phase = phaseFailing
	}
	s.slot.enter(pause)
}

// futile reports whether a retry that begins to wait now would wait in
// vain (the futility rule): the outage has lasted tune.FutileFactor times the
// longest wait of the retries that began to wait since the server last
// served, and no attempt has succeeded since it began.
func (s *gateState) futile(now time.Time) bool {
	return s.phase == phaseOutage && s.span > 0 && now.Sub(s.streakAt) >= time.Duration(tune.FutileFactor*float64(s.span))
}

// tooLate reports whether a retry that would begin to wait now, with
// fewer than tune.FutileEvery failures recorded since a deferred retry last
// failed, or with
// pause, for a call whose deadline is deadline (zero: none; then only the
// count of failures makes it too late), could go neither as a probe nor as its call's last chance before
// its deadline less the last chance's lead: the times the probe and
// last-chance rules give it as things stand (news may bring them sooner,
// but in an outage that outlived the calls' deadlines news is a success,
// which ends the outage).
func (s *gateState) tooLate(now time.Time, pause time.Duration, deadline time.Time, last bool) bool {
	if s.slot.since < tune.FutileEvery {
		// A long outage gets at most one retry for tune.FutileEvery failures.
		return true
	}
	if !s.slot.failedAt.IsZero() && now.Sub(s.slot.failedAt) < time.Duration(s.slot.since)*pause {
		// Failures reach the server more often than its pause: the
		// probe and the last chance, which wait for a pause with nothing
		// reaching it, will not come.
		return true
	}
	if deadline.IsZero() {
		return false
	}
	w := waiterView{pause: pause, deadline: deadline, last: last, held: true}
	var d decision
	s.decideByPhase(now, &w, true, &d)
	if d.how != AdmitNone {
		return false
	}
	return d.next.IsZero() || d.next.After(deadline.Add(-s.slot.lead()))
}

// admit: the waiting retry w goes now as how (a decision's answer, or
// AdmitBudget for a probe or last chance the budget paid for).
func (s *gateState) admit(now time.Time, w *waiterView, how Admission) {
	switch how {
	case AdmitRelease:
		// A call held through an outage goes back without a credit, at
		// the back pace.
		if s.heldThrough(w, w.held) {
			s.pace.wentBack(now)
		}
		if s.pace.credits >= 1 {
			s.pace.credits--
		}
		return
	case AdmitHeal:
		return
	}
	s.slot.take(now, w)
}

// heldThrough reports whether w, a call with a deadline held (held: w.held,
// or as a decision has it), was held through the latest outage: it goes
// back by the release rule's back pace.
func (s *gateState) heldThrough(w *waiterView, held bool) bool {
	return held && !w.deadline.IsZero() && w.holdAt.Before(s.pace.backAt)
}

// unadmit gives back what admit took for w's admission how, never used.
func (s *gateState) unadmit(w *waiterView, how Admission) {
	switch {
	case how == AdmitRelease:
		s.pace.credits = min(s.pace.credits+1, 1)
		if s.heldThrough(w, w.held) {
			s.pace.backNext = s.pace.backNext.Add(-s.pace.backEvery)
		}
	case how.probing() && s.slot.out > 0:
		s.slot.out--
	}
}

// probing reports whether a deferred retry let go this way held the one
// probe slot (the probe and last-chance rules).
func (a Admission) probing() bool {
	return a == AdmitProbe || a == AdmitBudget || a == AdmitLast
}

// waiterView is what the rules read of a waiting retry.
type waiterView struct {
	pause    time.Duration
	deadline time.Time
	last     bool
	// holdAt is when the wait ends unless the gate holds it (the hold
	// rule); held: it did.
	holdAt time.Time
	held   bool
	// took is Request.Took: how long an attempt of its method takes.
	took time.Duration
	// spread, uniform in [0, 1) once drawn, places the wait's return
	// after an outage within the time its deadline leaves (the release
	// rule).
	spread float64
	drawn  bool
}

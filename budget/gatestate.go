package budget

import (
	"math"
	"math/bits"
	"time"
)

// phase is where a Gate stands (see Gate). gateState's methods are its only
// transitions; gate_table_test.go tests every one.
type phase uint8

const (
	// phaseQuiet: nothing failed since the last success seen while nobody
	// waited (or ever); what earlier failures left is forgotten.
	phaseQuiet phase = iota
	// phaseFailing: the last attempt that reached the server failed (or a
	// retry was just refused after its attempt failed), fewer than
	// outageStreak in a row.
	phaseFailing
	// phaseOutage: outageStreak or more failures in a row, no success
	// between, retries known not to heal, and the server looked healthy
	// before them or failed for overload (rule 5).
	phaseOutage
	// phaseRecovering: an attempt succeeded after failures; waiting
	// retries go on release credits, or heal (rule 0).
	phaseRecovering
)

func (p phase) String() string {
	return [...]string{"quiet", "failing", "outage", "recovering"}[p]
}

// failing reports whether the last attempt that reached the server failed
// (rules 1 and 2 apply; else rule 3).
func (p phase) failing() bool { return p == phaseFailing || p == phaseOutage }

// gateState is a Gate's state under its lock. Its methods take the time and
// start no goroutine: each is one transition, pure but for rand.
type gateState struct {
	phase phase
	rand  func() float64
	// streak counts the failures since the last success.
	streak int
	// lastReached is when an attempt last reached the server (or a retry
	// was refused after its attempt ended); lastRetry when a retry last
	// did (rule 0's evidence).
	lastReached time.Time
	lastRetry   time.Time
	// probesOut: deferred retries out as probes or last chances (rules 1
	// and 2: at most one at a time), sent at probeAt with pause probePause;
	// the slot is free again at probeUntil if it never reports (rule 7).
	probesOut  int
	probeAt    time.Time
	probePause time.Duration
	probeUntil time.Time
	// probeTook is how long the latest deferred retry took; probeFailed
	// when the latest one failed.
	probeTook   time.Duration
	probeFailed time.Time
	// probeGap and lastGap are rule 1's and rule 2's gaps; enterPause the
	// pause of the latest retry to begin waiting.
	probeGap, lastGap time.Duration
	enterPause        time.Duration
	// credits, accrued up to creditAt, and gain are rule 3's; backAt is
	// when the latest outage ended while the server was not overloaded.
	credits  float64
	creditAt time.Time
	gain     float64
	backAt   time.Time
	// healBits holds the outcomes of the latest healN calls that retried
	// and ended (bit 0 the latest; 1: a retry succeeded, 0: the final one
	// failed).
	healBits uint8
	healN    int
	// retryFails counts the retries that failed since an attempt last
	// succeeded; seen: an attempt ever succeeded.
	retryFails int
	seen       bool
	// An attempt failed for overload, or one succeeded slowly, until
	// overloadUntil and slowUntil (rules 0, 5 and 6).
	overloadUntil, slowUntil time.Time
	// lastFail is when an attempt last failed (at first, when the first
	// was recorded); healthy: the streak of failures began after a
	// success and healthyGap without failures (rule 5).
	lastFail time.Time
	healthy  bool
	// okTook is how long the latest deferred retry that succeeded took
	// (Attempt.Took), at okAt (rule 6).
	okTook time.Duration
	okAt   time.Time
}

func newGateState(now time.Time, rand func() float64) gateState {
	return gateState{rand: rand, gain: releaseGainStart, creditAt: now}
}

// forget: a success was seen while nobody waited, so what the failures
// before it left (gaps, gain, streak) no longer counts. After an outage
// the first credit is drawn at random, as rule 3 says.
func (s *gateState) forget(now time.Time) {
	s.gain, s.probeGap, s.lastGap = releaseGainStart, 0, 0
	s.streak = 0
	s.retryFails, s.seen = 0, true
	if s.phase == phaseOutage {
		s.credits, s.creditAt = s.rand(), now
		s.back(now)
	}
	s.phase = phaseQuiet
}

// back: an outage ended now. Unless the server is overloaded, the calls
// held through it that have a deadline go back after their pause (rule 3).
func (s *gateState) back(now time.Time) {
	if !s.overloaded(now) {
		s.backAt = now
	}
}

// learn keeps what a says of whether retries heal and of overload (rule
// 0); it changes no phase.
func (s *gateState) learn(now time.Time, a Attempt) {
	if a.Overload {
		// A slow success holds timeout retries back (rule 5); a failure
		// for overload, retries that heal too (rule 0).
		s.slowUntil = now.Add(overloadHold)
		if a.Outcome != Success {
			s.overloadUntil = s.slowUntil
		}
	}
	if a.Number > 1 && !a.Hedge && (a.Outcome == Success || a.Outcome == Failure) {
		s.lastRetry = now
		if a.Outcome == Failure {
			s.retryFails++
		}
		// A call's outcome, once: healed by the retry that succeeded,
		// or not by the final one that failed. A failed retry with
		// attempts left says nothing yet, so the evidence does not
		// depend on which retries the gate lets go.
		if a.Outcome == Success || a.Final {
			s.healBits <<= 1
			if a.Outcome == Success {
				s.healBits |= 1
			}
			s.healN = min(s.healN+1, healWindow)
		}
	}
	if a.Outcome == Success {
		s.retryFails, s.seen = 0, true
	}
}

// healed is how many of the latest healN calls that retried were healed.
func (s *gateState) healed() int {
	return bits.OnesCount8(s.healBits & uint8(1<<s.healN-1))
}

// heals reports whether rule 0 lets retries go after their pause, when
// no failure for overload is recent: of the latest calls that retried and
// ended, at least one and a third were healed; or, until calls say
// (callsKnown), the server served an attempt and not two retries in a row
// failed since.
func (s *gateState) heals(now time.Time) bool {
	if s.overloaded(now) {
		return false
	}
	if !s.callsKnown() {
		return s.seen && s.retryFails < healMinSamples
	}
	won := s.healed()
	return won > 0 && float64(won) >= healMinShare*float64(s.healN)
}

// callsKnown reports whether the calls that retried say whether retrying
// heals: one was healed, or healMinSamples ended.
func (s *gateState) callsKnown() bool {
	return s.healN >= healMinSamples || s.healed() > 0
}

// known reports whether the process knows whether retrying heals: the
// calls say, or the latest healMinSamples retries failed and nothing
// succeeded since.
func (s *gateState) known() bool {
	return s.callsKnown() || s.retryFails >= healMinSamples
}

// down reports whether the process knows that retries do not heal: they do
// not heal (rule 0), and none of the latest calls that retried (two at
// least) was healed, or the latest two retries failed with nothing
// succeeding since. A fresh process does not take a flaky server for a
// down one before a retry had its chance, nor does one whose retries heal
// some calls, fewer than a third.
func (s *gateState) down(now time.Time) bool {
	return !s.heals(now) && (s.healN >= healMinSamples && s.healed() == 0 || s.retryFails >= healMinSamples)
}

// overloaded reports whether an attempt failed for overload within
// overloadHold.
func (s *gateState) overloaded(now time.Time) bool {
	return now.Before(s.overloadUntil)
}

// observe: an attempt ended with outcome a.
func (s *gateState) observe(now time.Time, a Attempt) {
	s.learn(now, a)
	probing := a.Admission.probing()
	// A probe that left before the one holding the slot reports late
	// (its slot expired and went to another): an outcome, but not the
	// slot's holder's, which stays out.
	late := a.Took > 0 && now.Add(-a.Took).Before(s.probeAt)
	if probing && s.probesOut > 0 && !late {
		s.probesOut--
		s.probeTook = now.Sub(s.probeAt)
	}
	switch a.Outcome {
	case Success:
		if a.Took > 0 && a.Admission != AdmitNone {
			s.okTook, s.okAt = a.Took, now
		}
		s.lastReached = now
		s.streak = 0
		if s.phase == phaseOutage {
			// The server is back: release slowly, from a credit drawn at
			// random, or at once when a deferred retry found it back.
			s.back(now)
			s.gain = releaseGainStart
			s.credits, s.creditAt = s.rand(), now
			if probing {
				s.credits = 1
			}
		}
		if s.phase.failing() {
			s.phase = phaseRecovering
		}
		if a.Admission != AdmitNone {
			s.gain = math.Min(2*s.gain, releaseGainMax)
		}
		// Every success halves the gaps: a server that serves again is
		// probed sooner when it fails again, one that fails most attempts
		// (overloaded) is not probed back to back.
		s.probeGap, s.lastGap = s.probeGap/2, s.lastGap/2
		s.accrue(now, s.gain)
	case Failure:
		s.lastReached = now
		if s.streak == 0 {
			s.healthy = s.seen && now.Sub(s.lastFail) >= healthyGap
		}
		s.lastFail = now
		// Failures in a row make an outage (rule 5), unless retries heal
		// (a flaky server fails several attempts in a row as a matter of
		// course), or the server was failing a share of its attempts all
		// along and is not overloaded.
		if s.streak++; s.streak >= outageStreak && (s.healthy || s.overloaded(now)) && s.down(now) {
			s.phase = phaseOutage
			s.credits = 0
		} else if s.phase != phaseOutage {
			s.phase = phaseFailing
		}
		if probing {
			base := max(s.probePause, gapFloor)
			s.probeGap = min(max(2*s.probeGap, base), probeGapMax)
			s.lastGap = min(max(2*s.lastGap, base), probeGapMax)
			s.probeFailed = now
		} else if s.probeGap < quietGapMax && (a.Number > 1 || s.known()) {
			// From the latest waiting retry's pause when successes
			// halved the gap to nothing. Until the process knows whether
			// retries heal, first attempts that fail say nothing of it.
			s.probeGap = min(max(2*s.probeGap, s.enterPause), quietGapMax)
		}
		if a.Admission == AdmitRelease || a.Admission == AdmitBudget || a.Admission == AdmitHeal {
			s.gain = math.Max(s.gain/2, releaseGainStart)
		}
	}
}

// enter: a retry refused by the budget, after its attempt ended now, begins
// to wait with pause. Its attempt is the latest evidence, and a failure.
func (s *gateState) enter(now time.Time, pause time.Duration) {
	s.lastReached = now
	if !s.phase.failing() {
		s.phase = phaseFailing
	}
	s.probeGap, s.lastGap, s.enterPause = max(s.probeGap, pause), max(s.lastGap, pause), pause
}

// expire frees the slot of a probe or last chance that did not report in
// time (rule 7).
func (s *gateState) expire(now time.Time) {
	if s.probesOut > 0 && !now.Before(s.probeUntil) {
		s.probesOut = 0
	}
}

// lead is how long before its deadline a last chance goes.
func (s *gateState) lead() time.Duration {
	return max(lastChanceLead, lastChanceFactor*s.probeTook)
}

// accrue adds the credits earned since creditAt, and extra; at most one is
// kept.
func (s *gateState) accrue(now time.Time, extra float64) {
	if d := now.Sub(s.creditAt); d > 0 {
		s.credits += releasePerSecond * d.Seconds()
	}
	s.creditAt = now
	s.credits = math.Min(s.credits+extra, 1)
}

// waiterView is what the rules read of a waiting retry.
type waiterView struct {
	pause    time.Duration
	deadline time.Time
	last     bool
	// holdAt is when the wait ends unless the gate holds it (rule 6);
	// held: it did.
	holdAt time.Time
	held   bool
	// took is Request.Took: how long an attempt of its method takes.
	took time.Duration
	// spread, uniform in [0, 1) once drawn, places the wait's return
	// after an outage within the time its deadline leaves (backAfter).
	spread float64
	drawn  bool
}

// backAfter is when a wait w held through the outage that ended at backAt
// goes back (rule 3): its own pause after it, and then a share (w.spread,
// drawn the first time it is asked) of what the call's deadline leaves
// before its last chance, so that the calls held together do not all go
// back together.
func (s *gateState) backAfter(w *waiterView) time.Time {
	if !w.drawn {
		w.spread, w.drawn = s.rand(), true
	}
	at := s.backAt.Add(w.pause)
	if room := w.deadline.Add(-s.lead()).Sub(at); room > 0 {
		at = at.Add(time.Duration(w.spread * float64(room)))
	}
	return at
}

// hopeless reports whether w's wait cannot end well (rule 6): a retry
// taking as long as an attempt of its method takes (Request.Took), or as
// the latest deferred retry that succeeded within overloadHold, would not
// finish before its call's deadline. When not, at is when it will be, if
// the evidence stands (zero: never).
func (s *gateState) hopeless(now time.Time, w *waiterView) (hopeless bool, at time.Time) {
	if w.deadline.IsZero() {
		return false, time.Time{}
	}
	took := w.took
	fresh := now.Before(s.okAt.Add(overloadHold))
	if fresh {
		took = max(took, s.okTook)
	}
	if took <= 0 {
		return false, time.Time{}
	}
	at = w.deadline.Add(-took).Add(1)
	if !now.Before(at) {
		return true, time.Time{}
	}
	return false, at
}

// admitEnd is candidate's answer for a wait that ends without admission
// (rule 6); never an Attempt's.
const admitEnd Admission = 255

// candidate says how a waiting retry w could go now by rules 0 to 3
// (AdmitHeal, AdmitRelease, AdmitProbe or AdmitLast), before the guard and
// the budget are asked; AdmitNone with when asking again could change the
// answer without news (zero: only news will); or admitEnd when its wait
// ends (rule 6). It changes nothing but w's hold, the credits' accrual and
// expired slots.
func (s *gateState) candidate(now time.Time, w *waiterView) (Admission, time.Time) {
	if !w.held && s.phase != phaseOutage && s.heals(now) {
		return AdmitHeal, time.Time{}
	}
	if !w.held && !now.Before(w.holdAt) {
		if s.phase != phaseOutage && !s.overloaded(now) {
			s.expire(now)
			if s.seen && s.probesOut == 0 {
				return AdmitProbe, time.Time{}
			}
			return admitEnd, time.Time{}
		}
		w.held = true
	}
	how, next := s.rules(now, w)
	if how == AdmitNone && !w.held && (next.IsZero() || next.After(w.holdAt)) {
		next = w.holdAt
	}
	return how, next
}

// rules is candidate's rules 1 to 3.
func (s *gateState) rules(now time.Time, w *waiterView) (Admission, time.Time) {
	if !s.phase.failing() {
		s.accrue(now, 0)
		if s.credits >= 1 {
			return AdmitRelease, time.Time{}
		}
		// Rounded up, and at least a millisecond: a wait of 0 would spin.
		d := time.Duration(math.Ceil((1 - s.credits) / releasePerSecond * float64(time.Second)))
		next := now.Add(max(d, time.Millisecond))
		if w.held && !w.deadline.IsZero() && w.holdAt.Before(s.backAt) {
			// Held through an outage, with a deadline: its own pause
			// after the server came back.
			if back := s.backAfter(w); !now.Before(back) {
				return AdmitRelease, time.Time{}
			} else if back.Before(next) {
				next = back
			}
		}
		return AdmitNone, next
	}
	s.expire(now)
	if s.probesOut > 0 {
		return AdmitNone, s.probeUntil
	}
	// Until the process knows whether retries heal (rule 0), first
	// attempts that fail say nothing about it: only retries' own outcomes
	// hold a probe back, and only a call's last attempt probes, as its
	// outcome settles the call either way.
	reached := s.lastReached
	known := s.known()
	if !known {
		reached = s.lastRetry
	}
	var due time.Time
	how := AdmitNone
	if known && (!w.last || w.deadline.IsZero()) || !known && w.last {
		due, how = reached.Add(max(w.pause, s.probeGap)), AdmitProbe
	}
	if !w.deadline.IsZero() {
		last := later(w.deadline.Add(-s.lead()), s.probeFailed.Add(s.lastGap), reached.Add(w.pause))
		if how == AdmitNone || last.Before(due) {
			due, how = last, AdmitLast
		}
	}
	if now.Before(due) {
		return AdmitNone, due
	}
	return how, time.Time{}
}

// admit: the waiting retry w goes now as how (a candidate's answer, or
// AdmitBudget for a probe or last chance the budget paid for).
func (s *gateState) admit(now time.Time, w *waiterView, how Admission) {
	switch how {
	case AdmitRelease:
		// A call held through an outage goes back without a credit.
		if s.credits >= 1 {
			s.credits--
		}
		return
	case AdmitHeal:
		return
	}
	s.probesOut++
	s.probeAt, s.probePause = now, w.pause
	if w.deadline.IsZero() {
		s.probeUntil = now.Add(probeGapMax)
	} else {
		s.probeUntil = w.deadline.Add(probeLeaseSlack)
	}
}

// probing reports whether a deferred retry let go this way held the one
// probe slot (rules 1 and 2).
func (a Admission) probing() bool {
	return a == AdmitProbe || a == AdmitBudget || a == AdmitLast
}

func later(a time.Time, bs ...time.Time) time.Time {
	for _, b := range bs {
		if b.After(a) {
			a = b
		}
	}
	return a
}

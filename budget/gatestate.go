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
	// between.
	phaseOutage
	// phaseRecovering: an attempt succeeded after failures; waiting
	// retries go on release credits.
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
	// the slot is free again at probeUntil if it never reports (rule 6).
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
	// credits, accrued up to creditAt, and gain are rule 3's.
	credits  float64
	creditAt time.Time
	gain     float64
	// healBits holds the outcomes of the latest healN retries (bit 0 the
	// latest; 1: it succeeded); no retry heals before overloadUntil (rule
	// 0).
	healBits      uint8
	healN         int
	overloadUntil time.Time
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
	if s.phase == phaseOutage {
		s.credits, s.creditAt = s.rand(), now
	}
	s.phase = phaseQuiet
}

// learn keeps what a says of whether retries heal and of overload (rule
// 0); it changes no phase.
func (s *gateState) learn(now time.Time, a Attempt) {
	if a.Overload {
		s.overloadUntil = now.Add(overloadHold)
	}
	if a.Number > 1 && !a.Hedge && (a.Outcome == Success || a.Outcome == Failure) {
		s.lastRetry = now
		s.healBits <<= 1
		if a.Outcome == Success {
			s.healBits |= 1
		}
		s.healN = min(s.healN+1, healWindow)
	}
}

// heals reports whether rule 0 lets retries go after their pause: enough
// recent retries succeeded, and no sign of overload is recent.
func (s *gateState) heals(now time.Time) bool {
	if s.healN < healMinSamples || now.Before(s.overloadUntil) {
		return false
	}
	won := bits.OnesCount8(s.healBits & uint8(1<<s.healN-1))
	return float64(won) >= healMinShare*float64(s.healN)
}

// down reports whether failures in a row make an outage: unless retries
// heal, or nothing says yet whether they do (too few retries recorded, as
// in a fresh process: a flaky server is not taken for a down one before a
// retry had its chance).
func (s *gateState) down(now time.Time) bool {
	return s.healN >= healMinSamples && !s.heals(now)
}

// observe: an attempt ended with outcome a.
func (s *gateState) observe(now time.Time, a Attempt) {
	s.learn(now, a)
	probing := a.Admission.probing()
	if probing && s.probesOut > 0 {
		s.probesOut--
		s.probeTook = now.Sub(s.probeAt)
	}
	switch a.Outcome {
	case Success:
		s.lastReached = now
		s.streak = 0
		if s.phase == phaseOutage {
			// The server is back: release slowly, from a credit drawn at
			// random, or at once when a deferred retry found it back.
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
		// Failures in a row make an outage, unless retries heal: a flaky
		// server fails several attempts in a row as a matter of course.
		if s.streak++; s.streak >= outageStreak && s.down(now) {
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
		} else if s.probeGap < quietGapMax {
			// From the latest waiting retry's pause when successes
			// halved the gap to nothing.
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
// time (rule 6).
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
	// healable: it began to wait outside an outage, so rule 0 may let it
	// go; the calls that waited through an outage go back paced (rule 3).
	healable bool
}

// candidate says how a waiting retry w could go now by rules 1 to 3
// (AdmitRelease, AdmitProbe or AdmitLast), before the guard and the budget
// are asked; AdmitNone with when asking again could change the answer
// without news (zero: only news will). It changes nothing but the credits'
// accrual and expired slots.
func (s *gateState) candidate(now time.Time, w waiterView) (Admission, time.Time) {
	if w.healable && (s.phase == phaseFailing || s.phase == phaseQuiet) && s.heals(now) {
		return AdmitHeal, time.Time{}
	}
	if !s.phase.failing() {
		s.accrue(now, 0)
		if s.credits >= 1 {
			return AdmitRelease, time.Time{}
		}
		// Rounded up, and at least a millisecond: a wait of 0 would spin.
		d := time.Duration(math.Ceil((1 - s.credits) / releasePerSecond * float64(time.Second)))
		return AdmitNone, now.Add(max(d, time.Millisecond))
	}
	s.expire(now)
	if s.probesOut > 0 {
		return AdmitNone, s.probeUntil
	}
	// Until the process knows whether retries heal (rule 0), first
	// attempts that fail say nothing about it: only retries' own outcomes
	// hold a probe back.
	reached := s.lastReached
	if s.healN < healMinSamples {
		reached = s.lastRetry
	}
	var due time.Time
	how := AdmitNone
	if !w.last || w.deadline.IsZero() {
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
func (s *gateState) admit(now time.Time, w waiterView, how Admission) {
	switch how {
	case AdmitRelease:
		s.credits--
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

package budget

import (
	"time"

	"github.com/stagger-go/stagger/internal/clock"
	tune "github.com/stagger-go/stagger/internal/gatetune"
)

// phase is where a Gate stands (see Gate). observe, enter and age are its
// only transitions; gate_table_test.go tests every one.
type phase uint8

const (
	phaseQuiet      phase = iota // nothing failed since a success seen while nobody waited
	phaseFailing                 // the last attempt that reached the server failed
	phaseOutage                  // the outage rule's streak of failures
	phaseRecovering              // a success after failures: the release rule
)

func (p phase) String() string { return [...]string{"quiet", "failing", "outage", "recovering"}[p] }

// failing reports whether the probe and last-chance rules apply (else the
// release rule).
func (p phase) failing() bool { return p == phaseFailing || p == phaseOutage }

// gateState is the estimator's and the scheduler's state, owned by the
// gate's lock. decide (gatedecide.go) reads it and changes nothing.
type gateState struct {
	phase phase
	rand  func() float64
	// streak counts the failures since the last success, from streakAt.
	streak   int
	streakAt time.Time
	// lastReached is when an attempt last reached the server (or a retry
	// was refused after its attempt ended).
	lastReached time.Time
	// lull is the latest interval between two answers of the backend.
	lull time.Duration
	// span is the longest wait of the retries that began to wait since
	// the server last served (the futility rule).
	span time.Duration
	ev   evidence
	pace pacer
}

// newGateState starts at now: failures that make an outage must follow
// tune.Calm without failures, counted from the start.
func newGateState(now time.Time, rand func() float64) gateState {
	pace := pacer{gain: tune.ReleaseGainStart, every: releaseEvery, next: now.Add(releaseEvery)}
	return gateState{rand: rand, lastReached: now, pace: pace, ev: evidence{lastFail: now}}
}

// age forgets, at now, what no attempt has confirmed for longer than
// tune.ProbeGapMax and the longest wait it judged (the ageing rule): a
// state not settled falls back to a new Gate's (the next retry finds out,
// as in a new process), and the evidence of whether retries heal goes.
// It does nothing while a retry waits (waiting) or a probe is out.
func (s *gateState) age(now time.Time, waiting bool) {
	bound := max(s.span, tune.ProbeGapMax)
	if waiting || s.pace.leased(now) {
		return
	}
	if now.Sub(s.lastReached) > bound {
		if !s.settled(now) {
			*s = newGateState(now, s.rand)
			return
		}
		// What the latest streaks measured.
		s.pace.since, s.ev.runs = 0, 0
	}
	if s.ev.calls != 0 && now.Sub(s.ev.lastRetry) > bound {
		s.ev.calls, s.ev.retryFails = 0, 0
	}
}

// settled reports whether a success seen while nobody waits would change nothing and Allow would
// refuse no retry without asking the budget: the Gate's fast paths.
func (s *gateState) settled(now time.Time) bool {
	return !now.Before(s.ev.slowUntil) && s.phase == phaseQuiet && s.streak == 0 && s.span == 0 && s.ev.seen && s.ev.retryFails == 0 &&
		s.pace.gain == tune.ReleaseGainStart && s.pace.gap == 0 && s.pace.backAt.IsZero()
}

// observe: an attempt ended with outcome a. A success ends the streak of
// failures, if any. With idle (nobody waits), only the evidence learns, and
// a success forgets what the failures before it left.
func (s *gateState) observe(now time.Time, a Attempt, idle bool) {
	s.ev.learn(now, a)
	if !s.pace.backAt.IsZero() && a.Overload && a.Outcome == Failure && !a.Pushback {
		// During a return a refusal says the held calls' return fills
		// the room: it holds retries whatever the successes (the
		// overload rule; tune.RoomCut says why).
		s.ev.heldUntil = now.Add(tune.OverloadHold)
	}
	if a.Outcome == Success && s.streak > 0 {
		s.ev.runs, s.ev.lastFail = s.ev.runsAfter(s.streak), s.lastReached
	}
	if a.Load.Reported && s.pace.util > 0 && !idle {
		s.pace = s.pace.steered(now, a.Load.Utilization, false, 0)
	}
	if a.Load.Reported && s.phase != phaseOutage {
		s.pace.util = 1 + a.Load.Utilization
	}
	if idle {
		if a.Outcome == Success {
			s.pace = s.pace.rested(0) // nobody waits: no return is under way
			s.pace.gain, s.pace.gap, s.pace.down = tune.ReleaseGainStart, 0, false
			s.streak, s.span = 0, 0
			if s.phase == phaseOutage {
				s.pace = s.pace.releasedAt(now, s.rand())
			}
			s.phase = phaseQuiet
		}
		return
	}
	// A lease holder reported after a.Took (zero: unknown). One that went
	// before the holder did reports late (its lease lapsed and went to
	// another): the holder keeps it. A holder that failed doubles the gap
	// below.
	probing := a.Admission.probing()
	if probing && !s.pace.until.IsZero() && (a.Took <= 0 || !now.Add(-a.Took).Before(s.pace.at)) {
		s.pace.until = time.Time{}
	}
	if a.Admission == admitRelease || a.Overload && a.Outcome == Failure {
		// A return's pace follows the server's answers: a released
		// retry's, and any refusal for overload, a new call's too, which
		// cuts it (held retries take only the room the new calls leave).
		s.pace = s.pace.answeredIn(now, a.Took, a.Outcome == Success)
	}
	if s.pace.backAt.IsZero() && !s.pace.down && s.pace.util == 0 && (a.Outcome == Success && (s.ev.short < tune.RoomCut || a.Admission != AdmitNone) || a.Outcome != Success && s.ev.cutAt.Equal(now)) {
		// Held retries wait for the room the answers show (the release
		// rule; the room's pace): a success quickens the releases by
		// tune.BackFaster, so that held retries follow the new calls back
		// within about a second of the successes; a failure for overload
		// that cut the overload rule's room slows them by as much, to
		// releaseEvery at worst (halving them held a backend refusing 30 %
		// at random to about one a second). A success of a retry the gate
		// let go halves the interval instead, as slow start does, whatever
		// the room: with no new call served, the held retries' own
		// successes are the only news (a burst of refusals that ended the
		// load left its held retries one a second). After a success the next release comes within every of now.
		if f := tune.BackFaster; a.Outcome != Success {
			s.pace.every = s.pace.within(float64(s.pace.every) / f)
		} else {
			if a.Admission != AdmitNone {
				f = tune.RoomCut
			}
			s.pace.every = s.pace.within(f * float64(s.pace.every))
			s.pace.next = clock.Earlier(s.pace.next, now.Add(s.pace.every))
		}
	}
	switch a.Outcome {
	case Success:
		if a.Took > 0 && a.Admission != AdmitNone {
			s.ev.okTook, s.ev.okAt = a.Took, now
		}
		s.lull, s.lastReached = now.Sub(s.lastReached), now
		s.streak, s.span = 0, 0
		if s.phase == phaseOutage {
			// The calls held through it go back (the release rule): no
			// faster than tune.BackShare times the pace their retries
			// began to wait at, and no slower than that pace itself or
			// releaseEvery, whichever is slower; cuts slow it to
			// tune.BackShare of that pace at most (slowest: a floor of one
			// a second each let a thousand processes with a few held calls
			// each send a thousand a second), the first after a
			// share 1-c of that interval, c drawn at random (so that
			// processes that saw the recovery together do not send theirs
			// together) or whole when a deferred retry found the server
			// back; fewer than tune.BackMinHeld go unpaced, each at its own
			// time (backAfter). Under overload there is no return: c alone
			// times the next release.
			c := s.rand()
			if probing {
				c = 1
			}
			p := s.pace.rested(0)
			if p.gain = tune.ReleaseGainStart; !s.ev.overloaded(now) {
				p.backAt, p.every = now, p.within(0)
				if p.entered >= tune.BackMinHeld {
					came := float64(now.Sub(s.streakAt)) / float64(p.entered)
					p.slowest = time.Duration(max(came/tune.BackShare, float64(releaseEvery)))
					p.every = p.within(min(came/tune.BackShare, max(came, float64(releaseEvery))))
				}
			}
			if p.entered = 0; p.util > 0 && !p.backAt.IsZero() {
				p = p.steered(now, 0, true, max(float64(now.Sub(s.streakAt))/float64(max(s.pace.entered, 1)), 1))
			}
			s.pace = p.releasedAt(now, c)
		}
		if s.phase.failing() {
			s.phase = phaseRecovering
		}
		if a.Admission != AdmitNone {
			s.pace.gain = min(2*s.pace.gain, tune.ReleaseGainMax)
		}
		s.pace.gap /= 2 // a server that serves again is probed sooner
		// During a return, a success quickens the releases only while no attempt was
		// refused for overload lately (the strain, tune.OverloadHold): the server's
		// room is then the new calls'. A success takes its share off
		// the next release's time, never past now (none is kept).
		if p := &s.pace; p.next.After(now) && p.util == 0 && (p.backAt.IsZero() || !s.ev.strained(now)) {
			p.next = clock.Later(p.next.Add(-time.Duration(p.gain*float64(p.every))), now)
		}
	case Failure:
		s.lull, s.lastReached = now.Sub(s.lastReached), now
		e := &s.ev
		if !a.Overload || a.Pushback {
			// A refusal for overload without a pushback is an answer of a
			// backend that is up: it never makes an outage, nor a failing
			// phase (the overload rule holds retries instead; a backend
			// refusing 30 % at random was taken for down in a run of
			// refusals and held its calls to MaxWait). One with a
			// pushback, the server's own shedding, still counts (counted
			// as none, lab mixed-criticality fell below no retry: 0.81
			// against 0.84 at 1.96 attempts per call, 1.33 with it).
			if s.streak == 0 {
				s.streakAt, s.pace.entered = now, 0
			}
			// The outage rule: a streak after calm, of a server whose retries
			// do not heal, or, with retries failing in it, beyond its
			// flakiness or lasting longer than the calls' waits (a server
			// that served, then failed every call for a deadline). Overload
			// helps make none: the sims' fleets are byte-identical without
			// it.
			retriesFailed := e.retryFails >= tune.Evidence
			healthy := e.seen && s.streakAt.Sub(e.lastFail) >= tune.Calm
			down := !e.heals(now, false) && (e.callsN() >= tune.Evidence && e.healed() == 0 || retriesFailed)
			beyond := e.seen && float64(s.streak+1) >= 2*e.runs+tune.Evidence
			lasting := e.seen && s.span > 0 && now.Sub(s.streakAt) >= s.span && retriesFailed
			if s.streak++; s.streak >= tune.Evidence && (healthy && down || beyond && retriesFailed || lasting) {
				s.phase, s.pace.down = phaseOutage, true
			} else if s.phase != phaseOutage {
				s.phase = phaseFailing
			}
		}
		if probing {
			// A failed lease holder doubles the gap, from paceFloor, up to
			// tune.ProbeGapMax.
			s.pace.gap = min(max(2*s.pace.gap, s.pace.pause, paceFloor), tune.ProbeGapMax)
			s.pace.failedAt, s.pace.since = now, 0
		} else if s.pace.since++; (a.Number > 1 || e.known()) && s.pace.gap < tune.QuietGapMax {
			// A new call's attempt failed: the probe gap doubles, up to
			// tune.QuietGapMax (until retries are known to heal or not, a
			// failed first attempt says nothing of it).
			s.pace.gap = min(max(2*s.pace.gap, s.pace.pause), tune.QuietGapMax)
		}
		if a.Admission == admitRelease || a.Admission == AdmitBudget || a.Admission == admitHeal {
			s.pace.gain = max(s.pace.gain/2, tune.ReleaseGainStart)
		}
	}
}

// enter: a retry refused after its attempt failed now begins to wait
// with pause, at most span.
func (s *gateState) enter(now time.Time, pause, span time.Duration) {
	s.lastReached = now
	s.span = max(s.span, span)
	s.pace.entered++
	if !s.phase.failing() && !s.ev.strained(now) {
		// (A refusal for overload lately: the backend is up, and the
		// overload rule holds the retry.)
		s.phase = phaseFailing
	}
	s.pace.gap = max(s.pace.gap, min(pause, tune.ProbeGapMax))
}

// probing reports whether an admission holds the pacer's lease.
func (a Admission) probing() bool { return a == admitProbe || a == AdmitBudget || a == admitLast }

// waiterView is what the rules read of a waiting retry: its Request, and
// its wait.
type waiterView struct {
	Request
	// since is when it began to wait, for pause (its pause ends at
	// since+pause).
	since    time.Time
	pause    time.Duration
	deadline time.Time
	// limit, for a call without a deadline, is when it has waited
	// DeferSettings.MaxWait (endAt).
	limit time.Time
	// holdAt is when the wait ends unless held (the hold rule); heldBy
	// names the rule that first held it ("": none, heldOutage, ...).
	holdAt time.Time
	heldBy string
	// turnAt is when its turn comes, at the estimate when it began to
	// wait (Enter; the end rule reads it without a deadline); lone: it
	// waits as its outage's lone probe instead.
	turnAt time.Time
	lone   bool
	// guardOpen: its guard was open when last asked (the guard rule).
	guardOpen bool
	// spread, uniform in [0, 1), places the call's return after an outage
	// within what its deadline leaves.
	spread float64
}

package budget

import (
	"time"

	"github.com/stagger-go/stagger/internal/clock"
	tune "github.com/stagger-go/stagger/internal/gatetune"
)

// releaseEvery is the release interval while no return is under way: one
// release a second (tune.ReleasePerSecond). paceFloor is the shortest pace
// and probe gap: one of zero would never move again (a failed probe's gap
// doubles from it; successes may halve it to nothing).
const (
	releaseEvery = time.Duration(float64(time.Second) / tune.ReleasePerSecond)
	paceFloor    = time.Microsecond
)

// pacer answers, for every paced waiting retry (a release, a probe, a last
// chance, a call going back after an outage), when the next may go and how
// many may be out, moved by the server's answers.
//
// While the server serves, releases are one cell of the generic cell rate
// algorithm: none goes before next, each that goes adds every to it, and
// none is kept (a pace never bursts); a success takes its share gain of
// every off next. Outside a return, every follows the room (gateState.observe)
// unless down. every is releaseEvery, or during a return (since backAt:
// calls held through an outage go back, each no sooner than backAfter,
// until a success finds none of the retries that waited before backAt
// waiting) the back pace, which each released
// answer moves against the fastest one since. While the server fails, one
// retry at a time is out: it holds the lease (until, from at, with pause)
// and reports how long it took; the next goes once nothing reached the
// server for gap, which its failure doubles (failedAt).
type pacer struct {
	next    time.Time
	every   time.Duration
	gain    float64
	backAt  time.Time
	fastest time.Duration
	// entered counts the retries that began to wait since the streak of
	// failures began: the process's load while the server was down.
	entered int
	// until: the lease ends then unless its holder reports first (the
	// settling rule frees a holder that never reports); at: when it went.
	until, at time.Time
	pause     time.Duration
	failedAt  time.Time
	gap       time.Duration
	// cutAt: a failure last cut the return's pace then, grownAt: a
	// success last grew it (answeredIn).
	cutAt, grownAt time.Time
	// since counts the failures since a lease holder last failed (the
	// futility rule).
	since int
	// down: an outage began since nobody last waited. Until a success
	// finds nobody waiting, the held retries go at the return's pace or
	// releaseEvery, not the room's (gateState.observe): a fleet's return keeps
	// its peak.
	down bool
	// slowest is the slowest a return's pace goes, and the releases' after
	// it while its retries wait (gateState.observe, rested; zero:
	// releaseEvery).
	slowest time.Duration
	// util is 1 plus the utilization the backend last reported (zero:
	// none yet), steeredAt when it last steered a return (steered).
	util      float64
	steeredAt time.Time
}

// rested is p with its return ended: releases go at releaseEvery again,
// or, while its retries still wait, at the return's slowest pace, which
// then stays the slowest (a process's held retries the rest of a fleet's
// return find at one a second each summed with the fleet).
func (p pacer) rested(slowest time.Duration) pacer {
	p.every, p.backAt, p.fastest, p.slowest = max(slowest, releaseEvery), time.Time{}, 0, slowest
	return p
}

// releasedAt is p whose next release may go after a share 1-c of every
// from now (c in [0, 1]: a credit drawn at random, or a whole one).
func (p pacer) releasedAt(now time.Time, c float64) pacer {
	p.next = now.Add(time.Duration((1 - min(c, 1)) * float64(p.every)))
	return p
}

// answeredIn is p once a released retry ended at now after took, ok when
// it succeeded (or any attempt was refused for overload: not ok): the
// return's estimate of the room the backend has for held retries, as
// adaptive concurrency limiters and TCP learn it. A failure halves the
// pace, once per attempt time (only an attempt that began after the
// latest cut, at cutAt, cuts: the others met the same load), to slowest
// at worst. A success says the backend has room: until the first cut the
// pace quickens by tune.BackFaster (slow start), after it the rate grows by
// the slowest rate (one a second at most) per attempt time (additive, by
// the process's own share: the attempt time is the fastest success's since
// the return).
// A multiplicative cut and an additive growth are what bring processes
// that never talk to their share: a pace frozen after a refusal held one
// process of a fleet at an eighth of another's. (A success slower than
// the fastest no longer leaves the pace as it is, TCP Vegas' queue test:
// with the cut to answer the queue, lab unavailable served more without
// it.)
func (p pacer) answeredIn(now time.Time, took time.Duration, ok bool) pacer {
	if p.backAt.IsZero() {
		return p
	}
	if ok && took > 0 && (p.fastest == 0 || took < p.fastest) {
		// A success's time only: a refusal comes back at once, and a
		// fastest set by it made every later success slow (the queue
		// test's time) and an attempt time of a refusal's.
		p.fastest = took
	}
	switch {
	case p.util > 0:
		// The backend's reports steer the pace (steered).
	case !ok:
		if !now.Add(-max(took, p.fastest)).Before(p.cutAt) {
			p.every, p.cutAt, p.grownAt = p.within(2*float64(p.every)), now, now
		}
	case p.cutAt.Before(p.backAt):
		p.every = p.within(tune.BackFaster * float64(p.every))
	default:
		// The rate r (retries a second) grows by tune.ReleasePerSecond per
		// attempt time that passed since it last grew, one at most per
		// success (an attempt time under tune.LastChanceLead counts as that:
		// loopback's would make it leap).
		at := max(p.fastest, tune.LastChanceLead)
		r := float64(time.Second) / float64(p.every)
		r += float64(time.Second) / float64(max(p.slowest, releaseEvery)) * float64(min(now.Sub(p.grownAt), at)) / float64(at)
		p.every, p.grownAt = p.within(float64(time.Second)/r), now
	}
	return p
}

// steered is p once an answer at now reported the backend's utilization
// u (of any call: the backend's own view of the whole fleet). At a
// return (back) the held calls' rate starts at the room the utilization
// reported before the outage (p.util) left, by the share of this
// process's own calls (one each came); after, it grows while u is below
// tune.TargetUtilization and is cut in proportion to how far above it is
// (by half per second when u is 1), as DCTCP cuts by its graded signal.
// The step is a second's worth at most, by the time since the last: every
// process hears the same signal, at a rate of its own, so a fleet of any
// size settles near the target, and no pace has a floor.
func (p pacer) steered(now time.Time, u float64, back bool, came float64) pacer {
	const t = tune.TargetUtilization
	f := float64(min(now.Sub(p.steeredAt), tune.Calm)) / float64(tune.Calm)
	r := float64(time.Second) / float64(p.every)
	switch u0 := p.util - 1; {
	case back:
		r = float64(time.Second) / came * max(t-u0, 0) / max(u0, 1-t)
	case u < t:
		r *= 1 + (t-u)*f
	default:
		r *= 1 - (u-t)/(1-t)/2*f
	}
	p.slowest, p.steeredAt = tune.ProbeGapMax, now
	p.every = p.within(float64(time.Second) / r)
	return p
}

// within is d as p's pace: paceFloor at least, releaseEvery at most, or
// slowest when that is slower (a return's, and what its held retries left).
func (p pacer) within(d float64) time.Duration {
	return time.Duration(min(max(d, float64(paceFloor)), float64(max(p.slowest, releaseEvery))))
}

// backAfter is when w, held through the outage that ended at backAt, goes
// back at the earliest: without a deadline, its pause after it; with one,
// its spread's share of what the deadline leaves before its last chance
// (last), releaseEvery at most (a pause after the return cost calls
// held with a deadline the time they had left: sim blip, 2 points).
func (p *pacer) backAfter(w *waiterView, last time.Time) time.Time {
	if w.deadline.IsZero() {
		return p.backAt.Add(w.pause)
	}
	room := min(last.Sub(p.backAt), releaseEvery)
	return p.backAt.Add(time.Duration(w.spread * float64(max(room, 0))))
}

func (p *pacer) leased(now time.Time) bool { return now.Before(p.until) }

// taken is p once the waiting retry w goes now as how; given gives back
// what taken took, never used. A release moves next by every; anything
// else takes the lease, until a second past w's deadline and
// tune.ProbeGapMax at most (the settling rule: a holder that never reports
// must not keep it long).
func (p pacer) taken(now time.Time, w *waiterView, how Admission) pacer {
	switch {
	case how == admitRelease:
		p.next = clock.Later(p.next, now).Add(p.every)
	case how.probing():
		p.at, p.until, p.pause = now, now.Add(tune.ProbeGapMax), w.pause
		if !w.deadline.IsZero() && w.deadline.Add(tune.Calm).Before(p.until) {
			p.until = w.deadline.Add(tune.Calm)
		}
	}
	return p
}

func (p pacer) given(how Admission) pacer {
	switch {
	case how == admitRelease:
		p.next = p.next.Add(-p.every)
	case how.probing():
		p.until = time.Time{}
	}
	return p
}

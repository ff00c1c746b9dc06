package budget

import (
	"math"
	"time"

	tune "github.com/stagger-go/stagger/internal/gatetune"
)

// releasePace is the release rule's pace.
type releasePace struct {
	// full is when the credits reach one: they accrue at
	// tune.ReleasePerSecond, at most one is kept (no burst), so one time
	// says how many there are (the generic cell rate algorithm).
	full time.Time
	// gain is the share of a credit each success adds.
	gain float64
	// The calls held through the outage that ended at backAt go back one
	// every backEvery at most, the next no sooner than backNext; backMin is
	// the least a released retry took since (the server's latency when it
	// has room).
	backAt, backNext   time.Time
	backEvery, backMin time.Duration
	// entered counts the retries that began to wait since the streak of
	// failures began: the process's load while the server was down.
	entered int
}

func newReleasePace(now time.Time) releasePace {
	return releasePace{gain: tune.ReleaseGainStart, full: now.Add(time.Second / tune.ReleasePerSecond)}
}

// credits is how many credits there are at now, at most one.
func (p *releasePace) credits(now time.Time) float64 {
	return math.Min(1-p.full.Sub(now).Seconds()*tune.ReleasePerSecond, 1)
}

// set makes the credits c at now (at most one is kept).
func (p *releasePace) set(now time.Time, c float64) {
	p.full = now.Add(time.Duration(math.Ceil((1 - math.Min(c, 1)) / tune.ReleasePerSecond * float64(time.Second))))
}

// back: an outage whose failures began at since ended now. The calls held
// through it go back no faster than tune.BackShare times the pace their
// retries began to wait at, the first after a share u (uniform in [0, 1))
// of that gap, so that processes that saw the recovery together do not
// send theirs together.
func (p *releasePace) back(now, since time.Time, u float64) {
	p.backAt, p.backNext, p.backEvery, p.backMin = now, now, 0, 0
	if d := now.Sub(since); p.entered >= tune.BackMinHeld && d > 0 {
		p.backEvery = time.Duration(float64(d) / (tune.BackShare * float64(p.entered)))
		p.backNext = now.Add(time.Duration(u * float64(p.backEvery)))
	}
	p.entered = 0
}

// answered: a released retry ended after took, ok when it succeeded. As
// fast as the fastest since the server came back (within tune.BackSlack),
// it says the server has room, and the back pace quickens by
// tune.BackFaster; served slower, it stays; failed, it halves.
func (p *releasePace) answered(took time.Duration, ok bool) {
	if p.backEvery == 0 {
		return
	}
	if took > 0 && (p.backMin == 0 || took < p.backMin) {
		p.backMin = took
	}
	switch {
	case !ok:
		p.backEvery = min(2*p.backEvery, tune.MaxBackEvery)
	case took <= time.Duration(tune.BackSlower*float64(p.backMin))+tune.BackSlack:
		p.backEvery = time.Duration(tune.BackFaster * float64(p.backEvery))
	}
}

// backAfter is when w, held through the outage that ended at backAt, goes
// back: its own pause after it, and its spread's share of what its
// deadline leaves before its last chance at lead, tune.BackSpreadMax at most.
func (p *releasePace) backAfter(w *waiterView, lead time.Duration) time.Time {
	at := p.backAt.Add(w.pause)
	if w.deadline.IsZero() {
		return at // the back pace alone spaces calls without a deadline
	}
	if room := min(w.lastChanceAt(lead).Sub(at), tune.BackSpreadMax); room > 0 {
		at = at.Add(time.Duration(w.spread * float64(room)))
	}
	return at
}

// probeSlot is the probe and last-chance rules' one slot, and the gap that
// spaces what goes through it.
type probeSlot struct {
	// until: the slot is held until then, unless its holder reports first
	// (the settling rule frees a holder that never reports); at: when the
	// holder went, with pause.
	until, at time.Time
	pause     time.Duration
	// took is how long the latest holder that reported took; failedAt,
	// when the latest one failed.
	took     time.Duration
	failedAt time.Time
	gap      time.Duration
	// since counts the failures since a holder last failed (the futility
	// rule).
	since int
}

func (p *probeSlot) held(now time.Time) bool { return now.Before(p.until) }

// take: the waiting retry w goes now through the slot, held until a
// second past its deadline, and tune.ProbeGapMax at most (the settling
// rule: a holder that never reports must not keep the slot for long).
func (p *probeSlot) take(now time.Time, w *waiterView) {
	p.at, p.pause = now, w.pause
	p.until = now.Add(tune.ProbeGapMax)
	if !w.deadline.IsZero() && w.deadline.Add(tune.ProbeLeaseSlack).Before(p.until) {
		p.until = w.deadline.Add(tune.ProbeLeaseSlack)
	}
}

// report: a holder ended now after took (zero: unknown). One that went
// before the holder did reports late (its slot lapsed and went to
// another): the holder keeps it. A holder that failed doubles the gap,
// from its pause (or tune.GapFloor) at least, up to tune.ProbeGapMax.
func (p *probeSlot) report(now time.Time, took time.Duration, failed bool) {
	if !p.until.IsZero() && (took <= 0 || !now.Add(-took).Before(p.at)) {
		p.until, p.took = time.Time{}, now.Sub(p.at)
	}
	if failed {
		p.gap = min(max(2*p.gap, p.pause, tune.GapFloor), tune.ProbeGapMax)
		p.failedAt, p.since = now, 0
	}
}

// lead is how long before its deadline a last chance goes.
func (p *probeSlot) lead() time.Duration {
	return max(tune.LastChanceLead, tune.LastChanceFactor*p.took)
}

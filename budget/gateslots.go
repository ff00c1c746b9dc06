package budget

import (
	tune "github.com/stagger-go/stagger/internal/gatetune"
	"time"
)

// probeSlots is the probe rule's and the last-chance rule's one slot, and
// the gaps that space what goes through it. Its fields are owned by the
// gate's lock.
type probeSlots struct {
	// out: deferred retries out as probes or last chances (at most one at
	// a time), the latest sent at at with pause pause; the slot is free
	// again at until if it never reports (the settling rule).
	out   int
	at    time.Time
	pause time.Duration
	until time.Time
	// took is how long the latest deferred retry that reported took;
	// failedAt when the latest one failed.
	took     time.Duration
	failedAt time.Time
	// probeGap and lastGap are the probe rule's and the last-chance rule's
	// gaps; enterPause the pause of the latest retry to begin waiting.
	probeGap, lastGap time.Duration
	enterPause        time.Duration
	// since counts the failures recorded since a deferred retry through
	// the slot last failed (the futility rule spaces them by tune.FutileEvery).
	since int
}

// lapsed reports whether the slot is held by a retry that did not report
// in time (the settling rule): free it.
func (p *probeSlots) lapsed(now time.Time) bool {
	return p.out > 0 && !now.Before(p.until)
}

// take: a deferred retry of a wait w goes now through the slot.
func (p *probeSlots) take(now time.Time, w *waiterView) {
	p.out++
	p.at, p.pause = now, w.pause
	if w.deadline.IsZero() {
		p.until = now.Add(tune.ProbeGapMax)
	} else {
		p.until = w.deadline.Add(tune.ProbeLeaseSlack)
	}
}

// report: a deferred retry that held the slot ended now, after took
// (zero: unknown). One that left before the slot's holder did reports late
// (its slot lapsed and went to another): an outcome, but the holder stays
// out. It reports whether the report was the holder's.
func (p *probeSlots) report(now time.Time, took time.Duration) bool {
	late := took > 0 && now.Add(-took).Before(p.at)
	if p.out == 0 || late {
		return false
	}
	p.out--
	p.took = now.Sub(p.at)
	return true
}

// failed: a deferred retry through the slot failed now; both gaps double,
// from its pause (or tune.GapFloor) at least, up to tune.ProbeGapMax.
func (p *probeSlots) failed(now time.Time) {
	base := max(p.pause, tune.GapFloor)
	p.probeGap = min(max(2*p.probeGap, base), tune.ProbeGapMax)
	p.lastGap = min(max(2*p.lastGap, base), tune.ProbeGapMax)
	p.failedAt = now
	p.since = 0
}

// halve: every success halves the gaps: a server that serves again is
// probed sooner when it fails again, one that fails most attempts
// (overloaded) is not probed back to back.
func (p *probeSlots) halve() { p.probeGap, p.lastGap = p.probeGap/2, p.lastGap/2 }

// stretch: a new call's attempt failed; the probe gap doubles from the
// latest waiting retry's pause, up to tune.QuietGapMax.
func (p *probeSlots) stretch() {
	if p.probeGap < tune.QuietGapMax {
		p.probeGap = min(max(2*p.probeGap, p.enterPause), tune.QuietGapMax)
	}
}

// enter: a retry begins to wait with pause; the gaps are at least it.
func (p *probeSlots) enter(pause time.Duration) {
	p.probeGap, p.lastGap, p.enterPause = max(p.probeGap, pause), max(p.lastGap, pause), pause
}

// lead is how long before its deadline a last chance goes.
func (p *probeSlots) lead() time.Duration {
	return max(tune.LastChanceLead, tune.LastChanceFactor*p.took)
}

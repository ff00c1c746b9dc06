package budget

import (
	tune "github.com/stagger-go/stagger/internal/gatetune"
	"time"
)

// probeSlots is the probe and last-chance rules' one slot and the gaps
// that space what goes through it. Owned by the gate's lock.
type probeSlots struct {
	// until: the slot is held until then, unless its holder reports first
	// (the settling rule frees a holder that never reports); at is when
	// the holder went, with pause.
	until time.Time
	at    time.Time
	pause time.Duration
	// took is how long the latest holder that reported took; failedAt
	// when the latest one failed.
	took     time.Duration
	failedAt time.Time
	// gap spaces the probes and the last chances.
	gap time.Duration
	// since counts the failures recorded since a holder last failed (the
	// futility rule).
	since int
}

// held reports whether the slot is held at now.
func (p *probeSlots) held(now time.Time) bool { return now.Before(p.until) }

// take: a deferred retry of a wait w goes now through the slot.
func (p *probeSlots) take(now time.Time, w *waiterView) {
	p.at, p.pause = now, w.pause
	p.until = w.deadline.Add(tune.ProbeLeaseSlack)
	if w.deadline.IsZero() {
		p.until = now.Add(tune.ProbeGapMax)
	}
}

// report: a deferred retry that held the slot ended now, after took (zero:
// unknown). One that went before the holder did reports late (its slot
// lapsed and went to another): the holder keeps it.
func (p *probeSlots) report(now time.Time, took time.Duration) {
	if p.until.IsZero() || took > 0 && now.Add(-took).Before(p.at) {
		return
	}
	p.until = time.Time{}
	p.took = now.Sub(p.at)
}

// failed: a holder failed now; both gaps double, from its pause (or
// tune.GapFloor) at least, up to tune.ProbeGapMax.
func (p *probeSlots) failed(now time.Time) {
	base := max(p.pause, tune.GapFloor)
	p.gap = min(max(2*p.gap, base), tune.ProbeGapMax)
	p.failedAt = now
	p.since = 0
}

// halve: a success halves the gaps, so a server that serves again is
// probed sooner when it fails again.
func (p *probeSlots) halve() { p.gap /= 2 }

// stretch: a new call's attempt failed; the probe gap doubles, up to
// tune.QuietGapMax.
func (p *probeSlots) stretch() {
	if p.gap < tune.QuietGapMax {
		p.gap = min(max(2*p.gap, p.pause), tune.QuietGapMax)
	}
}

// enter: a retry begins to wait with pause; the gaps are at least it.
func (p *probeSlots) enter(pause time.Duration) {
	p.gap = max(p.gap, pause)
}

// lead is how long before its deadline a last chance goes.
func (p *probeSlots) lead() time.Duration {
	return max(tune.LastChanceLead, tune.LastChanceFactor*p.took)
}

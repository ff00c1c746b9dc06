package budget

import (
	"github.com/stagger-go/stagger/internal/clock"
	tune "github.com/stagger-go/stagger/internal/gatetune"

	"math"
	"time"
)

// releasePace is the release rule's pace, owned by the gate's lock.
type releasePace struct {
	// full is when the credits reach one: they accrue at
	// tune.ReleasePerSecond and at most one is kept (no burst), so one time
	// says how many there are (the generic cell rate algorithm).
	full time.Time
	// gain is the share of a credit each success adds.
	gain float64
	// backAt is when the latest outage ended while the server was not
	// overloaded: the calls held through it go back from then, one every
	// backEvery at most, the next no sooner than backNext.
	backAt    time.Time
	backEvery time.Duration
	backNext  time.Time
	// backMin is the least a released retry took since backAt: the
	// recovered server's latency when it has room.
	backMin time.Duration
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

// grow doubles the gain, up to tune.ReleaseGainMax: a deferred retry succeeded.
func (p *releasePace) grow() { p.gain = math.Min(2*p.gain, tune.ReleaseGainMax) }

// shrink halves the gain, not below tune.ReleaseGainStart: a released or paid
// retry failed.
func (p *releasePace) shrink() { p.gain = math.Max(p.gain/2, tune.ReleaseGainStart) }

// back: an outage whose failures began at since ended now. The calls held
// through it go back no faster than tune.BackShare times the pace their
// retries began to wait at (so
// the server meets at most that much more than its usual load), the first
// after a share u (uniform in [0, 1)) of that gap, so that processes that
// saw the recovery together do not send theirs together.
func (p *releasePace) back(now, since time.Time, u float64) {
	p.backAt, p.backNext, p.backEvery, p.backMin = now, now, 0, 0
	if d := now.Sub(since); p.entered >= tune.BackMinHeld && d > 0 {
		p.backEvery = time.Duration(float64(d) / (tune.BackShare * float64(p.entered)))
		p.backNext = now.Add(time.Duration(u * float64(p.backEvery)))
	}
	p.entered = 0
}

// answered: a released retry ended after took, ok when it succeeded.
// Answered about as fast as the fastest since the server came back, it
// says the server has room and the back pace doubles; slower, or failed,
// it halves.
func (p *releasePace) answered(took time.Duration, ok bool) {
	if p.backEvery == 0 {
		return
	}
	if took > 0 && (p.backMin == 0 || took < p.backMin) {
		p.backMin = took
	}
	if ok && took <= time.Duration(tune.BackSlower*float64(p.backMin)) {
		p.backEvery /= 2
		return
	}
	p.backEvery = min(2*p.backEvery, tune.MaxBackEvery)
}

// wentBack: a call held through the outage went back now.
func (p *releasePace) wentBack(now time.Time) {
	p.backNext = clock.Later(p.backNext, now).Add(p.backEvery)
}

// backAfter is when w, held through the outage that ended at backAt, goes
// back: its own pause after it, and its spread's share of what its
// deadline leaves before its last chance at lead.
func (p *releasePace) backAfter(w *waiterView, lead time.Duration) time.Time {
	at := p.backAt.Add(w.pause)
	if room := w.deadline.Add(-lead).Sub(at); room > 0 {
		at = at.Add(time.Duration(w.spread * float64(room)))
	}
	return at
}

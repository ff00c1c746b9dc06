package budget

import (
	"github.com/stagger-go/stagger/internal/clock"
	tune "github.com/stagger-go/stagger/internal/gatetune"

	"math"
	"time"
)

// releasePace is the release rule's pace: the credits a Gate lets waiting
// retries go on once the server serves again, and when the latest outage
// ended. Its fields are owned by the gate's lock.
type releasePace struct {
	// credits, accrued up to creditAt: at most one is kept (no burst).
	credits  float64
	creditAt time.Time
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
	// entered counts the retries that began to wait since enteredAt, the
	// first of them since the latest outage ended: their pace is the
	// process's load while the server was down.
	entered   int
	enteredAt time.Time
}

func newReleasePace(now time.Time) releasePace {
	return releasePace{gain: tune.ReleaseGainStart, creditAt: now}
}

// at is the credits at now: those kept, plus what accrued since creditAt,
// at most one. It changes nothing (accrue keeps the same value).
func (p *releasePace) at(now time.Time) float64 {
	c := p.credits
	if d := now.Sub(p.creditAt); d > 0 {
		c += tune.ReleasePerSecond * d.Seconds()
	}
	return math.Min(c, 1)
}

// accrue adds the credits earned since creditAt, and extra; at most one is
// kept.
func (p *releasePace) accrue(now time.Time, extra float64) {
	if d := now.Sub(p.creditAt); d > 0 {
		p.credits += tune.ReleasePerSecond * d.Seconds()
	}
	p.creditAt = now
	p.credits = math.Min(p.credits+extra, 1)
}

// restart: the server is back after an outage; the first credit is first
// (drawn at random, or a whole one), the gain starts again.
func (p *releasePace) restart(now time.Time, first float64) {
	p.credits, p.creditAt = first, now
}

// grow doubles the gain, up to tune.ReleaseGainMax: a deferred retry succeeded.
func (p *releasePace) grow() { p.gain = math.Min(2*p.gain, tune.ReleaseGainMax) }

// shrink halves the gain, not below tune.ReleaseGainStart: a released or paid
// retry failed.
func (p *releasePace) shrink() { p.gain = math.Max(p.gain/2, tune.ReleaseGainStart) }

// wait is how long until the credits reach one, from c at now: rounded
// up, and at least a millisecond (a wait of 0 would spin).
func (p *releasePace) wait(c float64) time.Duration {
	d := time.Duration(math.Ceil((1 - c) / tune.ReleasePerSecond * float64(time.Second)))
	return max(d, time.Millisecond)
}

// enter: a retry began to wait now.
func (p *releasePace) enter(now time.Time) {
	if p.entered == 0 {
		p.enteredAt = now
	}
	p.entered++
}

// back: an outage ended now. The calls held through it go back no faster
// than tune.BackShare times the pace at which retries began to wait in it (the
// process's own load while the server was down), so that the server that
// just came back meets at most that much more than its usual load; the
// first no sooner than a share u (uniform in [0, 1)) of that pace's gap,
// so that processes that saw the recovery together do not send their
// first back together. A process that held fewer than tune.BackMinHeld sends
// them back by their spread alone.
func (p *releasePace) back(now time.Time, u float64) {
	p.backAt, p.backNext, p.backEvery, p.backMin = now, now, 0, 0
	if d := now.Sub(p.enteredAt); p.entered >= tune.BackMinHeld && d > 0 {
		p.backEvery = time.Duration(float64(d) / (tune.BackShare * float64(p.entered)))
		p.backNext = now.Add(time.Duration(u * float64(p.backEvery)))
	}
	p.entered = 0
}

// answered: a released retry ended after took (zero: at once), ok when it
// succeeded. While the recovered server answers as fast as it did at its
// fastest since it came back (within tune.BackSlower times), it has room: the
// back pace doubles; when it answers slower, or fails, the pace halves
// (a server with room to spare serves the held calls at once; one that
// queues them meets the pace).
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

// backAfter is when a wait w held through the outage that ended at backAt
// goes back (the release rule): its own pause after it, and then a share
// (w.spread, drawn before it is asked) of what the call's deadline leaves
// before its last chance at lead, so that the calls held together do not
// all go back together.
func (p *releasePace) backAfter(w *waiterView, lead time.Duration) time.Time {
	at := p.backAt.Add(w.pause)
	if room := w.deadline.Add(-lead).Sub(at); room > 0 {
		at = at.Add(time.Duration(w.spread * float64(room)))
	}
	return at
}

// Package pace keeps what the attempts of one method under the
// interceptors' per-attempt timer tell of each other (Evidence), so that a
// timer that fires tells a lost attempt from a server slow for all.
package pace

import (
	"sync/atomic"
	"time"

	"github.com/stagger-go/stagger/internal/gatetune"
)

// SlowPart: an attempt that ran a SlowPart-th of its timeout or longer is
// slow. The interceptor's timer counts such a success as a sign of overload,
// and SlowForAll waits that long after a later send: least waste on
// slowdown-90 (BENCHMARKS.md, "Figures behind the code's choices").
const SlowPart = 4

// The evidence's other tuning numbers, each with what set it.
const (
	// stragglerFastPart (Straggler): not measured; timeouts are a few times the latency.
	stragglerFastPart = 2
	// paceSends slices of a paceSliceParts-th of the timeout: TestRealTimeTimerSlowForAll, under
	// load, lost the evidence in a ring of four sends.
	paceSends      = 16
	paceSliceParts = 8
	// scoutGapMax, in timeouts: not measured; as the Gate's probeGapMax bounds its probes.
	scoutGapMax = 64
)

// paceFresh is the Gate's overload hold, so that pace and the Gate forget a slow server together.
var paceFresh = gatetune.OverloadHold

// Evidence is what the attempts of one method under the per-attempt timer
// tell of each other (the rule: interceptor.UnaryClientInterceptor,
// "Per-attempt timeout"; served: answered OK, or a stream's first header). A cut attempt
// is a straggler (budget.Request.Straggler: no sign of overload) when one
// sent after it was served, or in a quiet process when the method's latest
// served attempt took under a stragglerFastPart-th of the timeout; so a quiet
// process whose server slows for all cuts at most one straggler.
//
// Safe for concurrent use (atomics, no lock); the zero value knows nothing.
type Evidence struct {
	// sent: the latest send (Unix ns) of each paceSliceParts-th of the
	// timeout, in a ring, so a burst cannot push out the older sends
	// SlowForAll reads.
	sent     [paceSends]atomic.Int64
	answered atomic.Int64 // the latest start among the attempts served
	// took is how long the latest served took (latency, for the Gate), served
	// at tookAt, per criticality: a server that sheds the less critical
	// serves the more critical sooner.
	took, tookAt [4]atomic.Int64
	// scoutAt: the latest scout's start; scoutGap: until the next (0: perAttempt).
	scoutAt, scoutGap atomic.Int64
	fired             atomic.Int64 // the latest start among the attempts whose timer fired
}

// Fire notes that the timer of the attempt sent at start fired, and
// returns the latest such start before (0: none). Two timers due together
// may run in either order: Straggler answers the same.
func (p *Evidence) Fire(start time.Time) (prev int64) {
	return storeMax(&p.fired, start.UnixNano())
}

// Unfire takes back Fire(start), prev being its answer, for an attempt
// that ended before its timer was due although the timer's event was taken
// first: the timer never fired on it. A later start fired since stays.
func (p *Evidence) Unfire(start time.Time, prev int64) {
	p.fired.CompareAndSwap(start.UnixNano(), prev)
}

// storeMax stores v in a unless a holds as much, and returns what a held.
func storeMax(a *atomic.Int64, v int64) (prev int64) {
	for {
		cur := a.Load()
		if v <= cur || a.CompareAndSwap(cur, v) {
			return cur
		}
	}
}

// Straggler reports whether the attempt sent at start, whose timer fired,
// is a straggler (see Evidence), prevFired being Fire's answer.
func (p *Evidence) Straggler(start, now time.Time, perAttempt time.Duration, level int, prevFired int64) bool {
	s := start.UnixNano()
	answered := p.answered.Load()
	if answered > s {
		return true
	}
	for i := range p.sent {
		if p.sent[i].Load() > s {
			return false
		}
	}
	at := p.tookAt[level].Load()
	fresh := at != 0 && now.UnixNano()-at <= int64(paceFresh)
	return answered > prevFired && fresh && time.Duration(p.took[level].Load()) < perAttempt/stragglerFastPart
}

// Scout reports whether a retry may go now as the method's scout while the
// server is slow for every attempt: without scouts, attempts all lost at
// once would wait for evidence only a retry can give.
func (p *Evidence) Scout(now time.Time, perAttempt time.Duration) bool {
	at, gap := p.scoutAt.Load(), p.scoutGap.Load()
	if gap == 0 {
		gap = int64(perAttempt)
	}
	if at != 0 && now.UnixNano() < at+gap {
		return false
	}
	if !p.scoutAt.CompareAndSwap(at, now.UnixNano()) {
		return false
	}
	if at != 0 {
		p.scoutGap.Store(min(2*gap, scoutGapMax*int64(perAttempt)))
	}
	return true
}

// Latency is how long the latest attempt of criticality level served took,
// if within paceFresh (zero: unknown).
func (p *Evidence) Latency(now time.Time, level int) time.Duration {
	if at := p.tookAt[level].Load(); at == 0 || now.UnixNano()-at > int64(paceFresh) {
		return 0
	}
	return time.Duration(p.took[level].Load())
}

// Send notes an attempt sent at t. A slot keeps the latest time, so a
// goroutine descheduled before it stored cannot put back an older send.
func (p *Evidence) Send(t time.Time, perAttempt time.Duration) {
	slice := max(int64(perAttempt)/paceSliceParts, 1)
	n := t.UnixNano()
	storeMax(&p.sent[uint64(n/slice)%paceSends], n)
}

// Answer notes that the attempt sent at start was served after took.
func (p *Evidence) Answer(start time.Time, took time.Duration, level int) {
	s := start.UnixNano()
	p.took[level].Store(int64(took))
	p.tookAt[level].Store(s + int64(took))
	if s > p.scoutAt.Load() && p.scoutGap.Load() != 0 {
		p.scoutGap.Store(0)
	}
	storeMax(&p.answered, s)
}

// SlowForAll reports whether no attempt sent after start was served, and
// one was sent after it at least a SlowPart-th of perAttempt
// before now.
func (p *Evidence) SlowForAll(start, now time.Time, perAttempt time.Duration) bool {
	minAge := perAttempt / SlowPart
	s := start.UnixNano()
	if p.answered.Load() > s {
		return false
	}
	limit := now.Add(-minAge).UnixNano()
	for i := range p.sent {
		if t := p.sent[i].Load(); t > s && t <= limit {
			return true
		}
	}
	return false
}

package interceptor

import (
	"sync/atomic"
	"time"
)

// pace is what the attempts of one method under stagger's per-attempt timer
// tell of each other (plan.pace): when the latest were sent, the start of
// the newest served (answered with success, or a stream's first header),
// and how long the latest served took (latency, for the Gate). When a timer
// fires it tells a lost attempt from a slow server:
//
//   - an attempt sent after this one was served: this one is lost or stuck
//     on its own, and a retry is worth its load;
//   - attempts were sent after it long enough ago (a quarter of the
//     timeout) and none was served: the server is slow for every attempt,
//     a retry would join its queue, and the timer waits another period
//     (slowForAll);
//   - nothing was sent after it (a quiet process): the timer retries.
//
// The first case, and the quiet one when the method's latest attempt
// served took less than a stragglerFastPart-th of the timeout, make the
// attempt a straggler: its retry is asked for as such
// (budget.Request.Straggler) and its cut is no sign of overload. A quiet
// process whose server slows for every attempt cuts at most one straggler.
// Why: BENCHMARKS.md, "Figures behind the code's choices" (slowdown-90).
type pace struct {
	// sent holds send times (Unix nanoseconds), the latest of each slice of
	// time a paceSliceParts-th of the timeout long, in a ring of paceSends
	// slices: a burst of sends keeps one, so the older sends the
	// slow-for-all rule reads are not pushed out.
	sent [paceSends]atomic.Int64
	// answered is the latest start among the attempts served.
	answered atomic.Int64
	// took is how long the latest attempt served took, served at tookAt,
	// per criticality: a server that sheds the less critical first serves
	// the more critical sooner.
	took, tookAt [4]atomic.Int64
	// scoutAt is when the latest scout went, scoutGap how long after it the
	// next may go (0: perAttempt).
	scoutAt, scoutGap atomic.Int64
	// fired is the latest start among the attempts whose timer fired.
	fired atomic.Int64
}

// fire notes that the timer of the attempt sent at start fired, and
// returns the latest such start before (0: none). Two timers due together
// run in either order; straggler answers the same (the later send is in
// the ring).
func (p *pace) fire(start time.Time) (prev int64) {
	return storeMax(&p.fired, start.UnixNano())
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

// straggler reports whether the attempt sent at start, whose timer fired,
// is a straggler (see pace), prevFired being pace.fire's answer.
func (p *pace) straggler(start, now time.Time, perAttempt time.Duration, level int, prevFired int64) bool {
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

// scout reports whether a retry may go now as the method's scout while the
// server is slow for every attempt: one at a time, the gap doubling from
// perAttempt until an attempt sent after the latest scout is served.
// Without scouts, attempts all lost at once would wait for evidence only a
// retry can give.
func (p *pace) scout(now time.Time, perAttempt time.Duration) bool {
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

// latency is how long the latest attempt of criticality level served took,
// if within paceFresh (zero: unknown).
func (p *pace) latency(now time.Time, level int) time.Duration {
	if at := p.tookAt[level].Load(); at == 0 || now.UnixNano()-at > int64(paceFresh) {
		return 0
	}
	return time.Duration(p.took[level].Load())
}

// send notes an attempt sent at t. A slot keeps the latest time it was
// given, so a goroutine descheduled before it stored cannot put back an
// older send.
func (p *pace) send(t time.Time, perAttempt time.Duration) {
	slice := max(int64(perAttempt)/paceSliceParts, 1)
	n := t.UnixNano()
	storeMax(&p.sent[uint64(n/slice)%paceSends], n)
}

// answer notes that the attempt sent at start was served after took.
func (p *pace) answer(start time.Time, took time.Duration, level int) {
	s := start.UnixNano()
	p.took[level].Store(int64(took))
	p.tookAt[level].Store(s + int64(took))
	if s > p.scoutAt.Load() && p.scoutGap.Load() != 0 {
		p.scoutGap.Store(0)
	}
	storeMax(&p.answered, s)
}

// slowForAll reports whether no attempt sent after start was served, and
// one was sent after it at least minAge before now.
func (p *pace) slowForAll(start, now time.Time, minAge time.Duration) bool {
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

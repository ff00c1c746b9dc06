package interceptor

import (
	"sync/atomic"
	"time"
)

// pace is what the attempts of one method that run under stagger's
// per-attempt timer tell of each other (plan.pace, one per method): when the latest
// few were sent, and the start of the newest one served (answered with
// success, or a stream's first header); and how long the latest attempt
// served took, of those timed (these, and retries), for the Gate
// (latency, budget.Request.Took). When a timer fires and its grace
// ends, it tells a lost attempt from a slow server:
//
//   - an attempt sent after this one was served while this one waits: the
//     server did not serve in order, so this one is lost or stuck on its
//     own (a bad connection, a stuck replica), and a retry is worth its
//     load;
//   - attempts were sent after this one, long enough ago (a quarter of the
//     timeout), and none of those sent after it was served: the server is
//     slow for every attempt (a queue serves this one before them), the
//     retry would join the back of that queue and the work cut off would
//     be wasted, so the timer waits another period (slowForAll); a
//     rejection (the queue full) is no service, and says the same;
//   - nothing was sent after it (a quiet process): nothing is known of
//     the server now, and the timer retries as it always did.
//
// The first case, and the quiet one when the method's latest attempt
// served (sent after the latest earlier one whose timer fired) took less
// than a stragglerFastPart-th of the timeout, make the attempt a
// straggler (straggler): one slow attempt among fast ones, not an
// overload. Its retry is then asked for as such (budget.Request.Straggler:
// a Gate admits it unpaid while retries heal), and the attempt cut off is
// not told to the budget as a sign of overload. A quiet process whose
// server slows down for every attempt cuts at most one attempt as a
// straggler: its retry's timer finds the latest attempt served older than
// the straggler's, whose timer fired.
//
// In the lab's slowdown-90 (BENCHMARKS.md, issue 29) the processes whose
// first timer fired before they had seen a slow success cut their
// attempts off and retried: wasted 2.3 %, success 94.9 % against 96.1 %
// without retries.
type pace struct {
	// sent holds send times (Unix nanoseconds), the latest of each slice
	// of time paceSliceParts-th of the per-attempt timeout long, in a ring
	// of paceSends slices (two timeouts): a burst of sends (callers woken
	// together on a loaded machine, the retries of attempts cut off
	// together) keeps one, so the older sends the slow-for-all rule reads
	// are not pushed out of it (a ring of the latest four sends was: its
	// every later send younger than a quarter of the timeout, the rule
	// cut attempts off on a slow-for-all server, and their retries, sends
	// too, pushed out the next evidence).
	sent [paceSends]atomic.Int64
	// answered is the latest start among the attempts served (Unix
	// nanoseconds).
	answered atomic.Int64
	// took is how long the latest attempt served took, served at tookAt
	// (Unix nanoseconds), for budget.Request.Took, per criticality (its
	// Index): a server that sheds the less critical first serves the more
	// critical sooner.
	took, tookAt [4]atomic.Int64
	// scoutAt is when the latest scout went (Unix nanoseconds), and
	// scoutGap how long after it the next may go (0: perAttempt).
	scoutAt, scoutGap atomic.Int64
	// fired is the latest start among the attempts whose timer fired
	// (Unix nanoseconds).
	fired atomic.Int64
}

// fire notes that the timer of the attempt sent at start fired, and
// returns the latest start among the attempts whose timer fired before
// (0: none). Which of two timers due together runs first is the
// scheduler's choice, and it can return a start later than this one's;
// straggler's answer is the same either way: that later attempt's send
// is in the ring, so straggler returns false before it reads prev.
func (p *pace) fire(start time.Time) (prev int64) {
	s := start.UnixNano()
	for {
		cur := p.fired.Load()
		if s <= cur || p.fired.CompareAndSwap(cur, s) {
			return cur
		}
	}
}

// straggler reports whether the attempt sent at start, whose timer fired,
// of criticality index level, is a straggler (see pace): an attempt sent
// after it was served; or nothing was sent after it, and the method's
// latest attempt served, sent after prevFired (the latest earlier attempt
// whose timer fired: pace.fire), took less than a stragglerFastPart-th of
// perAttempt, within paceFresh.
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

// scout reports whether a retry may go now as the method's scout while
// the server is slow for every attempt: one at a time, the first at once,
// then after a gap that starts at the per-attempt timeout and doubles with
// every scout, until an attempt sent after the latest scout is served
// (answer). Without scouts, a burst of attempts all stuck at once
// (lost by a server that answers the retries) would wait for evidence
// that only a retry can give.
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

// latency is how long the latest attempt of criticality index level
// served took, if one was served within paceFresh (zero: unknown).
func (p *pace) latency(now time.Time, level int) time.Duration {
	if at := p.tookAt[level].Load(); at == 0 || now.UnixNano()-at > int64(paceFresh) {
		return 0
	}
	return time.Duration(p.took[level].Load())
}

// send notes an attempt sent at t under a per-attempt timeout perAttempt.
// A slot keeps the latest send time it was given, not the last one
// stored: a goroutine that read its clock and was descheduled before it
// stored (a loaded machine) would otherwise put back an older send, or one
// a ring's turn old, over a newer one, and what the slow-for-all rule
// reads would depend on which goroutine ran last.
func (p *pace) send(t time.Time, perAttempt time.Duration) {
	slice := max(int64(perAttempt)/paceSliceParts, 1)
	n := t.UnixNano()
	slot := &p.sent[uint64(n/slice)%paceSends]
	for {
		cur := slot.Load()
		if n <= cur || slot.CompareAndSwap(cur, n) {
			return
		}
	}
}

// answer notes that the attempt sent at start, of criticality index
// level, was served, after took.
func (p *pace) answer(start time.Time, took time.Duration, level int) {
	s := start.UnixNano()
	p.took[level].Store(int64(took))
	p.tookAt[level].Store(s + int64(took))
	if s > p.scoutAt.Load() && p.scoutGap.Load() != 0 {
		p.scoutGap.Store(0)
	}
	for {
		cur := p.answered.Load()
		if s <= cur || p.answered.CompareAndSwap(cur, s) {
			return
		}
	}
}

// slowForAll reports whether the attempt sent at start, whose timer fired,
// waits as the others do: no attempt sent after it was served, and one was
// sent after it at least minAge before now.
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

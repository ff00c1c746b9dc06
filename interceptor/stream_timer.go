package interceptor

import (
	"context"
	"sync"
	"time"
)

// streamTimer drives a retried stream's per-attempt timer (attemptTimer).
// The stream has no goroutine of its own, and its reader may be parked in
// the application when the timer is due, so the time.AfterFunc's goroutine
// takes each decision (attemptTimer.take) under mu, on f, the call's
// retryFacts, which the call writes only while no timer of its runs
// (before nextAttempt starts one; after stop, under mu), so every read
// is ordered before the write.
type streamTimer struct {
	mu sync.Mutex
	attemptTimer
	f *retryFacts
	// ctx is the attempt's, which cancel ends; callCtx the call's.
	ctx, callCtx context.Context
	cancel       context.CancelFunc
}

// nextAttempt starts a retried stream's next attempt: its context, the
// cancel that ends it, and its timer (nil: none).
func (c *call) nextAttempt(callCtx context.Context) (ctx context.Context, cancel context.CancelFunc, timer *streamTimer) {
	ctx = c.numberAttempt(callCtx)
	if c.perAttempt <= 0 {
		return ctx, noCancel, nil
	}
	timer = &streamTimer{f: &c.retryFacts, callCtx: callCtx}
	timer.arm(c.attempt, time.Now(), c.perAttempt, c.pace)
	timer.ctx, timer.cancel = context.WithCancel(ctx)
	timer.mu.Lock()
	timer.armNext()
	timer.mu.Unlock()
	return timer.ctx, timer.cancel, timer
}

// armNext arms the timer's next decision; under mu.
func (st *streamTimer) armNext() {
	if due, ok := st.dueAt(); ok {
		st.t = time.AfterFunc(time.Until(due), func() { st.takeDue(due) })
	}
}

// takeDue is the timer's goroutine: the decision due at due, unless the
// timer moved on since.
func (st *streamTimer) takeDue(due time.Time) {
	st.mu.Lock()
	next := timerStopped
	if at, ok := st.dueAt(); ok && at.Equal(due) {
		next = st.takeLocked()
	}
	st.mu.Unlock()
	if next == timerFired {
		st.cancel()
	}
}

// takeLocked takes the decision due now and arms the next one; under mu.
func (st *streamTimer) takeLocked() int32 {
	next := st.take(st.f, st.callCtx, st.ctx.Err() != nil, false)
	st.armNext()
	return next
}

// stopAnswered is stop for an attempt that answered or ended at now: it
// first takes, on the reader's goroutine, the decisions due by now whose
// goroutine has not run yet, so whether the attempt was cut off follows
// from when it ended, not from which goroutine ran first.
func (st *streamTimer) stopAnswered(now time.Time) bool {
	if st == nil {
		return true
	}
	fired := false
	st.mu.Lock()
	for due, ok := st.dueAt(); ok && !now.Before(due); due, ok = st.dueAt() {
		fired = st.takeLocked() == timerFired
	}
	st.mu.Unlock()
	if fired {
		st.cancel()
	}
	return st.stop()
}

// stop stops the timer unless it fired first, and reports whether the
// attempt was not cut off (true for a nil timer).
func (st *streamTimer) stop() bool {
	if st == nil {
		return true
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	st.attemptTimer.stop()
	return st.state != timerFired
}

// stopTimer stops the attempt's timer, which catches up first, and hands
// the call its verdict (attemptTimer.handOver). Call it before judging the
// attempt: a failure while the timer is armed is the attempt's own.
func (c *call) stopTimer(st *streamTimer) (cutOff bool) {
	if st == nil {
		c.slow = false
		return false
	}
	now := time.Now()
	st.stopAnswered(now)
	return st.handOver(c, now)
}

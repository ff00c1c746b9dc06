package interceptor

import (
	"context"
	"sync"
	"time"

	"github.com/stagger-go/stagger/policy"
)

// streamTimer drives a retried stream's per-attempt timer (attemptTimer):
// the stream has no owner goroutine to send the timer's events to (its
// reader may be parked in the application), so the time.AfterFunc's
// goroutine takes each decision itself (attemptTimer.take), under mu, on f,
// a copy of the call's retryFacts as the attempt started: the call's
// goroutine and the timer's share nothing they write. The reader takes
// the decisions due by the time it saw the attempt answer or end
// (catchUp) before it stops the timer, so whether the attempt was cut off
// follows from when it ended, not from which goroutine a loaded scheduler
// ran first. A decision and stop exclude each other through mu: once stop
// returns, the timer's state is final.
type streamTimer struct {
	mu sync.Mutex
	attemptTimer
	f retryFacts
	// ctx is the attempt's, which cancel ends (the timer cuts it off);
	// callCtx the call's.
	ctx, callCtx context.Context
	cancel       context.CancelFunc
}

// nextAttempt starts a retried stream's next attempt and returns its
// context: callCtx itself for a first attempt without a per-attempt
// timeout, else a child carrying the attempt number (AttemptFromContext),
// the grpc-previous-rpc-attempts header and, when the call has one,
// stagger's per-attempt timer (nil otherwise). cancel ends the attempt's
// context; call it once the attempt is over, after timer.stop.
func (c *call) nextAttempt(callCtx context.Context) (ctx context.Context, cancel context.CancelFunc, timer *streamTimer) {
	ctx = c.numberAttempt(callCtx)
	if c.perAttempt > 0 {
		timer = startStreamTimer(callCtx, ctx, c)
		return timer.ctx, timer.cancel, timer
	}
	return ctx, noCancel, nil
}

// startStreamTimer arms the per-attempt timer of c's current attempt,
// whose context derives from ctx; callCtx is the call's context.
func startStreamTimer(callCtx, ctx context.Context, c *call) *streamTimer {
	st := &streamTimer{f: c.retryFacts, callCtx: callCtx}
	st.arm(c.attempt, time.Now(), c.perAttempt, c.pace)
	st.ctx, st.cancel = context.WithCancel(ctx)
	st.mu.Lock()
	st.armNext()
	st.mu.Unlock()
	return st
}

// armNext has the timer's goroutine take its next decision when due.
// Under mu.
func (st *streamTimer) armNext() {
	if due, ok := st.dueAt(); ok {
		st.t = time.AfterFunc(time.Until(due), func() { st.takeDue(due) })
	}
}

// takeDue is the timer's goroutine: the decision due at due, unless the
// timer was stopped or moved on since.
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
	next := st.take(&st.f, st.callCtx, st.ctx.Err() != nil, false)
	st.armNext()
	return next
}

// catchUp takes, on the reader's goroutine, the decisions the timer was
// due to take by now (the attempt's end, or its first response header or
// message, as its goroutine saw it) and whose goroutine has not run yet.
// A no-op for a nil timer.
func (st *streamTimer) catchUp(now time.Time) {
	if st == nil {
		return
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
}

// stopAnswered is stop for an attempt that answered at now (its first
// response header or message): the timer's decisions due by then come
// first (catchUp).
func (st *streamTimer) stopAnswered(now time.Time) bool {
	st.catchUp(now)
	return st.stop()
}

// stop stops the timer unless it fired first. It reports whether the
// attempt was not cut off: true for a nil timer, for one stopped now or
// before, and for one that fired and let the attempt run on; false once it
// cut the attempt off. An attempt must call it before judging its outcome:
// a failure that ends an attempt whose timer is still armed is the
// attempt's own, even if the timer would have fired a moment later.
func (st *streamTimer) stop() bool {
	if st == nil {
		return true
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	st.attemptTimer.stop()
	return st.state != timerFired
}

// served notes, once the attempt was answered with success (its first
// response header), that the server served it
// (pace.answer): none of this method's attempts sent before it and still
// waiting is queued in front of it, in a server that serves in order.
// Nothing for a nil timer or an attempt cut off or ended from above. took
// is how long the attempt took to be served.
func (st *streamTimer) served(took time.Duration) {
	if st == nil || st.f.pace == nil || st.ctx.Err() != nil {
		return
	}
	st.mu.Lock()
	cut := st.state == timerFired
	st.mu.Unlock()
	if !cut {
		st.f.pace.answer(st.start, took, st.f.crit.Index())
	}
}

// stopTimer stops the attempt's timer (see streamTimer.stop) and reports
// whether it cut the attempt off; when it did, the retry it admitted as it
// fired becomes c.timerVerdict, for afterAttempt. It sets c.slow: the
// attempt ran a slowSuccessPart-th of its timer or longer.
func (c *call) stopTimer(st *streamTimer) (cutOff bool) {
	c.slow = false
	if st != nil {
		now := time.Now()
		c.slow = now.Sub(st.start) >= c.perAttempt/slowSuccessPart
		st.catchUp(now)
	}
	if st.stop() {
		if st != nil && st.refused != policy.ReasonNone {
			c.timerRefusedRetry(st.refused)
		}
		return false
	}
	c.timerVerdict, c.timerGrace = st.verdict, st.grace
	c.timerAdmission, c.timerStraggler = st.admission, st.straggler
	return true
}

package interceptor

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/stagger-go/stagger/budget"
	"github.com/stagger-go/stagger/policy"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Maintainers: a stream's per-attempt timer is the one decision taken off
// the call's goroutine (a unary call's is its loop's: unary_timer.go): when it fires, retryFacts.timeoutVerdict (call_retry.go) runs on the timer's
// goroutine, on a copy of the call's retryFacts taken by nextAttempt (not
// of the call), and asks Decide
// whether the policy would retry; if so, after the retry's pause (the
// attempt runs on through it: attemptTimer), retryFacts.timeoutAdmit asks the
// breaker and the budget, in afterAttempt's order, whether the retry can go
// now. Only then does the timer cut the attempt off; stopTimer hands the
// verdict it admitted to afterAttempt, which follows it without asking the
// budget again (Allow spends). Otherwise the attempt runs on and ends as any
// attempt does. Stream attempts use it through nextAttempt and stopTimer. Each decision is taken at its due time (attemptTimer.due,
// graceEnd), by the timer's goroutine or, when the attempt ended or
// answered after that time and the timer's goroutine has not run yet, by
// the attempt's own (catchUp): whether an attempt was cut off follows from
// when it ended, not from which goroutine a loaded scheduler ran first. A
// unary reply that came after the grace's end is still the call's
// success, and the retry the budget paid for does not go (as when a
// caller cancels in a pause).

// stopTimer stops the attempt's timer (see attemptTimer.stop) and reports
// whether it cut the attempt off; when it did, the retry it admitted as it
// fired becomes c.timerVerdict, for afterAttempt. It sets c.slow: the
// attempt ran a slowSuccessPart-th of its timer or longer.
func (c *call) stopTimer(at *attemptTimer) (cutOff bool) {
	if at != nil {
		now := time.Now()
		at.took = now.Sub(at.start)
		at.catchUp(now)
	}
	c.slow = at != nil && at.took >= c.perAttempt/slowSuccessPart
	if at.stop() {
		if at != nil && at.refused != policy.ReasonNone {
			c.timerRefusedRetry(at.refused)
		}
		return false
	}
	c.timerVerdict, c.timerGrace = at.verdict, at.grace
	c.timerAdmission, c.timerStraggler = at.admission, at.straggler
	return true
}

// timerRefusedRetry reports that the current attempt's timer fired, the policy
// would have retried, and the breaker or the budget (reason) refused the
// retry, so the attempt ran on: the per-attempt timeout the user set did
// not cut it (EventTimerRanOn, Report.TimerRefused).
func (c *call) timerRefusedRetry(reason policy.Reason) {
	c.timerRefused++
	c.timerReason = reason
	if c.o == nil {
		return
	}
	ctx := c.ctx
	if ctx == nil {
		ctx = context.Background()
	}
	c.emit(ctx, Event{Kind: EventTimerRanOn, Method: c.method, Attempt: c.attempt, Code: codes.DeadlineExceeded, Reason: reason})
}

// attemptTimer is stagger's own per-attempt timer (perAttemptRecvTimeout,
// with grpc C-core's meaning): it fires unless it was stopped first (at the
// first response header or message, or when the attempt ended on its own).
// When it fires it asks whether the policy would retry an attempt cut off
// now (retryFacts.timeoutVerdict, on a copy of the call's retryFacts as
// the attempt started).
// When it would not, the attempt runs on, as if it had no timer, and ends
// on its own. When it would, the attempt still runs on through the retry's
// pause (its grace: the retry could not go sooner anyway), and only at the
// pause's end does the timer decide, once, whether the retry goes now
// (retryFacts.timeoutAdmit: the breaker and the budget). When it goes, the
// attempt is cut off (its context cancelled) and the retry follows at
// once; when it does not, the attempt runs on. An attempt that answers in
// its grace is the call's answer, and nothing was spent on a retry: a slow
// server gets no retry of the work it is about to finish, and the budget
// and the Gate get a pause's more evidence (other calls' slow answers,
// for the Gate's overload rule) before they are asked. Firing (with its decision) and stopping
// exclude each other: one atomic state, and a mutex that stop waits on
// while a decision runs. So whether the timer cut an attempt off is a fact the timer
// records, never read after the fact from ctx.Err() or a status code, which
// races with the wire: a server's reply can arrive before a context reports
// done, and the other way round.
//
// It is not a context deadline: the attempt's context keeps the caller's
// deadline, which is all the server sees (grpc-timeout), so the server can
// never answer DEADLINE_EXCEEDED for stagger's timer.
type attemptTimer struct {
	state atomic.Int32
	// waited: the timer waited a period more, the server being slow for
	// every attempt (decide); only then may its retry go as a scout.
	waited bool
	// mu is held by fire while it decides; stop waits on it.
	mu sync.Mutex
	// t fires the timer; graceT ends its grace (state timerGrace).
	t, graceT *time.Timer
	ctx       context.Context
	cancel    context.CancelFunc
	// callCtx is the call's context and f a copy of the call's
	// retryFacts as the attempt started: all the decision reads of the
	// call, so that the call's goroutine and the timer's share nothing
	// they write.
	callCtx context.Context
	f       retryFacts
	// verdict is the retry the policy would make when the timer fired
	// (state timerGrace), and the one admitted when it cut the attempt off
	// (state timerFired); grace is how long after firing it cut it off;
	// admission how the budget admitted the retry, and straggler whether
	// the attempt was a straggler (pace.straggler); refused, once it ran
	// on (state timerRanOn), why the retry was refused (ReasonNone: the
	// policy would not retry). All are written before the state, read
	// after it.
	verdict   policy.Verdict
	grace     time.Duration
	admission budget.Admission
	straggler bool
	refused   policy.Reason
	// prevFired is the start of the latest attempt of the method whose
	// timer fired before this one's first did (pace.fire; Unix
	// nanoseconds), and firedOnce says this one's did.
	prevFired int64
	firedOnce bool
	// due is when the timer is due to fire (start plus the timeout, a
	// timeout more each time it waited), graceEnd when its grace is due
	// to end (due plus the pause): the times its decisions are taken at,
	// whenever its goroutine or catchUp runs them, so that they read the
	// evidence recorded by then and not how late a goroutine ran. Under
	// mu.
	due, graceEnd time.Time
	// start is when the timer was armed (stopTimer measures from it);
	// fired how long after it the timer fired, and took how long the
	// attempt took, once stopTimer measured it (zero before; the call's
	// goroutine's only).
	start       time.Time
	fired, took time.Duration
}

// errAttemptTimeout replaces the CANCELED an attempt ends with when
// stagger's per-attempt timer cut it off. The call retries it; it is the
// call's error only when the retry cannot go after all (the caller's
// deadline passed in the pause), and then says DEADLINE_EXCEEDED, as grpc
// C-core does.
var errAttemptTimeout = status.Error(codes.DeadlineExceeded, "interceptor: attempt cut off by the per-attempt timeout (perAttemptRecvTimeout)")

const (
	timerArmed int32 = iota
	// timerDeciding: fire is deciding, under mu.
	timerDeciding
	// timerGrace: it fired, the policy would retry, and the attempt runs
	// on through the retry's pause (until graceT fires).
	timerGrace
	// timerFired: it cut the attempt off (a retry was admitted).
	timerFired
	// timerRanOn: it fired, no retry could go, and the attempt runs on.
	timerRanOn
	timerStopped
)

// startAttemptTimer arms the per-attempt timer of c's current attempt,
// whose context derives from ctx; callCtx is the call's context.
func startAttemptTimer(callCtx, ctx context.Context, c *call) *attemptTimer {
	at := &attemptTimer{callCtx: callCtx, f: c.retryFacts, start: time.Now()}
	at.due = at.start.Add(c.perAttempt)
	if c.pace != nil {
		c.pace.send(at.start, c.perAttempt)
	}
	at.ctx, at.cancel = context.WithCancel(ctx)
	// Under mu: fire, which waits for it, may re-arm at.t (decide).
	at.mu.Lock()
	at.t = time.AfterFunc(c.perAttempt, at.fire)
	at.mu.Unlock()
	return at
}

func (at *attemptTimer) fire() {
	at.mu.Lock()
	if !at.state.CompareAndSwap(timerArmed, timerDeciding) {
		at.mu.Unlock()
		return
	}
	if p := at.f.pace; p != nil && !at.firedOnce {
		at.firedOnce = true
		at.prevFired = p.fire(at.start)
	}
	var v policy.Verdict
	ok := false
	if at.ctx.Err() == nil {
		// Not for an attempt already ended from above (a hedge that lost):
		// no retry follows it.
		v, ok = at.f.timeoutVerdict(at.callCtx)
	}
	next := timerRanOn
	switch {
	case ok && v.Pause > 0:
		// The grace: the attempt runs on through the retry's pause.
		at.verdict, at.fired, next = v, at.due.Sub(at.start), timerGrace
		at.graceEnd = at.due.Add(v.Pause)
		at.graceT = time.AfterFunc(time.Until(at.graceEnd), at.cut)
	case ok:
		next = at.decide(v, at.due)
	}
	at.state.Store(next)
	at.mu.Unlock()
	if next == timerFired {
		at.cancel()
	}
}

// cut ends the grace: the retry goes now, and the attempt is cut off, when
// the breaker and the budget admit it; else the attempt runs on.
func (at *attemptTimer) cut() {
	at.mu.Lock()
	if !at.state.CompareAndSwap(timerGrace, timerDeciding) {
		at.mu.Unlock()
		return
	}
	next := timerRanOn
	if at.ctx.Err() == nil {
		at.grace = at.graceEnd.Sub(at.start) - at.fired
		next = at.decide(at.verdict, at.graceEnd)
	}
	at.state.Store(next)
	at.mu.Unlock()
	if next == timerFired {
		at.cancel()
	}
}

// decide says, under mu, whether the retry v goes at now (the time the
// decision was due: attemptTimer.due or graceEnd), and returns the
// timer's next state. While the server is slow for every attempt
// (pace.slowForAll) the retry would only join the queue the attempt waits
// in: the timer waits another period (timerArmed, re-armed), and asks again
// then, when the evidence may have changed. Otherwise the retry goes when
// the breaker and the budget admit it (retryFacts.timeoutAdmit: timerFired, with
// v as the verdict), a straggler's (pace.straggler) as a healing retry
// when the budget alone would not pay for it; when they do not the
// attempt runs on (timerRanOn), and the call says why (stopTimer).
func (at *attemptTimer) decide(v policy.Verdict, now time.Time) int32 {
	straggler := false
	if p := at.f.pace; p != nil {
		if p.slowForAll(at.start, now, at.f.perAttempt/laterSendAgePart) && (!at.waited || !p.scout(now, at.f.perAttempt)) {
			at.waited = true
			at.due = now.Add(at.f.perAttempt)
			at.t.Reset(time.Until(at.due))
			return timerArmed
		}
		straggler = p.straggler(at.start, now, at.f.perAttempt, at.f.crit.Index(), at.prevFired)
	}
	adm, refused := at.f.timeoutAdmit(straggler)
	if refused != policy.ReasonNone {
		at.refused = refused
		return timerRanOn
	}
	at.verdict, at.admission, at.straggler = v, adm, straggler
	return timerFired
}

// catchUp takes, on the caller's goroutine, the decisions the timer was
// due to take by now (the attempt's end, or its first response header or
// message, as its goroutine saw it) and whose goroutine has not run yet:
// on a loaded machine a timer's goroutine can run after the answer that
// came later than the timer was due, and whether the attempt was cut off
// would then depend on which goroutine the scheduler ran first. With
// catchUp it depends on the times alone: an attempt that ended before its
// timer was due ended on its own; one that ended after met the timer's
// decisions first, taken at their due times (fire, cut). A no-op for a nil
// timer.
func (at *attemptTimer) catchUp(now time.Time) {
	if at == nil {
		return
	}
	for {
		at.mu.Lock()
		st, due := at.state.Load(), at.due
		if st == timerGrace {
			due = at.graceEnd
		}
		at.mu.Unlock()
		switch {
		case now.Before(due):
			return
		case st == timerArmed:
			at.fire()
		case st == timerGrace:
			at.cut()
		default:
			return
		}
	}
}

// stopAnswered is stop for an attempt that answered at now (its first
// response header or message): the timer's decisions due by then come
// first (catchUp).
func (at *attemptTimer) stopAnswered(now time.Time) bool {
	at.catchUp(now)
	return at.stop()
}

// stop stops the timer unless it fired first. It reports whether the
// attempt was not cut off: true for a nil timer, for one stopped now or
// before, and for one that fired and let the attempt run on; false once it
// cut the attempt off. An attempt must call it before judging its outcome:
// a failure that ends an attempt whose timer is still armed is the
// attempt's own, even if the timer would have fired a moment later.
func (at *attemptTimer) stop() bool {
	if at == nil {
		return true
	}
	for {
		switch st := at.state.Load(); st {
		case timerArmed, timerGrace:
			if at.state.CompareAndSwap(st, timerStopped) {
				// Armed, or in its grace (graceT is then set, before
				// the state).
				at.t.Stop()
				if st == timerGrace {
					at.graceT.Stop()
				}
				return true
			}
		case timerDeciding:
			// Wait for the decision (an empty critical section: the wait is the point).
			at.mu.Lock()
			at.mu.Unlock()
		default:
			return st != timerFired
		}
	}
}

// served notes, once the attempt was answered with success (a unary reply,
// a stream's first response header), that the server served it
// (pace.answer): none of this method's attempts sent before it and still
// waiting is queued in front of it, in a server that serves in order.
// Nothing for a nil timer or an attempt cut off or ended from above.
// took is how long the attempt took to be served.
func (at *attemptTimer) served(took time.Duration) {
	if at == nil || at.f.pace == nil || at.ctx.Err() != nil || at.state.Load() == timerFired {
		return
	}
	at.f.pace.answer(at.start, took, at.f.crit.Index())
}

package interceptor

import (
	"context"
	"time"

	"github.com/stagger-go/stagger/budget"
	"github.com/stagger-go/stagger/policy"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// attemptTimer is stagger's per-attempt timer (perAttemptRecvTimeout, with
// grpc C-core's meaning), one type for unary calls and streams: times and
// a state, and the rules UnaryClientInterceptor gives (Per-attempt
// timeout), which decide at its due times (take): as it fires it asks the
// call's decision whether the policy would retry the attempt cut off now
// (retryFacts.shouldRetry, askVerdict), and as the retry's pause (its
// grace) ends whether the breaker and the budget let that retry go now
// (askAdmit). Whether the timer cut an attempt off is a fact the timer
// records, never read after the fact from ctx.Err() or a status code,
// which races with the wire. It is not a context deadline: the server
// sees only the caller's.
//
// Each decision is taken as of its due time (due, graceEnd), whichever
// goroutine takes it and however late: an attempt that ended before a due
// time met none of that time's decision. Two drivers run it. A unary
// call's loop owns its timer (unaryLoop.timer, unary_timer.go): the timer
// sends the loop an event at each due time. A retried stream has no owner
// goroutine to send events to (its reader may be parked in the
// application), so its timer (streamTimer, stream_timer.go) takes the
// decisions on the time.AfterFunc's goroutine, under the timer's own lock,
// on a copy of the call's retryFacts.
type attemptTimer struct {
	// n is the attempt the timer belongs to (0: none yet).
	n     int
	state int32
	// t is the next due time's time.AfterFunc (its driver's); start is
	// when the attempt left, due when the timer is due to fire, graceEnd
	// when its grace is due to end.
	t                    *time.Timer
	start, due, graceEnd time.Time
	// waited: the timer waited a period more, the server being slow for
	// every attempt (decide); only then may its retry go as a scout.
	waited bool
	// prevFired is what pace.fire returned as the timer first fired, and
	// firedOnce says it did.
	prevFired int64
	firedOnce bool
	// verdict is the retry the policy would make when the timer fired, and
	// the one admitted when it cut the attempt off; fired is how long after
	// start it fired, grace how long after firing it cut the attempt off,
	// admission how the budget admitted the retry and straggler whether
	// the attempt was one; refused, once it ran on, why the retry was
	// refused (ReasonNone: the policy would not retry).
	verdict      policy.Verdict
	fired, grace time.Duration
	// decidedAt is the due time of the decision that cut the attempt off
	// or let it run on (timerFired, timerRanOn).
	decidedAt time.Time
	admission budget.Admission
	straggler bool
	refused   policy.Reason
}

// errAttemptTimeout replaces the CANCELED an attempt ends with when
// stagger's per-attempt timer cut it off. The call retries it; it is the
// call's error only when the retry cannot go after all (the caller's
// deadline passed in the pause), and then says DEADLINE_EXCEEDED, as grpc
// C-core does.
var errAttemptTimeout = status.Error(codes.DeadlineExceeded, "interceptor: attempt cut off by the per-attempt timeout (perAttemptRecvTimeout)")

// The timer's states.
const (
	timerArmed int32 = iota
	// timerGrace: it fired, the policy would retry, and the attempt runs
	// on through the retry's pause (until graceEnd).
	timerGrace
	// timerFired: it cut the attempt off (a retry was admitted).
	timerFired
	// timerRanOn: it fired, no retry could go, and the attempt runs on.
	timerRanOn
	timerStopped
)

// arm sets the timer of attempt n, which left at now, due after d.
func (t *attemptTimer) arm(n int, now time.Time, d time.Duration, p *pace) {
	*t = attemptTimer{n: n, start: now, due: now.Add(d)}
	if p != nil {
		p.send(now, d)
	}
}

// dueAt is when the timer's next decision is due: firing at due (armed),
// the grace's end at graceEnd; ok is false when none is to come.
func (t *attemptTimer) dueAt() (at time.Time, ok bool) {
	switch t.state {
	case timerArmed:
		return t.due, true
	case timerGrace:
		return t.graceEnd, true
	}
	return at, false
}

// take takes the decision due now (dueAt), as of its due time, for an
// attempt of the call f whose context ended from above when ended, and
// moves the timer to the state it returns. Armed, the timer fires: the
// attempt runs on unless the policy would retry it (askVerdict); when
// it would, beside its attempt (hedgeOnPerTryTimeout) the retry goes when
// decide admits it, and otherwise the attempt runs on through the retry's
// pause (timerGrace), at whose end decide says whether it is cut off.
// Beside, an admitted retry leaves the timer in timerRanOn (the attempt
// runs on) and returns timerFired: the driver starts that retry. The
// driver arms the timer's next event when the state is timerArmed or
// timerGrace, and cancels the attempt on timerFired (not beside).
func (t *attemptTimer) take(f *retryFacts, callCtx context.Context, ended, beside bool) int32 {
	at, _ := t.dueAt()
	next := timerRanOn
	if t.state == timerGrace {
		if !ended {
			t.grace = t.graceEnd.Sub(t.start) - t.fired
			next = t.decide(f, callCtx, t.verdict, t.graceEnd, false)
		}
		t.set(next, at)
		return next
	}
	if p := f.pace; p != nil && !t.firedOnce {
		t.firedOnce = true
		t.prevFired = p.fire(t.start)
	}
	var v policy.Verdict
	if !ended {
		// Not for an attempt already ended from above.
		v = f.shouldRetry(callCtx, &question{kind: askVerdict, n: f.attempt, err: errAttemptTimeout, timedOut: true}).verdict
	}
	switch {
	case v.Retry && v.Pause > 0 && !beside:
		t.verdict, t.fired, next = v, t.due.Sub(t.start), timerGrace
		t.graceEnd = t.due.Add(v.Pause)
	case v.Retry:
		next = t.decide(f, callCtx, v, at, beside)
	}
	if beside && next == timerFired {
		// The attempt runs on beside the retry, which gets a timer of
		// its own as it starts.
		t.set(timerRanOn, at)
		return timerFired
	}
	t.set(next, at)
	return next
}

// set moves the timer to state next by the decision due at.
func (t *attemptTimer) set(next int32, at time.Time) {
	t.state = next
	if next == timerFired || next == timerRanOn {
		t.decidedAt = at
	}
}

// decide says whether the retry v goes at now (the time the decision was
// due), and returns the timer's next state. While the server is slow for
// every attempt (pace.slowForAll) the retry would only join the queue the
// attempt waits in: the timer waits another period (timerArmed, due again)
// and asks again then, when the evidence may have changed. Otherwise the
// retry goes when the breaker and the budget admit it (askAdmit:
// timerFired), a straggler's (pace.straggler) as a healing retry when the
// budget alone would not pay for it; when they do not, the attempt runs on
// (timerRanOn), and the call says why (call.timerRefusedRetry).
func (t *attemptTimer) decide(f *retryFacts, callCtx context.Context, v policy.Verdict, now time.Time, beside bool) int32 {
	straggler := false
	if p := f.pace; p != nil {
		if p.slowForAll(t.start, now, f.perAttempt/laterSendAgePart) && (!t.waited || !p.scout(now, f.perAttempt)) {
			t.waited = true
			t.due = now.Add(f.perAttempt)
			return timerArmed
		}
		// Not beside its attempt: that retry runs beside the attempt
		// rather than in place of a straggler.
		straggler = !beside && p.straggler(t.start, now, f.perAttempt, f.crit.Index(), t.prevFired)
	}
	ans := f.shouldRetry(callCtx, &question{kind: askAdmit, n: f.attempt, err: errAttemptTimeout, timedOut: true, verdict: v, given: true, straggler: straggler})
	if !ans.verdict.Retry {
		if !ans.unretried {
			// Not the switch turned on since: the breaker or the budget.
			t.refused = ans.verdict.Reason
		}
		return timerRanOn
	}
	t.verdict, t.admission, t.straggler = v, ans.admission, straggler
	return timerFired
}

// stop stops the timer unless it fired first.
func (t *attemptTimer) stop() {
	if t.state == timerArmed || t.state == timerGrace {
		t.state = timerStopped
	}
	if t.t != nil {
		t.t.Stop()
		t.t = nil
	}
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

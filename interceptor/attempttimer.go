package interceptor

import (
	"context"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/stagger-go/stagger/budget"
	"github.com/stagger-go/stagger/internal/pace"
	"github.com/stagger-go/stagger/policy"
)

// attemptTimer is the per-attempt timer (perAttemptRecvTimeout) of unary
// calls and streams, by UnaryClientInterceptor's rules: as it fires it
// asks whether the policy would retry (askVerdict), and as the retry's
// pause (its grace) ends whether the retry goes now (askAdmit). Each
// decision is taken as of its due time, however late. Whether it cut an
// attempt off is its own record, never read from ctx.Err() or a code,
// which race with the wire. A unary call's loop owns its timer
// (unaryLoop.timer); a stream's is streamTimer.
type attemptTimer struct {
	n     int // the attempt's number (0: none yet)
	state int32
	// t is the next due time's AfterFunc.
	t                    *time.Timer
	start, due, graceEnd time.Time
	// waited: the timer waited a period more (decide); only then may its
	// retry go as a scout.
	waited bool
	// prevFired is what pace.Evidence.Fire returned as the timer first
	// fired, due at firedAt (zero: it has not fired, or no evidence).
	prevFired int64
	firedAt   time.Time
	// timerCut is the retry the timer would make (verdict, as it fired) or
	// made (as it cut the attempt off); refused, once it ran on, why the
	// retry was refused.
	timerCut
	refused policy.Reason
	// decidedAt: when the decision that cut the attempt off or let it run
	// on was due.
	decidedAt time.Time
}

// timerCut is the retry the timer admitted as it cut its attempt off
// (zero: none). The call takes it (call.cut) for afterAttempt as the timer
// stops.
type timerCut struct {
	verdict   policy.Verdict
	admission budget.Admission
	straggler bool
}

// errAttemptTimeout replaces the CANCELED of an attempt the timer cut off;
// the call's error only when the retry cannot go after all, as
// DEADLINE_EXCEEDED, as grpc C-core says.
var errAttemptTimeout = status.Error(codes.DeadlineExceeded, "interceptor: attempt cut off by the per-attempt timeout (perAttemptRecvTimeout)")

// The timer's states.
const (
	timerArmed int32 = iota
	// timerGrace: it fired, and the attempt runs on through the pause.
	timerGrace
	// timerFired: it cut the attempt off (a retry was admitted).
	timerFired
	// timerRanOn: it fired, no retry could go: the attempt runs on.
	timerRanOn
	timerStopped
)

func (t *attemptTimer) arm(n int, now time.Time, d time.Duration, p *pace.Evidence) {
	*t = attemptTimer{n: n, start: now, due: now.Add(d)}
	if p != nil {
		p.Send(now, d)
	}
}

func (t *attemptTimer) dueAt() (at time.Time, ok bool) {
	switch t.state {
	case timerArmed:
		return t.due, true
	case timerGrace:
		return t.graceEnd, true
	}
	return at, false
}

// take takes the decision due now, as of its due time (ended: the
// attempt's context ended from above), and returns the timer's next state.
// Armed, it fires: when the policy would retry, the attempt runs on
// through the pause (timerGrace), at whose end decide says whether it is
// cut off. Beside (hedgeOnPerTryTimeout) an admitted retry returns
// timerFired, the timer left in timerRanOn: the loop starts the retry.
func (t *attemptTimer) take(f *retryFacts, callCtx context.Context, ended, beside bool) int32 {
	at, _ := t.dueAt()
	next := timerRanOn
	if t.state == timerGrace {
		if !ended {
			next = t.decide(f, callCtx, t.verdict, t.graceEnd, false)
		}
		t.set(next, at)
		return next
	}
	if p := f.pace; p != nil && t.firedAt.IsZero() {
		t.firedAt = at
		t.prevFired = p.Fire(t.start)
	}
	var v policy.Verdict
	if !ended {
		v = f.shouldRetry(callCtx, &question{kind: askVerdict, n: f.attempt, err: errAttemptTimeout, timedOut: true}).verdict
	}
	switch {
	case v.Retry && v.Pause > 0 && !beside:
		t.verdict, next = v, timerGrace
		t.graceEnd = t.due.Add(v.Pause)
	case v.Retry:
		next = t.decide(f, callCtx, v, at, beside)
	}
	if beside && next == timerFired {
		// The attempt runs on beside the retry.
		t.set(timerRanOn, at)
		return timerFired
	}
	t.set(next, at)
	return next
}

func (t *attemptTimer) set(next int32, at time.Time) {
	t.state = next
	if next == timerFired || next == timerRanOn {
		t.decidedAt = at
	}
}

// decide says whether the retry v goes at now, and returns the timer's
// next state: another period while the server is slow for every attempt
// (pace.Evidence.SlowForAll), else the retry goes when the breaker and the
// budget admit it (a straggler's as a healing retry); else the attempt
// runs on, and the call says why (handOver).
func (t *attemptTimer) decide(f *retryFacts, callCtx context.Context, v policy.Verdict, now time.Time, beside bool) int32 {
	straggler := false
	if p := f.pace; p != nil {
		if p.SlowForAll(t.start, now, f.perAttempt) && (!t.waited || !p.Scout(now, f.perAttempt)) {
			t.waited = true
			t.due = now.Add(f.perAttempt)
			return timerArmed
		}
		// Beside its attempt, a retry replaces no straggler.
		straggler = !beside && p.Straggler(t.start, now, f.perAttempt, f.crit.Index(), t.prevFired)
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

func (t *attemptTimer) stop() {
	if t.state == timerArmed || t.state == timerGrace {
		t.state = timerStopped
	}
	if t.t != nil {
		t.t.Stop()
		t.t = nil
	}
}

// handOver gives c what the stopped timer decided of its attempt, ended at
// end: whether it ran slow (c.slow, a pace.SlowPart-th of the timer or
// more), the retry admitted as it was cut off (c.cut; cutOff), or the
// retry refused as it ran on (EventTimerRanOn, Report.TimerRefused).
func (t *attemptTimer) handOver(c *call, end time.Time) (cutOff bool) {
	c.slow = end.Sub(t.start) >= c.perAttempt/pace.SlowPart
	switch t.state {
	case timerFired:
		c.cut = t.timerCut
		return true
	case timerRanOn:
		if t.refused != policy.ReasonNone {
			c.timerRefused, c.timerReason = c.timerRefused+1, t.refused
			if c.o != nil {
				c.emit(c.hookCtx(), Event{Kind: EventTimerRanOn, Method: c.method, Attempt: c.attempt, Code: codes.DeadlineExceeded, Reason: t.refused})
			}
		}
	}
	return false
}

// armTimer has the timer's event sent when its next decision is due,
// unless the call ended first.
func (l *unaryLoop) armTimer() {
	due, ok := l.timer.dueAt()
	if !ok {
		return
	}
	n, events, done := l.timer.n, l.hc.results, l.hctx.Done()
	if l.alone {
		done = l.cur.Done() // its timer's events are the only ones sent
	}
	l.timer.t = time.AfterFunc(time.Until(due), func() {
		select {
		case events <- unaryEvent{kind: evTimer, n: n, at: due}:
		case <-done:
		}
	})
}

// take takes the decision due now: cut the attempt off, start the retry
// beside it (after the verdict's pause), or wait for the next event.
func (l *unaryLoop) take() {
	t, c := &l.timer, l.c()
	switch t.take(&c.retryFacts, l.callCtx, l.cur.Err() != nil, l.beside) {
	case timerFired:
		if !l.beside {
			l.cancel()
			return
		}
		c.emit(l.callCtx, Event{Kind: EventRetry, Method: c.method, Attempt: c.attempt, Code: codes.DeadlineExceeded, Err: errAttemptTimeout, Pause: t.verdict.Pause})
		c.retry, c.prev, c.afterTimeout = c.retry+1, t.verdict.Pause, true
		c.admission = t.admission // launch hands it to the attempt
		if t.verdict.Pause <= 0 {
			l.launch()
			return
		}
		l.dueT = time.NewTimer(t.verdict.Pause)
	case timerArmed, timerGrace:
		l.armTimer()
	}
}

// endTimer takes the end of the timer's attempt at end: the decisions due
// by then, then the timer hands the call its verdict (handOver). cutOff:
// the timer cut the attempt off.
func (l *unaryLoop) endTimer(end time.Time) (cutOff bool) {
	t := &l.timer
	for due, ok := t.dueAt(); ok && !end.Before(due); due, ok = t.dueAt() {
		l.take()
	}
	t.stop()
	if p := l.c().pace; p != nil && !t.firedAt.IsZero() && end.Before(t.firedAt) {
		// The loop took the timer's event before the end of an attempt
		// that ended before the timer was due: the timer never fired on
		// it, so neither does the evidence (Straggler's prevFired).
		p.Unfire(t.start, t.prevFired)
	}
	if (t.state == timerFired || t.state == timerRanOn) && end.Before(t.decidedAt) {
		// The attempt ended before the decision was due: its end is its
		// own, and afterAttempt settles the admission of the retry that
		// does not go (none when it ran on: one at a time, decide admits
		// only as it cuts the attempt off).
		t.state = timerStopped
		t.handOver(l.c(), end)
		l.c().cut = timerCut{admission: t.admission}
		return false
	}
	return t.handOver(l.c(), end)
}

package interceptor

import (
	"time"

	"github.com/stagger-go/stagger/budget"
	"github.com/stagger-go/stagger/policy"
)

// unaryTimer is the per-attempt timer of a unary call's latest attempt, as
// its loop (unaryLoop) keeps it: times and a state, which the loop alone
// reads and writes. It decides nothing and holds nothing of the call: the
// loop takes its decisions (fire, cut) at their due times, when the
// timer's event {n, due} arrives or, for an attempt that ended after a due
// time whose event has not arrived yet, as it takes the attempt's end
// (endTimer). Its rules are UnaryClientInterceptor's; its states are
// attemptTimer's (timerArmed, timerGrace, timerFired: it cut the attempt
// off, timerRanOn, timerStopped).
type unaryTimer struct {
	// n is the attempt the timer belongs to (0: none yet).
	n     int
	state int32
	// t sends the next due event; start is when the attempt left, due when
	// the timer is due to fire, graceEnd when its grace is due to end.
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

// startTimer arms the per-attempt timer of the attempt just numbered.
func (l *unaryLoop) startTimer() {
	c := l.c
	l.timer.stop()
	now := time.Now()
	l.timer = unaryTimer{n: c.attempt, start: now, due: now.Add(c.perAttempt)}
	if c.pace != nil {
		c.pace.send(now, c.perAttempt)
	}
	l.armTimer(l.timer.due)
}

// armTimer has the timer's event sent at due.
func (l *unaryLoop) armTimer(due time.Time) {
	l.timer.t = l.sendAt(due, unaryEvent{kind: evTimer, n: l.timer.n, at: due})
}

// stop stops the timer unless it fired first.
func (t *unaryTimer) stop() {
	if t.state == timerArmed || t.state == timerGrace {
		t.state = timerStopped
	}
	if t.t != nil {
		t.t.Stop()
		t.t = nil
	}
}

// timerDue takes the timer's event: a decision due at ev.at, unless the
// attempt has ended or the timer moved on since it was sent.
func (l *unaryLoop) timerDue(ev unaryEvent) {
	t := &l.timer
	switch {
	case ev.n != t.n:
	case t.state == timerArmed && ev.at.Equal(t.due):
		l.fire()
	case t.state == timerGrace && ev.at.Equal(t.graceEnd):
		l.cut()
	}
}

// fire is the timer's decision as it fires (at t.due): whether the policy
// would retry an attempt cut off now (timeoutVerdict). If not, the
// attempt runs on. If so, beside its attempt (hedgeOnPerTryTimeout) the
// retry goes when decide admits it; otherwise the attempt runs on through
// the retry's pause (its grace), at whose end cut decides.
func (l *unaryLoop) fire() {
	c, t := l.c, &l.timer
	if p := c.pace; p != nil && !t.firedOnce {
		t.firedOnce = true
		t.prevFired = p.fire(t.start)
	}
	var v policy.Verdict
	ok := false
	if l.cur.Err() == nil {
		// Not for an attempt already ended from above.
		v, ok = c.timeoutVerdict(l.callCtx)
	}
	next := timerRanOn
	switch {
	case ok && l.beside:
		if next = l.decide(v, t.due); next == timerFired {
			// The attempt runs on beside the retry, which gets a timer
			// of its own as it starts.
			l.setTimer(timerRanOn, t.due)
			l.retryBeside(v, t.admission)
			return
		}
	case ok && v.Pause > 0:
		t.verdict, t.fired, next = v, t.due.Sub(t.start), timerGrace
		t.graceEnd = t.due.Add(v.Pause)
		l.timer.t = l.sendAt(t.graceEnd, unaryEvent{kind: evTimer, n: t.n, at: t.graceEnd})
	case ok:
		next = l.decide(v, t.due)
	}
	l.setTimer(next, t.due)
}

// cut is the timer's decision as its grace ends (at t.graceEnd): the retry
// goes now, and the attempt is cut off, when decide admits it; else the
// attempt runs on.
func (l *unaryLoop) cut() {
	t := &l.timer
	next := timerRanOn
	if l.cur.Err() == nil {
		t.grace = t.graceEnd.Sub(t.start) - t.fired
		next = l.decide(t.verdict, t.graceEnd)
	}
	l.setTimer(next, t.graceEnd)
}

// setTimer moves the timer to state next by the decision due at; timerFired
// cancels the attempt.
func (l *unaryLoop) setTimer(next int32, at time.Time) {
	l.timer.state = next
	if next == timerFired || next == timerRanOn {
		l.timer.decidedAt = at
	}
	if next == timerFired {
		l.cancel()
	}
}

// decide says whether the retry v goes at now (the time the decision was
// due), and returns the timer's next state. While the server is slow for
// every attempt (pace.slowForAll) the retry would only join the queue the
// attempt waits in: the timer waits another period (timerArmed, its event
// sent again) and the loop asks again then. Otherwise the retry goes when
// the breaker and the budget admit it (timeoutAdmit: timerFired), a
// straggler's (pace.straggler) as a healing retry when the budget alone
// would not pay for it; when they do not, the attempt runs on
// (timerRanOn).
func (l *unaryLoop) decide(v policy.Verdict, now time.Time) int32 {
	c, t := l.c, &l.timer
	straggler := false
	if p := c.pace; p != nil {
		if p.slowForAll(t.start, now, c.perAttempt/laterSendAgePart) && (!t.waited || !p.scout(now, c.perAttempt)) {
			t.waited = true
			t.due = now.Add(c.perAttempt)
			l.armTimer(t.due)
			return timerArmed
		}
		// Not beside its attempt: that retry runs beside the attempt
		// rather than in place of a straggler.
		straggler = !l.beside && p.straggler(t.start, now, c.perAttempt, c.crit.Index(), t.prevFired)
	}
	adm, refused := c.timeoutAdmit(straggler)
	if refused != policy.ReasonNone {
		t.refused = refused
		return timerRanOn
	}
	t.verdict, t.admission, t.straggler = v, adm, straggler
	return timerFired
}

// endTimer takes the end of the timer's attempt at end: first the
// decisions due by then whose events have not arrived (an attempt that
// ended after a due time met that decision, taken as of then; one that
// ended before it was not timed out, whatever order the events came in),
// then the timer stops. It reports whether the timer cut the attempt off;
// when it did, the retry it admitted becomes c.timerVerdict, for
// afterAttempt. It sets c.slow: the attempt ran a slowSuccessPart-th of
// its timeout or longer.
func (l *unaryLoop) endTimer(end time.Time) (cutOff bool) {
	c, t := l.c, &l.timer
	for {
		if t.state == timerArmed && !end.Before(t.due) {
			l.fire()
		} else if t.state == timerGrace && !end.Before(t.graceEnd) {
			l.cut()
		} else {
			break
		}
	}
	c.slow = end.Sub(t.start) >= c.perAttempt/slowSuccessPart
	t.stop()
	if (t.state == timerFired || t.state == timerRanOn) && end.Before(t.decidedAt) {
		// The attempt ended before the decision was due, and its end
		// reached the loop after the timer's event: its end is its own.
		// A retry the decision admitted does not go.
		l.settleTimer()
		t.state = timerStopped
	}
	switch t.state {
	case timerFired:
		c.timerVerdict, c.timerGrace = t.verdict, t.grace
		c.timerAdmission, c.timerStraggler = t.admission, t.straggler
		return true
	case timerRanOn:
		if t.refused != policy.ReasonNone {
			c.timerRefusedRetry(t.refused)
		}
	}
	return false
}

// settleTimer tells the budget that the retry the timer admitted as it cut
// the attempt off will not go (the attempt's own end came first, or it
// answered): its admission is settled (a Gate's probe lease freed).
func (l *unaryLoop) settleTimer() {
	c, t := l.c, &l.timer
	if t.state == timerFired && c.budget != nil && t.admission != budget.AdmitNone {
		c.budget.Record(budget.Attempt{Number: c.attempt + 1, Outcome: budget.Other, Admission: t.admission})
	}
	t.admission = budget.AdmitNone
}

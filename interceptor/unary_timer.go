package interceptor

import (
	"time"

	"github.com/stagger-go/stagger/budget"
	"github.com/stagger-go/stagger/policy"
)

// A unary call's per-attempt timer is its loop's (unaryLoop.timer), which
// alone reads and writes it: the timer sends the loop an event {n, due} at
// each due time, and the loop takes the decision (attemptTimer.take) when
// that event arrives or, for an attempt that ended after a due time whose
// event has not arrived yet, as it takes the attempt's end (endTimer).

// startTimer arms the per-attempt timer of the attempt just numbered.
func (l *unaryLoop) startTimer() {
	c := l.c()
	l.timer.stop()
	l.timer.arm(c.attempt, time.Now(), c.perAttempt, c.pace)
	l.armTimer()
}

// armTimer has the timer's event sent when its next decision is due.
func (l *unaryLoop) armTimer() {
	if due, ok := l.timer.dueAt(); ok {
		l.timer.t = l.sendAt(due, evTimer, l.timer.n)
	}
}

// timerDue takes the timer's event: a decision due at ev.at, unless the
// attempt has ended or the timer moved on since it was sent.
func (l *unaryLoop) timerDue(ev unaryEvent) {
	if due, ok := l.timer.dueAt(); ok && ev.n == l.timer.n && ev.at.Equal(due) {
		l.take()
	}
}

// take takes the timer's decision due now (attemptTimer.take): it cancels
// the attempt the timer cut off, starts the retry admitted beside its
// attempt, or has the next decision's event sent.
func (l *unaryLoop) take() {
	t := &l.timer
	switch t.take(&l.c().retryFacts, l.callCtx, l.cur.Err() != nil, l.beside) {
	case timerFired:
		if l.beside {
			l.retryBeside(t.verdict, t.admission)
			return
		}
		l.cancel()
	case timerArmed, timerGrace:
		l.armTimer()
	}
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
	c, t := l.c(), &l.timer
	for due, ok := t.dueAt(); ok && !end.Before(due); due, ok = t.dueAt() {
		l.take()
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
// answered): its admission is settled (call.settle).
func (l *unaryLoop) settleTimer() {
	t := &l.timer
	if t.state == timerFired {
		l.c().settle(t.admission)
	}
	t.admission = budget.AdmitNone
}

package interceptor

import (
	"time"

	"github.com/stagger-go/stagger/budget"
)

// A unary call's per-attempt timer is its loop's (unaryLoop.timer): the
// loop takes each decision as its event arrives, or as it takes the end of
// an attempt that ended after a due time whose event has not (endTimer).

// startTimer arms the timer of the attempt just numbered.
func (l *unaryLoop) startTimer() {
	c := l.c()
	l.timer.stop()
	l.timer.arm(c.attempt, time.Now(), c.perAttempt, c.pace)
	l.armTimer()
}

// timerDue takes the timer's event, unless the timer moved on since.
func (l *unaryLoop) timerDue(ev unaryEvent) {
	if due, ok := l.timer.dueAt(); ok && ev.n == l.timer.n && ev.at.Equal(due) {
		l.take()
	}
}

// armTimer has the timer's event sent when its next decision is due.
func (l *unaryLoop) armTimer() {
	if due, ok := l.timer.dueAt(); ok {
		l.timer.t = l.sendAt(due, l.timer.n)
	}
}

// take takes the decision due now: cut the attempt off, start the retry
// beside it, or wait for the next event.
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

// endTimer takes the end of the timer's attempt at end: the decisions due
// by then, then the timer hands the call its verdict (handOver). cutOff:
// the timer cut the attempt off.
func (l *unaryLoop) endTimer(end time.Time) (cutOff bool) {
	t := &l.timer
	for due, ok := t.dueAt(); ok && !end.Before(due); due, ok = t.dueAt() {
		l.take()
	}
	t.stop()
	if (t.state == timerFired || t.state == timerRanOn) && end.Before(t.decidedAt) {
		// The attempt ended before the decision was due: its end is its
		// own, and afterAttempt settles the admission of the retry that
		// does not go.
		adm := budget.AdmitNone
		if t.state == timerFired {
			adm = t.admission
		}
		t.state = timerStopped
		t.handOver(l.c(), end)
		l.c().cut = timerCut{admission: adm}
		return false
	}
	return t.handOver(l.c(), end)
}

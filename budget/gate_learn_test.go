package budget

import (
	"errors"
	"testing"
	"time"
)

// The learning call is known by its call, not by its attempt's number: in
// a fresh process whose server fails, call 1's paid retry 2 fails with
// attempts left, so call 1 goes on as the call that learns whether
// retries heal, its retry 3 held (the hold rule). Call 2's retry 3, which
// waits beside it, is another call's: its wait ends at its hold time, as
// every other call's does while one learns. Taken by its number for the
// learning call, it was held as well.
func TestGateLearningCallIsKnownByItsCall(t *testing.T) {
	g, clk := callOneLearns(t)

	const pause = 100 * time.Millisecond
	other, err := g.Enter(Request{Number: 3, Call: 2}, pause, time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	defer other.Leave()
	learner, err := g.Enter(Request{Number: 3, Call: 1}, pause, time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	defer learner.Leave()
	clk.advance(2 * pause) // past both hold times

	if next := poll(t, learner, AdmitNone); learner.err() != nil || next.IsZero() {
		t.Fatalf("the learning call's retry: Err %v, next %v; want held", learner.err(), next)
	}
	poll(t, other, AdmitNone)
	if err := other.err(); !errors.Is(err, errWaitEnded) {
		t.Fatalf("another call's retry of the same number: Err %v; want its wait ended (%v), not held as the learning call", err, errWaitEnded)
	}
}

// Another call's last retry, of the learning call's next number, is not
// the probe that learns either: its wait ends at its hold time. Taken by
// its number for the learning call, it went as the probe, spending the
// learning call's turn on a call that cannot go on learning.
func TestGateLastRetryOfAnotherCallDoesNotLearn(t *testing.T) {
	g, clk := callOneLearns(t)

	const pause = 100 * time.Millisecond
	other, err := g.Enter(Request{Number: 3, Call: 2, Last: true}, pause, time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	defer other.Leave()
	clk.advance(2 * pause) // past its hold time
	poll(t, other, AdmitNone)
	if err := other.err(); !errors.Is(err, errWaitEnded) {
		t.Fatalf("another call's last retry of the learning call's next number: Err %v; want its wait ended (%v), not the probe", err, errWaitEnded)
	}
}

// callOneLearns returns a fresh process's Gate whose server fails, after
// call 1's paid retry 2 failed with attempts left: call 1 goes on as the
// call that learns whether retries heal.
func callOneLearns(t *testing.T) (*Gate, *manualClock) {
	t.Helper()
	clk := &manualClock{now: t0}
	b := &switchBudget{}
	g := newGate(t, b, DeferSettings{}, clk)
	g.Record(Attempt{Number: 1, Call: 1, Outcome: Failure})
	b.open.Store(true)
	if !g.Allow(Request{Number: 2, Call: 1}) {
		t.Fatal("the budget's retry was refused")
	}
	b.open.Store(false)
	g.Record(Attempt{Number: 2, Call: 1, Outcome: Failure})
	return g, clk
}

// The learning call keeps its turn until its call ends. In a fresh process
// whose server fails, call 1's retry 2 goes as the probe and fails with
// attempts left: call 1 learns. Call 2's paid retry 2, failed while call
// 1's retry 3 waits out its pause, took the turn: call 1's wait ended at
// its hold time, and each further paid retry that failed would take it
// again, so no call went on learning. Call 2's retry 3 is the one whose
// wait ends; once call 1's ends without going, the turn is free again.
func TestGateLearningCallKeepsItsTurn(t *testing.T) {
	clk := &manualClock{now: t0}
	b := &switchBudget{}
	g := newGate(t, b, DeferSettings{}, clk)
	const pause = 100 * time.Millisecond
	g.Record(Attempt{Number: 1, Call: 1, Outcome: Failure})
	probe, err := g.Enter(Request{Number: 2, Call: 1}, pause, time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	defer probe.Leave()
	clk.advance(2 * pause) // past its hold time: nobody told anything yet
	poll(t, probe, admitProbe)
	g.Record(Attempt{Number: 2, Call: 1, Outcome: Failure, Admission: admitProbe})

	learner, err := g.Enter(Request{Number: 3, Call: 1}, 4*pause, time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	defer learner.Leave()
	clk.advance(pause)
	g.Record(Attempt{Number: 1, Call: 2, Outcome: Failure})
	b.open.Store(true)
	if !g.Allow(Request{Number: 2, Call: 2}) {
		t.Fatal("the budget's retry of call 2 was refused")
	}
	b.open.Store(false)
	g.Record(Attempt{Number: 2, Call: 2, Outcome: Failure})
	other, err := g.Enter(Request{Number: 3, Call: 2}, pause, time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	defer other.Leave()
	clk.advance(5 * pause) // past both hold times

	if next := poll(t, learner, AdmitNone); learner.err() != nil || next.IsZero() {
		t.Fatalf("the learning call's retry: Err %v, next %v; want held", learner.err(), next)
	}
	poll(t, other, AdmitNone)
	if err := other.err(); !errors.Is(err, errWaitEnded) {
		t.Fatalf("call 2's retry 3: Err %v; want its wait ended (%v), call 1 learning", err, errWaitEnded)
	}

	learner.Leave() // call 1 ends: its caller left
	third, err := g.Enter(Request{Number: 3, Call: 3}, pause, time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	defer third.Leave()
	clk.advance(2 * pause)
	if next := poll(t, third, AdmitNone); third.err() != nil || next.IsZero() {
		t.Fatalf("call 3's retry 3 once call 1 left: Err %v, next %v; want held, learning", third.err(), next)
	}
}

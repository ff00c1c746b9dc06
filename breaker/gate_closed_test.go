package breaker

import (
	"testing"
	"time"

	"github.com/stagger-go/stagger/budget"
	"github.com/stagger-go/stagger/criticality"
)

// Issue 88's third defect: a retry a breaker guards goes within 100 ms of
// the breaker closing, even when another method's probe closed it (the
// Gate counted only its own answers as news: the waiter went at the time
// its guard's refusal named, or waited to its end).
func TestGateGuardedWaiterGoesWhenAnotherMethodCloses(t *testing.T) {
	clk := &manualClock{now: t0}
	var changes []Change
	br := newTestBreaker(t, Settings{ConsecutiveFailures: 2, ProbeEvery: 1, BreakDuration: time.Second}, clk, &changes)
	// The waiting method's Gate; its budget refuses every retry.
	g, err := budget.Deferring(&switchBudget{}, budget.DeferSettings{}, budget.WithClock(clk.Now))
	if err != nil {
		t.Fatal(err)
	}
	admitN(t, br, budget.Failure, 2) // open
	g.Record(budget.Attempt{Number: 1, Outcome: budget.Failure})
	w, err := g.Enter(budget.Request{Number: 2, Guard: br.Guard(criticality.Unset, nil)}, 100*time.Millisecond, time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Leave()
	// step runs the gate's loop at each time it names until at, taking
	// the waiter's verdict when it comes.
	var went budget.Admission
	var ended error
	take := func() {
		select {
		case <-w.Ready():
			if went == budget.AdmitNone && ended == nil {
				went, ended = w.Take()
			}
		default:
		}
	}
	step := func(at time.Time) {
		for {
			take()
			next := g.Tick()
			take()
			if next.IsZero() || next.After(at) {
				break
			}
			clk.advance(next.Sub(clk.Now()))
		}
		if clk.Now().Before(at) {
			clk.advance(at.Sub(clk.Now()))
			g.Tick()
			take()
		}
	}
	step(t0.Add(900 * time.Millisecond))
	// Another method's first attempt takes the half-open probe as the break
	// ends; served, it closes the breaker at +1.5 s.
	clk.advance(t0.Add(time.Second + time.Millisecond).Sub(clk.Now()))
	if err := br.Admit(criticality.Unset, nil); err != nil {
		t.Fatalf("the other method's first attempt: %v; want it to go as the probe", err)
	}
	step(t0.Add(1500 * time.Millisecond))
	if went != budget.AdmitNone || ended != nil {
		t.Fatalf("before the breaker closed: %v, %v", went, ended)
	}
	br.Record(budget.Success, true, criticality.Unset, nil)
	closedAt := clk.Now()
	step(closedAt.Add(100 * time.Millisecond))
	if went == budget.AdmitNone {
		t.Fatalf("100 ms after the breaker closed the guarded retry still waits (%v)", ended)
	}
}

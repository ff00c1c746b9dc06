package budget

import (
	"errors"
	"testing"
	"time"
)

// The futility rule: once the outage has lasted as long as the longest wait
// of the retries that began to wait since the server last served, a retry
// fails at once while another waits; alone, it waits as the probe. Calls
// already waiting keep their chance, and a success ends the rule.
func TestGateFutility(t *testing.T) {
	clk := &manualClock{now: t0}
	g := downServer(newGate(t, &switchBudget{}, DeferSettings{}, clk))
	for range outageStreak {
		g.Record(Attempt{Number: 1, Outcome: Failure})
	}
	const deadline = 2 * time.Second
	early, err := g.enter(retry2, 0, clk.Now().Add(deadline))
	if err != nil {
		t.Fatal(err)
	}
	defer early.Leave()
	// Within the calls' deadlines, retries wait.
	clk.advance(deadline - time.Millisecond)
	w, err := g.enter(retry2, 0, clk.Now().Add(deadline))
	if err != nil {
		t.Fatalf("%v into the outage: enter = %v, want a wait", deadline-time.Millisecond, err)
	}
	w.Leave()
	// Past them, a retry fails at once while another waits.
	clk.advance(time.Millisecond)
	if _, err := g.enter(retry2, 0, clk.Now().Add(deadline)); !errors.Is(err, ErrOutageLasting) {
		t.Fatalf("%v into the outage, one waiting: enter = %v, want ErrOutageLasting", deadline, err)
	}
	// The early wait keeps its chance: here, the probe.
	if a, _ := early.Poll(); a != AdmitProbe || early.Err() != nil {
		t.Fatalf("the early wait: Poll = %v, Err %v; want the probe", a, early.Err())
	}
	early.Leave()
	// Alone, a retry waits: it is the probe.
	probe, err := g.enter(retry2, 0, clk.Now().Add(deadline))
	if err != nil {
		t.Fatalf("alone: enter = %v, want a wait", err)
	}
	defer probe.Leave()
	if _, err := g.enter(retry2, 0, clk.Now().Add(deadline)); !errors.Is(err, ErrOutageLasting) {
		t.Fatalf("beside the probe: enter = %v, want ErrOutageLasting", err)
	}
	// A success (a new call's first attempt) ends the outage and the rule.
	g.Record(Attempt{Number: 1, Outcome: Success})
	w2, err := g.enter(retry2, 0, clk.Now().Add(deadline))
	if err != nil {
		t.Fatalf("after a success: enter = %v, want a wait", err)
	}
	w2.Leave()
	if st := g.State(); st.DeferGaveUp != 2 {
		t.Fatalf("gave up %d, want the 2 failed at once", st.DeferGaveUp)
	}
}

// A process whose calls have no deadline waits MaxWait at most: the
// futility rule counts that as their wait.
func TestGateFutilityWithoutDeadlines(t *testing.T) {
	clk := &manualClock{now: t0}
	g := downServer(newGate(t, &switchBudget{}, DeferSettings{MaxWait: time.Second}, clk))
	for range outageStreak {
		g.Record(Attempt{Number: 1, Outcome: Failure})
	}
	w, err := g.enter(retry2, 0, time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Leave()
	clk.advance(time.Second)
	if _, err := g.enter(retry2, 0, time.Time{}); !errors.Is(err, ErrOutageLasting) {
		t.Fatalf("MaxWait into the outage: enter = %v, want ErrOutageLasting", err)
	}
}

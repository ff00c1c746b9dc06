package budget

import (
	"errors"
	"slices"
	"testing"
	"time"

	tune "github.com/stagger-go/stagger/internal/gatetune"
)

// The backlog rule: during a return whose pace a refusal for overload
// braked, a held retry whose turn at that pace comes after its wait ends
// (and before the brake can lift) ends at once, saying so; every one it
// lets wait goes before its wait ends.
func TestGateBacklogEndsWaitsThePaceCannotReach(t *testing.T) {
	clk := &manualClock{now: t0}
	const maxWait = 3 * time.Second
	g := downServer(newGate(t, &switchBudget{}, DeferSettings{MaxWait: maxWait}, clk))
	for range tune.OutageStreak {
		g.Record(Attempt{Number: 1, Outcome: Failure})
	}
	// Twenty calls' retries held through the outage, 100 ms apart.
	ws := make([]*Waiter, 20)
	for i := range ws {
		w, err := g.Enter(retry2, 10*time.Millisecond, time.Time{})
		if err != nil {
			t.Fatal(err)
		}
		ws[i] = w
		clk.advance(100 * time.Millisecond)
		g.Tick()
		// The outage's probes fail; their calls end.
		for j, w := range ws[:i+1] {
			if w == nil {
				continue
			}
			select {
			case <-w.Ready():
				if a, err := w.Take(); a != admitProbe || err != nil {
					t.Fatalf("waiter %d in the outage: %v, %v; want a probe", j, a, err)
				}
				g.Record(Attempt{Number: 2, Outcome: Failure, Admission: admitProbe, Final: true})
				ws[j] = nil
			default:
			}
		}
	}
	probes := 0
	for _, w := range ws {
		if w == nil {
			probes++
		}
	}
	ws = slices.DeleteFunc(ws, func(w *Waiter) bool { return w == nil })
	// The return (a new call served), then a new call refused for
	// overload: the pace halves and nothing quickens it for 5 s.
	clk.advance(500 * time.Millisecond)
	g.Record(Attempt{Number: 1, Outcome: Success})
	g.Record(Attempt{Number: 1, Outcome: Failure, Overload: true, Pushback: true})
	braked := clk.Now()
	g.Record(Attempt{Number: 1, Outcome: Success})
	g.mu.Lock()
	every, next := g.st.pace.every, g.st.pace.next
	g.mu.Unlock()
	ended, admitted, kept := 0, 0, 0
	for i, w := range ws {
		select {
		case <-w.Ready():
		default:
			kept++
			continue
		}
		if w.err() == nil {
			// Released at once (its turn had come).
			if a, err := w.Take(); a != admitRelease || err != nil {
				t.Fatalf("waiter %d: %v, %v at the brake; want a release or the backlog rule's end", i, a, err)
			}
			admitted++
			continue
		}
		if !errors.Is(w.err(), errBacklog) {
			t.Fatalf("waiter %d ended at the brake with %v, want the backlog rule's end", i, w.err())
		}
		ended++
		// It could not have gone in time: its turn, after those let
		// wait before it, is no sooner than its end.
		turn := next.Add(time.Duration(kept) * every)
		if limit := w.view.limit; turn.Before(limit) {
			t.Errorf("waiter %d ended by the backlog rule; its turn %v came before its end %v", i, turn.Sub(t0), limit.Sub(t0))
		}
	}
	if ended == 0 || ended == len(ws) {
		t.Fatalf("the backlog rule ended %d of %d held retries (pace %v), want some, not all", ended, len(ws), every)
	}
	// Every one it let wait goes, before its wait ends, while the brake
	// lasts.
	for i, w := range ws {
		if w.err() != nil || w.state == waitOut {
			continue
		}
		for {
			clk.set(g.Tick())
			select {
			case <-w.Ready():
			default:
				continue
			}
			break
		}
		if a, err := w.Take(); a != admitRelease || err != nil {
			t.Fatalf("waiter %d: %v, %v; want a release", i, a, err)
		}
		admitted++
		g.Record(Attempt{Number: 2, Outcome: Success, Admission: admitRelease, Took: time.Millisecond})
		if !clk.Now().Before(braked.Add(tune.OverloadHold)) {
			t.Fatalf("waiter %d went after the brake lifted", i)
		}
	}
	t.Logf("%d held at the return (%d probes before), pace %v: %d ended by the backlog rule at once, %d released", len(ws), probes, every, ended, admitted)
	if ended+admitted != len(ws) {
		t.Fatalf("ended %d + admitted %d != %d (and %d probes)", ended, admitted, len(ws), probes)
	}
	st := g.State()
	if st.Deferred != st.DeferAdmitted+st.DeferGaveUp+uint64(st.Waiting) {
		t.Errorf("counters do not add up: %+v", st)
	}
}

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
	ws, probes := heldThroughOutage(t, g, clk, func(time.Time) time.Time { return time.Time{} })
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

// heldThroughOutage makes an outage at g and holds twenty calls' retries
// through it, 100 ms apart, each with the deadline deadline(entry) (zero:
// none); the outage's probes fail and their calls end. It returns those
// still held, and how many went as probes.
func heldThroughOutage(t *testing.T, g *Gate, clk *manualClock, deadline func(time.Time) time.Time) (ws []*Waiter, probes int) {
	t.Helper()
	for range tune.OutageStreak {
		g.Record(Attempt{Number: 1, Outcome: Failure})
	}
	ws = make([]*Waiter, 20)
	for i := range ws {
		w, err := g.Enter(retry2, 10*time.Millisecond, deadline(clk.Now()))
		if err != nil {
			t.Fatal(err)
		}
		ws[i] = w
		clk.advance(100 * time.Millisecond)
		g.Tick()
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
				probes++
			default:
			}
		}
	}
	return slices.DeleteFunc(ws, func(w *Waiter) bool { return w == nil }), probes
}

// While a refusal has the gate failing (until the next success), the
// backlog rule spares a held call with a deadline: it may go as its last
// chance. Once a success ends the failing, the rule ends those the pace
// cannot reach.
func TestGateBacklogSparesLastChancesWhileFailing(t *testing.T) {
	clk := &manualClock{now: t0}
	g := downServer(newGate(t, &switchBudget{}, DeferSettings{}, clk))
	ws, _ := heldThroughOutage(t, g, clk, func(at time.Time) time.Time { return at.Add(3 * time.Second) })
	clk.advance(500 * time.Millisecond)
	g.Record(Attempt{Number: 1, Outcome: Success})
	g.Record(Attempt{Number: 1, Outcome: Failure, Overload: true, Pushback: true})
	g.Tick()
	for i, w := range ws {
		if errors.Is(w.err(), errBacklog) {
			t.Fatalf("waiter %d (with a deadline) ended by the backlog rule while the gate was failing", i)
		}
	}
	g.Record(Attempt{Number: 1, Outcome: Success})
	ended := 0
	for _, w := range ws {
		if errors.Is(w.err(), errBacklog) {
			ended++
		}
		w.Leave()
	}
	if ended == 0 {
		t.Fatalf("no held call of %d ended by the backlog rule once the gate served again", len(ws))
	}
}

// During a return, every waiting retry goes at the return's pace, the
// ones that began to wait just before it too: the heal rule, which lets a
// retry go after its pause where retrying heals, does not apply while the
// held ones go back (a fleet of 20 processes sent 35 retries in the first
// 100 ms of a return that way, 1.13-1.21x the backend's capacity).
func TestGateReturnPacesRetriesNotHeldYet(t *testing.T) {
	clk := &manualClock{now: t0}
	g := newGate(t, &switchBudget{}, DeferSettings{}, clk)
	g.Record(Attempt{Number: 1, Outcome: Success})
	clk.advance(2 * tune.HealthyGap)
	g.mu.Lock()
	g.st.ev.retryFails = tune.HealMinSamples // retries failed: the server is down, not flaky
	g.mu.Unlock()
	for range tune.OutageStreak {
		g.Record(Attempt{Number: 1, Outcome: Failure})
	}
	var ws []*Waiter
	const pause = 100 * time.Millisecond
	for i := range 8 {
		w, err := g.Enter(retry2, pause, time.Time{})
		if err != nil {
			t.Fatal(err)
		}
		defer w.Leave()
		ws = append(ws, w)
		if i < 6 {
			clk.advance(time.Second) // past its hold time: held by the outage
			g.Tick()
		}
	}
	g.mu.Lock()
	phase, held := g.st.phase, 0
	for _, w := range ws {
		if w.view.held {
			held++
		}
	}
	g.mu.Unlock()
	if phase != phaseOutage || held != 6 {
		t.Fatalf("before the return: phase %v, %d held; want an outage, 6 held", phase, held)
	}
	// The return: a new call served; the evidence says retries heal (no
	// retry failed since the success, no call that retried is known).
	g.Record(Attempt{Number: 1, Outcome: Success})
	g.mu.Lock()
	heals := g.st.ev.heals(clk.Now(), false)
	g.mu.Unlock()
	if !heals {
		t.Fatal("after the return, the evidence does not say retries heal: the test shows nothing")
	}
	// Past the last two's pauses: whatever goes, goes by the pace, one at
	// a time.
	for step := range 20 {
		clk.advance(pause / 4)
		g.Tick()
		went := 0
		for i, w := range ws {
			select {
			case <-w.Ready():
			default:
				continue
			}
			a, err := w.Take()
			if err != nil || a == AdmitNone {
				continue // ended, or taken before
			}
			if a == admitHeal {
				t.Fatalf("step %d: waiter %d went by the heal rule during the return", step, i)
			}
			went++
		}
		if went > 1 {
			t.Fatalf("step %d: %d retries went at once during the return, want the pace's one", step, went)
		}
	}
}

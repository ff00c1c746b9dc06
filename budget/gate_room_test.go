package budget

import (
	"testing"
	"time"

	tune "github.com/stagger-go/stagger/internal/gatetune"
)

// The overload rule's estimate: a refusal for overload without a pushback
// holds retries until successes give back the room it took, not for
// tune.OverloadHold (a backend refusing 30 % at random had every retry
// held to its limit).
func TestGateRefusalAmongSuccessesHoldsUntilServed(t *testing.T) {
	refused := Attempt{Number: 1, Outcome: Failure, Overload: true}
	served := Attempt{Number: 1, Outcome: Success}
	for _, tc := range []struct {
		name string
		// refusals are recorded a millisecond apart, each attempt having
		// taken took; then successes, until a retry is admitted.
		refusals int
		took     time.Duration
		want     int // successes before a retry is admitted
	}{
		{"one refusal", 1, 0, 1},
		{"two refusals in a row", 2, 0, 2},
		{"a burst of refusals: two successes end it", 8, 0, 2},
		// The second attempt began before the first refusal's cut: it
		// met the same load, and cuts nothing.
		{"two refusals of one attempt time", 2, 10 * time.Millisecond, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clk := &manualClock{now: t0}
			open := &switchBudget{}
			open.open.Store(true)
			g := newGate(t, open, DeferSettings{}, clk)
			g.Record(served)
			for range tc.refusals {
				clk.advance(time.Millisecond)
				a := refused
				a.Took = tc.took
				g.Record(a)
			}
			if g.Allow(retry2) {
				t.Fatal("right after a refusal for overload without a pushback: admitted a retry")
			}
			n := 0
			for ; n < 10 && !g.Allow(retry2); n++ {
				clk.advance(time.Millisecond)
				g.Record(served)
			}
			if n != tc.want {
				t.Errorf("a retry admitted after %d successes, want %d", n, tc.want)
			}
			if !clk.Now().Before(t0.Add(tune.OverloadHold)) {
				t.Errorf("admitted only tune.OverloadHold after the refusal")
			}
		})
	}
}

// During a return after an outage, a refusal for overload without a
// pushback says the held calls' return fills the room: it holds retries
// for tune.OverloadHold whatever the successes (a fleet's return served
// 11 % of its outage calls at 80 % load with the hold, 7 % without it).
func TestGateRefusalInAReturnHolds(t *testing.T) {
	clk := &manualClock{now: t0}
	g := downServer(newGate(t, &switchBudget{}, DeferSettings{MaxWait: 3 * time.Second}, clk))
	ws, _ := heldThroughOutage(t, g, clk, func(time.Time) time.Time { return time.Time{} })
	clk.advance(500 * time.Millisecond)
	g.Record(Attempt{Number: 1, Outcome: Success})
	g.mu.Lock()
	returning := !g.st.pace.backAt.IsZero()
	g.mu.Unlock()
	if !returning {
		t.Fatal("no return under way after the outage's first success")
	}
	g.Record(Attempt{Number: 1, Outcome: Failure, Overload: true})
	at := clk.Now()
	for range 4 {
		clk.advance(time.Millisecond)
		g.Record(Attempt{Number: 1, Outcome: Success})
	}
	g.mu.Lock()
	held := g.st.ev.overloaded(clk.Now())
	g.mu.Unlock()
	if !held {
		t.Error("during a return, a refusal without a pushback held nothing once successes followed")
	}
	clk.set(at.Add(tune.OverloadHold))
	g.mu.Lock()
	held = g.st.ev.overloaded(clk.Now())
	g.mu.Unlock()
	if held {
		t.Error("tune.OverloadHold after the refusal: still overloaded")
	}
	for _, w := range ws {
		w.Leave()
	}
}

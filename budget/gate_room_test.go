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

// The room's pace: once a burst of refusals for overload without a
// pushback ends and the new calls are served again, the successes raise
// the release rate, so the retries held through the burst go back within
// about a second, not one a second (lab migrate-burst: the last held call
// ended 9.95 s after the burst, 0.64 s with the room's pace).
func TestGateHeldThroughABurstGoBackWithTheSuccesses(t *testing.T) {
	clk := &manualClock{now: t0}
	g := newGate(t, &switchBudget{}, DeferSettings{}, clk)
	g.Record(Attempt{Number: 1, Outcome: Success})
	// A burst: for 2 s every attempt is refused, 20 a second; the
	// budget refuses every retry, and 35 wait.
	const held = 35
	var ws []*Waiter
	for i := range 40 {
		clk.advance(50 * time.Millisecond)
		g.Record(Attempt{Number: 1, Outcome: Failure, Overload: true, Took: time.Millisecond})
		if i >= 40-held {
			w, err := g.Enter(retry2, 100*time.Millisecond, time.Time{})
			if err != nil {
				t.Fatal(err)
			}
			ws = append(ws, w)
		}
	}
	// Served again: new calls succeed, 20 a second, and so does every
	// held retry that goes.
	back := clk.Now()
	var last time.Time
	for tick := 1; tick <= 300 && len(ws) > 0; tick++ {
		clk.advance(10 * time.Millisecond)
		if tick%5 == 0 {
			g.Record(Attempt{Number: 1, Outcome: Success, Took: time.Millisecond})
		}
		waiting := ws[:0]
		for _, w := range ws {
			a, _, err := w.Poll()
			switch {
			case err != nil:
				t.Fatalf("a held retry's wait ended %v after the burst: %v", clk.Now().Sub(back), err)
			case a == AdmitNone:
				waiting = append(waiting, w)
			default:
				last = clk.Now()
				g.Record(Attempt{Number: 2, Outcome: Success, Took: time.Millisecond, Admission: a})
			}
		}
		ws = waiting
	}
	if len(ws) > 0 {
		t.Fatalf("3 s after the burst, %d of %d held retries still wait", len(ws), held)
	}
	t.Logf("the last held retry went %v after the burst", last.Sub(back))
	if took := last.Sub(back); took > 1500*time.Millisecond {
		t.Errorf("the last of %d held retries went %v after the burst, want 1.5 s at most", held, took)
	}
}

// With no news the room's estimate goes back to "unknown", where one retry
// at a time goes to learn: a burst of refusals for overload without a
// pushback whose load ends with it leaves held retries that no success
// will ever release (lab migrate-burst -duration 2s: every held call
// failed at MaxWait, 0 of 40 served). The first that goes finds the
// backend idle, and the others follow its success.
func TestGateHeldThroughABurstWithNoNewsGoToLearn(t *testing.T) {
	clk := &manualClock{now: t0}
	g := newGate(t, &switchBudget{}, DeferSettings{}, clk)
	g.Record(Attempt{Number: 1, Outcome: Success})
	var ws []*Waiter
	refused := true // the backend refuses every attempt until the burst ends
	for range 40 {
		clk.advance(50 * time.Millisecond)
		g.Record(Attempt{Number: 1, Outcome: Failure, Overload: true, Took: time.Millisecond})
		w, err := g.Enter(retry2, 100*time.Millisecond, time.Time{})
		if err != nil {
			t.Fatal(err)
		}
		ws = append(ws, w)
		ws = pollBurst(t, g, ws, refused)
	}
	// The load ends with the burst: no new call comes, and the backend
	// serves every attempt.
	refused = false
	end := clk.Now()
	for tick := 1; tick <= 300 && len(ws) > 0; tick++ {
		clk.advance(10 * time.Millisecond)
		ws = pollBurst(t, g, ws, refused)
	}
	if len(ws) > 0 {
		t.Fatalf("3 s after a burst that ended the load, %d held retries still wait", len(ws))
	}
	t.Logf("the last held retry went %v after the burst", clk.Now().Sub(end))
}

// pollBurst polls each waiter of ws once; an admitted one's attempt ends at
// at once (its time unknown), refused for overload without a pushback
// (refused) or served. It
// returns those still waiting.
func pollBurst(t *testing.T, g *Gate, ws []*Waiter, refused bool) []*Waiter {
	t.Helper()
	waiting := ws[:0]
	for _, w := range ws {
		a, _, err := w.Poll()
		switch {
		case err != nil:
			t.Fatalf("a held retry's wait ended: %v", err)
		case a == AdmitNone:
			waiting = append(waiting, w)
		case refused:
			// Its next retry waits again (attempts 3 to 5).
			g.Record(Attempt{Number: 2, Outcome: Failure, Overload: true, Admission: a})
			nw, err := g.Enter(Request{Number: 3}, 200*time.Millisecond, time.Time{})
			if err != nil {
				t.Fatal(err)
			}
			waiting = append(waiting, nw)
		default:
			g.Record(Attempt{Number: 2, Outcome: Success, Admission: a})
		}
	}
	return waiting
}

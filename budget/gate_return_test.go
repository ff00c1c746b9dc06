package budget

import (
	"slices"
	"testing"
	"time"

	tune "github.com/stagger-go/stagger/internal/gatetune"
)

// A return whose pace a refusal for overload cut: no held retry's wait
// ends before its own bound (its MaxWait, or its deadline) because others
// wait before it, and the successes that follow grow the pace again while
// the refusal is still recent (the backlog rule ended 8 of 20 held calls
// at once here, at a pace that nothing quickened for 5 s: a fleet whose
// processes met refusals unevenly kept one at an eighth of another's pace).
func TestGateCutReturnEndsNoWaitBeforeItsBound(t *testing.T) {
	for _, tc := range []struct {
		name     string
		deadline func(time.Time) time.Time
	}{
		{"without a deadline", func(time.Time) time.Time { return time.Time{} }},
		{"with a deadline", func(at time.Time) time.Time { return at.Add(3 * time.Second) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clk := &manualClock{now: t0}
			g := downServer(newGate(t, &switchBudget{}, DeferSettings{MaxWait: 3 * time.Second}, clk))
			ws, probes := heldThroughOutage(t, g, clk, tc.deadline)
			// The return (a new call served), then a new call refused
			// for overload: the pace halves.
			clk.advance(500 * time.Millisecond)
			g.Record(Attempt{Number: 1, Outcome: Success})
			g.Record(Attempt{Number: 1, Outcome: Failure, Overload: true, Pushback: true})
			cut := clk.Now()
			g.Record(Attempt{Number: 1, Outcome: Success})
			g.mu.Lock()
			atCut := g.st.pace.every
			g.mu.Unlock()
			released, ended, fastest := 0, 0, atCut
			taken := make([]bool, len(ws))
			for released+ended < len(ws) && clk.Now().Before(cut.Add(10*time.Second)) {
				takeReady(ws, taken, func(i int, a Admission, err error) {
					w := ws[i]
					switch {
					case err != nil:
						bound := w.view.limit
						if !w.view.deadline.IsZero() {
							// Its deadline less an attempt (hopeless).
							bound = w.view.deadline.Add(-20 * time.Millisecond)
						}
						if clk.Now().Before(bound) {
							t.Fatalf("waiter %d ended %v before its bound: %v", i, bound.Sub(clk.Now()), err)
						}
						ended++
					case a == admitRelease:
						released++
						g.mu.Lock()
						fastest = min(fastest, g.st.pace.every)
						g.mu.Unlock()
						g.Record(Attempt{Number: 2, Outcome: Success, Admission: admitRelease, Took: 20 * time.Millisecond})
					case a != AdmitNone:
						t.Fatalf("waiter %d: %v during the return, want a release", i, a)
					}
				})
				// The Gate's next decision; zero when none is due (the
				// waiters left are ready to take): time goes on a step.
				if next := g.Tick(); next.After(clk.Now()) {
					clk.set(next)
				} else {
					clk.advance(10 * time.Millisecond)
				}
			}
			t.Logf("%d held at the return (%d probes before), pace %v at the cut: %d released, %d ended at their bound", len(ws), probes, atCut, released, ended)
			if released+ended != len(ws) {
				t.Fatalf("released %d + ended %d != %d held", released, ended, len(ws))
			}
			if released == 0 {
				t.Fatalf("none of %d held went back", len(ws))
			}
			if fastest >= atCut {
				t.Errorf("the pace stayed at %v after the cut while released retries succeeded", atCut)
			}
			st := g.State()
			if st.Deferred != st.DeferAdmitted+st.DeferGaveUp+uint64(st.Waiting) {
				t.Errorf("counters do not add up: %+v", st)
			}
		})
	}
}

// heldThroughOutage makes an outage at g and holds twenty calls' retries
// through it, 100 ms apart, each with the deadline deadline(entry) (zero:
// none); the outage's probes fail and their calls end. It returns those
// still held, and how many went as probes.
func heldThroughOutage(t *testing.T, g *Gate, clk *manualClock, deadline func(time.Time) time.Time) (ws []*Waiter, probes int) {
	t.Helper()
	for range tune.Evidence {
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

// During a return, every waiting retry goes at the return's pace, the
// ones that began to wait just before it too: the heal rule, which lets a
// retry go after its pause where retrying heals, does not apply while the
// held ones go back (a fleet of 20 processes sent 35 retries in the first
// 100 ms of a return that way, 1.13-1.21x the backend's capacity).
func TestGateReturnPacesRetriesNotHeldYet(t *testing.T) {
	clk := &manualClock{now: t0}
	g := downAfterServing(t, clk)
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
		if w.view.heldBy != "" {
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

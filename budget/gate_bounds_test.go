package budget

import (
	"testing"
	"time"
)

// The release rule's order: of two held retries of a level, the release
// goes to the one whose MaxWait ends first, its call's earlier waits
// counted, not to the one that arrived first. A call whose probe failed in
// an outage enters again late; by arrival it went after every call that
// began waiting after it, and its MaxWait ended first (sim fleet at 100
// processes lost calls at max-wait after the return). The two are in
// different sets too (held or not), which the grant loop orders alike.
// A call with a deadline is bounded by it, not by MaxWait (the end rule):
// ordered by its MaxWait, a call whose deadline came in 200 ms went behind
// one without a deadline whose MaxWait had seconds left, and its wait
// ended unserved.
func TestGateReleasesTheEarliestBoundFirst(t *testing.T) {
	tests := []struct {
		name      string
		waited    [2]time.Duration // Request.Waited of the first and the second to arrive
		deadline  [2]time.Duration // their calls' deadlines after t0 (0: none)
		heldFirst bool             // only the first is held (another set)
		want      int
	}{
		{"same bound: the oldest", [2]time.Duration{0, 0}, [2]time.Duration{}, false, 0},
		{"the later arrival waited before", [2]time.Duration{0, 5 * time.Second}, [2]time.Duration{}, false, 1},
		{"the earlier arrival waited longer", [2]time.Duration{5 * time.Second, time.Second}, [2]time.Duration{}, false, 0},
		{"across sets: the later arrival waited before", [2]time.Duration{0, 5 * time.Second}, [2]time.Duration{}, true, 1},
		{"a deadline before the other's MaxWait", [2]time.Duration{0, 5 * time.Second}, [2]time.Duration{200 * time.Millisecond, 0}, false, 0},
		{"a deadline after the other's MaxWait", [2]time.Duration{0, 5 * time.Second}, [2]time.Duration{9 * time.Second, 0}, false, 1},
		{"the earlier deadline, the later arrival", [2]time.Duration{0, 0}, [2]time.Duration{time.Second, 300 * time.Millisecond}, false, 1},
		{"across sets: a deadline before the other's MaxWait", [2]time.Duration{5 * time.Second, 0}, [2]time.Duration{0, 200 * time.Millisecond}, true, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clk := &manualClock{now: t0.Add(-time.Millisecond)}
			g := downServer(newGate(t, &switchBudget{}, DeferSettings{}, clk))
			var ws [2]*Waiter
			for i := range ws {
				r := retryAt(crit)
				r.Waited = tt.waited[i]
				var deadline time.Time
				if tt.deadline[i] > 0 {
					deadline = t0.Add(tt.deadline[i])
				}
				w, err := g.Enter(r, time.Millisecond, deadline)
				if err != nil {
					t.Fatal(err)
				}
				defer w.Leave()
				ws[i] = w
			}
			g.mu.Lock()
			g.st.phase = phaseRecovering
			for i, w := range ws {
				if i == 0 || !tt.heldFirst {
					w.view.heldBy = heldOutage
				}
				if w.at >= 0 {
					t.Fatalf("waiter %d among the heads before its pause passed", i)
				}
			}
			g.st.pace.set(t0, 1)
			g.mu.Unlock()
			clk.set(t0)
			g.Tick()
			for i, w := range ws {
				want := AdmitNone
				if i == tt.want {
					want = admitRelease
				}
				a := takeIfReady(w)
				if a != want {
					t.Fatalf("waiter %d (waited %v, deadline %v): %v, want %v", i, tt.waited[i], tt.deadline[i], a, want)
				}
			}
		})
	}
}

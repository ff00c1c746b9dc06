package budget

import (
	"testing"
	"time"
)

// TestTurnIn: a waiter's turn, at the estimate, is the next release's (or
// probe's) time, then one interval per retry ahead of it.
func TestTurnIn(t *testing.T) {
	t0 := time.Unix(1000, 0)
	rnd := func() float64 { return 0.5 }
	serving := newGateState(t0, rnd)
	serving.pace.next, serving.pace.every = t0.Add(300*time.Millisecond), 100*time.Millisecond
	past := serving
	past.pace.next = t0.Add(-time.Second)
	failing := newGateState(t0, rnd)
	failing.phase, failing.lastReached, failing.pace.gap = phaseOutage, t0.Add(-time.Second), 4*time.Second
	leased := failing
	leased.pace.until = t0.Add(10 * time.Second)
	for _, tc := range []struct {
		name  string
		s     gateState
		ahead int
		want  time.Duration
	}{
		{"serving, first", serving, 0, 300 * time.Millisecond},
		{"serving, three ahead", serving, 3, 600 * time.Millisecond},
		{"serving, release due", past, 0, 0},
		{"serving, release due, two ahead", past, 2, 200 * time.Millisecond},
		{"failing, next probe", failing, 0, 3 * time.Second},
		{"failing, two ahead", failing, 2, 11 * time.Second},
		{"failing, lease out", leased, 1, 14 * time.Second},
	} {
		if got := tc.s.turnIn(t0, tc.ahead); got != tc.want {
			t.Errorf("%s: turnIn(%d) = %v, want %v", tc.name, tc.ahead, got, tc.want)
		}
	}
}

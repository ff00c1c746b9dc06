package budget

import (
	"errors"
	"testing"
	"time"
)

// Issue 88's defects of the Gate, each read from outside and failing on the
// tree before its fix.

// Defect 2: no wait passes MaxWait, whatever its pause. A call without a
// deadline whose pause is longer than what MaxWait leaves ends at MaxWait
// (it waited for its pause, 30 s, and then failed), in an outage and at a
// server that serves.
func TestGatePauseNeverPassesMaxWait(t *testing.T) {
	for _, tc := range []struct {
		name string
		gate func(*testing.T, *manualClock) *Gate
	}{
		{"outage", func(t *testing.T, clk *manualClock) *Gate {
			return inOutage(t, clk, DeferSettings{MaxWait: 3 * time.Second})
		}},
		{"serving", func(t *testing.T, clk *manualClock) *Gate {
			g := newGate(t, &switchBudget{}, DeferSettings{MaxWait: 3 * time.Second}, clk)
			g.Record(Attempt{Number: 1, Outcome: Success})
			return g
		}},
	} {
		for _, pause := range []time.Duration{30 * time.Second, 1<<63 - 1} {
			clk := &manualClock{now: t0}
			g := tc.gate(t, clk)
			w, err := g.Enter(retry2, pause, time.Time{})
			if err != nil {
				t.Fatalf("%s, pause %v: %v", tc.name, pause, err)
			}
			a, at, err := settleAlone(t, clk, w)
			w.Leave()
			if a != AdmitNone || !errors.Is(err, errWaitLimit) || at != 3*time.Second {
				t.Errorf("%s, pause %v: %v, %v at %v; want the end by max-wait at 3s", tc.name, pause, a, err, at)
			}
		}
	}
}

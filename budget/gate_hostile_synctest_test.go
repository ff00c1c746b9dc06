//go:build go1.25

package budget

import (
	"context"
	"math"
	"testing"
	"testing/synctest"
	"time"
)

// Hostile durations through the public API (issue 88): a wait with a pause
// of the largest duration and no deadline ends by DeferSettings.MaxWait, its
// default 10 s, at the latest (it ended after 292 years), at a server that
// serves and in an outage; a call that waited longer than any
// MaxWait ends at once.
func TestGateHostileDurationsKeepTheContract(t *testing.T) {
	for _, outage := range []bool{false, true} {
		synctest.Test(t, func(t *testing.T) {
			g, err := Deferring(&switchBudget{}, DeferSettings{})
			if err != nil {
				t.Fatal(err)
			}
			if outage {
				downServer(g)
				failures(g, 2)
			} else {
				g.Record(Attempt{Number: 1, Outcome: Success})
			}
			for _, tc := range []struct {
				name  string
				r     Request
				pause time.Duration
				want  time.Duration
			}{
				{"largest pause", retry2, math.MaxInt64, 10 * time.Second},
				{"smallest pause", retry2, math.MinInt64, 10 * time.Second},
				{"waited the largest duration", Request{Number: 3, Waited: math.MaxInt64}, math.MaxInt64, 0},
				{"waited the smallest duration", Request{Number: 3, Waited: math.MinInt64}, math.MaxInt64, 10 * time.Second},
			} {
				start := time.Now()
				a, err := g.Wait(context.Background(), tc.r, tc.pause)
				if d := time.Since(start); err != nil && WaitRule(err) != "max-wait" && WaitRule(err) != "futility" || d > tc.want {
					t.Errorf("outage %v, %s: %v, %v after %v; want it gone or its wait ended by %v", outage, tc.name, a, err, d, tc.want)
				}
			}
		})
	}
}

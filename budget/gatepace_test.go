package budget

import (
	"math"
	"testing"
	"time"

	tune "github.com/stagger-go/stagger/internal/gatetune"
)

// credits is how many releases the pacer would let go at now, at most one
// (the tests' view of its cell); set makes them c.
func (p *pacer) credits(now time.Time) float64 {
	return math.Min(1-float64(p.next.Sub(now))/float64(p.every), 1)
}

func (p *pacer) set(now time.Time, c float64) { *p = p.releasedAt(now, c) }

// TestPacerSteered: a load report steers the return's pace. At the return it
// starts at the room the last report before the outage left, by this
// process's share (one call each came); then it grows below the target, is cut
// in proportion above it (by half a second's worth when the backend reports
// itself full), by the time since the last step, a second's worth at most.
func TestPacerSteered(t *testing.T) {
	t0 := time.Unix(0, 0)
	const target = tune.TargetUtilization
	rate := func(p pacer) float64 { return float64(time.Second) / float64(p.every) }
	for _, c := range []struct {
		name   string
		before float64 // the report before the outage
		back   bool
		u      float64
		after  time.Duration // since the last step
		want   float64       // the rate after, from 1 a second
	}{
		{"back at 40 %: the room left by each call's share", 0.4, true, 0, 0, (target - 0.4) / 0.4},
		{"back at the target: no room, the slowest pace", target, true, 0, 0, float64(time.Second) / float64(tune.ProbeGapMax)},
		{"below the target, a second on", 0.4, false, 0.5, time.Second, 1 + (target - 0.5)},
		{"below the target, long after: a second's worth", 0.4, false, 0.5, time.Hour, 1 + (target - 0.5)},
		{"below the target, 100 ms on", 0.4, false, 0.5, 100 * time.Millisecond, 1 + (target-0.5)/10},
		{"full: halved per second", 0.4, false, 1, time.Second, 0.5},
		{"above the target by half its margin: a quarter off", 0.4, false, (1 + target) / 2, time.Second, 0.75},
	} {
		p := pacer{every: time.Second, util: 1 + c.before, steeredAt: t0}
		p = p.steered(t0.Add(c.after), c.u, c.back, float64(time.Second))
		if got := rate(p); math.Abs(got-c.want) > 1e-6*c.want {
			t.Errorf("%s: rate %.6f a second, want %.6f", c.name, got, c.want)
		}
	}
}

package budget

import (
	"testing"
	"time"
)

// TestReturnNoSlowerThanHeldCame: a return after an outage starts no
// slower than the pace its held calls came at, when that is slower than one
// a second (a thousand processes that each held four calls over a 10 s
// outage sent a thousand retries a second at the return on a floor of one
// a second: sim fleet, 1,000 processes at 40 % load, peak 1.3x), and its
// cuts take it below, to tune.BackShare of that pace, one a second at most:
// no floor of one a second each that sums with the fleet.
func TestReturnNoSlowerThanHeldCame(t *testing.T) {
	t0 := time.Unix(1000, 0)
	for _, tc := range []struct {
		name      string
		entered   int
		want, cut time.Duration
	}{
		// 4 over 10 s came every 2.5 s; tune.BackShare of that is 6.25 s,
		// where cuts stop.
		{"came slower than a second", 4, 2500 * time.Millisecond, 5 * time.Second},
		// 40 over 10 s came every 250 ms: tune.BackShare of it, 625 ms;
		// a cut doubles it to one a second at most.
		{"came faster", 40, 625 * time.Millisecond, time.Second},
		// 8 over 10 s came every 1.25 s: cuts stop at 3.125 s.
		{"came a little slower", 8, 1250 * time.Millisecond, 2500 * time.Millisecond},
	} {
		s := newGateState(t0, func() float64 { return 0 })
		s.phase, s.streak, s.streakAt, s.pace.entered, s.pace.down = phaseOutage, 2, t0, tc.entered, true
		back := t0.Add(10 * time.Second)
		// A probe found the server back: the return begins.
		s.observe(back, Attempt{Number: 2, Outcome: Success, Admission: admitProbe}, false)
		p := s.pace
		if p.backAt != back || p.every != tc.want {
			t.Errorf("%s: the return's pace %v, want %v", tc.name, p.every, tc.want)
		}
		// A failed release halves the pace, to slowest at most.
		cut := p.answeredIn(back.Add(time.Second), 50*time.Millisecond, false)
		if cut.every != tc.cut {
			t.Errorf("%s: after a cut %v, want %v", tc.name, cut.every, tc.cut)
		}
	}
}

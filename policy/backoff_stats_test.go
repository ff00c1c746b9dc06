package policy

import (
	"math"
	"testing"
	"time"
)

// backoffDraws is the number of draws per statistical check: enough that a
// mean is within a fraction of a percent; the seed is fixed, so the checks
// are deterministic and their tolerances are several standard errors wide.
const backoffDraws = 100_000

// backoffUniformity bins (d−lo)/(hi−lo) into 20 bins and returns the
// chi-square statistic against the uniform distribution (19 degrees of
// freedom: 43.8 is the 0.1% critical value).
func backoffUniformity(ds []time.Duration, lo, hi time.Duration) float64 {
	const bins = 20
	var count [bins]int
	for _, d := range ds {
		i := int(float64(d-lo) / float64(hi-lo) * bins)
		if i >= bins {
			i = bins - 1
		}
		if i < 0 {
			i = 0
		}
		count[i]++
	}
	want := float64(len(ds)) / bins
	var chi float64
	for _, c := range count {
		chi += (float64(c) - want) * (float64(c) - want) / want
	}
	return chi
}

func TestDelayDistribution(t *testing.T) {
	const ms = time.Millisecond
	b := Backoff{Initial: 100 * ms, Max: time.Second, Multiplier: 2}
	tests := []struct {
		name   string
		jitter Jitter
		retry  int
		prev   time.Duration
		// lo and hi bound every draw (hi included: float rounding can reach it);
		// the draws are uniform on [lo, hi).
		lo, hi time.Duration
	}{
		{"proportional", JitterProportional, 3, 0, 320 * ms, 480 * ms},
		{"proportional after the cap", JitterProportional, 9, 0, 800 * ms, 1200 * ms},
		{"full", JitterFull, 3, 0, 0, 400 * ms},
		{"full after the cap", JitterFull, 9, 0, 0, time.Second},
		{"equal", JitterEqual, 3, 0, 200 * ms, 400 * ms},
		{"decorrelated", JitterDecorrelated, 2, 200 * ms, 100 * ms, 600 * ms},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			bo := b
			bo.Jitter = tt.jitter
			r := NewSeededRandom(42)
			ds := make([]time.Duration, backoffDraws)
			minD, maxD := time.Duration(math.MaxInt64), time.Duration(0)
			var sum float64
			for i := range ds {
				d := bo.Delay(tt.retry, tt.prev, r())
				ds[i] = d
				sum += float64(d)
				minD, maxD = min(minD, d), max(maxD, d)
			}
			if minD < tt.lo || maxD > tt.hi {
				t.Fatalf("draws in [%v, %v], want within [%v, %v]", minD, maxD, tt.lo, tt.hi)
			}
			// The whole range is used: the extremes are near its ends.
			width := float64(tt.hi - tt.lo)
			if float64(minD-tt.lo) > width/1000 || float64(tt.hi-maxD) > width/1000 {
				t.Errorf("draws in [%v, %v], want them to reach [%v, %v]", minD, maxD, tt.lo, tt.hi)
			}
			// Mean of a uniform: the midpoint. Its standard error is
			// width/√12/√n ≈ width/1100; allow 5 of them.
			mean := sum / backoffDraws
			if mid := float64(tt.lo+tt.hi) / 2; math.Abs(mean-mid) > width/220 {
				t.Errorf("mean %v, want %v", time.Duration(mean), time.Duration(mid))
			}
			if chi := backoffUniformity(ds, tt.lo, tt.hi); chi > 43.8 {
				t.Errorf("chi-square %.1f > 43.8: not uniform on [%v, %v)", chi, tt.lo, tt.hi)
			}
		})
	}
}

func TestDelayNoneIsConstant(t *testing.T) {
	b := Backoff{Initial: 100 * time.Millisecond, Max: time.Second, Multiplier: 2, Jitter: JitterNone}
	r := NewSeededRandom(1)
	for i := 0; i < 1000; i++ {
		if d := b.Delay(3, 0, r()); d != 400*time.Millisecond {
			t.Fatalf("Delay = %v, want 400ms whatever u", d)
		}
	}
}

// TestDelayCapBunching measures the documented difference between the kinds
// at the cap: jitter applied after the cap leaves almost no pause at exactly
// Max; decorrelated jitter, capped outside, puts a large share there.
func TestDelayCapBunching(t *testing.T) {
	const max = time.Second
	b := Backoff{Initial: 100 * time.Millisecond, Max: max, Multiplier: 2}
	atMax := func(j Jitter, prev time.Duration) float64 {
		bo := b
		bo.Jitter = j
		r := NewSeededRandom(3)
		n := 0
		for i := 0; i < backoffDraws; i++ {
			if bo.Delay(20, prev, r()) == max {
				n++
			}
		}
		return float64(n) / backoffDraws
	}
	for _, j := range []Jitter{JitterProportional, JitterFull, JitterEqual} {
		if f := atMax(j, 0); f > 0.001 {
			t.Errorf("%v: %.2f%% of pauses at exactly Max, want none", j, 100*f)
		}
	}
	// With prev = Max, P(Initial + u(3Max − Initial) >= Max) = 1 − 0.9/2.9.
	want := 1 - 0.9/2.9
	if f := atMax(JitterDecorrelated, max); math.Abs(f-want) > 0.01 {
		t.Errorf("DECORRELATED: %.3f of pauses at Max, want %.3f", f, want)
	}
}

// TestDelayDecorrelatedChain follows a decorrelated sequence as the
// interceptor does (prev = the last pause) and checks every pause stays in
// [Initial, Max].
func TestDelayDecorrelatedChain(t *testing.T) {
	b := Backoff{Initial: 5 * time.Millisecond, Max: 2 * time.Second, Multiplier: 2, Jitter: JitterDecorrelated}
	r := NewSeededRandom(9)
	for call := 0; call < 1000; call++ {
		prev := b.Initial
		for retry := 1; retry <= 30; retry++ {
			d := b.Delay(retry, prev, r())
			if d < b.Initial || d > b.Max || d > 3*prev {
				t.Fatalf("call %d retry %d: Delay(prev %v) = %v, want in [%v, min(%v, 3×prev)]", call, retry, prev, d, b.Initial, b.Max)
			}
			prev = d
		}
	}
}

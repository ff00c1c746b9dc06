package policy

import (
	"math"
	"strconv"
	"time"
)

// Jitter chooses how a backoff term is randomised.
type Jitter int

const (
	// JitterProportional is gRFC A6's jitter since 2024: term × U(0.8, 1.2).
	// It is the default.
	JitterProportional Jitter = iota
	// JitterFull is U(0, term): it spreads load best (AWS, 2015).
	JitterFull
	// JitterEqual is term/2 + U(0, term/2): it guarantees half the term.
	JitterEqual
	// JitterDecorrelated is min(Max, U(Initial, 3×prev)). It depends on the
	// previous pause and bunches at Max once 3×prev passes Max.
	JitterDecorrelated
	// JitterNone is the term itself.
	JitterNone
)

var jitterNames = [...]string{"PROPORTIONAL", "FULL", "EQUAL", "DECORRELATED", "NONE"}

// String returns the name a policy file uses: "PROPORTIONAL", "FULL", ...
func (j Jitter) String() string {
	if j >= 0 && int(j) < len(jitterNames) {
		return jitterNames[j]
	}
	return "Jitter(" + strconv.Itoa(int(j)) + ")"
}

// Backoff is an exponential backoff with jitter. It is a value: Delay is a pure
// function of its inputs, so one Backoff serves any number of calls at once.
type Backoff struct {
	// Initial is the term before the first retry. Must be > 0.
	Initial time.Duration
	// Max caps the term. Must be > 0. A Max below Initial is accepted, as
	// gRFC A6 and grpc-go accept it: every term is then Max.
	Max time.Duration
	// Multiplier grows the term after each retry. Must be > 0 (gRFC A6); below
	// 1 the term shrinks towards 0, never below it.
	Multiplier float64
	// Jitter is how the term is randomised. The zero value is
	// JitterProportional, gRFC A6's.
	Jitter Jitter
}

// Delay is the pause before retry number retry (1 = first retry). prev is the
// pause before the previous retry (Initial when retry == 1, and again after a
// pushback reset); u is uniform in [0, 1).
//
//	term = min(Max, Initial × Multiplier^(retry-1))
//	Proportional: term × (0.8 + 0.4u)      Full:  u × term
//	Equal:        term/2 + u × term/2      None:  term
//	Decorrelated: min(Max, Initial + u × (3×prev − Initial))
//
// Jitter is applied after the cap, so clients never bunch at the cap, except
// with JitterDecorrelated, which is defined with the cap outside. Huge retry
// numbers or multipliers saturate at Max; the result is never negative. Delay
// assumes a Backoff that passed Validate; for one that did not it still never
// panics and never returns a negative pause.
func (b Backoff) Delay(retry int, prev time.Duration, u float64) time.Duration {
	if !(u >= 0) { // also catches NaN
		u = 0
	} else if u >= 1 {
		u = math.Nextafter(1, 0)
	}
	if b.Jitter == JitterDecorrelated {
		lo := float64(b.Initial)
		hi := 3 * float64(prev)
		if hi < lo {
			hi = lo
		}
		return capped(lo+u*(hi-lo), b.Max)
	}
	term := b.term(retry)
	switch b.Jitter {
	case JitterFull:
		term *= u
	case JitterEqual:
		term = term/2 + u*term/2
	case JitterNone:
	default: // JitterProportional
		term *= 0.8 + 0.4*u
	}
	return toDuration(term)
}

// term is min(Max, Initial × Multiplier^(retry-1)) as a float64 of
// nanoseconds, rounded exactly as grpc-go's initial × math.Pow(multiplier, n)
// is, so a plain gRFC A6 policy pauses exactly as grpc-go's retry does.
func (b Backoff) term(retry int) float64 {
	initial, max := float64(b.Initial), float64(b.Max)
	if initial <= 0 || max <= 0 {
		return 0
	}
	t := initial
	switch m := b.Multiplier; {
	case retry <= 1 || !(m > 0) || m == 1:
	case m > 1:
		t *= powGrowing(m, retry-1, max/initial)
	default: // 0 < m < 1: shrinking terms are rare; Pow handles underflow
		t *= math.Pow(m, float64(retry-1))
	}
	if !(t <= max) { // also catches NaN and +Inf
		t = max
	}
	return t
}

// powGrowing is x^k for x > 1 and k >= 1, bit for bit what math.Pow returns
// while the result stays in the normal range (math.Pow squares the same
// mantissas, in the same order, with exact power-of-two rescaling), at a
// third of its cost. It stops early, returning +Inf, once the result is
// past twice limit (twice: limit is a rounded quotient, and the caller's own
// comparison decides the borderline): the term is capped then anyway, and the
// retry number can be huge.
func powGrowing(x float64, k int, limit float64) float64 {
	a := 1.0
	for ; k != 0; k >>= 1 {
		if k&1 == 1 {
			a *= x
			if a > 2*limit {
				return math.Inf(1)
			}
		}
		x *= x
	}
	return a
}

// capped converts d to a Duration no larger than max and no smaller than 0.
func capped(d float64, max time.Duration) time.Duration {
	if !(d <= float64(max)) {
		d = float64(max)
	}
	return toDuration(d)
}

func toDuration(d float64) time.Duration {
	switch {
	case !(d > 0):
		return 0
	case d >= math.MaxInt64:
		return math.MaxInt64
	}
	return time.Duration(d)
}

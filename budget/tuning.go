package budget

import "math"

// The criticality reserve (Request.Criticality says the rule): the share of
// a budget's span that a retry of each level must leave, so that the less
// critical are refused first and CRITICAL_PLUS has a reserve of its own.
// CRITICAL (and a call that names none) leaves nothing, as before
// criticality existed: gRFC A6's arithmetic is unchanged for it. Chosen
// with TestStormCriticality (`go test -v -run StormCriticality ./budget`),
// which measures them (BENCHMARKS.md, "Figures behind the code's choices").
const (
	// reserveSheddable: a quarter: it gives CRITICAL calls most of what
	// any reserve gives them, at half a half's cost to SHEDDABLE calls.
	reserveSheddable = 0.25
	// reserveSheddablePlus: half of SHEDDABLE's, between it and CRITICAL.
	reserveSheddablePlus = reserveSheddable / 2
	// reserveCriticalPlus: CRITICAL_PLUS may spend a fifth of the span
	// below CRITICAL's floor (a token bucket in debt, a ratio over its
	// allowance): more gave the default budget nothing and cost the ratio's
	// CRITICAL calls, and the amplification at p = 1 stays within 1.15.
	reserveCriticalPlus = 0.2
)

// reserveShares[l.Index()] is what a retry of level l leaves of the span
// (negative: what it may dip below CRITICAL's floor).
var reserveShares = [4]float64{reserveSheddable, reserveSheddablePlus, 0, -reserveCriticalPlus}

// reserveFloors returns the reserve of each level in thousandths of a token,
// for a span of span thousandths (0 for CRITICAL, exactly).
func reserveFloors(span int64) (f [4]int64) {
	for i, s := range reserveShares {
		f[i] = int64(math.Round(s * float64(span)))
	}
	return f
}

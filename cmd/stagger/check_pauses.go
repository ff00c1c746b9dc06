package main

import (
	"math"
	"slices"
	"sort"
	"time"

	"github.com/stagger-go/stagger/policy"
)

// satAdd is a + b for durations >= 0, saturating at the largest Duration.
func satAdd(a, b time.Duration) time.Duration {
	if a > math.MaxInt64-b {
		return math.MaxInt64
	}
	return a + b
}

// satMul is d × n for d, n >= 0, saturating at the largest Duration.
func satMul(d time.Duration, n int64) time.Duration {
	if n <= 0 || d <= 0 {
		return 0
	}
	if int64(d) > math.MaxInt64/n {
		return math.MaxInt64
	}
	return d * time.Duration(n)
}

// durationOf converts nanoseconds to a Duration, saturating.
func durationOf(ns float64) time.Duration {
	switch {
	case !(ns > 0):
		return 0
	case ns >= math.MaxInt64:
		return math.MaxInt64
	}
	return time.Duration(ns)
}

// pauseRow is one row of the pause table: retries retry to last (last ==
// retry for a single retry) pause alike. elided marks a run of rows whose
// min and max are given but whose quantiles were not worked out.
type pauseRow struct {
	retry, last int
	q           [4]time.Duration // min, median, p99, max
	atCap       float64
	elided      bool
}

// pauseGrid is how finely the jitter's u is integrated: pauses are computed
// from Backoff.Delay on a grid of u, not by drawing random numbers, so the
// table is the same on every run.
const pauseGrid = 200

// pauseRowsShown is how many retries the table shows one by one; later
// retries that pause differently are summed up in one row (their min and
// max), so that the table, and the work behind it, stay small whatever
// maxAttempts says.
const pauseRowsShown = 8

// pauseTable gives the distribution of the pause before each retry, from
// Backoff.Delay itself, and the sum of the longest pauses (saturating at the
// largest Duration). The work is bounded whatever retries is: at most
// pauseRowsShown rows are worked out, and the rest is found by bisection
// and closed forms (see pauseTableSimple and pauseTableDecorrelated).
func pauseTable(b policy.Backoff, retries int) ([]pauseRow, time.Duration) {
	if retries < 1 {
		return nil, 0
	}
	if b.Jitter == policy.JitterDecorrelated {
		return pauseTableDecorrelated(b, retries)
	}
	return pauseTableSimple(b, retries)
}

// pauseTableSimple: for every jitter but decorrelated the pause depends on u
// and the term alone and is monotone in u, so its quantiles are Delay at
// those quantiles of u; and the term is monotone in the retry number (it
// grows to Max, or shrinks), so the retries that pause alike form one run at
// the end, found by bisection.
func pauseTableSimple(b policy.Backoff, retries int) ([]pauseRow, time.Duration) {
	uMax := math.Nextafter(1, 0)
	row := func(r int) pauseRow {
		return pauseRow{retry: r, last: r, q: [4]time.Duration{
			b.Delay(r, b.Initial, 0), b.Delay(r, b.Initial, 0.5), b.Delay(r, b.Initial, 0.99), b.Delay(r, b.Initial, uMax),
		}}
	}
	final := row(retries)
	// k is the first retry that pauses as the last one does: every row
	// from k on is final's (the rows are monotone in r).
	k := sort.Search(retries, func(i int) bool { return row(i+1).q == final.q }) + 1
	var rows []pauseRow
	var worst time.Duration
	shown := min(k-1, pauseRowsShown)
	for r := 1; r <= shown; r++ {
		x := row(r)
		if n := len(rows); n > 0 && rows[n-1].q == x.q {
			rows[n-1].last = r
		} else {
			rows = append(rows, x)
		}
		worst = satAdd(worst, x.q[3])
	}
	if shown < k-1 {
		// Retries shown+1 .. k-1: terms Initial × Multiplier^(r-1), uncapped;
		// their longest pauses are that term times Delay's factor at uMax.
		first, last := row(shown+1), row(k-1)
		rows = append(rows, pauseRow{retry: shown + 1, last: k - 1, elided: true,
			q: [4]time.Duration{min(first.q[0], last.q[0]), 0, 0, max(first.q[3], last.q[3])}})
		worst = satAdd(worst, geometricSum(b, shown+1, k-1, uMax))
	}
	final.retry = k
	rows = append(rows, final)
	worst = satAdd(worst, satMul(final.q[3], int64(retries-k+1)))
	return rows, worst
}

// geometricSum is the sum of the longest pauses of retries from to to,
// whose terms are all below Max: Initial × f × Σ Multiplier^(r-1), in
// closed form.
func geometricSum(b policy.Backoff, from, to int, uMax float64) time.Duration {
	f := 0.8 + 0.4*uMax // the factor Delay applies to the term at uMax
	switch b.Jitter {
	case policy.JitterFull:
		f = uMax
	case policy.JitterEqual:
		f = 0.5 + 0.5*uMax
	case policy.JitterNone:
		f = 1
	}
	m, n := b.Multiplier, float64(to-from+1)
	var s float64
	if m == 1 {
		s = n
	} else {
		s = math.Pow(m, float64(from-1)) * (math.Pow(m, n) - 1) / (m - 1)
	}
	return durationOf(float64(b.Initial) * f * s)
}

// pauseTableDecorrelated: decorrelated jitter depends on the previous pause
// too. Its distribution is carried from retry to retry as pauseGrid equally
// likely values, each combined with pauseGrid values of u (a deterministic
// numeric integration), for the first pauseRowsShown retries; the later ones
// get their exact min and max only. The extremes are exact: Delay is
// monotone in prev and u, the shortest pause is always min(Initial, Max),
// and the longest triples until it reaches Max, within about 40 retries.
func pauseTableDecorrelated(b policy.Backoff, retries int) ([]pauseRow, time.Duration) {
	uMax := math.Nextafter(1, 0)
	var rows []pauseRow
	var worst time.Duration
	prev := []time.Duration{b.Initial}
	lo, hi := b.Initial, b.Initial
	shown := min(retries, pauseRowsShown)
	for r := 1; r <= shown; r++ {
		lo, hi = b.Delay(r, lo, 0), b.Delay(r, hi, uMax)
		worst = satAdd(worst, hi)
		all := decorrelatedPauses(b, r, prev)
		var row pauseRow
		if len(prev) == 1 {
			// One previous pause: the pause depends on u alone, exactly.
			p := prev[0]
			row = pauseRow{q: [4]time.Duration{b.Delay(r, p, 0), b.Delay(r, p, 0.5), b.Delay(r, p, 0.99), b.Delay(r, p, uMax)}}
			if row.q[3] >= b.Max && 3*p > b.Initial {
				// Delay is min(Max, Initial + u(3p - Initial)): the share of u
				// that lands on Max.
				row.atCap = max(0, 1-float64(b.Max-b.Initial)/float64(3*p-b.Initial))
			}
		} else {
			atCap := 0
			for _, d := range all {
				if d >= b.Max {
					atCap++
				}
			}
			row = pauseRow{q: [4]time.Duration{lo, quantile(all, 0.5), quantile(all, 0.99), hi}, atCap: float64(atCap) / float64(len(all))}
		}
		row.retry, row.last = r, r
		rows = append(rows, row)
		if r < shown {
			next := make([]time.Duration, pauseGrid)
			for i := range next {
				next[i] = all[i*len(all)/pauseGrid+len(all)/pauseGrid/2]
			}
			prev = next
		}
	}
	if retries == shown {
		return rows, worst
	}
	// The longest pause triples until it reaches its limit (Max, within
	// about 40 retries): sum the growing ones, then the rest at once.
	r := shown + 1
	for ; r <= retries; r++ {
		next := b.Delay(r, hi, uMax)
		if next == hi {
			break
		}
		hi = next
		worst = satAdd(worst, hi)
	}
	worst = satAdd(worst, satMul(hi, int64(retries-r+1)))
	rows = append(rows, pauseRow{retry: shown + 1, last: retries, elided: true, q: [4]time.Duration{b.Delay(retries, lo, 0), 0, 0, hi}})
	return rows, worst
}

// decorrelatedPauses is the sorted pauses before retry r, from every pause
// in prev (equally likely) and pauseGrid values of u.
func decorrelatedPauses(b policy.Backoff, r int, prev []time.Duration) []time.Duration {
	all := make([]time.Duration, 0, len(prev)*pauseGrid)
	for _, p := range prev {
		for i := 0; i < pauseGrid; i++ {
			all = append(all, b.Delay(r, p, (float64(i)+0.5)/pauseGrid))
		}
	}
	slices.Sort(all)
	return all
}

func quantile(sorted []time.Duration, q float64) time.Duration {
	i := int(q * float64(len(sorted)))
	if i >= len(sorted) {
		i = len(sorted) - 1
	}
	return sorted[i]
}

// Package quantile estimates a latency quantile from many goroutines at
// once without a lock, for the interceptors' adaptive hedging delay
// (policy.Hedging.Adaptive asks each method's p95 on every hedged call).
package quantile

import (
	"math"
	"math/bits"
	"sync/atomic"
	"time"
)

// A log-spaced histogram of atomic counters. Below
// 2^minOctave ns all share bucket 0; each octave up to 2^maxOctave ns is
// split in subBuckets parts; longer durations share the last bucket. A
// quantile is its bucket's upper bound, at most 25% above the true value
// and never below it: hedging a little late rather than a little early.
const (
	minOctave    = 10
	maxOctave    = 37
	subBits      = 2
	subBuckets   = 1 << subBits
	latencySlots = (maxOctave-minOctave)*subBuckets + 1
)

// The histogram's tuning numbers, each with what set it.
const (
	// minSamples: not measured; a p95 of fewer calls is mostly noise.
	minSamples = 20
	// halfLife: not measured; after a halving the p95's tail still weighs 25 samples.
	halfLife = 1024
)

// Histogram estimates quantiles of one method's latency. It is safe
// for concurrent use; the zero value is empty and ready.
//
// Halving races with concurrent observes: a sample that lands in a bucket
// between its load and its store may be lost, or kept at full weight. That
// perturbs an estimate by a sample or two, which a 95th percentile over
// hundreds of samples does not notice; a lock would cost every call.
type Histogram struct {
	counts [latencySlots]atomic.Uint32
	seen   atomic.Uint64
}

func latencySlot(d time.Duration) int {
	if d < 1<<minOctave {
		return 0
	}
	v := uint64(d)
	e := bits.Len64(v) - 1 // v in [2^e, 2^(e+1))
	if e >= maxOctave {
		return latencySlots - 1
	}
	sub := int(v>>(e-subBits)) & (subBuckets - 1)
	return (e-minOctave)*subBuckets + sub + 1
}

// slotUpper returns the bound every duration of bucket i is below.
func slotUpper(i int) time.Duration {
	if i == 0 {
		return 1 << minOctave
	}
	i--
	e, sub := i/subBuckets+minOctave, i%subBuckets
	return time.Duration(uint64(subBuckets+sub+1) << (e - subBits))
}

// Observe counts d; every halfLife samples all counts halve, so the
// estimate follows a change of latency.
func (h *Histogram) Observe(d time.Duration) {
	h.counts[latencySlot(d)].Add(1)
	if h.seen.Add(1)%halfLife == 0 {
		for i := range h.counts {
			c := &h.counts[i]
			for {
				old := c.Load()
				if old == 0 || c.CompareAndSwap(old, old/2) {
					break
				}
			}
		}
	}
}

// Quantile returns the q-quantile (0 < q <= 1) of the samples, as its bucket's
// upper bound, and true; or false when fewer than minSamples count.
func (h *Histogram) Quantile(q float64) (time.Duration, bool) {
	var snap [latencySlots]uint32
	var total uint64
	for i := range h.counts {
		snap[i] = h.counts[i].Load()
		total += uint64(snap[i])
	}
	if total < minSamples {
		return 0, false
	}
	rank := max(uint64(math.Ceil(q*float64(total))), 1)
	var run uint64
	for i, c := range snap {
		run += uint64(c)
		if run >= rank {
			return slotUpper(i), true
		}
	}
	return slotUpper(latencySlots - 1), true
}

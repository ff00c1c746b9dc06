// Package window counts events over a sliding time window, for the ratio
// budget and the circuit breaker.
package window

import "time"

// Slices is how many slices a sliding window is kept in: memory is fixed
// however long it lives, and counts leave it one slice (a tenth of its
// length) at a time.
const Slices = 10

// Counts are the counters a window keeps (the ratio budget's three); each
// user names its own indexes.
type Counts [3]uint64

// LevelCounts are the circuit breaker's: three counters for each of the
// four criticality levels.
type LevelCounts [12]uint64

// Counters are the counter arrays a Window may keep: one type per user, so
// that a user pays for its own counters only.
type Counters interface{ Counts | LevelCounts }

// Window counts events over a sliding time window, as a ring of Slices
// slices brought up to date lazily when it is used: no goroutine, no timer.
// Not safe for concurrent use: its owner's lock guards it.
type Window[C Counters] struct {
	slices [Slices]C
	// Sum is the sums over the slices, as of the last Advance or Add.
	Sum   C
	tick  int64 // slice index of the newest slice since epoch
	epoch time.Time
	width time.Duration
}

// New returns an empty window of the given length, starting at now.
func New[C Counters](now time.Time, length time.Duration) Window[C] {
	return Window[C]{epoch: now, width: max(length/Slices, 1)}
}

// Advance drops the slices that left the window by now. A clock that goes
// backwards leaves the window where it is.
func (w *Window[C]) Advance(now time.Time) {
	tick := int64(now.Sub(w.epoch) / w.width)
	if tick <= w.tick {
		return
	}
	if tick-w.tick >= Slices {
		w.Reset()
	} else {
		for i := w.tick + 1; i <= tick; i++ {
			k := i % Slices
			for j := 0; j < len(w.Sum); j++ {
				w.Sum[j] -= w.slices[k][j]
			}
			var zero C
			w.slices[k] = zero
		}
	}
	w.tick = tick
}

// Add counts n events of counter i at now.
func (w *Window[C]) Add(now time.Time, i int, n uint64) {
	w.Advance(now)
	w.Sum[i] += n
	w.slices[w.tick%Slices][i] += n
}

// Start returns when the window began (its now at New).
func (w *Window[C]) Start() time.Time { return w.epoch }

// Forget forgets every count of counter i.
func (w *Window[C]) Forget(i int) {
	for k := range w.slices {
		w.slices[k][i] = 0
	}
	w.Sum[i] = 0
}

// Reset forgets every count.
func (w *Window[C]) Reset() {
	var zero C
	for k := range w.slices {
		w.slices[k] = zero
	}
	w.Sum = zero
}

// Package window counts events over a sliding time window, for the ratio
// budget and the circuit breaker.
package window

import "time"

// Slices is how many slices a sliding window is kept in: memory is fixed
// however long it lives, and counts leave it one slice (a tenth of its
// length) at a time.
const Slices = 10

// Counts are the counters a window keeps; each user names its own indexes.
type Counts [3]uint64

// Window counts events over a sliding time window, as a ring of Slices
// slices brought up to date lazily when it is used: no goroutine, no timer.
// Not safe for concurrent use: its owner's lock guards it.
type Window struct {
	slices [Slices]Counts
	// Sum is the sums over the slices, as of the last Advance or Add.
	Sum   Counts
	tick  int64 // slice index of the newest slice since epoch
	epoch time.Time
	width time.Duration
}

// New returns an empty window of the given length, starting at now.
func New(now time.Time, length time.Duration) Window {
	return Window{epoch: now, width: max(length/Slices, 1)}
}

// Advance drops the slices that left the window by now. A clock that goes
// backwards leaves the window where it is.
func (w *Window) Advance(now time.Time) {
	tick := int64(now.Sub(w.epoch) / w.width)
	if tick <= w.tick {
		return
	}
	if tick-w.tick >= Slices {
		w.slices = [Slices]Counts{}
		w.Sum = Counts{}
	} else {
		for i := w.tick + 1; i <= tick; i++ {
			s := &w.slices[i%Slices]
			for j := range s {
				w.Sum[j] -= s[j]
			}
			*s = Counts{}
		}
	}
	w.tick = tick
}

// Add counts n events of counter i at now.
func (w *Window) Add(now time.Time, i int, n uint64) {
	w.Advance(now)
	w.Sum[i] += n
	w.slices[w.tick%Slices][i] += n
}

// Reset forgets every count.
func (w *Window) Reset() {
	w.slices = [Slices]Counts{}
	w.Sum = Counts{}
}

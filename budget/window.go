package budget

import "time"

// windowSlices is how many slices a sliding window is kept in: memory is
// fixed however long it lives, and counts leave it one slice (a tenth of
// its length) at a time.
const windowSlices = 10

// windowCounts are the counters a sliding window keeps; each user names its
// own indexes.
type windowCounts [3]uint64

// window counts events over a sliding time window, as a ring of windowSlices
// slices brought up to date lazily when it is used: no goroutine, no timer.
// Not safe for concurrent use: its owner's lock guards it.
type window struct {
	slices [windowSlices]windowCounts
	sum    windowCounts // sums over slices
	tick   int64        // slice index of the newest slice since epoch
	epoch  time.Time
	width  time.Duration
}

func newWindow(now time.Time, length time.Duration) window {
	return window{epoch: now, width: max(length/windowSlices, 1)}
}

// advance drops the slices that left the window by now. A clock that goes
// backwards leaves the window where it is.
func (w *window) advance(now time.Time) {
	tick := int64(now.Sub(w.epoch) / w.width)
	if tick <= w.tick {
		return
	}
	if tick-w.tick >= windowSlices {
		w.slices = [windowSlices]windowCounts{}
		w.sum = windowCounts{}
	} else {
		for i := w.tick + 1; i <= tick; i++ {
			s := &w.slices[i%windowSlices]
			for j := range s {
				w.sum[j] -= s[j]
			}
			*s = windowCounts{}
		}
	}
	w.tick = tick
}

// add counts n events of counter i at now.
func (w *window) add(now time.Time, i int, n uint64) {
	w.advance(now)
	w.sum[i] += n
	w.slices[w.tick%windowSlices][i] += n
}

// reset forgets every count.
func (w *window) reset() {
	w.slices = [windowSlices]windowCounts{}
	w.sum = windowCounts{}
}

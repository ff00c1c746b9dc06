package budget

import (
	"math"
	"sync"
	"time"
)

// ratioBuckets is how many slices the window is kept in: memory is fixed
// however long the budget lives, and counts leave the window one slice
// (Window/10) at a time.
const ratioBuckets = 10

// Ratio keeps retries under a share of requests over a sliding window, in the
// manner of Finagle's RetryBudget and the Google SRE book's per-client retry
// budget. A request is a first attempt (Attempt.Number == 1), counted when
// RecordAt sees it end; a retry or a hedge is counted when AllowAt grants it.
// AllowAt grants one more when, over the last Window,
//
//	retries + 1 ≤ max(Percent/100 × requests, MinRetriesPerSecond × Window)
//
// The window is a ring of 10 slices of Window/10, brought up to date lazily
// when the budget is used; there is no goroutine and no timer.
//
// The zero value is not usable: build one with NewRatio. A Ratio is safe for
// concurrent use; its operations take one mutex.
type Ratio struct {
	mu       sync.Mutex
	slices   [ratioBuckets]ratioSlice
	requests uint64 // sums over slices
	retries  uint64
	tick     int64 // slice index of the newest slice since epoch
	epoch    time.Time
	width    time.Duration
	share    float64 // Percent/100
	floor    float64 // retries the window always allows
	allowed  uint64
	refused  uint64
	now      func() time.Time
	settings RatioSettings
}

type ratioSlice struct{ requests, retries uint64 }

// NewRatio returns an empty ratio budget, or a *SettingsError when s breaks a
// rule. Zero fields take their defaults (DefaultRatioSettings).
func NewRatio(s RatioSettings, opts ...Option) (*Ratio, error) {
	if err := s.Validate(); err != nil {
		return nil, err
	}
	s = s.WithDefaults()
	o := buildOptions(opts)
	return &Ratio{
		epoch:    o.now(),
		width:    s.Window / ratioBuckets,
		share:    s.Percent / 100,
		floor:    s.MinRetriesPerSecond * s.Window.Seconds(),
		now:      o.now,
		settings: s,
	}, nil
}

// Settings returns the settings r was built with, defaults filled in.
func (r *Ratio) Settings() RatioSettings { return r.settings }

// advance drops the slices that left the window by now. A clock that goes
// backwards leaves the window where it is.
func (r *Ratio) advance(now time.Time) {
	tick := int64(now.Sub(r.epoch) / r.width)
	if tick <= r.tick {
		return
	}
	if tick-r.tick >= ratioBuckets {
		r.slices = [ratioBuckets]ratioSlice{}
		r.requests, r.retries = 0, 0
	} else {
		for i := r.tick + 1; i <= tick; i++ {
			s := &r.slices[i%ratioBuckets]
			r.requests -= s.requests
			r.retries -= s.retries
			*s = ratioSlice{}
		}
	}
	r.tick = tick
}

func (r *Ratio) allowance() float64 {
	return math.Max(r.share*float64(r.requests), r.floor)
}

// Record is RecordAt with the budget's clock, read only for first attempts
// (the others change nothing).
func (r *Ratio) Record(a Attempt) {
	if a.Number > 1 {
		return
	}
	r.RecordAt(r.now(), a)
}

// RecordAt counts a request for every first attempt, however it ended; other
// attempts were counted as retries when they were allowed.
func (r *Ratio) RecordAt(now time.Time, a Attempt) {
	if a.Number > 1 {
		return
	}
	r.mu.Lock()
	r.advance(now)
	r.requests++
	r.slices[r.tick%ratioBuckets].requests++
	r.mu.Unlock()
}

// Allow is AllowAt with the budget's clock.
func (r *Ratio) Allow(q Request) bool { return r.AllowAt(r.now(), q) }

// AllowAt grants a retry or a hedge, and counts it, while the window's
// retries stay within its allowance.
func (r *Ratio) AllowAt(now time.Time, _ Request) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.advance(now)
	if float64(r.retries+1) > r.allowance() {
		r.refused++
		return false
	}
	r.retries++
	r.slices[r.tick%ratioBuckets].retries++
	r.allowed++
	return true
}

// State is StateAt with the budget's clock.
func (r *Ratio) State() State { return r.StateAt(r.now()) }

// StateAt reports the retries the window would allow now (Level) out of
// all it allows (Capacity): both move with the requests in the window.
func (r *Ratio) StateAt(now time.Time) State {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.advance(now)
	allow := math.Floor(r.allowance() + 1e-9)
	return State{
		Kind:     kindRatio,
		Level:    math.Max(0, allow-float64(r.retries)),
		Capacity: allow,
		Allowed:  r.allowed,
		Refused:  r.refused,
		At:       now,
	}
}

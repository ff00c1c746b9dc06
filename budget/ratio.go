package budget

import (
	"math"
	"sync"
	"time"
)

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
	mu sync.Mutex
	// w counts requests (ratioRequests) and retries (ratioRetries).
	w        window
	share    float64 // Percent/100
	floor    float64 // retries the window always allows
	allowed  uint64
	refused  uint64
	now      func() time.Time
	settings RatioSettings
}

const (
	ratioRequests = iota
	ratioRetries
)

// NewRatio returns an empty ratio budget, or a *SettingsError when s breaks a
// rule. Zero fields take their defaults (DefaultRatioSettings).
func NewRatio(s RatioSettings, opts ...Option) (*Ratio, error) {
	if err := s.Validate(); err != nil {
		return nil, err
	}
	s = s.WithDefaults()
	o := buildOptions(opts)
	return &Ratio{
		w:        newWindow(o.now(), s.Window),
		share:    s.Percent / 100,
		floor:    s.MinRetriesPerSecond * s.Window.Seconds(),
		now:      o.now,
		settings: s,
	}, nil
}

// Settings returns the settings r was built with, defaults filled in.
func (r *Ratio) Settings() RatioSettings { return r.settings }

func (r *Ratio) allowance() float64 {
	return math.Max(r.share*float64(r.w.sum[ratioRequests]), r.floor)
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
	r.w.add(now, ratioRequests, 1)
	r.mu.Unlock()
}

// Allow is AllowAt with the budget's clock.
func (r *Ratio) Allow(q Request) bool { return r.AllowAt(r.now(), q) }

// AllowAt grants a retry or a hedge, and counts it, while the window's
// retries stay within its allowance.
func (r *Ratio) AllowAt(now time.Time, _ Request) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.w.advance(now)
	if float64(r.w.sum[ratioRetries]+1) > r.allowance() {
		r.refused++
		return false
	}
	r.w.add(now, ratioRetries, 1)
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
	r.w.advance(now)
	allow := math.Floor(r.allowance() + 1e-9)
	return State{
		Kind:     kindRatio,
		Level:    math.Max(0, allow-float64(r.w.sum[ratioRetries])),
		Capacity: allow,
		Allowed:  r.allowed,
		Refused:  r.refused,
		At:       now,
	}
}

package budget

import (
	"math"
	"sync"
	"time"

	"github.com/stagger-go/stagger/internal/window"
)

// ratio keeps retries under a share of requests over a sliding window, in the
// manner of Finagle's RetryBudget and the Google SRE book's per-client retry
// budget. A request is a first attempt (Attempt.Number == 1), counted when
// Record sees it end; a retry or a hedge is counted when Allow grants it.
// Allow grants one more when, over the last Window,
//
//	retries + 1 ≤ max(Percent/100 × requests, MinRetriesPerSecond × Window)
//
// The window is a ring of 10 slices of Window/10, brought up to date lazily
// when the budget is used; there is no goroutine and no timer.
//
// New builds one for KindRatio. It is safe for concurrent use; its
// operations take one mutex.
type ratio struct {
	mu sync.Mutex
	// w counts requests (ratioRequests) and retries (ratioRetries).
	w     window.Window[window.Counts]
	share float64 // Percent/100
	floor float64 // retries the window always allows
	// spend[l.Index()] is the share of the allowance a retry of level l
	// may take (1 for CRITICAL; see Request.Criticality).
	spend   [4]float64
	allowed uint64
	refused uint64
	now     func() time.Time
}

const (
	ratioRequests = iota
	ratioRetries
)

// newRatio returns an empty ratio budget, or a *SettingsError when s breaks a
// rule. Zero fields take their defaults (Settings.WithDefaults).
func newRatio(s RatioSettings, opts ...Option) (*ratio, error) {
	if err := s.validate(); err != nil {
		return nil, err
	}
	s = s.withDefaults()
	o := buildOptions(opts)
	r := &ratio{
		w:     window.New[window.Counts](o.Now(), s.Window),
		share: s.Percent / 100,
		floor: s.MinRetriesPerSecond * s.Window.Seconds(),
		now:   o.Now,
	}
	for i, f := range reserveShares {
		r.spend[i] = 1 - f
	}
	return r, nil
}

func (r *ratio) allowance() float64 {
	return math.Max(r.share*float64(r.w.Sum[ratioRequests]), r.floor)
}

// Record counts a request for every first attempt, however it ended; other
// attempts were counted as retries when they were allowed (and do not read
// the clock).
func (r *ratio) Record(a Attempt) {
	if a.Number > 1 {
		return
	}
	now := r.now()
	r.mu.Lock()
	r.w.Add(now, ratioRequests, 1)
	r.mu.Unlock()
}

// Allow grants a retry or a hedge, and counts it, while the window's
// retries stay within its allowance, less the reserve the request's
// criticality leaves (Request.Criticality: none for CRITICAL; a
// CRITICAL_PLUS retry may pass the allowance by the reserve).
func (r *ratio) Allow(req Request) bool {
	now := r.now()
	r.mu.Lock()
	defer r.mu.Unlock()
	r.w.Advance(now)
	if float64(r.w.Sum[ratioRetries]+1) > r.allowance()*r.spend[req.Criticality.Index()] {
		r.refused++
		return false
	}
	r.w.Add(now, ratioRetries, 1)
	r.allowed++
	return true
}

// State reports the retries the window would allow now (Level) out of all
// it allows (Capacity): both move with the requests in the window.
func (r *ratio) State() State {
	now := r.now()
	r.mu.Lock()
	defer r.mu.Unlock()
	r.w.Advance(now)
	allow := math.Floor(r.allowance() + 1e-9)
	return State{
		Kind:     kindRatio,
		Level:    math.Max(0, allow-float64(r.w.Sum[ratioRetries])),
		Capacity: allow,
		Allowed:  r.allowed,
		Refused:  r.refused,
		At:       now,
	}
}

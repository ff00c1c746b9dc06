package budget

import (
	"time"
)

// throttle is gRFC A6's retryThrottling, token for token. Tokens start at
// MaxTokens and stay in [0, MaxTokens]. Every attempt that fails in a way the
// policy retries takes one token, even the last attempt of a call; every
// successful attempt gives back TokenRatio, kept to 3 decimals (0.1239 counts
// as 0.123). A retry or a hedge is allowed only while tokens > MaxTokens/2,
// and Allow spends nothing: the throttle stops retries once failures outnumber
// successes by about 1/TokenRatio to 1, and lets them through again as soon
// as successes bring the tokens back above half.
//
// New builds one for KindThrottle. It is safe for concurrent use; its
// operations are lock-free.
type throttle struct {
	tokenCounts
	max   int64
	ratio int64
	// above[l.Index()]: a retry of level l is allowed while 2 × tokens >
	// above (max for CRITICAL: gRFC A6's tokens > maxTokens/2).
	above [4]int64
	now   func() time.Time
}

// newThrottle returns a full throttle, or a *SettingsError when s breaks a rule.
func newThrottle(s ThrottleSettings, opts ...Option) (*throttle, error) {
	if err := s.validate(); err != nil {
		return nil, err
	}
	o := buildOptions(opts)
	t := &throttle{max: toMilli(s.MaxTokens), ratio: toMilli(s.TokenRatio), now: o.Now}
	// A ratio above MaxTokens fills the throttle just the same; clamping it
	// keeps tokens+ratio far from overflowing.
	t.ratio = min(t.ratio, t.max)
	for i, f := range reserveFloors(t.max) {
		t.above[i] = t.max + f
	}
	t.tokens.Store(t.max)
	return t, nil
}

// Record takes a token for a Failure and gives back TokenRatio for a
// Success; Other changes nothing. It does not read the clock: the tokens do
// not depend on time.
func (t *throttle) Record(a Attempt) {
	switch a.Outcome {
	case Failure:
		addClamped(&t.tokens, -milli, t.max)
	case Success:
		addClamped(&t.tokens, t.ratio, t.max)
	}
}

// Allow reports whether tokens > MaxTokens/2, plus the reserve the
// request's criticality leaves of the upper half (Request.Criticality; none
// for CRITICAL, as in gRFC A6). It spends nothing: in gRFC A6 the retry
// pays when it fails, through Record. Like Record, it does not read the
// clock.
func (t *throttle) Allow(r Request) bool {
	if 2*t.tokens.Load() > t.above[r.Criticality.Index()] {
		t.allowed.Add(1)
		return true
	}
	t.refused.Add(1)
	return false
}

// State reports the tokens (Level) out of MaxTokens (Capacity), stamped
// with the budget's clock.
func (t *throttle) State() State {
	return t.snapshot(kindThrottle, t.max, t.now())
}

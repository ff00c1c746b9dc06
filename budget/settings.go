package budget

import (
	"fmt"
	"math"
	"strconv"
	"sync/atomic"
	"time"
)

// ThrottleSettings configure the gRFC A6 throttle (a policy file's
// retryThrottling).
type ThrottleSettings struct {
	// MaxTokens is in (0, 1000]. Tokens start at MaxTokens.
	MaxTokens float64
	// TokenRatio (> 0, kept to 3 decimals) is added per successful call.
	TokenRatio float64
}

// TokenBucketSettings configure a token bucket in the AWS SDKs' standard mode.
// A zero field takes the default written beside it.
type TokenBucketSettings struct {
	// Capacity is the most tokens the bucket holds, and where it starts
	// unless Initial is set. Default 500. At most 1e9.
	Capacity float64
	// Initial is where the bucket starts, in (0, Capacity]. Zero means full
	// (Capacity), as in the AWS SDKs. Stagger's default budget starts low:
	// see DefaultSettings.
	Initial float64
	// RetryCost is what a retry (or a hedge) takes, in (0, Capacity].
	// Default 5.
	RetryCost float64
	// TimeoutRetryCost is what a retry after a per-attempt timeout takes, in
	// (0, Capacity]. Default 10.
	TimeoutRetryCost float64
	// SuccessReward is added when a call succeeds on its first attempt, in
	// (0, Capacity]. Default 1.
	SuccessReward float64
}

// RatioSettings configure a ratio budget: retries are kept under Percent of
// the requests of the last Window, with a floor of MinRetriesPerSecond.
// A zero field takes the default written beside it.
type RatioSettings struct {
	// Percent of requests that may be retries, in (0, 100]. Default 10.
	// Requests are first attempts.
	Percent float64
	// Window over which requests and retries are counted, in [10ms, 1h].
	// Default 10s. It is kept as a ring of 10 buckets of Window/10, so
	// counts leave the window Window/10 at a time.
	Window time.Duration
	// MinRetriesPerSecond is a floor so that a quiet client can still retry:
	// the window allows at least MinRetriesPerSecond × Window retries, in
	// [0, 1e6]. Zero takes the default (Settings.WithDefaults); a negative
	// value means no floor.
	MinRetriesPerSecond float64
}

// Kind names a budget kind.
type Kind uint8

const (
	// KindNone: no budget (unlimited).
	KindNone Kind = iota
	// KindThrottle: the gRFC A6 throttle.
	KindThrottle
	// KindTokenBucket: the AWS SDK standard-mode token bucket.
	KindTokenBucket
	// KindRatio: retries as a share of requests over a sliding window.
	KindRatio
)

// Settings is a budget as a policy file declares it: Kind says which of the
// other fields applies. It is comparable with ==, so a reload can tell whether
// the budget changed and keep the old one's state when it did not.
type Settings struct {
	Kind        Kind
	Throttle    ThrottleSettings
	TokenBucket TokenBucketSettings
	Ratio       RatioSettings
	// Defer says whether refused retries wait (Gate): by default they do
	// for the token bucket and the ratio, not for the throttle.
	Defer DeferSettings
}

// String returns "none", "throttle", "token-bucket" or "ratio", the names
// State.Kind uses.
func (k Kind) String() string {
	switch k {
	case KindNone:
		return "none"
	case KindThrottle:
		return kindThrottle
	case KindTokenBucket:
		return kindTokenBucket
	case KindRatio:
		return kindRatio
	}
	return "Kind(" + strconv.Itoa(int(k)) + ")"
}

const (
	kindThrottle    = "throttle"
	kindTokenBucket = "token-bucket"
	kindRatio       = "ratio"
)

// Budgets keep tokens as integer thousandths so that Allow and Record are a
// compare-and-swap, and so that gRFC A6's "tokenRatio kept to 3 decimals" is
// exact.
const milli = 1000

// toMilli truncates x to thousandths. The small bias keeps values written
// with 3 decimals (0.123 is 122.99999… in binary) from losing a thousandth.
func toMilli(x float64) int64 {
	return int64(math.Floor(x*milli + 1e-6))
}

func fromMilli(m int64) float64 { return float64(m) / milli }

// addClamped adds delta to *tokens and keeps the result in [0, ceiling], or
// in [old, ceiling] when old is below 0 (a token bucket's CRITICAL_PLUS
// debt, see Request.Criticality: a refund pays it back, nothing deepens
// it). It returns without a write when the clamp leaves the value unchanged
// (a full bucket that is refilled, an empty one that is drained), so the
// common case under load costs one atomic load and no contended CAS. The
// settings' rules keep delta and ceiling at most 1e12 thousandths, so
// old+delta cannot overflow.
func addClamped(tokens *atomic.Int64, delta, ceiling int64) {
	for {
		old := tokens.Load()
		next := min(ceiling, max(min(0, old), old+delta))
		if next == old || tokens.CompareAndSwap(old, next) {
			return
		}
	}
}

// validate reports the first setting that breaks its rule, as a
// *SettingsError naming the setting.
func (s ThrottleSettings) validate() error {
	if !(s.MaxTokens > 0 && s.MaxTokens <= 1000) {
		return &SettingsError{Field: "MaxTokens", Rule: "must be in (0, 1000]", Value: s.MaxTokens}
	}
	if toMilli(s.MaxTokens) == 0 {
		return &SettingsError{Field: "MaxTokens", Rule: "must be at least 0.001 (3 decimals are kept)", Value: s.MaxTokens}
	}
	if !(s.TokenRatio > 0) || math.IsInf(s.TokenRatio, 1) {
		return &SettingsError{Field: "TokenRatio", Rule: "must be a finite number > 0", Value: s.TokenRatio}
	}
	if toMilli(s.TokenRatio) == 0 {
		return &SettingsError{Field: "TokenRatio", Rule: "must be at least 0.001 (3 decimals are kept)", Value: s.TokenRatio}
	}
	return nil
}

// defaultTokenBucket is the AWS SDKs' standard mode: capacity 500
// (starting full), retry cost 5, timeout retry cost 10, success reward 1
// (Settings{}.WithDefaults().TokenBucket).
func defaultTokenBucket() TokenBucketSettings {
	return TokenBucketSettings{Capacity: 500, Initial: 500, RetryCost: 5, TimeoutRetryCost: 10, SuccessReward: 1}
}

// withDefaults returns s with each zero field replaced by its default.
func (s TokenBucketSettings) withDefaults() TokenBucketSettings {
	d := defaultTokenBucket()
	if s.Capacity == 0 {
		s.Capacity = d.Capacity
	}
	if s.Initial == 0 {
		s.Initial = s.Capacity
	}
	if s.RetryCost == 0 {
		s.RetryCost = d.RetryCost
	}
	if s.TimeoutRetryCost == 0 {
		s.TimeoutRetryCost = d.TimeoutRetryCost
	}
	if s.SuccessReward == 0 {
		s.SuccessReward = d.SuccessReward
	}
	return s
}

// validate reports the first setting that breaks its rule, after zero fields
// took their defaults, as a *SettingsError naming the setting.
func (s TokenBucketSettings) validate() error {
	s = s.withDefaults()
	if !(s.Capacity >= 0.001 && s.Capacity <= 1e9) {
		return &SettingsError{Field: "Capacity", Rule: "must be in [0.001, 1e9]", Value: s.Capacity}
	}
	within := func(field string, v float64) error {
		if !(v > 0 && v <= s.Capacity) || toMilli(v) == 0 {
			return &SettingsError{Field: field, Rule: fmt.Sprintf("must be in (0, capacity %v] and at least 0.001", s.Capacity), Value: v}
		}
		return nil
	}
	for _, f := range []struct {
		name string
		v    float64
	}{
		{"Initial", s.Initial},
		{"RetryCost", s.RetryCost},
		{"TimeoutRetryCost", s.TimeoutRetryCost},
		{"SuccessReward", s.SuccessReward},
	} {
		if err := within(f.name, f.v); err != nil {
			return err
		}
	}
	return nil
}

// defaultRatio is 10% of requests over a 10 s window with a floor of 0.1
// retries per second (one retry per window), see doc.go for why
// (Settings{}.WithDefaults().Ratio).
func defaultRatio() RatioSettings {
	return RatioSettings{Percent: 10, Window: 10 * time.Second, MinRetriesPerSecond: 0.1}
}

// withDefaults returns s with each zero field replaced by its default, and a
// negative MinRetriesPerSecond (no floor) as 0.
func (s RatioSettings) withDefaults() RatioSettings {
	d := defaultRatio()
	if s.Percent == 0 {
		s.Percent = d.Percent
	}
	if s.Window == 0 {
		s.Window = d.Window
	}
	switch {
	case s.MinRetriesPerSecond == 0:
		s.MinRetriesPerSecond = d.MinRetriesPerSecond
	case s.MinRetriesPerSecond < 0:
		s.MinRetriesPerSecond = 0
	}
	return s
}

// validate reports the first setting that breaks its rule, after zero fields
// took their defaults, as a *SettingsError naming the setting.
func (s RatioSettings) validate() error {
	if !(s.Percent > 0 && s.Percent <= 100) && s.Percent != 0 {
		return &SettingsError{Field: "Percent", Rule: "must be in (0, 100]", Value: s.Percent}
	}
	if s.Window != 0 && (s.Window < 10*time.Millisecond || s.Window > time.Hour) {
		return &SettingsError{Field: "Window", Rule: "must be in [10ms, 1h]", Value: s.Window}
	}
	if math.IsNaN(s.MinRetriesPerSecond) || s.MinRetriesPerSecond > 1e6 {
		return &SettingsError{Field: "MinRetriesPerSecond", Rule: "must be at most 1e6 (negative: no floor)", Value: s.MinRetriesPerSecond}
	}
	return nil
}

// Validate checks the settings of s.Kind and Defer, after zero fields took
// their defaults; the other kinds' fields are ignored. It returns the first
// setting that breaks its rule as a *SettingsError whose Field is the
// setting's name within its part (MaxTokens, Capacity, Window), or within
// Defer for Defer's (Defer.MaxWait).
func (s Settings) Validate() error {
	if s.Kind != KindNone {
		if err := s.Defer.validate(); err != nil {
			if se, ok := err.(*SettingsError); ok {
				return &SettingsError{Field: "Defer." + se.Field, Rule: se.Rule, Value: se.Value}
			}
			return err
		}
	}
	switch s.Kind {
	case KindNone:
		return nil
	case KindThrottle:
		return s.Throttle.validate()
	case KindTokenBucket:
		return s.TokenBucket.validate()
	case KindRatio:
		return s.Ratio.validate()
	}
	return &SettingsError{Field: "Kind", Rule: "must be none, throttle, token-bucket or ratio", Value: s.Kind}
}

// WithDefaults returns s with each zero field of its parts (TokenBucket,
// Ratio, Defer) replaced by the default written beside it, and a negative
// Ratio.MinRetriesPerSecond (no floor) as 0: the settings New builds from.
// Throttle has no defaults.
func (s Settings) WithDefaults() Settings {
	s.TokenBucket = s.TokenBucket.withDefaults()
	s.Ratio = s.Ratio.withDefaults()
	s.Defer = s.Defer.withDefaults()
	return s
}

// New builds the budget s describes, wrapped in a Gate when it defers
// (s.Defer). KindNone returns (nil, nil): a nil Budget means unlimited.
func New(s Settings, opts ...Option) (Budget, error) {
	if err := s.Defer.validate(); err != nil && s.Kind != KindNone {
		return nil, err
	}
	b, err := newKind(s, opts)
	if err != nil || b == nil || !s.defers() {
		return b, err
	}
	g, err := Deferring(b, s.Defer, opts...)
	if err != nil {
		return nil, err
	}
	return g, nil
}

// defers reports whether the budget s describes defers refused retries
// (New wraps it in a Gate): by s.Defer, and by default for the token bucket
// and the ratio, not the throttle.
func (s Settings) defers() bool {
	return s.Kind != KindNone && s.Defer.on(s.Kind)
}

func newKind(s Settings, opts []Option) (Budget, error) {
	switch s.Kind {
	case KindNone:
		return nil, nil
	case KindThrottle:
		// Each case returns its own nil so that an error never comes with a
		// non-nil Budget holding a nil pointer.
		t, err := newThrottle(s.Throttle, opts...)
		if err != nil {
			return nil, err
		}
		return t, nil
	case KindTokenBucket:
		b, err := newTokenBucket(s.TokenBucket, opts...)
		if err != nil {
			return nil, err
		}
		return b, nil
	case KindRatio:
		r, err := newRatio(s.Ratio, opts...)
		if err != nil {
			return nil, err
		}
		return r, nil
	}
	return nil, s.Validate()
}

// tokenCounts is the state the two token kinds (throttle, tokenBucket) share:
// tokens in thousandths, updated by compare-and-swap, and the Allow counters.
type tokenCounts struct {
	tokens  atomic.Int64 // thousandths of a token
	allowed atomic.Uint64
	refused atomic.Uint64
}

// snapshot is State for a token kind whose capacity is capMilli thousandths.
func (c *tokenCounts) snapshot(kind string, capMilli int64, now time.Time) State {
	return State{
		Kind:     kind,
		Level:    fromMilli(c.tokens.Load()),
		Capacity: fromMilli(capMilli),
		Allowed:  c.allowed.Load(),
		Refused:  c.refused.Load(),
		At:       now,
	}
}

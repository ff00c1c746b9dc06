package breaker

import (
	"strconv"
	"time"
)

// Settings configure a circuit breaker and client-side adaptive
// throttling (a policy file's circuitBreaker and adaptiveThrottling). They
// share one sliding window of the attempts one Breaker guards. A zero
// field takes the default written beside it; the policy file rejects an
// explicit zero. Comparable with ==.
type Settings struct {
	// FailureRatio trips the breaker: when, over SamplingWindow, at least
	// MinimumThroughput first attempts got an answer and at least this
	// share of them failed. Only first attempts count: they sample the
	// server as the callers meet it, where retries repeat the calls that
	// failed (a key that always fails would count once per attempt). In
	// (0, 1]; default 0.5.
	FailureRatio float64
	// MinimumThroughput is the fewest answered first attempts in the
	// window before the ratio counts. In [1, 1e6]; default 20.
	MinimumThroughput int
	// ConsecutiveFailures first attempts failed in a row (no success of
	// any attempt between) trip the breaker while the window holds fewer
	// than MinimumThroughput answers: a client too quiet for the ratio
	// still stops calling a server that fails everything, and a busy one
	// is judged by the ratio alone (under 20 % random failures, 5 in a row
	// come once in 3,000 first attempts). In [1, 1e6]; default 5.
	ConsecutiveFailures int
	// SamplingWindow is the window's length, in [100ms, 24h]; default 10s.
	// It is kept as a ring of 10 slices: counts leave it a tenth at a time.
	SamplingWindow time.Duration
	// BreakDuration is the least time the breaker stays open before it
	// lets one probe through (half-open), in [1ms, 1h]; default 100ms.
	// Each probe that fails doubles it, up to MaxBreakDuration; closing
	// resets it. The first break is short because the failures that
	// opened the breaker say the server fails, not for how long: each
	// failed probe is the evidence that the outage lasts, and lengthens
	// the break (at the defaults 100ms, 200ms, 400ms, 800ms, then 1s).
	// Until issue 88 it was 1s from the first break: a breaker that
	// opened at the end of an outage kept the recovered server's callers
	// out for up to a second, below a client that does not retry
	// (BENCHMARKS.md, "Issue 88: the breaker beside no retry").
	BreakDuration time.Duration
	// ProbeEvery: the break also lasts until the probe is one in this
	// many of the first attempts asked since the breaker opened (this
	// many less one refused before it; each failed probe doubles it, up
	// to 1000), or until MaxBreakDuration, so that in a lasting outage
	// probes stay a small share of what a busy client asks; with the
	// default MaxBreakDuration a client probes at least once a second,
	// whatever its rate (a longer MaxBreakDuration probes less but sees a
	// recovered server later). In [1, 1e6]; default 1: the first break is
	// BreakDuration's alone, and the share of first attempts sent as
	// probes halves with each failed probe. Until issue 88 it was 10, and
	// counted the refusals before the probe: a client of fewer than 10
	// calls a second had every break last MaxBreakDuration, its first
	// too.
	ProbeEvery int
	// MaxBreakDuration bounds the break however few first attempts are
	// refused (a quiet client, or only retries waiting), and the doubled
	// BreakDuration, so that the breaker's probe sees a recovered server
	// within MaxBreakDuration whatever the outage's length; in
	// [BreakDuration, 24h]; default 1s (BreakDuration when that is
	// longer). Until issue 39 it was 5s: after a long outage, breaks had
	// grown to 5s, and a client met the recovered server up to 5s late.
	MaxBreakDuration time.Duration
	// NoTrip: the breaker never opens (adaptive throttling alone).
	NoTrip bool
	// ThrottleK turns on client-side adaptive throttling of first attempts
	// (Google SRE book, "Handling Overload"): a first attempt is rejected
	// locally with probability max(0, (requests − K × accepts) /
	// (requests + 1)), counted over the window, where requests are the
	// attempts asked for (rejected ones included) and accepts those the
	// server answered without failing. 0: off; else in [1, 100]; the SRE
	// book's K is 2. It is the K of CRITICAL calls (and of calls that name
	// no criticality); each level keeps its own counts and the less
	// critical a lower K (Breaker says how).
	ThrottleK float64
	// Scope says what one Breaker guards: every method of one target
	// (ScopeTarget) or one method of one target (ScopeMethod, the default).
	Scope Scope
	// NoPacing turns off the pacing of first attempts held while their
	// connection was not ready (see Breaker.Pace; the interceptors hold
	// waitForReady calls).
	NoPacing bool
}

// Scope says what one Breaker guards.
type Scope uint8

const (
	// ScopeMethod: one breaker per target and method, so that one failing
	// method (or one whose keys fail) does not stop the others.
	ScopeMethod Scope = iota
	// ScopeTarget: one breaker per target (the ClientConn's target string),
	// for a target whose methods fail together.
	ScopeTarget
)

// String returns "method" or "target".
func (s Scope) String() string {
	switch s {
	case ScopeMethod:
		return "method"
	case ScopeTarget:
		return "target"
	}
	return "Scope(" + strconv.Itoa(int(s)) + ")"
}

// Defaults of Settings.
const (
	DefaultFailureRatio      = 0.5
	DefaultMinimumThroughput = 20
	DefaultConsecutive       = 5
	DefaultSamplingWindow    = 10 * time.Second
	DefaultBreakDuration     = 100 * time.Millisecond
	DefaultMaxBreakDuration  = time.Second
	DefaultProbeEvery        = 1
	DefaultThrottleK         = 2.0
)

// WithDefaults returns s with each zero field replaced by its default
// (ThrottleK stays 0: off).
func (s Settings) WithDefaults() Settings {
	if s.FailureRatio == 0 {
		s.FailureRatio = DefaultFailureRatio
	}
	if s.MinimumThroughput == 0 {
		s.MinimumThroughput = DefaultMinimumThroughput
	}
	if s.ConsecutiveFailures == 0 {
		s.ConsecutiveFailures = DefaultConsecutive
	}
	if s.SamplingWindow == 0 {
		s.SamplingWindow = DefaultSamplingWindow
	}
	if s.BreakDuration == 0 {
		s.BreakDuration = DefaultBreakDuration
	}
	if s.ProbeEvery == 0 {
		s.ProbeEvery = DefaultProbeEvery
	}
	if s.MaxBreakDuration == 0 {
		s.MaxBreakDuration = max(DefaultMaxBreakDuration, s.BreakDuration)
	}
	return s
}

// Validate reports the first setting that breaks its rule, as a
// *SettingsError naming the policy file's field. Zero fields are valid
// (defaults); NaN and infinities are not.
func (s Settings) Validate() error {
	f := s.WithDefaults()
	switch {
	case !(f.FailureRatio > 0 && f.FailureRatio <= 1):
		return &SettingsError{Field: "FailureRatio", Rule: "must be in (0, 1]", Value: s.FailureRatio}
	case f.MinimumThroughput < 1 || f.MinimumThroughput > 1e6:
		return &SettingsError{Field: "MinimumThroughput", Rule: "must be in [1, 1e6]", Value: s.MinimumThroughput}
	case f.ConsecutiveFailures < 1 || f.ConsecutiveFailures > 1e6:
		return &SettingsError{Field: "ConsecutiveFailures", Rule: "must be in [1, 1e6]", Value: s.ConsecutiveFailures}
	case f.SamplingWindow < 100*time.Millisecond || f.SamplingWindow > 24*time.Hour:
		return &SettingsError{Field: "SamplingWindow", Rule: "must be in [100ms, 24h]", Value: s.SamplingWindow}
	case f.BreakDuration < time.Millisecond || f.BreakDuration > time.Hour:
		return &SettingsError{Field: "BreakDuration", Rule: "must be in [1ms, 1h]", Value: s.BreakDuration}
	case f.ProbeEvery < 1 || f.ProbeEvery > 1e6:
		return &SettingsError{Field: "ProbeEvery", Rule: "must be in [1, 1e6]", Value: s.ProbeEvery}
	case f.MaxBreakDuration < f.BreakDuration || f.MaxBreakDuration > 24*time.Hour:
		return &SettingsError{Field: "MaxBreakDuration", Rule: "must be in [breakDuration, 24h]", Value: s.MaxBreakDuration}
	case s.ThrottleK != 0 && !(s.ThrottleK >= 1 && s.ThrottleK <= 100):
		return &SettingsError{Field: "ThrottleK", Rule: "must be in [1, 100]", Value: s.ThrottleK}
	case s.Scope > ScopeTarget:
		return &SettingsError{Field: "Scope", Rule: "must be METHOD or TARGET", Value: s.Scope}
	case s.NoTrip && s.ThrottleK == 0:
		return &SettingsError{Field: "NoTrip", Rule: "neither trips nor throttles (NoTrip without ThrottleK)", Value: true}
	}
	return nil
}

package policy

import (
	"encoding/json"
	"errors"
	"strings"
	"time"

	"github.com/stagger-go/stagger/breaker"
)

// breakerPart is what one level of a file (the top, or a methodConfig
// entry) says of circuitBreaker and adaptiveThrottling: each absent, off
// (false, entries only) or an object of fields, set where given.
type breakerPart struct {
	cb, at       *node
	cbOff, atOff bool
	s            breaker.Settings
	windowAT     time.Duration
	windowATPath string
	failed       bool
	scopeSet     bool
	paceSet      bool
}

// breakerFields reads the circuitBreaker and adaptiveThrottling keys of n
// (the root, or an entry at path, where false turns either off).
func (w *walker) breakerFields(n *node, path string, entry bool) breakerPart {
	var p breakerPart
	before := len(w.errs)
	p.cb, p.at = get(n, "circuitBreaker"), get(n, "adaptiveThrottling")
	cp, ap := join(path, "circuitBreaker"), join(path, "adaptiveThrottling")
	p.cb, p.cbOff = w.breakerSection(p.cb, cp, entry, "breaker")
	p.at, p.atOff = w.breakerSection(p.at, ap, entry, "throttling")
	if p.cb != nil {
		switch {
		case w.object(p.cb, cp, "failureRatio", "minimumThroughput", "consecutiveFailures", "samplingWindow", "breakDuration", "probeEvery", "maxBreakDuration", "scope", "paceReconnect"):
			p.s.FailureRatio = w.breakerNumber(p.cb, cp, "failureRatio")
			p.s.MinimumThroughput = int(w.breakerNumber(p.cb, cp, "minimumThroughput"))
			p.s.ConsecutiveFailures = int(w.breakerNumber(p.cb, cp, "consecutiveFailures"))
			p.s.ProbeEvery = int(w.breakerNumber(p.cb, cp, "probeEvery"))
			p.s.SamplingWindow = w.breakerDuration(p.cb, cp, "samplingWindow")
			p.s.BreakDuration = w.breakerDuration(p.cb, cp, "breakDuration")
			p.s.MaxBreakDuration = w.breakerDuration(p.cb, cp, "maxBreakDuration")
			if v := get(p.cb, "paceReconnect"); v != nil {
				if b, ok := w.boolean(v, join(cp, "paceReconnect")); ok {
					p.s.NoPacing, p.paceSet = !b, true
				}
			}
			if v := get(p.cb, "scope"); v != nil {
				if s, ok := w.str(v, join(cp, "scope")); ok {
					switch strings.ToUpper(s) {
					case "METHOD":
						p.s.Scope, p.scopeSet = breaker.ScopeMethod, true
					case "TARGET":
						p.s.Scope, p.scopeSet = breaker.ScopeTarget, true
					default:
						w.fail(join(cp, "scope"), "must be METHOD or TARGET", s)
					}
				}
			}
		default:
			p.cb = nil
		}
	}
	if p.at != nil {
		switch {
		case w.object(p.at, ap, "k", "window"):
			p.s.ThrottleK = w.breakerNumber(p.at, ap, "k")
			p.windowAT = w.breakerDuration(p.at, ap, "window")
			p.windowATPath = join(ap, "window")
			if p.s.ThrottleK == 0 && get(p.at, "k") == nil {
				p.s.ThrottleK = breaker.DefaultThrottleK
			}
		default:
			p.at = nil
		}
	}
	// Every field on its own, so that a file hears of all its mistakes
	// at once; resolveBreaker checks them together.
	for _, one := range []breaker.Settings{
		{FailureRatio: p.s.FailureRatio}, {MinimumThroughput: p.s.MinimumThroughput}, {ConsecutiveFailures: p.s.ConsecutiveFailures}, {ProbeEvery: p.s.ProbeEvery},
		{SamplingWindow: p.s.SamplingWindow}, {BreakDuration: p.s.BreakDuration, MaxBreakDuration: max(p.s.BreakDuration, breaker.DefaultMaxBreakDuration)},
		{MaxBreakDuration: p.s.MaxBreakDuration, BreakDuration: min(p.s.MaxBreakDuration, breaker.DefaultBreakDuration)},
		{ThrottleK: p.s.ThrottleK},
	} {
		w.breakerRules(one, path)
	}
	p.failed = len(w.errs) != before
	return p
}

// breakerRules reports the first rule s breaks, under path.
func (w *walker) breakerRules(s breaker.Settings, path string) bool {
	err := s.Validate()
	if err == nil {
		return true
	}
	var se *breaker.SettingsError
	if errors.As(err, &se) {
		v := se.Value
		if d, ok := v.(time.Duration); ok {
			v = shownValue(d.String())
		}
		w.fail(join(path, breakerKey(se.Field)), se.Rule, v)
	} else {
		w.fail(path, "must be a valid breaker", err.Error())
	}
	return false
}

// breakerKey is the policy file's key of the breaker.Settings field named
// field (the breaker package knows nothing of the file).
func breakerKey(field string) string {
	switch field {
	case "ThrottleK":
		return "adaptiveThrottling.k"
	case "NoTrip":
		return "circuitBreaker"
	}
	return "circuitBreaker." + fileKey(field)
}

// breakerSection checks the kind of a circuitBreaker or adaptiveThrottling
// section v at path: an object (returned), or, in an entry, false (off).
func (w *walker) breakerSection(v *node, path string, entry bool, what string) (obj *node, off bool) {
	switch {
	case v == nil:
		return nil, false
	case entry && v.kind == nodeBool && !v.b:
		return nil, true
	case v.kind != nodeObject:
		rule := "must be an object"
		if entry {
			rule = "must be an object, or false to turn the file's " + what + " off here"
		}
		w.wrongKind(path, rule, v)
		return nil, false
	}
	return v, false
}

// breakerNumber reads an optional number of a breaker section; absent is 0
// (the default); an explicit 0 is an error naming the field.
func (w *walker) breakerNumber(n *node, path, key string) float64 {
	v := get(n, key)
	if v == nil {
		return 0
	}
	f, ok := w.number(v, join(path, key))
	if ok && f == 0 {
		w.fail(join(path, key), zeroRule(key), json.Number(v.s))
	}
	return f
}

// breakerDuration is breakerNumber for durations.
func (w *walker) breakerDuration(n *node, path, key string) time.Duration {
	v := get(n, key)
	if v == nil {
		return 0
	}
	d, ok := w.duration(v, join(path, key))
	if ok && d == 0 {
		w.fail(join(path, key), zeroRule(key), shownValue("0s"))
	}
	return d
}

// zeroRule is the rule an explicit zero breaks: the breaker package's own
// (a zero there means the default, so it is asked about a value below
// every range).
func zeroRule(key string) string {
	s := breaker.Settings{ThrottleK: breaker.DefaultThrottleK}
	switch key {
	case "failureRatio":
		s.FailureRatio = -1
	case "minimumThroughput":
		s.MinimumThroughput = -1
	case "consecutiveFailures":
		s.ConsecutiveFailures = -1
	case "probeEvery":
		s.ProbeEvery = -1
	case "samplingWindow", "window":
		s.SamplingWindow = -1
	case "breakDuration":
		s.BreakDuration = -1
	case "maxBreakDuration":
		s.MaxBreakDuration = -1
	case "k":
		s.ThrottleK = -1
	}
	var se *breaker.SettingsError
	if errors.As(s.Validate(), &se) {
		return se.Rule
	}
	return "must not be 0"
}

// resolveBreaker returns the settings the part makes of base (the file's, nil
// when none) and whether a breaker applies at all: fields the part gives
// override base's; off turns its half off.
func (w *walker) resolveBreaker(base *breaker.Settings, p breakerPart, path string) *breaker.Settings {
	if p.failed {
		return nil
	}
	var s breaker.Settings
	trips, throttles := false, false
	if base != nil {
		s = *base
		trips, throttles = !s.NoTrip, s.ThrottleK > 0
	}
	if p.cbOff {
		trips = false
	}
	if p.atOff {
		throttles, s.ThrottleK = false, 0
	}
	if p.cb != nil {
		trips = true
		overlay(&s, p.s)
		if p.scopeSet {
			s.Scope = p.s.Scope
		}
		if p.paceSet {
			s.NoPacing = p.s.NoPacing
		}
	}
	if p.at != nil {
		throttles = true
		s.ThrottleK = p.s.ThrottleK
		if p.windowAT != 0 {
			switch {
			case p.cb != nil && p.s.SamplingWindow != 0 && p.s.SamplingWindow != p.windowAT:
				w.fail(p.windowATPath, "must equal circuitBreaker.samplingWindow: the breaker and throttling count over one window", shownValue(p.windowAT.String()))
				return nil
			case trips && p.cb == nil && base != nil && base.SamplingWindow != p.windowAT:
				w.fail(p.windowATPath, "must equal the file's circuitBreaker.samplingWindow: the breaker and throttling count over one window", shownValue(p.windowAT.String()))
				return nil
			}
			s.SamplingWindow = p.windowAT
		}
	}
	if !trips && !throttles {
		return nil
	}
	s.NoTrip = !trips
	if !w.breakerRules(s, path) {
		return nil
	}
	s = s.WithDefaults()
	return &s
}

// overlay copies the fields part sets (non-zero) onto s.
func overlay(s *breaker.Settings, part breaker.Settings) {
	if part.FailureRatio != 0 {
		s.FailureRatio = part.FailureRatio
	}
	if part.MinimumThroughput != 0 {
		s.MinimumThroughput = part.MinimumThroughput
	}
	if part.ConsecutiveFailures != 0 {
		s.ConsecutiveFailures = part.ConsecutiveFailures
	}
	if part.ProbeEvery != 0 {
		s.ProbeEvery = part.ProbeEvery
	}
	if part.SamplingWindow != 0 {
		s.SamplingWindow = part.SamplingWindow
	}
	if part.BreakDuration != 0 {
		s.BreakDuration = part.BreakDuration
		if part.MaxBreakDuration == 0 && s.MaxBreakDuration < s.BreakDuration {
			s.MaxBreakDuration = 0
		}
	}
	if part.MaxBreakDuration != 0 {
		s.MaxBreakDuration = part.MaxBreakDuration
	}
}

// checkBreakers checks every breaker settings the file uses.
func (c *Config) checkBreakers() error {
	if c.breaker != nil {
		if err := c.breaker.Validate(); err != nil {
			return err
		}
	}
	for _, e := range c.entries {
		if e.Method.Breaker != nil {
			if err := e.Method.Breaker.Validate(); err != nil {
				return err
			}
		}
	}
	return nil
}

// BreakerSettingsFor returns the settings of the circuit breakers (and
// adaptive throttling) that guard calls matched to m, where m is what
// Method returned (nil: a method no entry names, guarded by the file's
// top-level sections), or nil when none guard them. Methods whose settings
// are equal share one breaker.Set in the interceptors.
func (c *Config) BreakerSettingsFor(m *Method) *breaker.Settings {
	if c == nil {
		return nil
	}
	if m != nil {
		return m.Breaker
	}
	return c.breaker
}

// NewBreakers returns a new, empty breaker.Set of s (one breaker per target
// and method, or per target, made on first use), built with the parse's
// WithBreakerOptions, or s's *breaker.SettingsError. Each call returns a
// new value; the interceptors call it once per settings and keep the result
// (interceptor.State).
func (c *Config) NewBreakers(s breaker.Settings) (*breaker.Set, error) {
	var opts []breaker.Option
	if c != nil {
		opts = c.breakerOpts
	}
	return breaker.NewSet(s, nil, opts...)
}

// BreakerSettings returns the file's top-level circuitBreaker and
// adaptiveThrottling, defaults applied, or nil when it has neither.
func (c *Config) BreakerSettings() *breaker.Settings {
	if c == nil {
		return nil
	}
	return c.breaker
}

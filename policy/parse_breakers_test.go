package policy

import (
	"strings"
	"testing"
	"time"

	"github.com/stagger-go/stagger/breaker"
)

func TestParseBreakerSections(t *testing.T) {
	c := parseMust(t, `{
	  "circuitBreaker": {"failureRatio": 0.6, "minimumThroughput": 50, "samplingWindow": "20s", "breakDuration": "2s", "scope": "target"},
	  "adaptiveThrottling": {"k": 1.5},
	  "methodConfig": [
	    {"name": [{"service": "a.A"}], "circuitBreaker": {"failureRatio": 0.9, "paceReconnect": false}},
	    {"name": [{"service": "b.B"}], "circuitBreaker": false},
	    {"name": [{"service": "c.C"}], "adaptiveThrottling": false, "circuitBreaker": false},
	    {"name": [{"service": "d.D"}]}
	  ]}`)
	file := breaker.Settings{FailureRatio: 0.6, MinimumThroughput: 50, ConsecutiveFailures: 5, ProbeEvery: breaker.DefaultProbeEvery, SamplingWindow: 20 * time.Second,
		BreakDuration: 2 * time.Second, MaxBreakDuration: 2 * time.Second, ThrottleK: 1.5, Scope: breaker.ScopeTarget}
	if got := c.BreakerSettings(); got == nil || *got != file {
		t.Fatalf("file breaker = %+v, want %+v", got, file)
	}
	a := file
	a.FailureRatio, a.NoPacing = 0.9, true
	if got := c.Method("/a.A/X").Breaker; got == nil || *got != a {
		t.Fatalf("a.A breaker = %+v, want %+v", got, a)
	}
	b := file
	b.NoTrip = true
	if got := c.Method("/b.B/X").Breaker; got == nil || *got != b {
		t.Fatalf("b.B = %+v, want throttling alone %+v", got, b)
	}
	if got := c.Method("/c.C/X").Breaker; got != nil {
		t.Fatalf("c.C = %+v, want none", got)
	}
	// Same settings, same breakers (the interceptors keep one set per
	// settings): an entry that says nothing has the file's, and so does a
	// method no entry names.
	if d, f := c.BreakerSettingsFor(c.Method("/d.D/X")), c.BreakerSettingsFor(nil); d == nil || f == nil || *d != *f {
		t.Fatal("d.D and unnamed methods must have the file's breakers")
	}
	if a, f := c.BreakerSettingsFor(c.Method("/a.A/X")), c.BreakerSettingsFor(nil); *a == *f || c.BreakerSettingsFor(c.Method("/c.C/X")) != nil {
		t.Fatal("a.A must have its own breakers, c.C none")
	}
	if bs, err := c.NewBreakers(*c.BreakerSettingsFor(nil)); err != nil || bs.Settings() != file {
		t.Fatalf("NewBreakers = %v, %v", bs, err)
	}
	if _, err := c.NewBreakers(breaker.Settings{FailureRatio: 2}); err == nil {
		t.Fatal("NewBreakers of invalid settings must fail")
	}

	// An entry may have a breaker where the file has none.
	c = parseMust(t, `{"methodConfig": [{"name": [{"service": "a.A"}], "circuitBreaker": {}}, {"name": [{}]}]}`)
	if c.BreakerSettingsFor(nil) != nil || c.BreakerSettingsFor(c.Method("/z.Z/X")) != nil {
		t.Fatal("no file-level breaker: unnamed methods are unguarded")
	}
	if got := c.Method("/a.A/X").Breaker; got == nil || *got != (breaker.Settings{}).WithDefaults() {
		t.Fatalf("circuitBreaker {} = %+v, want the defaults", got)
	}
	// Throttling alone, with its own window, in YAML.
	c = parseMust(t, "adaptiveThrottling:\n  window: 30s\n")
	if got := c.BreakerSettings(); got == nil || !got.NoTrip || got.ThrottleK != 2 || got.SamplingWindow != 30*time.Second {
		t.Fatalf("throttling alone = %+v", got)
	}
}

func TestParseBreakerErrors(t *testing.T) {
	for _, c := range []struct{ doc, want string }{
		{`{"circuitBreaker": {"failureRatio": 1.5}}`, "circuitBreaker.failureRatio: must be in (0, 1], got 1.5"},
		{`{"circuitBreaker": {"failureRatio": 0}}`, "circuitBreaker.failureRatio: must be in (0, 1], got 0"},
		{`{"circuitBreaker": {"samplingWindow": "0s"}}`, "circuitBreaker.samplingWindow: must be in [100ms, 24h], got 0s"},
		{`{"circuitBreaker": {"minimumThroughput": 0}}`, "circuitBreaker.minimumThroughput: must be in [1, 1e6], got 0"},
		{`{"circuitBreaker": {"probeEvery": 0}}`, "circuitBreaker.probeEvery: must be in [1, 1e6], got 0"},
		{`{"circuitBreaker": {"consecutiveFailures": 0}}`, "circuitBreaker.consecutiveFailures: must be in [1, 1e6], got 0"},
		{`{"circuitBreaker": {"breakDuration": "10s", "maxBreakDuration": "1s"}}`, "circuitBreaker.maxBreakDuration: must be in [breakDuration, 24h], got 1s"},
		{`{"circuitBreaker": {"scope": "HOST"}}`, "circuitBreaker.scope: must be METHOD or TARGET"},
		{`{"circuitBreaker": true}`, "circuitBreaker: must be an object"},
		{`{"circuitBreaker": {"failureRatio": "half"}}`, "circuitBreaker.failureRatio"},
		{`{"adaptiveThrottling": {"k": 0.5}}`, "adaptiveThrottling.k: must be in [1, 100], got 0.5"},
		{`{"adaptiveThrottling": {"k": 0}}`, "adaptiveThrottling.k: must be in [1, 100], got 0"},
		{`{"circuitBreaker": {"samplingWindow": "5s"}, "adaptiveThrottling": {"window": "10s"}}`, "adaptiveThrottling.window: must equal circuitBreaker.samplingWindow"},
		{`{"methodConfig": [{"name": [{"service": "a.A"}], "circuitBreaker": {"failureRatio": 2}}]}`, "methodConfig[0].circuitBreaker.failureRatio: must be in (0, 1], got 2"},
		{`{"methodConfig": [{"name": [{"service": "a.A"}], "circuitBreaker": true}]}`, "methodConfig[0].circuitBreaker: must be an object, or false"},
	} {
		_, err := ParseConfig([]byte(c.doc))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s:\n got %v\nwant %q", c.doc, err, c.want)
		}
	}
	// Unknown keys are warnings, as everywhere.
	c := parseMust(t, `{"circuitBreaker": {"failureRatoi": 0.5}}`)
	if len(c.Warnings()) != 1 || !strings.Contains(c.Warnings()[0].String(), "circuitBreaker.failureRatoi") {
		t.Fatalf("warnings %v", c.Warnings())
	}
}

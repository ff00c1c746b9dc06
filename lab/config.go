package lab

import (
	"errors"
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/stagger-go/stagger/policy"
)

// Config describes a run. The zero value of each field means its default,
// given in the field's comment. A Config is a plain value.
type Config struct {
	// Scenario is the kind of outage; default ScenarioUnavailable.
	Scenario Scenario
	// Duration is how long calls are offered; default 8s (10s in
	// ScenarioOverload and ScenarioFlakyQuietRandom, 4s in ScenarioChain
	// and ScenarioFlakyQuiet and the replicated scenarios (ScenarioBadReplica,
	// ScenarioSlowReplica3), 14s in
	// ScenarioMetastable, 30s in ScenarioLongOutage, 40s in
	// ScenarioStragglers).
	Duration time.Duration
	// OutageStart and OutageEnd bound the trigger, counted from the start
	// of the load: the outage (in ScenarioOverload the overload: the
	// server has half its workers; in the slowdowns the slowdown; in
	// ScenarioChain C's outage); defaults 2s and 4s (2s and 3.5s in
	// ScenarioBlip, 2s and 6s in ScenarioOverload, 1s and 3s in
	// ScenarioChain, 2s and 3s in ScenarioSlowdown, ScenarioSlowdown90 and
	// ScenarioMetastable, 2s and 22s in ScenarioLongOutage), taken when
	// both are zero. The scenarios without
	// a trigger (Scenario.HasTrigger) ignore them.
	OutageStart, OutageEnd time.Duration
	// Clients is the number of client connections per contender, each a
	// simulated process with its own budget; default 50 (1 in
	// ScenarioFlakyQuiet and ScenarioStragglers, 4 in ScenarioFlakyQuietRandom and
	// ScenarioBadReplica and ScenarioSlowReplica3).
	Clients int
	// Capacity is the attempts per second the worker server serves with
	// all its workers, so that a worker spends ServiceTime, Workers ÷
	// Capacity, per attempt (20 ms by default); default 500. The slow
	// replicas and the flaky scenarios limit nothing; in ScenarioChain no
	// server limits its attempts (what is measured is propagation, not
	// shedding): Capacity only scales OutageLoad and PeakAfter, and
	// reckons the Ceiling.
	Capacity int
	// Workers is the number of workers of the worker server (half of
	// which work during ScenarioOverload's overload); default 10.
	Workers int
	// Queue is the most attempts the worker server lets wait for a
	// worker; default 5 × Workers: a tenth of a second of work at full
	// capacity (a fifth during the overload); in ScenarioSlowdown,
	// ScenarioSlowdown90 and ScenarioMetastable twice PerAttemptTimeout's
	// worth of work at full capacity (Capacity × 2 × PerAttemptTimeout,
	// 200 by default: 0.4 s), deeper than the per-attempt timeout and
	// shallower than the deadline, so that a client without retries
	// waits its turn and is served while a per-attempt timer cuts it off.
	Queue int
	// Slow is how many times as long the service takes during the
	// slowdown of ScenarioSlowdown (default 3) and ScenarioSlowdown90
	// (default 4); other scenarios ignore it.
	Slow float64
	// PerAttemptTimeout is the per-attempt timeout of every contender
	// that has one (see the package comment) in ScenarioSlowdown,
	// ScenarioSlowdown90, ScenarioMetastable and ScenarioStragglers;
	// default 200 ms (3 × StragglerBase, 60 ms, in ScenarioStragglers).
	// Other scenarios ignore it.
	PerAttemptTimeout time.Duration
	// FailureRate is the probability with which ScenarioFlakyQuietRandom's
	// server fails each attempt with UNAVAILABLE; default 0.5. Other
	// scenarios ignore it.
	FailureRate float64
	// Rate is the calls per second all clients of a contender offer
	// together; default 80 % of Capacity (50 % in ScenarioSlowReplica and
	// ScenarioSlowReplicaStream; in
	// ScenarioBlip 1 call/s per client, 50 with the default Clients; 100
	// in ScenarioChain; 5 calls/s per client in the flaky scenarios and
	// ScenarioStragglers; 75 %
	// in ScenarioSlowdown and ScenarioMetastable, 90 % in
	// ScenarioSlowdown90). In ScenarioOverload 80 % of Capacity is 160 % of
	// the reduced capacity.
	Rate float64
	// MaxAttempts is every contender's attempt limit, the first attempt
	// included; default 5 (gRFC A6's cap, which grpc-go applies), 3 in
	// ScenarioChain, on every layer, in the flaky scenarios,
	// ScenarioStragglers, ScenarioBadReplica and ScenarioSlowReplica3.
	MaxAttempts int
	// Backoff is the pause schedule the contenders share (see the package
	// comment for what each makes of it); default Initial 50ms, Max 1s,
	// Multiplier 2, proportional jitter (in ScenarioChain Initial 10ms,
	// Max 100ms: a user call that makes 27 attempts at C takes about
	// 0.4 s; in the flaky scenarios Initial 100ms: a call healed on its
	// third attempt takes about 0.3 s).
	Backoff policy.Backoff
	// CallTimeout is each call's deadline; default 2s (1s in
	// ScenarioSlowdown, ScenarioSlowdown90 and ScenarioMetastable).
	CallTimeout time.Duration
	// Contenders names the contenders to run (see ContendersFor); nil
	// means all of the scenario's.
	Contenders []string
}

// Defaults returns c with every zero field set to its default.
func (c Config) Defaults() Config {
	if c.Scenario == "" {
		c.Scenario = ScenarioUnavailable
	}
	if c.Duration == 0 {
		c.Duration = 8 * time.Second
		switch c.Scenario {
		case ScenarioOverload, ScenarioMixedCriticality:
			c.Duration = 10 * time.Second
		case ScenarioChain, ScenarioFlakyQuiet, ScenarioBadReplica, ScenarioSlowReplica3:
			c.Duration = 4 * time.Second
		case ScenarioFlakyQuietRandom:
			c.Duration = 10 * time.Second
		case ScenarioMetastable:
			c.Duration = 14 * time.Second
		case ScenarioLongOutage:
			c.Duration = 30 * time.Second
		case ScenarioStragglers:
			c.Duration = 40 * time.Second
		}
	}
	if c.OutageStart == 0 && c.OutageEnd == 0 {
		c.OutageStart, c.OutageEnd = 2*time.Second, 4*time.Second
		switch c.Scenario {
		case ScenarioBlip:
			c.OutageEnd = 3500 * time.Millisecond
		case ScenarioOverload, ScenarioMixedCriticality:
			c.OutageEnd = 6 * time.Second
		case ScenarioChain:
			c.OutageStart, c.OutageEnd = time.Second, 3*time.Second
		case ScenarioSlowdown, ScenarioSlowdown90, ScenarioMetastable:
			c.OutageEnd = 3 * time.Second
		case ScenarioLongOutage:
			c.OutageEnd = 22 * time.Second
		}
	}
	if c.Clients == 0 {
		c.Clients = 50
		switch c.Scenario {
		case ScenarioFlakyQuiet, ScenarioStragglers:
			c.Clients = 1
		case ScenarioFlakyQuietRandom, ScenarioBadReplica, ScenarioSlowReplica3:
			c.Clients = 4
		}
	}
	if c.Capacity == 0 {
		c.Capacity = 500
	}
	if c.Workers == 0 {
		c.Workers = 10
	}
	if c.Queue == 0 {
		c.Queue = 5 * c.Workers
		if c.Scenario.timeouts() && c.Scenario.workerServer() {
			// Twice the per-attempt timeout's worth of work at full
			// capacity.
			pat := c.PerAttemptTimeout
			if pat == 0 {
				pat = 200 * time.Millisecond
			}
			c.Queue = max(int(float64(c.Capacity)*2*pat.Seconds()), 1)
		}
	}
	if c.Slow == 0 {
		c.Slow = 3
		if c.Scenario == ScenarioSlowdown90 {
			c.Slow = 4
		}
	}
	if c.PerAttemptTimeout == 0 && c.Scenario.timeouts() {
		c.PerAttemptTimeout = 200 * time.Millisecond
		if c.Scenario == ScenarioStragglers {
			c.PerAttemptTimeout = 3 * StragglerBase
		}
	}
	if c.FailureRate == 0 {
		c.FailureRate = 0.5
	}
	if c.Rate == 0 {
		switch c.Scenario {
		case ScenarioSlowReplica, ScenarioSlowReplicaStream, ScenarioSlowReplica3:
			// Room for the hedges: a rejected hedge would end its call.
			c.Rate = 0.5 * float64(c.Capacity)
		case ScenarioBlip:
			c.Rate = float64(c.Clients)
		case ScenarioChain:
			c.Rate = 100
		case ScenarioFlakyQuiet, ScenarioFlakyQuietRandom, ScenarioStragglers:
			c.Rate = 5 * float64(c.Clients)
		case ScenarioSlowdown, ScenarioMetastable:
			c.Rate = 0.75 * float64(c.Capacity)
		case ScenarioSlowdown90:
			c.Rate = 0.9 * float64(c.Capacity)
		default:
			c.Rate = 0.8 * float64(c.Capacity)
		}
	}
	if c.MaxAttempts == 0 {
		c.MaxAttempts = 5
		if c.Scenario == ScenarioChain || c.Scenario.quiet() || c.Scenario.replicated() {
			c.MaxAttempts = 3
		}
	}
	if c.Backoff == (policy.Backoff{}) {
		c.Backoff = policy.Backoff{Initial: 50 * time.Millisecond, Max: time.Second, Multiplier: 2, Jitter: policy.JitterProportional}
		switch {
		case c.Scenario == ScenarioChain:
			c.Backoff.Initial, c.Backoff.Max = 10*time.Millisecond, 100*time.Millisecond
		case c.Scenario.flaky():
			// Pauses of 0.1 s and 0.2 s: a call healed on its third
			// attempt takes about 0.3 s.
			c.Backoff.Initial = 100 * time.Millisecond
		}
	}
	if c.CallTimeout == 0 {
		c.CallTimeout = 2 * time.Second
		if c.Scenario.timeouts() && c.Scenario != ScenarioStragglers {
			c.CallTimeout = time.Second
		}
	}
	if c.Contenders == nil {
		c.Contenders = namesOf(contendersFor(c.Scenario))
	}
	return c
}

// Validate reports every field of c (after Defaults) that a run cannot use.
func (c Config) Validate() error {
	var errs []error
	bad := func(field, rule string, v any) {
		errs = append(errs, fmt.Errorf("lab: %s: %s, got %v", field, rule, v))
	}
	known := false
	for _, s := range Scenarios() {
		known = known || c.Scenario == s
	}
	if !known {
		bad("Scenario", "must be one of "+strings.Join(scenarioNames(), ", "), fmt.Sprintf("%q", c.Scenario))
	}
	if c.Duration <= 0 {
		bad("Duration", "must be > 0", c.Duration)
	}
	if c.Scenario.HasTrigger() && (c.OutageStart < 0 || c.OutageEnd <= c.OutageStart || c.OutageEnd > c.Duration) {
		bad("OutageStart/OutageEnd", "must satisfy 0 <= start < end <= Duration", fmt.Sprintf("[%v, %v) of %v", c.OutageStart, c.OutageEnd, c.Duration))
	}
	if c.Clients <= 0 || c.Clients > 10000 {
		bad("Clients", "must be in [1, 10000]", c.Clients)
	}
	if c.Capacity <= 0 {
		bad("Capacity", "must be > 0", c.Capacity)
	}
	if c.Workers < 2 || c.Workers > 10000 {
		// Half of them work during the overload: at least one.
		bad("Workers", "must be in [2, 10000]", c.Workers)
	}
	if c.Queue < 0 || c.Queue > 1e6 {
		bad("Queue", "must be in [0, 1e6]", c.Queue)
	}
	if c.Scenario.workerServer() && c.Capacity > 0 && c.Workers > 0 && c.ServiceTime() < time.Microsecond {
		bad("Capacity", "must leave each of the Workers at least 1µs per attempt (Capacity <= Workers × 1e6)", c.Capacity)
	}
	if !(c.Rate > 0) || c.Rate > 1e6 {
		bad("Rate", "must be in (0, 1e6] calls per second", c.Rate)
	}
	if c.MaxAttempts < 1 || c.MaxAttempts > 5 {
		// grpc-go caps maxAttempts at 5; a larger limit would not be the same
		// for every contender.
		bad("MaxAttempts", "must be in [1, 5] (grpc-go's cap)", c.MaxAttempts)
	}
	if !(c.Slow >= 1) || c.Slow > 1000 {
		bad("Slow", "must be in [1, 1000]", c.Slow)
	}
	if c.PerAttemptTimeout < 0 {
		bad("PerAttemptTimeout", "must be >= 0", c.PerAttemptTimeout)
	}
	if !(c.FailureRate >= 0) || c.FailureRate > 1 {
		bad("FailureRate", "must be in [0, 1]", c.FailureRate)
	}
	if err := c.Backoff.Validate(); err != nil {
		errs = append(errs, fmt.Errorf("lab: Backoff: %w", err))
	}
	if c.CallTimeout <= 0 {
		bad("CallTimeout", "must be > 0", c.CallTimeout)
	}
	checkContenders(c.Contenders, contendersFor(c.Scenario), bad)
	return errors.Join(errs...)
}

// ServiceTime is the worker time an attempt costs on the worker server:
// Workers ÷ Capacity (cfg after Defaults). A rejected attempt costs a
// tenth of it (testserver.Workers).
func (c Config) ServiceTime() time.Duration {
	if c.Capacity <= 0 {
		return 0
	}
	return time.Duration(c.Workers) * time.Second / time.Duration(c.Capacity)
}

// ReducedCapacity is the attempts per second ScenarioOverload's server can
// serve during the overload, when Workers/2 workers (rounded down) work:
// (Workers/2) ÷ ServiceTime, half of Capacity for an even Workers
// (Config.CapacityAt during the overload).
func (c Config) ReducedCapacity() float64 {
	s := c.ServiceTime()
	if s <= 0 {
		return 0
	}
	return float64(c.Workers/2) / s.Seconds()
}

// CapacityAt is the attempts per second the server of c's scenario can
// serve at t (counted from the start of the load): Capacity, none during
// an outage, ReducedCapacity during the overload, Capacity ÷ Slow during
// the slowdown. In the scenarios whose server limits nothing (the slow
// replicas, the flaky servers, the chain) it is +Inf.
func (c Config) CapacityAt(t time.Duration) float64 {
	s := c.Scenario
	if !s.workerServer() {
		return math.Inf(1)
	}
	if t < c.OutageStart || t >= c.OutageEnd {
		return float64(c.Capacity)
	}
	switch {
	case s.overloaded():
		return c.ReducedCapacity()
	case s.slowed():
		return float64(c.Capacity) / c.Slow
	}
	return 0
}

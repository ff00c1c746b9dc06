package lab

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"sync/atomic"
	"time"

	"github.com/stagger-go/stagger/policy"
)

// Scenario names a kind of outage.
type Scenario string

const (
	// ScenarioUnavailable: the server answers UNAVAILABLE during the outage
	// (over bufconn).
	ScenarioUnavailable Scenario = "unavailable"
	// ScenarioRefused: the server is gone during the outage and connections
	// are refused (over loopback TCP); calls fail fast.
	ScenarioRefused Scenario = "refused"
	// ScenarioRefusedWait is ScenarioRefused with grpc.WaitForReady on every
	// call: calls wait for the server instead of failing.
	ScenarioRefusedWait Scenario = "refused-wfr"
	// ScenarioBlip is a short UNAVAILABLE outage under light load (over
	// bufconn): by default 1 call/s per client and an outage from 2 s to
	// 3.5 s, so that the capacity left after the outage could serve every
	// call it failed: what is measured is healing, not shedding.
	ScenarioBlip Scenario = "blip"
	// ScenarioSlowReplica has no outage: each attempt takes SlowBase, but
	// one attempt in twenty (a slow replica) takes ten times as long; it
	// compares stagger without and with hedging (HedgingContenders).
	ScenarioSlowReplica Scenario = "slow-replica"
	// ScenarioSlowReplicaStream is ScenarioSlowReplica with a server
	// stream: every call is a ListItems of SlowStreamMessages messages,
	// whose first message takes what an attempt takes, and what is
	// measured is the time to the first message (Result.FirstP50,
	// FirstP99, FirstP999). Hedges race until one attempt commits (its
	// response headers arrive); the others are cancelled
	// (HedgingStreamContenders).
	ScenarioSlowReplicaStream Scenario = "slow-replica-stream"
	// ScenarioOverload has no outage but an overload (over bufconn): a
	// server of Workers workers and a FIFO queue that pays for every
	// attempt, a rejected one too (testserver.Workers), loses half its
	// workers from OutageStart to OutageEnd (by default 2 s to 6 s of a
	// 10 s run), while the offered load, 80 % of the full capacity, is
	// 160 % of what is left. It measures Goodput.
	ScenarioOverload Scenario = "overload"
	// ScenarioChain is a call chain (over bufconn): the users call A, A
	// calls B, B calls C, three in-process servers, every call through the
	// contender's retry layer for its hop (ChainContenders), none with a
	// retry budget; C answers UNAVAILABLE from OutageStart to OutageEnd (by
	// default 1 s to 3 s of a 4 s run). It measures how retries multiply
	// down the chain (BottomAttemptsPerCall) and the users' success once C
	// is back (SuccessAfter).
	ScenarioChain Scenario = "chain"
	// ScenarioFlakyQuiet is a quiet process against a flaky server (over
	// bufconn, no outage, no capacity limit): one client, 5 calls/s, 3
	// attempts, a 2 s deadline; the first FlakyFailAttempts (2) attempts
	// of every call fail with UNAVAILABLE and the third is served.
	ScenarioFlakyQuiet Scenario = "flaky-quiet"
	// ScenarioFlakyQuietRandom is ScenarioFlakyQuiet with a few quiet
	// processes (4 clients, 5 calls/s each) and a server that fails each
	// attempt with probability FailureRate (0.5): each call's script says
	// how many of its first attempts fail, drawn per call from its
	// client's seeded source, so that every contender meets the same
	// failures.
	ScenarioFlakyQuietRandom Scenario = "flaky-quiet-random"
	// ScenarioSlowdown: at 75 % of the capacity, the worker server's
	// service time is Slow (3) times as long from OutageStart to OutageEnd
	// (one second); every contender that can has a per-attempt timeout
	// (PerAttemptTimeout, 200 ms), the call deadline is 1 s.
	ScenarioSlowdown Scenario = "slowdown"
	// ScenarioSlowdown90 is ScenarioSlowdown at 90 % of the capacity,
	// with a slowdown of 4×.
	ScenarioSlowdown90 Scenario = "slowdown-90"
	// ScenarioMetastable: at 75 % of the capacity, the worker server
	// answers UNAVAILABLE for one second (the trigger), then serves again
	// for 11 s at the same offered load; per-attempt timeouts as in
	// ScenarioSlowdown. Whether the server comes back is the question.
	ScenarioMetastable Scenario = "metastable"
	// ScenarioBadReplica: three replicas over loopback TCP behind every
	// client connection (its resolver returns their three addresses), of
	// which the first answers every attempt UNAVAILABLE for the whole run
	// (no trigger, no capacity limit): 4 clients, each a busy connection,
	// 400 calls/s in all, 3 attempts, for 4 s. Every contender balances
	// with round_robin but stagger-elsewhere, which has the stagger_elsewhere
	// policy over it (package balancer/elsewhere; BadReplicaContenders).
	// Result.BadRepeats counts the calls that met the bad replica more than
	// once, from its records.
	ScenarioBadReplica Scenario = "bad-replica"
	// ScenarioSlowReplica3: three replicas over loopback TCP behind every
	// client connection, as in ScenarioBadReplica, of which the first is
	// slow: each attempt takes SlowBase on the others and SlowFactor times
	// as long on it, every attempt (testserver.Server.SetDelayFactor); no
	// trigger, no capacity limit; 4 clients, 250 calls/s in all, 4 s.
	// The contenders (SlowReplica3Contenders) hedge with 3 attempts
	// SlowHedgeDelay apart over round_robin (stagger) and over the
	// stagger_elsewhere policy (stagger-elsewhere), beside no-retry.
	// Result.HedgeRepeats counts the calls that sent a hedge to the replica
	// their first attempt went to, from the replicas' records.
	ScenarioSlowReplica3 Scenario = "slow-replica-3"
	// ScenarioMixedCriticality is ScenarioOverload with calls of two
	// criticalities: CriticalShare (30 %) of every client's calls are
	// CRITICAL, the others SHEDDABLE (package criticality). The server
	// runs stagger's server side in front of its workers, a concurrency
	// limit of Workers + Queue/2 that keeps a share for the more critical
	// (server.WithConcurrencyLimit, server.WithCriticalityShares), for
	// every contender alike; only stagger-criticality says its calls'
	// criticality (the peers cannot tell them apart), and stagger is the
	// same retry layer without it. Result.CriticalSuccess and
	// SheddableSuccess split the success rate by criticality.
	ScenarioMixedCriticality Scenario = "mixed-criticality"
	// ScenarioLongOutage is ScenarioUnavailable with an outage that
	// outlives the calls' deadlines many times over: by default the worker
	// server answers UNAVAILABLE from 2 s to 22 s of a 30 s run, the calls'
	// deadline is 2 s. Every contender and no-retry. What a retry layer's
	// waits cost the caller shows in FailP50, FailP99 and
	// Result.MeanInFlight; whether it lets traffic back once the server
	// serves again, in SuccessAfter and Recover. OutageSweep runs it at
	// other outage lengths.
	ScenarioLongOutage Scenario = "long-outage"
	// ScenarioStragglers is a quiet process and a server with stragglers
	// (over bufconn, no trigger, no capacity limit): one client, 5 calls/s
	// for 40 s, 3 attempts, a 2 s deadline; every attempt takes
	// StragglerBase, but one in StragglerOdds⁻¹ (10), drawn per attempt
	// from the client's seeded source, takes StragglerFactor (20) times as
	// long. Every contender that has one gets a per-attempt timeout of
	// PerAttemptTimeout, 3 × StragglerBase by default (stagger its
	// perAttemptRecvTimeout with the default budget, go-grpc-middleware
	// WithPerRetryTimeout): a client that cuts the straggler and retries
	// ends the call in about PerAttemptTimeout + the first pause +
	// StragglerBase instead of StragglerFactor × StragglerBase.
	ScenarioStragglers Scenario = "stragglers"
)

// StragglerBase is how long an attempt takes in ScenarioStragglers; a
// straggler, with probability StragglerOdds per attempt, takes
// StragglerFactor times as long.
const (
	StragglerBase   = 20 * time.Millisecond
	StragglerFactor = 20
	StragglerOdds   = 1.0 / 10
)

// OutageSweep lists the outage lengths `make lab-figures` runs
// ScenarioLongOutage at (SweepConfig): a blip, ScenarioUnavailable's two
// seconds, an outage that outlives the 2 s deadline a little, and
// ScenarioLongOutage's own 20 s.
var OutageSweep = []time.Duration{500 * time.Millisecond, 2 * time.Second, 5 * time.Second, 20 * time.Second}

// SweepConfig is ScenarioLongOutage with an outage of length d from 2 s
// on, and 8 s of run after it (SweepConfig(20 * time.Second) is
// ScenarioLongOutage's defaults).
func SweepConfig(d time.Duration) Config {
	start := 2 * time.Second
	return Config{Scenario: ScenarioLongOutage, OutageStart: start, OutageEnd: start + d, Duration: start + d + 8*time.Second}
}

// CriticalShare is the share of ScenarioMixedCriticality's calls that are
// CRITICAL: the third, seventh and tenth of every ten a client makes.
const CriticalShare = 0.3

// FlakyFailAttempts is how many attempts of every call fail in
// ScenarioFlakyQuiet.
const FlakyFailAttempts = 2

// Scenarios lists every scenario, in the order the CLI shows them.
func Scenarios() []Scenario {
	return []Scenario{ScenarioUnavailable, ScenarioRefused, ScenarioRefusedWait, ScenarioBlip, ScenarioSlowReplica, ScenarioSlowReplicaStream, ScenarioOverload, ScenarioChain,
		ScenarioFlakyQuiet, ScenarioFlakyQuietRandom, ScenarioSlowdown, ScenarioSlowdown90, ScenarioMetastable, ScenarioBadReplica,
		ScenarioSlowReplica3, ScenarioMixedCriticality, ScenarioLongOutage, ScenarioStragglers}
}

// HasTrigger reports whether scenario s has a trigger, from OutageStart to
// OutageEnd (an outage, an overload or a slowdown), after which the lab
// measures recovery (Result.Recovered, SuccessAfter). The slow replicas,
// the flaky servers and the bad replica have none.
func (s Scenario) HasTrigger() bool {
	switch s {
	case ScenarioSlowReplica, ScenarioSlowReplicaStream, ScenarioFlakyQuiet, ScenarioFlakyQuietRandom, ScenarioBadReplica, ScenarioSlowReplica3, ScenarioStragglers:
		return false
	}
	return true
}

// workerServer reports whether scenario s runs on a server that pays for
// its work (testserver.Workers): every scenario with a trigger but the
// chain, whose servers do not limit their attempts.
func (s Scenario) workerServer() bool { return s.HasTrigger() && s != ScenarioChain }

// overloaded reports whether s's trigger is ScenarioOverload's: half the
// workers gone.
func (s Scenario) overloaded() bool { return s == ScenarioOverload || s == ScenarioMixedCriticality }

// slowed reports whether s's trigger is a slowdown of the service time.
func (s Scenario) slowed() bool { return s == ScenarioSlowdown || s == ScenarioSlowdown90 }

// timeouts reports whether s gives the contenders per-attempt timeouts.
func (s Scenario) timeouts() bool {
	return s.slowed() || s == ScenarioMetastable || s == ScenarioStragglers
}

// replicated reports whether s runs three replicas behind every client
// connection.
func (s Scenario) replicated() bool { return s == ScenarioBadReplica || s == ScenarioSlowReplica3 }

// flaky reports whether s is one of the flaky-server scenarios.
func (s Scenario) flaky() bool { return s == ScenarioFlakyQuiet || s == ScenarioFlakyQuietRandom }

// quiet reports whether s is one of the quiet-process scenarios: one
// client or a few, 5 calls/s each, 3 attempts.
func (s Scenario) quiet() bool { return s.flaky() || s == ScenarioStragglers }

// SlowBase is how long an attempt takes in ScenarioSlowReplica; a slow
// attempt takes SlowFactor times as long, with probability SlowOdds, drawn
// anew for every attempt (a hedge goes to another replica). SlowHedgeDelay
// is the fixed hedging delay of the hedging contenders.
//
// SlowBase is large beside a loaded machine's scheduling noise (a few ms on
// a busy 2-core box): with a 1-5 ms base, noise alone pushes fast first
// attempts past the hedging delay, hedges fire on calls that needed none,
// and the scenario measures the scheduler. SlowHedgeDelay is 1.5×SlowBase,
// just above the attempts' p95 (19 attempts in 20 take SlowBase), where
// "The Tail at Scale" sends its hedges; the best a hedged slow call can do
// is SlowHedgeDelay+SlowBase, 2.5×SlowBase, against 10×SlowBase unhedged.
const (
	SlowBase       = 20 * time.Millisecond
	SlowFactor     = 10
	SlowOdds       = 1.0 / 20
	SlowHedgeDelay = SlowBase * 3 / 2
	// SlowStreamMessages is how many messages each call of
	// ScenarioSlowReplicaStream receives.
	SlowStreamMessages = 5
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
	if len(c.Contenders) == 0 {
		bad("Contenders", "must name at least one", "none")
	}
	seen := map[string]bool{}
	for _, n := range c.Contenders {
		if _, ok := contenderByName(c.Scenario, n); !ok {
			bad("Contenders", "must be among "+strings.Join(namesOf(contendersFor(c.Scenario)), ", "), fmt.Sprintf("%q", n))
		}
		if seen[n] {
			bad("Contenders", "must not repeat a name", fmt.Sprintf("%q", n))
		}
		seen[n] = true
	}
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

func scenarioNames() []string {
	var out []string
	for _, s := range Scenarios() {
		out = append(out, string(s))
	}
	return out
}

// Bin is the width of a load series' bins.
const Bin = 100 * time.Millisecond

// Result is what one contender did in a run.
type Result struct {
	// Contender is the contender's name.
	Contender string
	// Calls is the calls issued; Successes those that ended OK.
	Calls, Successes int
	// Attempts is every attempt the client connections began (in
	// ScenarioChain the users' connections to A).
	Attempts int
	// OutageAttempts is the attempts begun during the outage; in
	// ScenarioChain those that reached C during its outage.
	OutageAttempts int
	// AttemptsPerCall is Attempts ÷ Calls.
	AttemptsPerCall float64
	// SuccessRate is Successes ÷ Calls.
	SuccessRate float64
	// OutageLoad is OutageAttempts ÷ (Capacity × outage length); in
	// ScenarioOverload ÷ (ReducedCapacity × overload length).
	OutageLoad float64
	// OutageCalls, in ScenarioChain only (0 in the others), is the user
	// calls made and returned during C's outage: every attempt of theirs
	// that reached C met it down, so what they cost measures propagation
	// alone. TopAttemptsPerCall, MiddleAttemptsPerCall and
	// BottomAttemptsPerCall are the attempts that reached A, B and C for
	// those calls, ÷ OutageCalls (0 when there are none). With N attempts
	// on each of the three hops, up to N, N² and N³: 27 at C with N = 3,
	// where N is the no-amplification limit.
	OutageCalls                                                      int
	TopAttemptsPerCall, MiddleAttemptsPerCall, BottomAttemptsPerCall float64
	// SuccessAfter is the success rate of the calls made from AfterGap
	// (2 s) after the trigger's end (OutageEnd) on; in ScenarioChain,
	// whose run ends soon after C's outage, from OutageEnd on, once C is
	// back. CallsAfter is how many calls that is. Both are 0 in the
	// scenarios without a trigger (Scenario.HasTrigger), or when no call
	// is made then.
	SuccessAfter float64
	CallsAfter   int
	// Recovered reports whether the calls made in every second from some
	// point after the trigger's end on succeeded at RecoverThreshold (95
	// %) or more; Recover is how long after the trigger's end that point
	// is, in whole seconds (seconds counted from OutageEnd, by the calls'
	// start; a second without calls passes). Recovered is false in the
	// scenarios without a trigger.
	Recovered bool
	Recover   time.Duration
	// Goodput is the calls that succeeded, by when they returned, from
	// the trigger's start (OutageStart; the load's start in the scenarios
	// without a trigger) to Duration, ÷ the attempts the server could
	// serve in that time (the integral of Config.CapacityAt; where the
	// server limits nothing, ÷ the calls offered): the share of the
	// server's capacity spent on calls that succeeded. A server busy only
	// with such calls gives 1; one under a lighter load, Rate ÷ Capacity
	// at best (0.75 in ScenarioMetastable); each rejection, dropped
	// attempt, or attempt served for a caller that had gone takes from
	// it. It can pass 1 by a hair: workers idled by the overload finish
	// the attempts they began before it.
	Goodput float64
	// Wasted is the share of the worker server's work done for callers
	// that had gone (testserver.Stats.Wasted ÷ Work): attempts served
	// after their caller's deadline or cancellation (a per-attempt timer
	// cancels), and attempts dropped because their deadline had passed
	// in the queue. 0 in the scenarios without a worker server.
	Wasted float64
	// Timeline is the run second by second, from the start of the load.
	Timeline []Second
	// PeakAfter is the largest number of attempts the server received in
	// one Bin from OutageEnd to Duration, ÷ (Capacity × Bin). In
	// ScenarioChain, here and in Load, the server is C.
	PeakAfter float64
	// P50, P99 and P999 are latency percentiles of the successful calls
	// (zero when none succeeded).
	P50, P99, P999 time.Duration
	// FailP50 and FailP99 are latency percentiles of the failed calls
	// (zero when none failed): how long a user waited for a failure.
	FailP50, FailP99 time.Duration
	// BadRepeats, in ScenarioBadReplica only (0 in the others), is the
	// calls that met the bad replica more than once (its own records of
	// each call's attempts, by the call's key); BadCalls those that met it
	// at all.
	BadRepeats, BadCalls int
	// HedgeRepeats, in ScenarioSlowReplica3 only (0 in the others), is the
	// calls that sent a later attempt (a hedge) to the replica their first
	// attempt went to, from the replicas' records of each call's attempts
	// (the first is the one that arrived first); every replica is READY
	// throughout, so another one always was.
	HedgeRepeats int
	// CriticalSuccess and SheddableSuccess, in ScenarioMixedCriticality
	// only (0 in the others), are the success rates of the CRITICAL calls
	// and of the SHEDDABLE ones; CriticalCalls and SheddableCalls count
	// them.
	CriticalSuccess, SheddableSuccess float64
	CriticalCalls, SheddableCalls     int
	// FirstP50, FirstP99 and FirstP999, in ScenarioSlowReplicaStream only
	// (zero in the others), are percentiles of the time from a successful
	// call's start to its first message.
	FirstP50, FirstP99, FirstP999 time.Duration
	// Load is the attempts the server received per Bin, from the start of
	// the load.
	Load []int
	// PeakInFlight is the most calls in flight at once: made and not yet
	// returned.
	PeakInFlight int
	// MeanInFlight is the mean number of calls in flight during the
	// trigger (from OutageStart to OutageEnd; 0 in the scenarios without
	// one): what a retry layer's waits cost the caller, in goroutines,
	// memory and its own callers' latency, beside what a client that does
	// not retry holds.
	MeanInFlight float64
	// PeakAttemptsInFlight is the most attempts in flight at once, from
	// their stats.Begin to their stats.End (a call waiting for a ready
	// connection is in an attempt).
	PeakAttemptsInFlight int
	// PeakWaiting is the most calls waiting at once: calls in flight that
	// have ended an attempt and have none in flight, from the end of that
	// attempt until the next one begins or the call returns (pausing
	// between attempts: backoff, pushback, a budget holding the retry
	// back). Over time, the waiting calls are the calls in flight less
	// those in an attempt.
	PeakWaiting int
	// PeakGoroutines is the most goroutines of the contender's client side
	// alive at once, sampled every Bin: the goroutines started under its
	// profiler label, which are its calls' goroutines (one per call in
	// flight), its client connections' and any its retry layer starts, but
	// not its server's.
	PeakGoroutines int
}

// Second is one second of a contender's run, [i s, (i+1) s) from the
// start of the load for Timeline[i].
type Second struct {
	// Calls is the calls made in the second; CallsSucceeded, how many of
	// them succeeded (whenever they returned).
	Calls, CallsSucceeded int
	// Attempts is the attempts the contender's connections began in the
	// second.
	Attempts int
	// Successes is the calls that returned successfully in the second.
	Successes int
}

// RecoverThreshold is the success rate every second after the trigger
// must reach for a contender to count as recovered (Result.Recovered).
const RecoverThreshold = 0.95

// AfterGap is how long after the trigger's end Result.SuccessAfter
// starts counting calls: long enough for the backlog of a healthy client
// to clear, so that what it measures is whether the server came back.
const AfterGap = 2 * time.Second

// Report is a run's configuration (defaults filled in) and its results, in
// the order of Config.Contenders.
type Report struct {
	Config  Config
	Results []Result
	// Ceiling is Ceiling(Config): the success rate an ideal client could
	// reach in the scenario without ever sending more than capacity.
	Ceiling float64
	// Wall is how long the run took on the time package's clock.
	Wall time.Duration
}

// Run fills in cfg's defaults, validates it, and runs every contender at the
// same time, each against its own server. It returns when every call and
// server has ended. Cancelling ctx stops offering calls and cancels those in
// flight (the results then cover what ran).
func Run(ctx context.Context, cfg Config) (*Report, error) {
	cfg = cfg.Defaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	start := time.Now()
	results := make([]Result, len(cfg.Contenders))
	errs := make([]error, len(cfg.Contenders))
	run := runs.Add(1)
	labels := make([]string, len(cfg.Contenders))
	for i, name := range cfg.Contenders {
		labels[i] = fmt.Sprintf("%d/%s", run, name)
	}
	sampler := sampleGoroutines(labels)
	done := make(chan struct{})
	for i, name := range cfg.Contenders {
		c, _ := contenderByName(cfg.Scenario, name)
		go func() {
			defer func() { done <- struct{}{} }()
			results[i], errs[i] = runContender(ctx, &cfg, c, labels[i])
		}()
	}
	for range cfg.Contenders {
		<-done
	}
	peaks := sampler.peaksAfterStop()
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	for i := range results {
		results[i].PeakGoroutines = peaks[labels[i]]
	}
	return &Report{Config: cfg, Results: results, Ceiling: Ceiling(cfg), Wall: time.Since(start)}, nil
}

// runs numbers the runs of this process, for the goroutine labels.
var runs atomic.Int64

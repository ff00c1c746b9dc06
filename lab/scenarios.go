package lab

import "time"

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

func scenarioNames() []string {
	var out []string
	for _, s := range Scenarios() {
		out = append(out, string(s))
	}
	return out
}

package lab

import "time"

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

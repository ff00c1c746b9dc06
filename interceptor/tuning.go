package interceptor

import (
	"time"

	"github.com/stagger-go/stagger/internal/gatetune"
)

// The interceptors' tuning numbers, unexported so that a retune does not
// change the API. Each says what it came from: a measurement (named in
// BENCHMARKS.md), or "not measured" and the argument that set it.

// The per-attempt timer (attemptTimer) and what its attempts tell of
// each other (pace.go).
const (
	// slowSuccessPart: a success after this part of the per-attempt
	// timeout is overload (budget.Attempt.Overload). A quarter wasted the
	// least work on the lab's slowdown-90 server (BENCHMARKS.md, "Figures
	// behind the code's choices").
	slowSuccessPart = 4
	// laterSendAgePart: an attempt sent after a timed-out one and this part
	// of the timeout old, unserved, says the server is slow for all
	// (pace.slowForAll). Not measured apart: slowSuccessPart's value, with
	// which the rule was measured.
	laterSendAgePart = 4
	// stragglerFastPart: in a quiet process, a timed-out attempt is a
	// straggler when the method's latest served attempt took less than
	// this part of the timeout (pace.straggler). Not measured: users set a
	// timeout a few times the latency they expect, and a server slowing
	// for all stretches answers past half of it first.
	stragglerFastPart = 2
	// paceSends send times, one per paceSliceParts-th of the timeout: two
	// timeouts' worth, in slices of half the slow-for-all rule's age. Not
	// measured beyond TestRealTimeTimerSlowForAll on a loaded machine, where
	// a ring of the latest four sends lost the evidence.
	paceSends      = 16
	paceSliceParts = 8
	// scoutGapMax bounds the doubling gap between scouts, in per-attempt
	// timeouts. Not measured: a long slowdown costs a scout per 64
	// timeouts (as the Gate's probeGapMax bounds its probes), while a lost
	// burst is found by the first.
	scoutGapMax = 64
)

// paceFresh is how long a served attempt's latency counts for its method
// (pace.latency, budget.Request.Took): the Gate's overload hold, so both
// forget a slow server at the same time.
var paceFresh = gatetune.OverloadHold

// The per-method cache (call.go).
const (
	// methodSlots find a method by where its name's bytes live. Not
	// measured: a client calls tens of methods, so two rarely share a
	// slot; when they do, one goes to the map, a hash slower.
	methodSlots = 64
	// methodCacheMax bounds the cache against made-up method names; past
	// it, lookups go to the file. Not measured: far above a real client's.
	methodCacheMax = 4096
	// cacheLine pads methodInfo.spare, which calls write, away from what
	// every call reads; where lines are 128 bytes it costs time, not
	// correctness.
	cacheLine = 64
)

// Hedging (hedge.go, quantile.go).
const (
	// hedgeQuantile: an adaptive policy hedges at the p95, at most one call
	// in twenty. Not measured here: BENCHMARKS.md's hedging section
	// measures the result against a fixed delay.
	hedgeQuantile = 0.95
	// adaptiveMinSamples: below it the policy's Delay is used. Not
	// measured: a p95 of fewer calls is mostly noise.
	adaptiveMinSamples = 20
	// adaptiveHalfLife: every this many samples all counts are halved, so
	// the estimate follows a changing method and never overflows. Not
	// measured: after a halving the p95's tail still weighs 25 samples.
	adaptiveHalfLife = 1024
	// hedgeResultsRoom bounds a hedged call's results channel. Not
	// measured: above the attempts a file allows unless its cap is raised.
	hedgeResultsRoom = 8
)

// callerDeadlineSlack: an attempt that ends with CANCELED or
// DEADLINE_EXCEEDED this close to the caller's deadline ended for it. It
// covers the client's timers firing late on a loaded machine and proxies
// that round grpc-timeout down. Not measured: a status a millisecond or
// more before the deadline is the attempt's own.
const callerDeadlineSlack = time.Millisecond

// stateCap bounds the distinct settings one State keeps budgets (and,
// apart, breakers) for. Not measured: a process has a few policy files,
// and reloads drop what they no longer use.
const stateCap = 64

// The logger's summary of refused retries (logsummary.go).
const (
	// refusedLogEvery: one warn line per backend per interval. Not
	// measured: ten seconds is the longest a call without a deadline
	// waits for the budget, so an outage's waits end within a line or two.
	refusedLogEvery = 10 * time.Second
	// refusedLogTargets: the budget's own bound of targets
	// (budget.Backends), so each target it keeps apart has its line.
	refusedLogTargets = 1024
)

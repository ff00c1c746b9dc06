package interceptor

import (
	"time"

	"github.com/stagger-go/stagger/internal/gatetune"
)

// The interceptors' tuning numbers, in one place. Each is unexported on
// purpose: a retune must not change the API. Each says what it came from:
// a measurement, or "not measured" and the argument that set it.

// The per-attempt timer (attemptTimer) and what its attempts tell of
// each other (pace.go).
const (
	// slowSuccessPart: an attempt that succeeds after a slowSuccessPart-th
	// of its per-attempt timeout or later is a sign of overload (rising
	// latency), told to the budget (budget.Attempt.Overload): the Gate then
	// refuses timeout retries for a while, so that the next timer lets a
	// slow attempt run on instead of cutting it off. A quarter wasted the
	// least of the lab's slowdown-90 server's work on attempts cut off, as
	// more processes saw a slow success before their own first timer
	// fired; pace covers the others (BENCHMARKS.md, "Figures behind the code's choices").
	slowSuccessPart = 4
	// laterSendAgePart: an attempt sent after a timed-out one says the
	// server is slow for every attempt (pace.slowForAll, the slow-for-all
	// rule) only once it is a laterSendAgePart-th of the per-attempt
	// timeout old and still unserved: a younger one may yet be answered in
	// normal time, so its silence says nothing. Not measured apart: it is
	// slowSuccessPart's value, the age at which an answer counts as slow,
	// with which the rule was measured (slowdown-90 94.9 → 96.2 %, wasted
	// 2.3 → 0.1 %, BENCHMARKS.md).
	laterSendAgePart = 4
	// stragglerFastPart: in a quiet process (nothing sent after an
	// attempt whose timer fired), the attempt is a straggler when the
	// method's latest attempt served took less than a stragglerFastPart-th
	// of the per-attempt timeout (pace.straggler). Not measured: a user
	// sets a timeout a few times the latency they expect (the new
	// user 150 ms against answers at once; the lab's stragglers 3×), so an
	// answer in under half of it is one they call normal, while a server
	// slowing down for every attempt stretches answers past half the
	// timeout before it stretches them past all of it.
	stragglerFastPart = 2
	// paceSends is how many send times pace keeps, one per slice of
	// time a paceSliceParts-th of the per-attempt timeout long: two
	// timeouts' worth, so that when a timer fires (after one timeout, or
	// more when it waited) the sends older than the slow-for-all rule's
	// age are there. A slice is an eighth: half the rule's age
	// (laterSendAgePart), so the latest send of a slice stands for the
	// others closely enough. Not measured beyond TestRealTimeTimerSlowForAll
	// on a loaded machine (a ring of the latest four sends lost the
	// evidence there: 14-31 attempts cut off of 50 in one run in five
	// beside six busy loops); send stays one atomic store.
	paceSends      = 16
	paceSliceParts = 8
	// scoutGapMax bounds the gap between scouts, in per-attempt timeouts:
	// the gaps double from one timeout (1, 2, 4, ... 64), so after six
	// scouts a slowdown that lasts is still scouted once per 64 timeouts.
	// Not measured: chosen so that a long slowdown costs a scout per 6.4 s
	// at a 100 ms timeout (the Gate's probeGapMax, 30 s, bounds its probes
	// the same way), while a lost burst is found by the first scout.
	scoutGapMax = 64
)

// paceFresh is how long a served attempt's latency is taken for the
// method's (pace.latency, budget.Request.Took): as long as the Gate takes
// a failure for overload or a slow success as evidence (the overload
// rule's hold, from the Gate's rules snapshot), so that both forget a slow
// server at the same time.
var paceFresh = gatetune.OverloadHold

// The per-method cache (call.go).
const (
	// methodSlots is the number of slots that find a method by where its
	// name's bytes live (methodCache.byData). Not measured: a service's
	// stubs call tens of methods, so that 64 slots rarely put two of a
	// process's methods in one; two that meet take turns, and the other
	// one's lookups go to the map (byName), correct but a hash slower.
	methodSlots = 64
	// methodCacheMax bounds the cache: a program that makes up method names
	// at run time must not grow it without end. Past it, lookups go to the
	// file. Not measured: far above the methods a real client calls.
	methodCacheMax = 4096
	// cacheLine pads methodInfo.spare, which calls write, away from the
	// fields every call reads: 64 bytes on amd64 and most arm64; where
	// lines are 128 bytes two calls on different cores may still share
	// one, which costs time, not correctness.
	cacheLine = 64
)

// Hedging (hedge.go, quantile.go).
const (
	// hedgeQuantile is the quantile of a method's latency that an adaptive
	// policy hedges at. Not measured here: on a steady method a hedge then
	// goes for about one call in twenty (at most 5 % more load), and only
	// the tail it is meant for waits that long; BENCHMARKS.md's hedging
	// section measures the result against a fixed delay.
	hedgeQuantile = 0.95
	// adaptiveMinSamples: below this many samples the policy's Delay is
	// used. Not measured: a p95 of fewer calls is mostly noise (one sample
	// in 20 is the whole tail).
	adaptiveMinSamples = 20
	// adaptiveHalfLife: every this many samples all counts are halved, so
	// the estimate follows a method whose latency changes (older samples
	// weigh less) and the counters never overflow. Not measured: large
	// enough that right after a halving the p95's tail still weighs 25
	// samples.
	adaptiveHalfLife = 1024
	// hedgeResultsRoom bounds a hedged call's results channel. Not
	// measured: policies rarely allow more attempts (a file's are capped
	// at 5 unless raised), so their attempts never wait to report.
	hedgeResultsRoom = 8
)

// callerDeadlineSlack is how close to the caller's deadline an attempt may
// end with CANCELED or DEADLINE_EXCEEDED and still be taken for the caller's
// deadline. grpc-go rounds grpc-timeout up, so a server's DEADLINE_EXCEEDED
// for the caller's deadline arrives after it on the client's clock; the
// slack covers the client's own timers firing late (a loaded machine) and
// proxies that round the other way. Not measured: chosen so that a timer
// firing a little late on a loaded machine is covered, while a status that
// ends an attempt more than a millisecond before the deadline is still the
// attempt's own.
const callerDeadlineSlack = time.Millisecond

// stateCap bounds the distinct settings one State keeps budgets (and,
// apart, breakers) for (state.go). A Source's reloads drop what they no
// longer use, so only configs given per call or many fixed configs sharing
// one State can reach it; past it a config's budgets and breakers are
// built for the plan that needs them and not kept. Not measured: a process
// has a few policy files, not dozens.
const stateCap = 64

// The logger's summary of refused retries (logsummary.go).
const (
	// refusedLogEvery: at most one warn line per backend per interval.
	// Not measured: an operator's log pipeline keeps a line a few seconds
	// apart at no cost, and ten seconds is the longest a call without a
	// deadline waits for the budget, so an outage's waits end within one
	// line or two (the issue's SRE counted 629 lines in one 10 s outage
	// at one per call).
	refusedLogEvery = 10 * time.Second
	// refusedLogTargets bounds the backends the summary counts apart;
	// the others share one line, target "other". It is the budget's own
	// bound of targets (budget.Backends), so that every target the budget
	// keeps apart has its own line.
	refusedLogTargets = 1024
)

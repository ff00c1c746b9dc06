package budget

import (
	"math"
	"time"
)

// The Gate's tuning numbers, in one place. Each is unexported on purpose:
// a retune must not change the API. `stagger check` prints them through
// the rules' snapshot (gaterules.go). Each line says what the value came
// from.
const (
	// releasePerSecond, releaseGainStart, releaseGainMax: release credits
	// accrue at 1/s plus 1/16 of each success, the share doubling per
	// deferred retry that succeeds up to 3/16 (TCP's slow start in the
	// process's own successes). Chosen from four settings in the storm lab
	// (BENCHMARKS.md, issue 13 second pass): 1.5/s and 3/16 peaked at about
	// 2× capacity after recovery, 1/s and 3/16 at 1.18× (unavailable); the
	// time-based part is the same in every process, so it is the smaller.
	releasePerSecond = 1.0
	releaseGainStart = 1.0 / 16
	releaseGainMax   = 3.0 / 16
	// outageStreak failures in a row, with no success between, make an
	// outage: under 10–20 % random failures two in a row come once in 25–100
	// attempts, so a serving server is rarely taken for a down one, and a
	// down one is seen on the second failure.
	outageStreak = 2
	// probeGapMax bounds the probe and last-chance gaps that failed probes
	// double: not measured, a bound so that a long outage is still probed
	// every 30 s (restarts of real services take seconds to minutes).
	probeGapMax = 30 * time.Second
	// quietGapMax bounds what new calls' failures make of the probe gap, so
	// that the calls a process holds in an outage probe again after at most
	// 4 s of quiet once its own calls stop (not measured anew in issue 29:
	// a fresh process, which does not know whether retries heal, sends no
	// such probe; `stagger sim failrate` at p = 1 and 1000 processes went
	// from 1.48 to 1.10, the budget's own retries).
	quietGapMax = 4 * time.Second
	// lastChanceLead is the least time before its call's deadline at which
	// a waiting retry goes as the call's last chance; lastChanceFactor
	// times the latest deferred attempt's duration when that is longer, so
	// that the attempt can come back before the deadline. 50 ms covers an
	// attempt on a LAN; the lab's blip (1.5 s outage) went from 90 % to
	// 100 % with it (BENCHMARKS.md, issue 13 second pass).
	lastChanceLead   = 50 * time.Millisecond
	lastChanceFactor = 2
	// waitSlack: no retry starts with less than this before its deadline
	// (an attempt sent with less left is cut off by the deadline).
	waitSlack = time.Millisecond
	// gapFloor: a failed probe's gap never doubles from less than this
	// (successes may have halved the gaps to nothing).
	gapFloor = time.Millisecond
	// probeLeaseSlack: a probe or last chance that has not reported by its
	// call's deadline plus this is taken as lost and its slot freed (the
	// interceptors record an attempt a little after its deadline ends it).
	// A call without a deadline holds the slot at most probeGapMax.
	probeLeaseSlack = time.Second
	// backShare: the calls held through an outage go back no faster than
	// this share of the pace at which retries began to wait in it, on top
	// of the new calls: measured in issue 39 (lab unavailable, see
	// BENCHMARKS.md).
	backShare = 0.4
	// backMinHeld: a process whose retries began to wait fewer times than
	// this in an outage sends its held calls back by their spread alone:
	// the pace of a handful is no pace (the lab's blip, 1.5 waits per
	// process: 100 % unpaced, 92.8 % paced, its first back up to 2.5
	// times the outage's length late); the unavailable scenario's
	// processes hold 16 each.
	backMinHeld = 4
	// backSlower: a released retry answered within this many times the
	// fastest since the server came back says the server has room, and
	// the back pace doubles; slower, or failed, it halves (TCP Vegas'
	// test of a queue in the path). Measured in issue 39 on the lab's
	// chain (C, with room to spare, back after 2 s) and unavailable (a
	// worker server at 80 % of its capacity): a fixed pace 99.2 -> 69.5 %
	// and 1.42-1.50× after; 2, doubling: 98.5 % and 1.64×; 1.5, ×4/3:
	// 97.8 % and 1.40×; 1.25, doubling: 98.8 % and 1.44×.
	backSlower = 1.25
	// maxBackEvery bounds how slow the back pace gets.
	maxBackEvery = time.Second
	// futileFactor: a retry fails at once instead of waiting once the
	// outage has lasted this many times the longest wait of the retries
	// that began to wait since the server last served (the futility rule).
	// Chosen in issue 39 over the lab's outage-length sweep: see
	// BENCHMARKS.md.
	futileFactor = 1.0
	// futileHold: the share of the retries that still wait in such an
	// outage, so that the server's return finds calls to serve at once
	// (the calls a peer's backoff saves) while most fail fast. Below a
	// quarter, fewer than half the failed calls of a 5 s outage wait out
	// their deadline (the calls held before the rule began: 2 s of 5),
	// so their median is a fast failure; measured in issue 39 (lab
	// outage sweep, BENCHMARKS.md).
	futileHold = 0.1
	// healWindow calls that retried and ended are kept; once healMinSamples
	// of them ended (or one healed), healMinShare of them healed say the
	// server heals on retry (the heal rule); healMinSamples retries that failed in
	// a row, nothing succeeding since, say it may not. A server
	// that fails the first two attempts of each call and serves the third
	// heals every call; one that fails half its attempts at random heals
	// three calls in four (3 attempts); a down one none; a key that always
	// fails (partial failure) none. In the lab (BENCHMARKS.md, issue 29):
	// flaky-quiet 50 % -> 100 %, flaky-quiet-random 83 % -> 87.5 % (grpc-go
	// 88.5 %); judged per attempt, the retries the gate let go (second
	// attempts, which fail in flaky-quiet) taught it that retries never
	// heal. Two retries in a row stop paid retries as soon as before
	// (metastable: load in the outage 1.04× capacity; counted per call,
	// 1.16×).
	healWindow     = 8
	healMinSamples = 2
	healMinShare   = 1.0 / 3
	// overloadHold: after an attempt failed for overload (RESOURCE_EXHAUSTED,
	// a pushback, an attempt cut off by the per-attempt timer) retries are
	// not healed and timeout retries are refused for this long; after a
	// slow success, timeout retries only: retrying an overloaded server
	// deepens the overload even when some retries succeed.
	overloadHold = 5 * time.Second
	// healthyGap: failures in a row make an outage only when no attempt
	// failed for this long before them, counted from the first attempt
	// (the outage rule): a server that fails a share of its attempts all along is
	// flaky, and its calls are not held for it. In flaky-quiet-random (four
	// processes, five calls a second each, half the attempts fail) a wait
	// held for an outage that unlucky calls suggested ended in failure in
	// about one run of twenty at 500 ms, in none of sixty at 1 s (with
	// the outage rule taking a server that heals some calls for not down); the
	// outage scenarios fail after two seconds of service or more.
	healthyGap = time.Second
	// runDecay: the longest run of failures a success ended shrinks by
	// this with each later run, so that an early unlucky run does not
	// hide an outage for long. Not measured: chosen so that under 20 %
	// random failures (runs of 3 once in about 150 attempts) the streak
	// that makes an outage stays near 6, and under 50 % (runs of 4-6
	// among the lab's flaky-quiet calls) near 12.
	runDecay = 0.9
	// futileEvery: in an outage that outlived the calls' deadlines, the
	// lone waiter (the probe) begins to wait only once this many failures
	// were recorded since a deferred retry last failed, so that a quiet
	// process sends a long outage at most one retry in ten calls (the
	// property test's bar; it sent one a deadline apart, each call
	// waiting its deadline out for it, when its last-chance gap had not
	// grown past its calls' spacing).
	futileEvery = 10
	// healStale: while the server serves (nothing failed since a
	// success), the calls that retried say whether retrying heals for
	// this long after the latest of them ended; then, until another does,
	// a straggler's retry heals (Allow). Not measured: a second, so that a server back from an
	// outage, which then retries no call, does not keep refusing a
	// per-attempt timer's retry (the property test: Allow admitted one
	// only two seconds after the server served every attempt).
	healStale = time.Second
	// holdSlack: a wait the gate does not hold ends (or goes as a probe)
	// this share of its pause after the pause (the hold rule), so that a call
	// that fails waited in the gate little more than its backoff's pause.
	holdSlack = 0.1
)

// The criticality reserve (Request.Criticality says the rule): the share of
// a budget's span that a retry of each level must leave, so that the less
// critical are refused first and CRITICAL_PLUS has a reserve of its own.
// CRITICAL (and a call that names none) leaves nothing, as before
// criticality existed: gRFC A6's arithmetic is unchanged for it. Chosen
// with TestStormCriticality (`go test -v -run StormCriticality ./budget`:
// model 2, 100 clients, 30 % CRITICAL and 70 % SHEDDABLE calls).
const (
	// reserveSheddable: a quarter. At p = 0.3-0.5 it gives CRITICAL calls
	// most of what any reserve gives them (default budget: 93.9 -> 96.6 %
	// at p = 0.3, 61.0 -> 78.4 % at p = 0.5; a half gave no more; ratio:
	// 77.3 -> 85.1 %, a half 87.4 %), at half a half's cost to SHEDDABLE
	// calls where the budget binds at p = 0.1 (default, which starts at 9
	// of 100 tokens: 99.9 -> 97.6 %, a half 94.8 %; ratio: 96.6 -> 94.3 %,
	// a half 92.1 %). A full AWS bucket never comes near it at p <= 0.5.
	reserveSheddable = 0.25
	// reserveSheddablePlus: half of SHEDDABLE's, between it and CRITICAL
	// (four levels at p = 0.3, default budget: 72.5, 83.3, 96.7, 96.7 %).
	reserveSheddablePlus = reserveSheddable / 2
	// reserveCriticalPlus: CRITICAL_PLUS may spend a fifth of the span
	// below CRITICAL's floor (a token bucket in debt, a ratio over its
	// allowance). With 5 % CRITICAL_PLUS calls at p = 0.5 its success
	// rises from 73.7 to 82.5 % (default) and 62.5 to 70.0 % (ratio),
	// where 0.3 gave the default nothing more and cost the ratio's
	// CRITICAL calls 3.6 points; at p = 1 over 1000 clients the default's
	// amplification goes from 1.095 to 1.135, within issue 7's 1.15.
	reserveCriticalPlus = 0.2
)

// reserveShares[l.Index()] is what a retry of level l leaves of the span
// (negative: what it may dip below CRITICAL's floor).
var reserveShares = [4]float64{reserveSheddable, reserveSheddablePlus, 0, -reserveCriticalPlus}

// reserveFloors returns the reserve of each level in thousandths of a token,
// for a span of span thousandths (0 for CRITICAL, exactly).
func reserveFloors(span int64) (f [4]int64) {
	for i, s := range reserveShares {
		f[i] = int64(math.Round(s * float64(span)))
	}
	return f
}

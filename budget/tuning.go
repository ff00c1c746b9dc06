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
	// outage: under a server's random failures two in a row are rare, and
	// a down server is seen on the second failure
	// (BENCHMARKS.md, "Figures behind the code's choices").
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
	// attempt on a LAN; the lab's blip heals with it
	// (BENCHMARKS.md, "Figures behind the code's choices").
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
	// the pace of a handful is no pace: pacing them cost the lab's blip
	// its successes (BENCHMARKS.md, "Figures behind the code's choices").
	backMinHeld = 4
	// backSlower: a released retry answered within this many times the
	// fastest since the server came back says the server has room, and
	// the back pace doubles; slower, or failed, it halves (TCP Vegas'
	// test of a queue in the path). Measured in issue 39 on the lab's
	// chain and unavailable (BENCHMARKS.md, "Figures behind the code's choices").
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
	// fails (partial failure) none. Judged per call, not per attempt: per
	// attempt, the retries the gate let go (second attempts, which fail in
	// flaky-quiet) taught it that retries never heal
	// (BENCHMARKS.md, "Figures behind the code's choices").
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
	// flaky, and its calls are not held for it; a second, not less, so
	// that unlucky runs of a flaky server's failures are not taken for an
	// outage (BENCHMARKS.md, "Figures behind the code's choices").
	healthyGap = time.Second
	// runDecay: the longest run of failures a success ended shrinks by
	// this with each later run, so that an early unlucky run does not
	// hide an outage for long. Not measured: chosen so that the streak
	// that makes an outage stays a few failures past a flaky server's
	// usual runs (BENCHMARKS.md, "Figures behind the code's choices").
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
// with TestStormCriticality (`go test -v -run StormCriticality ./budget`),
// which measures them (BENCHMARKS.md, "Figures behind the code's choices").
const (
	// reserveSheddable: a quarter: it gives CRITICAL calls most of what
	// any reserve gives them, at half a half's cost to SHEDDABLE calls.
	reserveSheddable = 0.25
	// reserveSheddablePlus: half of SHEDDABLE's, between it and CRITICAL.
	reserveSheddablePlus = reserveSheddable / 2
	// reserveCriticalPlus: CRITICAL_PLUS may spend a fifth of the span
	// below CRITICAL's floor (a token bucket in debt, a ratio over its
	// allowance): more gave the default budget nothing and cost the ratio's
	// CRITICAL calls, and the amplification at p = 1 stays within 1.15.
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

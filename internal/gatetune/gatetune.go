// Package gatetune holds budget.Gate's tuning numbers and the snapshot of
// its rules that `stagger check` prints. It is internal: a retune must not
// change the API. Package budget reads the numbers; the interceptors read
// OverloadHold (how long a served attempt's latency counts); cmd/stagger
// prints Rules.
package gatetune

import "time"

// The Gate's tuning numbers, in one place. Each line says what the value
// came from.
const (
	// ReleasePerSecond, ReleaseGainStart, ReleaseGainMax: release credits
	// accrue at 1/s plus 1/16 of each success, the share doubling per
	// deferred retry that succeeds up to 3/16 (TCP's slow start in the
	// process's own successes). Chosen from four settings in the storm lab
	// (BENCHMARKS.md, issue 13 second pass): 1.5/s and 3/16 peaked at about
	// 2× capacity after recovery, 1/s and 3/16 at 1.18× (unavailable); the
	// time-based part is the same in every process, so it is the smaller.
	ReleasePerSecond = 1.0
	ReleaseGainStart = 1.0 / 16
	ReleaseGainMax   = 3.0 / 16
	// OutageStreak failures in a row, with no success between, make an
	// outage: under a server's random failures two in a row are rare, and
	// a down server is seen on the second failure
	// (BENCHMARKS.md, "Figures behind the code's choices").
	OutageStreak = 2
	// ProbeGapMax bounds the probe and last-chance gaps that failed probes
	// double: not measured, a bound so that a long outage is still probed
	// every 30 s (restarts of real services take seconds to minutes).
	ProbeGapMax = 30 * time.Second
	// QuietGapMax bounds what new calls' failures make of the probe gap, so
	// that the calls a process holds in an outage probe again after at most
	// 4 s of quiet once its own calls stop (not measured anew in issue 29:
	// a fresh process, which does not know whether retries heal, sends no
	// such probe; `stagger sim failrate` at p = 1 and 1000 processes went
	// from 1.48 to 1.10, the budget's own retries).
	QuietGapMax = 4 * time.Second
	// LastChanceLead is the least time before its call's deadline at which
	// a waiting retry goes as the call's last chance; LastChanceFactor
	// times the latest deferred attempt's duration when that is longer, so
	// that the attempt can come back before the deadline. 50 ms covers an
	// attempt on a LAN; the lab's blip heals with it
	// (BENCHMARKS.md, "Figures behind the code's choices").
	LastChanceLead   = 50 * time.Millisecond
	LastChanceFactor = 2
	// WaitSlack: no retry starts with less than this before its deadline
	// (an attempt sent with less left is cut off by the deadline).
	WaitSlack = time.Millisecond
	// GapFloor: a failed probe's gap never doubles from less than this
	// (successes may have halved the gaps to nothing).
	GapFloor = time.Millisecond
	// ProbeLeaseSlack: a probe or last chance that has not reported by its
	// call's deadline plus this is taken as lost and its slot freed (the
	// interceptors record an attempt a little after its deadline ends it).
	// A call without a deadline holds the slot at most ProbeGapMax.
	ProbeLeaseSlack = time.Second
	// BackShare: the calls held through an outage go back no faster than
	// this share of the pace at which retries began to wait in it, on top
	// of the new calls: measured in issue 39 (lab unavailable, see
	// BENCHMARKS.md).
	BackShare = 0.4
	// BackMinHeld: a process whose retries began to wait fewer times than
	// this in an outage sends its held calls back by their spread alone:
	// the pace of a handful is no pace: pacing them cost the lab's blip
	// its successes (BENCHMARKS.md, "Figures behind the code's choices").
	BackMinHeld = 4
	// BackSlower: a released retry answered within this many times the
	// fastest since the server came back says the server has room, and
	// the back pace doubles; slower, or failed, it halves (TCP Vegas'
	// test of a queue in the path). Measured in issue 39 on the lab's
	// chain and unavailable (BENCHMARKS.md, "Figures behind the code's choices").
	BackSlower = 1.25
	// MaxBackEvery bounds how slow the back pace gets.
	MaxBackEvery = time.Second
	// FutileFactor: a retry fails at once instead of waiting once the
	// outage has lasted this many times the longest wait of the retries
	// that began to wait since the server last served (the futility rule).
	// Chosen in issue 39 over the lab's outage-length sweep: see
	// BENCHMARKS.md.
	FutileFactor = 1.0
	// FutileHold: the share of the retries that still wait in such an
	// outage, so that the server's return finds calls to serve at once
	// (the calls a peer's backoff saves) while most fail fast. Below a
	// quarter, fewer than half the failed calls of a 5 s outage wait out
	// their deadline (the calls held before the rule began: 2 s of 5),
	// so their median is a fast failure; measured in issue 39 (lab
	// outage sweep, BENCHMARKS.md).
	FutileHold = 0.1
	// HealWindow calls that retried and ended are kept; once HealMinSamples
	// of them ended (or one healed), HealMinShare of them healed say the
	// server heals on retry (the heal rule); HealMinSamples retries that failed in
	// a row, nothing succeeding since, say it may not. A server
	// that fails the first two attempts of each call and serves the third
	// heals every call; one that fails half its attempts at random heals
	// three calls in four (3 attempts); a down one none; a key that always
	// fails (partial failure) none. Judged per call, not per attempt: per
	// attempt, the retries the gate let go (second attempts, which fail in
	// flaky-quiet) taught it that retries never heal
	// (BENCHMARKS.md, "Figures behind the code's choices").
	HealWindow     = 8
	HealMinSamples = 2
	HealMinShare   = 1.0 / 3
	// OverloadHold: after an attempt failed for overload (RESOURCE_EXHAUSTED,
	// a pushback, an attempt cut off by the per-attempt timer) retries are
	// not healed and timeout retries are refused for this long; after a
	// slow success, timeout retries only: retrying an overloaded server
	// deepens the overload even when some retries succeed.
	OverloadHold = 5 * time.Second
	// HealthyGap: failures in a row make an outage only when no attempt
	// failed for this long before them, counted from the first attempt
	// (the outage rule): a server that fails a share of its attempts all along is
	// flaky, and its calls are not held for it; a second, not less, so
	// that unlucky runs of a flaky server's failures are not taken for an
	// outage (BENCHMARKS.md, "Figures behind the code's choices").
	HealthyGap = time.Second
	// RunDecay: the longest run of failures a success ended shrinks by
	// this with each later run, so that an early unlucky run does not
	// hide an outage for long. Not measured: chosen so that the streak
	// that makes an outage stays a few failures past a flaky server's
	// usual runs (BENCHMARKS.md, "Figures behind the code's choices").
	RunDecay = 0.9
	// FutileEvery: in an outage that outlived the calls' deadlines, the
	// lone waiter (the probe) begins to wait only once this many failures
	// were recorded since a deferred retry last failed, so that a quiet
	// process sends a long outage at most one retry in ten calls (the
	// property test's bar; it sent one a deadline apart, each call
	// waiting its deadline out for it, when its last-chance gap had not
	// grown past its calls' spacing).
	FutileEvery = 10
	// HealStale: while the server serves (nothing failed since a
	// success), the calls that retried say whether retrying heals for
	// this long after the latest of them ended; then, until another does,
	// a straggler's retry heals (Allow). Not measured: a second, so that a server back from an
	// outage, which then retries no call, does not keep refusing a
	// per-attempt timer's retry (the property test: Allow admitted one
	// only two seconds after the server served every attempt).
	HealStale = time.Second
	// HoldSlack: a wait the gate does not hold ends (or goes as a probe)
	// this share of its pause after the pause (the hold rule), so that a call
	// that fails waited in the gate little more than its backoff's pause.
	HoldSlack = 0.1
)

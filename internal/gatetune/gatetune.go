// Package gatetune holds budget.Gate's tuning numbers, each with the one
// line that says why, and the snapshot of its rules that `stagger check`
// prints. Internal, so that a retune changes no API. The first block holds
// the numbers tuned on their own; the second, numbers derived from them,
// which a retune of those moves. BENCHMARKS.md ("Figures behind the code's
// choices", issues 13, 29 and 39) has the measurements.
package gatetune

import "time"

const (
	// Releases go one per Calm at slowest (ReleasePerSecond), each success
	// taking 1/16 of the interval off, doubling per released retry that
	// succeeds up to 3/16: 1/s and 3/16 peaked at 1.18x capacity after
	// recovery in the storm lab, 1.5/s at 2x. The return after an outage is never slower, and a call held
	// through it with a deadline goes back at a random share of what its
	// deadline leaves, one release interval at most (spread over an hour's
	// deadline, a held call waited up to an hour past the server's return).
	// Once a failure cut a return's pace, the rate of held retries grows
	// by its slowest rate, one retry a second at most, per attempt time (additive
	// increase, one at most per success): with a pace frozen for
	// OverloadHold after each refusal instead, a fleet's processes met
	// refusals unevenly and one kept an eighth of another's pace; half as
	// much served fewer held calls, twice as much sent more refusals
	// (BENCHMARKS.md, "A fleet of any size, on virtual time").
	ReleaseGainStart = 1.0 / 16
	ReleaseGainMax   = 3.0 / 16
	// Evidence: two of a kind are evidence, one is chance. Two failures in
	// a row are rare under random failures, and a down server is seen on
	// the second (the outage rule's streak); two retries failed since a
	// success say retries fail; two calls that retried say whether
	// retrying heals (the heal rule's fewest samples).
	Evidence = 2
	// ProbeGapMax: failed probes double their gap up to 30 s, so a long
	// outage is still probed twice a minute (restarts take seconds to
	// minutes). What no attempt confirmed for as long, the longest probe
	// gap, and for the longest wait it judged is forgotten (the ageing
	// rule): a Gate left in an outage when its traffic stopped refused the
	// first retry hours later.
	ProbeGapMax = 30 * time.Second
	// LastChanceLead: a last chance goes 50 ms (an attempt on a LAN)
	// before the end rule would end its wait: with no attempt timed that
	// is its attempt's time, else the slack that keeps a late timer or a
	// slower attempt within the deadline; the lab's blip heals with it.
	// An attempt time under it counts as it in a return's additive growth
	// (ReleasePerSecond): on loopback the fastest took 0.3 ms, and a growth
	// per attempt time that short would leap by a hundred retries a second
	// per second of successes.
	LastChanceLead = 50 * time.Millisecond
	// BackShare: calls held through an outage go back at most 0.4 times the
	// pace their retries began to wait at (lab unavailable, issue 39), and
	// cuts slow them to that share at most, below one a second if need be:
	// a fleet of 1,000 at 80 % load peaked at 1.84-1.98x on a floor of one
	// a second each, 1.61-1.76x on this (sim fleet, seeds 1-5).
	BackShare = 0.4
	// BackMinHeld: fewer than 4 held calls go back unpaced, each at its
	// own time; pacing a handful cost the lab's blip its successes.
	BackMinHeld = 4
	// FutileUnsent: for a retry whose attempt never left the client (its
	// connection was failing to connect), the backend's return is expected
	// half as far off as the outage has lasted (the end rule's turn): lab
	// refused, 71.8 -> 73.1 % at 1.18 attempts per call (BENCHMARKS
	// "Issue 63: the channel's own news").
	FutileUnsent = 2.0
	// FutileDeadlines: a call with a deadline waits through an outage's
	// first 3 of its deadlines and later fails at once: if outage lengths
	// are heavy-tailed, one that lasted three deadlines ends within one
	// more less than one time in four (issue 88; a 3 s outage with 1 s
	// deadlines keeps its calls, a 15 s one fails them at once).
	FutileDeadlines = 3.0
	// HealWindow: of the latest 8 calls that retried (two at least,
	// Evidence), a third healed says retrying heals (HealMinShare; a server
	// failing half its attempts heals 3 in 4, a down one none); judged per
	// call, since per attempt the gate's own probes taught it that nothing
	// heals.
	HealWindow = 8
	// OverloadHold: a failure for overload (or a slow success) is a sign
	// for 5 s: no retry heals unpaid meanwhile (retrying an overloaded
	// server deepens it even when some retries succeed), and the share of
	// signs among the attempts since says whether retries are held.
	// The same strain brakes the releases (the release rule): while it lasts, successes do not quicken the releases
	// and fast answers do not quicken a return, and each refusal for
	// overload halves a return's pace: the server's room is the new
	// calls' (issue 63's fleet of 20 processes after a 10 s outage: the
	// refusals after the return fell tenfold; BENCHMARKS.md, "Figures
	// behind the code's choices").
	OverloadHold = 5 * time.Second
	// OverloadShare, OverloadWindow: a backend is overloaded (every retry
	// waits) while more than 60 % of the latest 32 attempts (fewer count
	// as 32) were signs of overload (refused for
	// overload, cut off by the per-attempt timer, or slow): a backend
	// refusing 30 % of attempts with RESOURCE_EXHAUSTED and serving the
	// rest at once had every retry held for 10 s when any sign held them
	// (issue 65's pricing: 78-84 % of calls served with a 500 ms
	// deadline; the budget alone serves it). Attempts fail at random, so
	// the window must be long and the share well above the refusals a
	// served backend shows: over its 300 attempts in 10 s, a backend
	// refusing 30 % at random shows a false overload in 80 % of runs
	// judged on "more than half of 16" (3 calls of 180 held to their
	// deadline), in 0.6 % on this rule (40 % refused: 29 %); a backend
	// refusing two attempts in three is judged overloaded within a window.
	OverloadShare  = 0.6
	OverloadWindow = 32
	// RoomCut: the overload rule's estimate of the room a backend has for
	// retries. A failure for overload without a pushback takes half the
	// room left (once per attempt time), and retries are held while a
	// cut's worth or more is gone: a refusal holds retries until the next
	// success, a burst's until its second. So a success gives back
	// RoomCut*(1-RoomCut) (a quarter), the most that still holds a burst
	// of two refusals past its first success (two cuts took
	// 1-(1-RoomCut)^2 of the room). A 5 s hold after each refusal held every
	// retry of a backend refusing 30 % at random to its 10 s limit
	// (BENCHMARKS.md, "A migrating team's three scenarios"). During a
	// return after an outage a refusal still holds for OverloadHold: the
	// held calls' return fills the room (without it, the sim's fleet
	// served fewer of an outage's calls; BENCHMARKS.md, "A fleet of any
	// size, on virtual time").
	// A retry the gate let go that succeeds halves the release interval
	// by the same factor (slow start doubles what a cut halves): a burst
	// whose load ended leaves no new call to quicken it, and a fifth per
	// success brought held calls back one at a time over seconds.
	RoomCut = 0.5
	// QuietLulls: a backend that answered nothing for 4 times its latest
	// interval between answers (and the probe gap) gives no news: a
	// retry goes to learn. Judged on the gap alone, a fleet of 1,000
	// processes, each hearing an answer every few seconds, took its own
	// sparse traffic for silence, and its peak after the return rose.
	QuietLulls = 4
	// Calm: a second without failures. Only failures after one make an
	// outage, so a flaky server's unlucky runs are not taken for one; and
	// one after its latest streak of failures ended, a server that serves
	// every attempt heals a straggler's retry again (the issue 45 bar: a
	// timer cuts within a second of the first success). A second is also
	// how long past its deadline a probe, or a paid retry, that no attempt
	// reported is taken for lost: the interceptors record an attempt a
	// little after its deadline ends it.
	Calm = time.Second
	// TargetUtilization: where a backend reports its load (gRFC A51), held
	// calls go back at the pace that keeps it 97 % busy: 95 % served a
	// fleet's outage calls at 80 % load 0.58-0.61 of the room's limit,
	// 98 % peaked at 1.21x (sim fleet -reports, 20-1,000 processes,
	// seeds 1-5; BENCHMARKS.md, "A fleet of any size").
	TargetUtilization = 0.97
	// HoldSlack: a wait no rule holds ends a tenth of its pause after it,
	// so a failing call waits little more than its backoff.
	HoldSlack = 0.1
)

// Derived from the numbers above, not tuned on their own: a retune of those
// moves these with them.
const (
	// BackFaster: one success is worth the same share of the release
	// interval whether it takes it off the next release's time (the most a
	// success takes, ReleaseGainMax) or off the interval itself: each fast
	// answer shortens the back pace's interval by that share (halving it
	// let a hundred processes' held calls return at three times capacity
	// in sim outage). Outside a return it is the room's pace too: a
	// success quickens the releases by it, a refusal that cuts the room
	// slows them by as much (halving them held a backend refusing 30 %
	// at random to one a second; BENCHMARKS.md, the migrating team's
	// scenarios).
	BackFaster = 1 - ReleaseGainMax
	// HealMinShare: retrying heals while at most Evidence calls failed to
	// heal for each one that healed (fewer are not evidence that retrying
	// does not heal): a third.
	HealMinShare = 1.0 / (Evidence + 1)
	// QuietGapMax: new calls' failures stretch the probe gap up to
	// QuietLulls calm seconds (4 s), so held calls probe again soon after
	// the process's own calls stop. A learning retry held at a server never
	// seen to serve goes once nothing reached it for as long (sim failrate
	// -p 1, 1,000 processes).
	QuietGapMax = QuietLulls * Calm
	// ReleasePerSecond: one retry released per Calm, a second without
	// failures (Releases, above, has the measurements behind the rate).
	ReleasePerSecond = float64(time.Second) / float64(Calm)
	// RunDecay: a flaky server's longest run of failures shrinks by
	// 1-1/HealWindow (7/8) per later run, so an early unlucky run does not
	// hide an outage for long: it fades as the heal rule's window forgets a
	// call.
	RunDecay = 1 - 1.0/HealWindow
	// FutileEvery: the lone probe of an outage the futility rule judges
	// waits only once a window of attempts (OverloadWindow, the latest
	// attempts that judge a backend overloaded) failed since the last
	// failed probe: at most one retry per window of calls, within the
	// property test's bar of one in ten.
	FutileEvery = OverloadWindow
)

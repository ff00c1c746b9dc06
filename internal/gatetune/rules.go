package gatetune

import "fmt"

// Rule is one of the Gate's rules: its name and what it says, with its
// numbers.
type Rule struct {
	Name, Says string
}

// Current is the snapshot of the Gate's rules that `stagger check` prints,
// in the order the Gate's documentation gives them, with the numbers of
// gatetune.go. They are not settings: a release may retune them.
func Current() []Rule {
	return []Rule{
		{Name: "heal", Says: fmt.Sprintf("while retrying heals the calls that retried (at least %.2g of the latest %d) and no attempt failed for overload within %v, a waiting retry goes after its own pause (not during a return after an outage: then every waiting retry goes at the return's pace), and a retry after a per-attempt timeout of a straggler (newer attempts served) goes unpaid", HealMinShare, HealWindow, OverloadHold)},
		{Name: "probe", Says: fmt.Sprintf("while attempts fail, one waiting retry at a time goes when nothing reached the server for the quiet time: its pause, doubled by every failure (up to %v by new calls' failures, %v by failed probes)", QuietGapMax, ProbeGapMax)},
		{Name: "last-chance", Says: fmt.Sprintf("while attempts fail, a call with a deadline keeps its last attempt for a last chance %v (or twice the latest deferred retry's duration) before the deadline", LastChanceLead)},
		{Name: "release", Says: fmt.Sprintf("while the server serves, waiting retries go one at a time at one pace: %v a second, each success taking %v of the interval off (growing to %v while released retries succeed); once it serves again after an outage, from %v of the pace the held retries began to wait at (fewer than %d held: unpaced), each answer within %vx (and %v) of the fastest since the return quickening it by a fifth, a slower one leaving it, a failed one or any refusal for overload halving it, nothing quickening it within the overload rule's hold of such a refusal, never slower than one a second: a server with room to spare has them all back within about a second; a call held through the outage goes no sooner than its pause after the return, or with a deadline at a random share of what its deadline leaves, %v at most; the return lasts until a success finds none of the retries that began to wait before it waiting", ReleasePerSecond, ReleaseGainStart, ReleaseGainMax, BackShare, BackMinHeld, BackSlower, BackSlack, BackSpreadMax)},
		{Name: "guard", Says: "a retry a circuit breaker guards goes only when the breaker allows it too; while it is open, as its half-open probe; a closed breaker is no guard; a refusal keeps the retry's place; a yes whose caller left goes back to the breaker"},
		{Name: "outage", Says: fmt.Sprintf("%d failures in a row, after %v without failures, of a server whose retries do not heal, make an outage, and so does a streak in which two retries failed, longer than twice the server's longest recent run of failures plus %[1]d or, at a server that served, lasting longer than the calls' waits (under overload, with no retry failed): every retry waits (none is paid by the budget)", OutageStreak, HealthyGap)},
		{Name: "overload", Says: fmt.Sprintf("a backend is overloaded for %[3]v after an attempt refused with RESOURCE_EXHAUSTED without a pushback or cut off by the per-attempt timer (a straggler's excepted), and while more than %.0[1]f %% of its latest %[2]d attempts (fewer count as %[2]d), the latest within %[3]v, were signs of overload: refused with RESOURCE_EXHAUSTED (a pushback or not), cut off by that timer, or served slowly (after a quarter of the per-attempt timeout); a pushback's delay is the retry's pause, and a pushback with another status is no sign; while overloaded every retry waits; for %[3]v after a slow success, every retry after a per-attempt timeout but a straggler's", 100*OverloadShare, OverloadWindow, OverloadHold)},
		{Name: "hold", Says: fmt.Sprintf("a wait that no rule lets go by its pause and %v of it is held only in an outage or an overload; otherwise, none the budget paid for being out, it goes as a probe (a server that served, a process no retry has told anything yet, or one that does not know yet whether retries heal: one call at a time goes on learning it, a failed probe's call's next retry next, %v at most) or ends", HoldSlack, QuietGapMax)},
		{Name: "backlog", Says: fmt.Sprintf("during a return whose pace a refusal for overload braked (nothing quickens it for %v), a held retry whose turn at that pace, after the held retries before it, comes after its wait ends, and that end before the brake can lift, ends at once: it could not go (while a refusal has the process failing, until the next success, only a call without a deadline: one with a deadline keeps its last chance)", OverloadHold)},
		{Name: "hopeless", Says: "a wait ends as soon as a retry, taking as long as its method's attempts lately, could not finish before the call's deadline"},
		{Name: "futility", Says: fmt.Sprintf("once an outage has lasted %v times the longest wait of the retries that began to wait since the server last served (%v times, for a retry whose attempt never left the client: its connection was refused), a retry fails at once (reason outage) unless it can go at once as the lone probe, its pause waived (nobody else waits, %v failures were recorded since a probe failed, and the probe gap, at least that longest wait, has passed since); calls already waiting keep their chance; the first success ends it", FutileFactor, FutileFactor*FutileUnsent, FutileEvery)},
		{Name: "settling", Says: fmt.Sprintf("no retry goes sooner than its pause; a probe that never reports frees its slot %v after its call's deadline, %v after it went at most", ProbeLeaseSlack, ProbeGapMax)},
		{Name: "ageing", Says: fmt.Sprintf("what no attempt confirmed for %v, and for longer than the longest wait it judged (an outage, a failing phase, whether retries heal), is forgotten while nobody waits: the next retry finds out, as in a new process", ForgetAfter)},
		{Name: "criticality", Says: "releases, probes and last chances go to the most critical waiting retry first; a full waiting room evicts the least critical, latest first"},
	}
}

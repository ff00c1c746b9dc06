package budget

import (
	"errors"
	"math"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"
)

// Gate adds deferral to a budget: a retry the budget refuses waits, within
// its call's deadline, instead of ending the call, and goes when one of the
// rules below lets it. The gate decides when it learns something that can
// change a waiting retry's answer (a success, a deferred retry's outcome,
// a change of phase, of whether retries heal or of overload; a failure
// that changes none of them only puts the waits' times off, and wakes
// nobody) and when a wait falls due; its numbers are in tuning.go, and
// `stagger check` prints the rules with them. What it learns is one
// server's: Backends keeps a Gate per method of each backend.
//
// The gate learns from the calls that retried whether retrying heals them.
// A call counts once, when it ends after retrying: healed when a retry
// succeeded, unhealed when its final retry failed (Attempt.Final); a call
// still retrying does not count yet. Retries heal while, of the latest
// eight such calls, at least one and a third were healed; until two ended
// or one healed, while the server has served an attempt and not two
// retries in a row failed since. The process knows whether retries heal
// once two such calls ended, one healed, or two retries in a row failed
// with no success since; before that (a fresh process) it knows nothing.
// Judging calls rather than attempts keeps the evidence fair whichever
// retries the gate lets go: a server that fails every call's first two
// attempts and serves the third heals every call.
//
// The gate stands in one of four phases: quiet (nothing failed since the
// last success seen while nobody waited), failing (the last attempt that
// reached the server failed), outage (the outage rule) and recovering (an
// attempt succeeded after failures). The rules, by name:
//
//   - The heal rule. While retries heal and no attempt failed for overload
//     for five seconds (Attempt.Overload), a waiting retry goes after its
//     own pause (AdmitHeal), unless the gate is in an outage or held the
//     wait (the hold rule: those go back paced, by the release rule). A
//     flaky server heals on retry and a retry is worth its load; a down
//     one (no retry heals) or an overloaded one gets the rules below.
//     Allow admits by this rule, at once and unpaid, a straggler's retry
//     (Request.Straggler: after a per-attempt timeout, while the method's
//     other attempts were served fast) that the budget refuses and the
//     outage and overload rules do not, unless the gate is in an outage:
//     a per-attempt timer cannot wait, and one slow attempt among fast
//     ones says nothing of overload (the default budget of a fresh
//     process holds 9 tokens and a timeout retry costs 10: without this
//     rule its timer cut off no straggler). Its Attempt then says
//     AdmitHeal, so a budget does not refund what it did not pay.
//   - The probe rule. While failing or in an outage, one deferred retry at
//     a time goes, when nothing reached the server for the quiet time: the
//     longer of the retry's own pause and the probe gap. The gap starts at
//     the first waiting retry's pause, doubles with every attempt that
//     fails, the new calls' first attempts included (up to 4 s; a
//     probe that fails doubles it up to 30 s, and to no less than
//     its own pause), and halves with every success. A process that keeps
//     sending calls learns from them instead of probing; a quiet one
//     probes at its backoff's pace, slowed by every failure. It goes as
//     AdmitBudget when the budget's Allow pays for it now, else as
//     AdmitProbe. The last attempt of a call with a deadline
//     (Request.Last) is not spent on a probe: it waits for the last-chance
//     rule. Until the process knows whether retries heal it is the other
//     way round: only a call's last attempt probes (its outcome settles a
//     call either way), or, while no retry has told the process anything,
//     any waiting retry at its pause; and only retries' outcomes hold it back and
//     stretch the gap (first attempts that fail say nothing of whether a
//     retry heals). So a fleet of fresh quiet processes sends a down
//     server no retry beyond what their budgets pay for.
//   - The last-chance rule. While failing or in an outage, a retry whose
//     call has a deadline goes as that call's last chance (AdmitLast, or
//     AdmitBudget when paid) at the deadline less 50 ms (or twice
//     the latest deferred retry's duration), when no other deferred retry
//     is out, nothing reached the server for its pause, and the last
//     deferred retry that failed ended at least the last-chance gap ago.
//     That gap starts at the first waiting retry's pause, doubles with
//     every deferred retry that fails and halves with every success: the
//     call has nothing to lose, and a long outage does not get one more
//     attempt per call.
//   - The release rule. While quiet or recovering, a release credit lets
//     one waiting retry go (AdmitRelease). Credits accrue at
//     one a second and by a gain with every success the process
//     records; the gain starts at 1/16, doubles with every
//     deferred retry that succeeds (or is admitted by the heal rule), up
//     to 3/16, and halves (not
//     below the start) with every released or paid retry that fails. At
//     most one credit is kept: no burst. An outage drops the credits; the
//     first after it is drawn at random (processes that saw the recovery
//     together must not release together), or is a whole one when a
//     deferred retry found the server back (the waiting call whose last
//     chance would have come next must not lose it to the probe that came
//     first). A wait held through the outage whose call has a deadline
//     goes back without a credit, unless an attempt failed for overload
//     within five seconds: its own pause after the outage ended, and then
//     a share drawn at random of what its deadline leaves before its last
//     chance. It cannot wait for a credit, and the draw spreads the calls
//     that waited together (stagger sim outage -call-timeout 2s: peak
//     after the outage 5.7× capacity at their pause alone, 3.4× spread).
//     A process that held four calls or more sends them back no faster
//     than 0.4 times the pace at which its retries began to wait in the
//     outage, the first after a random share of that gap, so that the
//     server that just came back meets little more than its usual load;
//     the pace doubles with every released retry the server answers
//     about as fast as its fastest since it came back (it has room), and
//     halves with one slower or failed (it queues them): the recovering
//     server's peak load falls, and so do its failures (BENCHMARKS.md,
//     "Issue 29": the lab's unavailable and chain).
//   - The guard rule. A retry whose Request names a Guard (a circuit
//     breaker) goes only when the guard allows it too, so the guard's
//     half-open probe and the gate's probe are one attempt. While the
//     guard is open it alone says when a waiting retry goes (as its
//     probe), and the gate holds the wait. While the guard is closed it is
//     the judge of whether the server fails: the probe and last-chance
//     rules then let only a retry the budget pays for go (a free probe
//     would only repeat a call that failed, such as a key that always
//     fails).
//   - The outage rule. Failures in a row, no success between, two more than
//     twice the longest recent run of failures (a flaky server's runs),
//     make an outage when retries do not heal (none of the latest calls
//     that retried was healed, two at least, or the latest two retries
//     failed with no success since), and either the server looked healthy
//     before them (an attempt had succeeded, and none failed for a second
//     before the first of them, counted from the first attempt recorded)
//     or an attempt failed for overload within five seconds: a server that
//     fails a share of its attempts all along is flaky, not down. But a
//     streak beyond what its flakiness makes (twice the longest recent run
//     of failures that a success ended, plus two), in which two retries
//     failed, is an outage whatever the calls before it said: a flaky
//     server that went down got every call's every retry. In an
//     outage Allow refuses every retry (not hedges) without asking the
//     budget: the retry waits and goes by the rules above, so budget-paid
//     retries cannot burn a call's attempts against a server known to be
//     down (the lab's metastable scenario: load in the outage 1.16×
//     capacity when this held only while calls waited, 1.04× since).
//   - The overload rule. Within five seconds of a failure for overload,
//     Allow refuses every retry (not hedges) without asking the budget, so
//     that retries do not pile onto a server that is full (the lab's
//     overload: BENCHMARKS.md, "Figures behind the code's choices"); within five seconds of a slow success, it refuses a
//     retry after a per-attempt timeout (Request.AfterTimeout): the
//     interceptors then let the slow attempt run on instead of cutting it
//     off, since the retry would only join the queue that made it slow;
//     but not a straggler's (Request.Straggler), whose caller saw other
//     attempts served fast meanwhile: there is no queue to join.
//   - The hold rule. A waiting retry that no rule lets go by its pause and
//     a tenth is held: it waits for the rules above, within its deadline,
//     while the gate is in an outage or an attempt failed for overload
//     within five seconds, and once held stays so. Otherwise it goes then
//     as a probe, when no other probe is out and the server has served an
//     attempt or no retry has yet told the process anything (none failed
//     or ended a call: without that probe, a process whose first call's
//     retry got an answer not retried never sent the retry that tells
//     whether retries heal), or its wait ends (ErrWaitEnded) and the call ends with
//     its last status: a wait is worth it only for a server that was
//     serving and now is down or overloaded, and a call that was not held
//     waits no longer than its pause and a tenth.
//   - The hopeless rule. Whatever the phase, a wait ends (ErrWaitEnded) as
//     soon as a retry could not finish before its call's deadline, taking
//     as long as an attempt of its method takes (Request.Took) or as the
//     latest deferred retry that succeeded within five seconds
//     (Attempt.Took): it would wait out its deadline only to fail (the
//     lab's slowdown-90: failed calls' p50 999 ms, the whole deadline,
//     before; 441 ms since).
//   - The futility rule. Once an outage has lasted as long as the longest
//     wait of the retries that began to wait since the server last served
//     (what their deadlines left, or MaxWait), waiting is pure cost: a
//     retry that would begin to wait fails at once (ErrOutageLasting) and
//     its call ends with its last status, unless nobody waits, when it
//     waits alone as the probe (but only once ten failures were recorded
//     since a deferred retry last failed, failures do not reach the
//     server more often than its pause, and a probe or its last chance
//     could go before its deadline: a long outage gets at most one retry
//     in ten calls, and no call waits its deadline out for a chance that
//     will not come), or a draw keeps it waiting (one in ten:
//     the server's return then finds calls to serve, as a peer's backoff
//     saves the calls of an outage's last moments; BENCHMARKS.md, "Issue
//     45", long-outage 5 s, has the figures). Calls already waiting keep
//     their chance;
//     the first success (a healed probe, a new call's first attempt) ends
//     the outage and the rule with it. A service whose dependency is down
//     for minutes does not hold its own callers, goroutines and memory for
//     each call's whole deadline.
//   - The settling rule. No retry is admitted sooner than its pause. A
//     probe or last chance that never reports (its attempt lost) frees its
//     slot a second after its call's deadline, or 30 s after it
//     went for a call without one; a probe that reports after that is
//     still counted as an outcome, and one that left before the probe now
//     holding the slot does not free it (Attempt.Took says when it left).
//   - The criticality rule (Request.Criticality; Unset counts as CRITICAL,
//     so a process whose calls name none is unaffected). A release credit,
//     a probe or a last chance that the rules give a waiting retry goes
//     instead to the most critical waiting retry that they, its guard and
//     the budget let go now (the oldest of its level first); only a
//     waiting retry's own heal is not handed over. When the waiting calls
//     are at their bound, a retry evicts the least critical waiting one
//     below its level (the latest of that level to enter), which ends its
//     call at once with its last status (ErrEvicted), and is refused
//     (ErrTooManyWaiting) only when none is less critical. A SHEDDABLE
//     retry waits in an outage like any other: refusing it at once there
//     ended its calls sooner but cost goodput (the lab's
//     mixed-criticality: BENCHMARKS.md, "Figures behind the code's
//     choices"). The budget itself keeps a reserve for
//     the more critical (see Request.Criticality).
//
// The waiting calls are bounded (DeferSettings.MaxWaiting); a call without
// a deadline waits at most MaxWait. Waiting costs the caller's goroutine
// only: no goroutine or timer is started but the one Wait sleeps on.
//
// A Gate is a Budget: Record and Allow pass through to the budget it wraps
// (Allow counts in the budget's State like any other; the retries the
// outage and overload rules refuse count in State.Refused). Allow costs
// two atomic loads beyond the budget's own (a third after a per-attempt
// timeout, and a clock read once an overload was ever recorded). When
// nobody waits, recording a first attempt's success costs three atomic
// loads beyond the budget's own; a failure, or a retry's outcome (the
// evidence of whether retries heal), takes the gate's lock and reads the
// clock. A Gate is
// safe for concurrent use; build it with Deferring (or New).
type Gate struct {
	b    Budget
	s    DeferSettings
	now  func() time.Time
	rand func() float64

	// waiting mirrors the waiting count, for Record's and Allow's fast
	// paths.
	waiting atomic.Int32
	// succeeded: a success was recorded while nobody waited, so what the
	// last failures left is stale (gateState.forget runs at the next slow
	// path).
	succeeded atomic.Bool
	// outageNow mirrors st.phase == phaseOutage, for Allow.
	outageNow atomic.Bool
	// overloadUntil and slowUntil mirror st's (Unix nanoseconds), for
	// Allow.
	overloadUntil, slowUntil atomic.Int64
	// refused counts the retries Allow refused without asking the budget
	// (the outage and overload rules), added to its State's Refused.
	refused atomic.Uint64
	// first: an attempt was recorded (Record reads the clock once for
	// the first).
	first atomic.Bool

	mu      sync.Mutex
	st      gateState
	room    waitingRoom
	changed chan struct{}
	// counters for State.
	deferred, admitted, gaveUp uint64
	// futile counts the retries the futility rule failed at once (in
	// gaveUp too); polls the waiters' decisions asked (tests and
	// benchmarks read it).
	futile uint64
	polls  uint64
}

// Deferring wraps b so that its refused retries wait (see Gate). s.Mode is
// not consulted: the caller chose to defer.
func Deferring(b Budget, s DeferSettings, opts ...Option) (*Gate, error) {
	if b == nil {
		return nil, errors.New("budget: Deferring: nil budget (a nil budget is unlimited and never refuses)")
	}
	if err := s.Validate(); err != nil {
		return nil, err
	}
	o := buildOptions(opts)
	// The gate's own generator, seeded by two draws of the source the
	// options give: it runs under the gate's lock, the source never does.
	rnd := rand.New(rand.NewPCG(math.Float64bits(o.Rand()), math.Float64bits(o.Rand()))).Float64
	return &Gate{b: b, s: s.WithDefaults(), now: o.Now, rand: rnd, st: newGateState(o.Now(), rnd), changed: make(chan struct{})}, nil
}

// Allow asks the wrapped budget, except that in an outage, and after a
// failure for overload, it refuses every retry, and after a slow success
// every retry after a per-attempt timeout but a straggler's (the outage
// and overload rules; hedges are asked as usual); and that it admits a
// straggler's retry the budget refuses while retries heal (the heal
// rule), without blocking.
func (g *Gate) Allow(r Request) bool {
	_, ok := g.allow(r)
	return ok
}

// Admit is Allow, and says how it admitted r: AdmitNone when the budget
// paid, AdmitHeal when the heal rule let a straggler's retry go unpaid
// (the caller tells the budget so in the retry's Attempt.Admission). It
// implements Admitter.
func (g *Gate) Admit(r Request) (Admission, bool) { return g.allow(r) }

func (g *Gate) allow(r Request) (Admission, bool) {
	straggler := r.Straggler && r.AfterTimeout && !r.Hedge
	if !r.Hedge && (g.outageNow.Load() || g.until(&g.overloadUntil)) || r.AfterTimeout && !straggler && g.until(&g.slowUntil) {
		g.refused.Add(1)
		return AdmitNone, false
	}
	if g.b.Allow(r) {
		return AdmitNone, true
	}
	if straggler && g.heals() {
		return AdmitHeal, true
	}
	return AdmitNone, false
}

// heals reports whether the heal rule lets a retry go now, outside an
// outage. It changes nothing: successes recorded while nobody waited
// (which gateState.forget would apply at the next slow path) count as
// forget counts them.
func (g *Gate) heals() bool {
	now := g.now()
	g.mu.Lock()
	defer g.mu.Unlock()
	ev, ph := g.st.ev, g.st.phase
	if g.succeeded.Load() {
		ev.retryFails, ev.seen, ph = 0, true, phaseQuiet
	}
	if ph == phaseQuiet {
		return ev.healsServing(now)
	}
	return ph != phaseOutage && ev.heals(now)
}

// Record tells the wrapped budget, then the gate, how an attempt ended.
func (g *Gate) Record(a Attempt) {
	g.b.Record(a)
	if !g.first.Load() && g.first.CompareAndSwap(false, true) {
		// Failures that make an outage must follow tune.HealthyGap without
		// failures, from the first attempt on (the outage rule).
		now := g.now()
		g.mu.Lock()
		g.st.ev.lastFail = now
		g.mu.Unlock()
	}
	if a.Outcome != Failure && a.Admission == AdmitNone && g.waiting.Load() == 0 {
		if a.Number > 1 || a.Overload {
			// Evidence for the heal rule only; the phases move as on the
			// fast path.
			now := g.now()
			g.mu.Lock()
			g.st.ev.learn(now, a)
			g.mirrorOverload()
			g.mu.Unlock()
		}
		if a.Outcome == Success && !g.succeeded.Load() {
			// The next slow path forgets the failures (forgetLocked), and
			// the outage with them: Allow must not wait for it.
			g.succeeded.Store(true)
			g.outageNow.Store(false)
		}
		return
	}
	now := g.now()
	g.mu.Lock()
	defer g.mu.Unlock()
	g.forgetLocked(now)
	before := g.st.outlook(now)
	g.st.observe(now, a)
	g.outageNow.Store(g.st.phase == phaseOutage)
	g.mirrorOverload()
	if a.Outcome == Success || a.Admission != AdmitNone || g.st.outlook(now) != before {
		g.notifyLocked()
	}
}

// mirrorOverload copies st.overloadUntil and st.slowUntil for Allow (0:
// never).
func (g *Gate) mirrorOverload() {
	if !g.st.ev.slowUntil.IsZero() {
		g.slowUntil.Store(g.st.ev.slowUntil.UnixNano())
	}
	if !g.st.ev.overloadUntil.IsZero() {
		g.overloadUntil.Store(g.st.ev.overloadUntil.UnixNano())
	}
}

// until reports whether now is before the time t mirrors (0: never).
func (g *Gate) until(t *atomic.Int64) bool {
	u := t.Load()
	return u != 0 && g.now().UnixNano() < u
}

// forgetLocked runs gateState.forget when successes were recorded while
// nobody waited.
func (g *Gate) forgetLocked(now time.Time) {
	if g.succeeded.Swap(false) {
		g.st.forget(now)
		g.outageNow.Store(false)
	}
}

// notifyLocked wakes the waiters, if any (nobody else holds the channel).
func (g *Gate) notifyLocked() {
	if g.room.n == 0 {
		return
	}
	close(g.changed)
	g.changed = make(chan struct{})
}

// State returns the wrapped budget's state, with the calls waiting now and
// the gate's counters.
func (g *Gate) State() State {
	st := g.b.State()
	st.Refused += g.refused.Load()
	g.mu.Lock()
	st.Waiting, st.Deferred, st.DeferAdmitted, st.DeferGaveUp = g.room.n, g.deferred, g.admitted, g.gaveUp
	st.Health = g.st.phase.String()
	if g.succeeded.Load() {
		st.Health = phaseQuiet.String()
	}
	g.mu.Unlock()
	return st
}

package budget

import (
	"errors"
	"math"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	tune "github.com/stagger-go/stagger/internal/gatetune"
)

// Gate adds deferral to a budget: a retry the budget refuses waits, within
// its call's deadline, instead of ending the call, and goes when the
// Gate's schedule says. What it learns is one server's: Backends keeps a
// Gate per method of each backend. It has two parts, under one lock.
//
// The estimator (gatestate.go, gateevidence.go) keeps the server's phase,
// moved by recorded attempts and the time: quiet (nothing failed since a
// success seen while nobody waited), failing (the last attempt that
// reached the server failed), outage (the outage rule) and recovering (a
// success after failures); and the evidence: whether retrying heals the
// calls that retried (a third of the latest eight), whether an attempt
// failed for overload within five seconds, how long attempts take.
//
// The scheduler (gatedecide.go) gives each waiting retry, from its own
// pause, its deadline, its criticality and that state, how and when it
// goes (a decision: an admission now, or the time to ask again), and is
// asked again only at that time or when the state changes what it would
// say (a failure that changes nothing wakes nobody). The rules it applies,
// by name (`stagger check` prints them with their numbers):
//
//   - heal: while retries heal and nothing is overloaded, a retry goes
//     after its own pause (and Allow admits a straggler's retry unpaid);
//   - probe and last-chance: while the server fails, one retry at a time
//     goes once nothing reached it for the probe gap (its pause, doubled by
//     failures), and a call with a deadline keeps its last attempt for
//     just before it;
//   - release: once the server serves again, waiting retries go on credits
//     that accrue with time and successes; calls held through an outage go
//     back spread over what their deadlines leave, at a pace the recovering
//     server's answers set;
//   - guard: a retry a circuit breaker guards goes only when the breaker
//     allows it too; while the breaker is open, as its half-open probe;
//   - outage and overload: failures in a row after a calm second, of a
//     server whose retries do not heal, or beyond its flakiness or the
//     calls' waits, are an outage; in it, and after a failure for
//     overload, Allow refuses every retry (not hedges): they wait;
//   - hold and hopeless: a wait no rule lets go by its pause and a tenth
//     probes (a server that served, or a process no retry told anything,
//     none paid for being out) or ends, unless the server is down or
//     overloaded; a wait ends as soon as a retry could not finish before
//     its deadline;
//   - futility: once an outage outlived the waits of its retries, a retry
//     fails at once (ErrOutageLasting) but for one in ten and a lone probe;
//   - settling: no retry goes before its pause; a probe that never
//     reports frees its slot a second after its call's deadline;
//   - criticality: releases, probes and last chances go to the most
//     critical waiting retry first; a full room evicts the least critical.
//
// Each rule's reasons are beside its code. The waiting calls are bounded
// (DeferSettings.MaxWaiting), a call without a deadline waits MaxWait.
//
// A Gate is a Budget, safe for concurrent use; build it with Deferring (or
// New). Record and Allow pass through to the budget it wraps (the retries
// the outage and overload rules refuse count in State.Refused). While the
// gate is settled (nobody waits, nothing failed since a success, no
// overload), Allow and Record of a first attempt that did not fail read
// one atomic word beyond the budget's own work. Nothing foreign runs under
// the gate's lock (not WithRandom's source, the wrapped budget or a
// Guard): a waiting retry the rules let go holds its admission while its
// Poll asks its Guard and the budget, and gives it back if they refuse.
type Gate struct {
	b   Budget
	s   DeferSettings
	now func() time.Time

	// settled is the one word the fast paths read (gateState.settled, and
	// nobody waits). Written under mu; time only makes a gate more
	// settled, so a stale false costs a lock, never a wrong answer.
	settled atomic.Bool

	mu      sync.Mutex
	st      gateState
	room    waitingRoom
	shared  *room // the backend's and the set's bounds (Backends); nil: none
	changed chan struct{}
	// counts holds State's counters (Refused: the retries Allow refused
	// without asking the budget); polls, the decisions asked (tests read it).
	counts State
	polls  uint64
	// asking counts the waiters whose Poll holds an admission while it
	// asks their guard and the budget unlocked.
	asking int
}

// Deferring wraps b so that its refused retries wait (see Gate). s.Mode is
// not consulted: the caller chose to defer.
func Deferring(b Budget, s DeferSettings, opts ...Option) (*Gate, error) {
	if b == nil {
		return nil, errors.New("budget: Deferring: nil budget (a nil budget is unlimited and never refuses)")
	}
	if err := s.validate(); err != nil {
		return nil, err
	}
	o := buildOptions(opts)
	// Its own generator, seeded by two draws of the options' source: it
	// runs under the lock, the source never does.
	rnd := rand.New(rand.NewPCG(math.Float64bits(o.Rand()), math.Float64bits(o.Rand()))).Float64
	g := &Gate{b: b, s: s.withDefaults(), now: o.Now, changed: make(chan struct{})}
	g.st = newGateState(o.Now(), rnd)
	return g, nil
}

// Allow asks the wrapped budget, but for the outage and overload rules
// (it refuses) and the heal rule (it admits a straggler's retry unpaid).
// It never blocks.
func (g *Gate) Allow(r Request) bool {
	_, ok := g.allow(r)
	return ok
}

// Admit is Allow, and says how it admitted r: AdmitNone when the budget
// paid, "heal" when the heal rule let it go unpaid. It implements
// Admitter.
func (g *Gate) Admit(r Request) (Admission, bool) { return g.allow(r) }

func (g *Gate) allow(r Request) (Admission, bool) {
	straggler := r.Straggler && r.AfterTimeout && !r.Hedge
	var now time.Time
	settled := g.settled.Load()
	if !settled {
		now = g.now()
		g.mu.Lock()
		ev := &g.st.ev
		refuse := !r.Hedge && (g.st.phase == phaseOutage || ev.overloaded(now)) || r.AfterTimeout && !straggler && now.Before(ev.slowUntil)
		if refuse {
			g.counts.Refused++
		}
		g.settle(now) // an overload may have passed
		g.mu.Unlock()
		if refuse {
			return AdmitNone, false
		}
	}
	if g.b.Allow(r) {
		if !settled && r.Number > 1 && !r.Hedge {
			g.mu.Lock()
			g.st.ev.retryOut = now.Add(tune.ProbeLeaseSlack)
			g.mu.Unlock()
		}
		return AdmitNone, true
	}
	if straggler && g.heals() {
		return admitHeal, true
	}
	return AdmitNone, false
}

// heals reports whether the heal rule lets a straggler's retry go unpaid
// now: a per-attempt timer cannot wait (a fresh default budget holds 9
// tokens, a timeout retry costs 10), and one slow attempt among fast ones
// says nothing of overload.
func (g *Gate) heals() bool {
	now := g.now()
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.st.phase != phaseOutage && g.st.ev.heals(now, g.st.phase == phaseQuiet)
}

// Record tells the wrapped budget, then the gate, how an attempt ended.
// A first attempt that did not fail, while the gate is settled, changes
// nothing and takes no lock.
func (g *Gate) Record(a Attempt) {
	g.b.Record(a)
	plain := a.Outcome != Failure && a.Admission == AdmitNone && a.Number == 1 && !a.Overload
	if plain && g.settled.Load() {
		return
	}
	now := g.now()
	g.mu.Lock()
	defer g.mu.Unlock()
	defer g.settle(now)
	if a.Outcome != Failure && a.Admission == AdmitNone && g.room.n == 0 {
		// Nobody waits: a success forgets what failures left.
		g.st.ev.learn(now, a)
		if a.Outcome == Success {
			g.st.forget(now)
		}
		return
	}
	before := g.st.outlook(now)
	g.st.observe(now, a)
	if a.Outcome == Success || a.Admission != AdmitNone || g.st.outlook(now) != before {
		g.notifyLocked()
	}
}

// settle sets the settled word at now; under mu.
func (g *Gate) settle(now time.Time) { g.settled.Store(g.room.n == 0 && g.st.settled(now)) }

// notifyLocked wakes the waiters, if any.
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
	g.mu.Lock()
	st.Refused += g.counts.Refused
	st.Waiting, st.Deferred, st.DeferAdmitted, st.DeferGaveUp = g.room.n, g.counts.Deferred, g.counts.DeferAdmitted, g.counts.DeferGaveUp
	st.Health = g.st.phase.String()
	g.mu.Unlock()
	return st
}

package budget

import (
	"container/list"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"reflect"
	"sync"
	"sync/atomic"
	"time"

	tune "github.com/stagger-go/stagger/internal/gatetune"
)

// Gate adds deferral to a budget: a retry the budget refuses waits, within
// its call's deadline, instead of ending the call. What it learns is one
// backend's: Backends keeps a Gate per method of each backend. A Gate is a
// Budget, safe for concurrent use; build it with Deferring (or New).
//
// The wait contract, by rule (`stagger check` prints it with its numbers):
//
// When a refused retry goes. Never before its pause (settling). While
// retrying heals the backend's calls and no attempt failed for overload
// within 5 s, after its pause, unless a return after an outage is under
// way (heal). While the
// backend fails, one retry at a time, as the probe, once nothing reached
// the backend for the probe gap (probe; a held retry, while it is not
// known whether retries heal, once besides nothing reached it for four
// times its latest interval between answers: with no news the estimate goes
// back to unknown, and one retry goes to learn), or, for a call with a deadline,
// as its last chance just before it (last chance). While it serves, one
// at a time at one pace (release): one a second at slowest, each success
// taking a sixteenth off and, unless an outage came since nobody waited,
// quickening the pace by a fifth (by half for a retry the gate let go:
// slow start) while the overload rule's room is at
// least half left, and each refusal that cuts the room slowing it by as
// much (the room's pace: retries held through a burst of refusals go back
// within about a second of the new calls' successes); after an outage, from 0.4 times the pace the held ones
// came at, a fifth quicker per success until the first failed one or
// refusal for overload, a new call's too
// (held retries take only the room new calls leave), halves it, at most
// once per attempt time; after that cut the rate grows by a retry a
// second per attempt time, one at most per success (an estimate of the room learnt
// as TCP learns it: a multiplicative cut and an additive growth bring
// processes that never talk to their share), until a success finds
// none of the retries that began to wait before the return still waiting
// (how soon all are back is that pace's, not the room's: a few that came
// slowly take seconds; a held call no sooner than its pause after
// the return, or with a deadline at a random share of what it leaves, a
// second at most; fewer than four held go unpaced). A guarded retry goes
// only when its circuit breaker allows (guard): a closed breaker is no
// guard and is not asked; a refusal keeps the retry's place; a yes whose
// caller left before the retry went goes back to a GuardReturner; a guard
// that panics ends the wait and gives back what it was granted. Of the
// retries whose pause has passed, the most critical goes first, then the
// oldest (criticality); a held retry and a guarded one are each judged
// against the oldest of their kind.
//
// When a wait ends, and with what. At its call's deadline (deadline), or
// DeferSettings.MaxWait without one (max-wait); at once when a retry as
// long as its method's attempts lately could not finish (hopeless); a tenth past its pause when no rule let it go and the
// backend is neither down nor overloaded, unless it goes then as the probe
// that learns whether retries heal (hold); when a more critical retry
// takes its place in a full room (criticality); never before its own
// bound because others wait before it. Down (outage: failures in
// a row, after a calm second, where retries do not heal), or overloaded
// (overload: after a RESOURCE_EXHAUSTED without a pushback or a
// per-attempt timeout, until successes give back the room such refusals
// took, each a quarter of it where each refusal took half of what was
// left; for 5 s, whatever the successes, during a return after an outage;
// and while more than 60 % of the latest 32 attempts,
// the latest within 5 s, were signs of overload: those, a
// RESOURCE_EXHAUSTED with a pushback, a slow success; a pushback's delay
// is the pause), waits are held and Allow refuses every retry; once an
// outage outlived a new retry's own wait (the backend's return expected as
// far off as the outage has lasted; half as far for a retry whose attempt
// never left the client, Request.Unsent), that retry of a call without a
// deadline is turned away at once (futility) but for a rare lone probe:
// the new calls' first attempts and those probes find the backend's
// return. A call with a deadline waits through the outage to its deadline
// (less its attempt, hopeless), for the return may come first. The call ends with its last
// status; its error and interceptor.Report name the rule that ended the
// wait and the one that held it (outage, overload or breaker).
//
// What a success and a failure do. Each Record updates the estimate and
// runs the grant loop. A failure adds to the streak that makes an outage
// and doubles the probe gap; a success ends the streak, quickens the
// release pace, and after an outage starts the return.
//
// What a caller that leaves gets back. Its wait ends; an admission it was
// granted and had not taken goes to the next waiter, and a budget of this
// package gives back what it took for it.
//
// What ages, and when. The phase lasts until a success ends the failures;
// whether retries heal is judged from the latest 8 calls that retried.
// What no attempt confirmed for 30 s and the longest wait it judged (the
// phase, the evidence, what the latest probe took) is forgotten while
// nobody waits (ageing): the next retry finds out, as in a new process.
//
// How it decides (x/sync/semaphore's shape): one mutex; one function,
// grantLocked (gatewait.go), alone admits or ends waits, each by closing
// its Ready channel; the rules it applies read the estimate (gatestate.go,
// gateevidence.go) and the pacer (gatepace.go) in decide (gatedecide.go).
// Enter, Record, Leave and the gate's one timer run it. It decides only
// heads (of each criticality, the oldest retry whose pause has passed,
// held or not, guarded or not) and the waiters whose own time came, kept
// in one ordered set by that time (waitset.go): an event costs O(log n) in
// the waiters, and wakes only who goes or whose wait ends.
// An admitted caller
// asks its Guard and the budget unlocked (Take), and what they refuse goes
// back through the one give-back path. Every move of a waiter, and the
// counter it adds to, is moveLocked's; the estimate changes in observe
// (with the evidence's learn), enter and age, and the pacer's methods
// return new values that they store (ten functions write the gate's
// state: TestGateWriters). Nothing
// foreign runs under the gate's lock (not WithRandom's source, the clock,
// the budget or a Guard).
//
// Record and Allow pass through to the wrapped budget (retries the outage
// and overload rules refuse count in State.Refused). While nobody waits and
// all is well, Allow and Record of a first attempt that did not fail read
// one atomic word beyond the budget's own work.
type Gate struct {
	b   Budget
	s   DeferSettings
	now func() time.Time
	// virtual: now is the caller's (WithClock): no timer is armed, and
	// whoever moves the clock calls Tick.
	virtual bool

	// settled is the one word the fast paths read (gateState.settled, and
	// nobody waits). Written under mu; time only makes a gate more
	// settled, so a stale false costs a lock, never a wrong answer.
	settled atomic.Bool

	mu sync.Mutex
	st gateState
	// queue holds the arrivals in the room (queued, or granted and not
	// taken yet), by criticality, oldest first; heads, by criticality and
	// class (Waiter.class), the queued whose pause has passed, oldest
	// first; dues, the queued by the time the grant loop must decide each
	// again without news (scratch: its list of those due); n counts those
	// in the room; shared, the backend's and the set's bounds (Backends;
	// nil: none).
	queue   [4]list.List
	heads   [4][4]waitSet
	dues    waitSet
	scratch []*Waiter
	n       int
	shared  *room
	// news counts the Records heard; guardNews and guardAt: a guard
	// refused at guardNews, and the waiters whose guard is open wait for
	// news or guardAt (zero: news only).
	news, guardNews uint64
	guardAt         time.Time
	// round counts the grant loop's runs (Waiter.round).
	round uint64
	// wasOutage: the grant loop's last run saw an outage.
	wasOutage bool
	// timer runs the grant loop at timerAt.
	timer   *time.Timer
	timerAt time.Time
	// counts holds State's counters (Refused: the retries Allow refused
	// without asking the budget); verdicts, the waiters decided (tests
	// read it).
	counts   State
	verdicts uint64
}

// Deferring wraps b so that its refused retries wait (see Gate). s.Mode is
// not consulted: the caller chose to defer.
func Deferring(b Budget, s DeferSettings, opts ...Option) (*Gate, error) {
	if b == nil || isNilPointer(b) {
		return nil, errors.New("budget: Deferring: nil budget (a nil budget is unlimited and never refuses)")
	}
	if _, ok := b.(Deferrer); ok {
		// A Gate over a Gate would refund, as the outer one's, retries the
		// inner one let go unpaid.
		return nil, fmt.Errorf("budget: Deferring: the budget (%T) defers already", b)
	}
	if err := s.validate(); err != nil {
		return nil, err
	}
	o := buildOptions(opts)
	// Its own generator, seeded by two draws of the options' source: it
	// runs under the lock, the source never does.
	rnd := rand.New(rand.NewPCG(math.Float64bits(o.Rand()), math.Float64bits(o.Rand()))).Float64
	// guardNews: no guard has refused yet (news starts at 0).
	g := &Gate{b: b, s: s.withDefaults(), now: o.Now, virtual: o.Virtual, guardNews: math.MaxUint64, dues: waitSet{due: true}}
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
		g.ageLocked(now)
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

// Record tells the wrapped budget, then the gate, how an attempt ended,
// and runs the grant loop if anyone waits. A first attempt that did not
// fail, while the gate is settled, changes nothing and takes no lock.
func (g *Gate) Record(a Attempt) {
	g.b.Record(a)
	plain := a.Outcome != Failure && a.Admission == AdmitNone && a.Number == 1 && !a.Overload
	if plain && g.settled.Load() {
		return
	}
	now := g.now()
	g.mu.Lock()
	defer g.mu.Unlock()
	g.ageLocked(now)
	if a.Outcome != Failure && a.Admission == AdmitNone && g.n == 0 {
		// Nobody waits: a success forgets what failures left.
		g.st.observe(now, a, true)
		g.settle(now)
		return
	}
	g.st.observe(now, a, false)
	if a.Outcome == Success && !g.st.pace.backAt.IsZero() && !g.heldThroughLocked() {
		// The calls held through it have gone: the return ends
		// (under a steady load, a success never finds nobody waiting).
		g.st.pace = g.st.pace.rested()
	}
	g.news++
	g.grantLocked(now)
}

// heldThroughLocked reports whether a retry that began to wait before the
// return under way still waits: the queues keep the order of entry, so
// the oldest waiting of each level tells.
func (g *Gate) heldThroughLocked() bool {
	for l := range g.queue {
		for e := g.queue[l].Front(); e != nil; e = e.Next() {
			if w := e.Value.(*Waiter); w.state == waitQueued {
				if w.view.since.Before(g.st.pace.backAt) {
					return true
				}
				break
			}
		}
	}
	return false
}

// ageLocked lets the state age (gateState.age) while nobody waits.
func (g *Gate) ageLocked(now time.Time) {
	if g.n == 0 {
		g.st.age(now)
	}
}

// settle sets the settled word at now; under mu.
func (g *Gate) settle(now time.Time) { g.settled.Store(g.n == 0 && g.st.settled(now)) }

// State returns the wrapped budget's state, with the calls waiting now and
// the gate's counters.
func (g *Gate) State() State {
	st := g.b.State()
	g.mu.Lock()
	st.Refused += g.counts.Refused
	st.Waiting, st.Deferred, st.DeferAdmitted, st.DeferGaveUp = g.n, g.counts.Deferred, g.counts.DeferAdmitted, g.counts.DeferGaveUp
	st.DeferTurnedAway = g.counts.DeferTurnedAway
	st.Health = g.st.phase.String()
	g.mu.Unlock()
	return st
}

// isNilPointer reports whether b is a typed nil (a nil pointer, map, func,
// chan or slice in a non-nil interface): its methods would panic on first use.
func isNilPointer(b Budget) bool {
	switch v := reflect.ValueOf(b); v.Kind() {
	case reflect.Pointer, reflect.Map, reflect.Func, reflect.Chan, reflect.Slice, reflect.Interface:
		return v.IsNil()
	}
	return false
}

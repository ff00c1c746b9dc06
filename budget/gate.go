package budget

import (
	"container/list"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"reflect"
	"slices"
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
// The estimate: the rate of retries the backend can take beside its new calls,
// learnt from its answers as TCP learns its window. Successes raise it; a
// refusal for overload (RESOURCE_EXHAUSTED without a pushback, a per-attempt
// timeout, a slow success) halves it, once per attempt time, and never makes an
// outage: failures in a row where retries do not heal, which drop it to its
// floor, one probe per probe gap; the return grows it; no news makes it unknown:
// one retry at a time learns. A pushback's delay is its own retry's pause. Load
// reports (Attempt.Load) steer it: up below 97 % busy, cut in proportion above.
//
// Two rules on the estimate decide every wait:
//
//   - Go: a retry goes once its pause has passed and the pace at the
//     estimate has room for it (while retries heal the backend's calls, at
//     once). New calls come first: held retries take only the room they
//     leave, the most critical first, then the one whose end (below)
//     comes first. A guarded retry needs its breaker's yes too; a closed
//     breaker is no guard, a refusal keeps the retry's place, and a yes
//     whose caller left goes back to a GuardReturner.
//   - End: a wait ends once its turn plus an attempt cannot come before its
//     end, its deadline or DeferSettings.MaxWait without one, never because
//     others wait before it; while attempts fail, a call with a deadline goes
//     just before, as its last chance. Its error and interceptor.Report name
//     the case (deadline, hopeless, max-wait; futility: an outage longer than
//     the wait; hold: nothing to wait for; criticality: evicted by a more
//     critical retry) and what held it (outage, overload, breaker).
//
// `stagger check -format json` lists the rules' detail, with their numbers:
// heal, probe, last-chance, release, guard, outage, overload, hold, end,
// futility, settling, ageing, criticality. A caller that leaves gets back
// what it was granted and had not taken (a budget of this package, what it
// paid). One mutex; grantLocked alone admits or ends waits and wakes only
// who goes; the clock, the budget and Guards are asked outside the lock.
// Record and Allow pass through to the wrapped budget (retries refused
// while the backend is down or overloaded count in State.Refused).
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
	// util is the latest load report a fast path heard (pacer.util's
	// form), taken into st by the next Record that locks.
	util atomic.Uint64

	mu sync.Mutex
	st gateState
	// queue holds the arrivals in the room (queued, or granted and not
	// taken yet), by criticality, oldest first; heads, by criticality and
	// class (Waiter.class), the queued whose pause has passed, in
	// waitSet's order; dues, the queued by the time the grant loop must
	// decide each again without news (scratch: its list of those due);
	// shared, the backend's and the set's bounds (Backends; nil: none).
	// How many are in the room, counts says (waiting).
	queue   [4]list.List
	heads   [4][4]waitSet
	dues    waitSet
	scratch []*Waiter
	shared  *room
	// guardQuiet: a guard refused and no Record was heard since; the
	// waiters whose guard is open wait for news or guardAt (zero: news
	// only).
	guardQuiet bool
	guardAt    time.Time
	// guardNews counts the changes guards told of (GuardWatcher,
	// Waiter.take).
	guardNews uint64
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
	// A typed nil (a nil pointer, map, func, chan or slice in a non-nil
	// interface) would panic on first use.
	if v := reflect.ValueOf(b); b == nil || slices.Contains([]reflect.Kind{reflect.Pointer, reflect.Map, reflect.Func, reflect.Chan, reflect.Slice, reflect.Interface}, v.Kind()) && v.IsNil() {
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
	return &Gate{b: b, s: s.withDefaults(), now: o.Now, virtual: o.Virtual, dues: waitSet{due: true}, st: newGateState(o.Now(), rnd)}, nil
}

// Allow asks the wrapped budget, but for the outage and overload rules
// (it refuses) and the heal rule (it admits a straggler's retry unpaid).
// It never blocks.
func (g *Gate) Allow(r Request) bool {
	_, ok := g.Admit(r)
	return ok
}

// Admit is Allow, and says how it admitted r: AdmitNone when the budget
// paid, "heal" when the heal rule let it go unpaid. It implements
// Admitter.
func (g *Gate) Admit(r Request) (Admission, bool) {
	straggler := r.Straggler && r.AfterTimeout && !r.Hedge
	var now time.Time
	settled := g.settled.Load()
	if !settled {
		now = g.now()
		g.mu.Lock()
		g.st.age(now, g.waiting() > 0)
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
			g.st.ev.retryOut = now.Add(tune.Calm)
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
	if a.Outcome != Failure && a.Admission == AdmitNone && a.Number == 1 && !a.Overload && g.settled.Load() {
		if a.Load.Reported {
			g.util.Store(math.Float64bits(1 + a.Load.Utilization))
		}
		return
	}
	now := g.now()
	g.mu.Lock()
	defer g.mu.Unlock()
	if u := g.util.Swap(0); u != 0 && g.st.phase != phaseOutage {
		g.st.pace.util = math.Float64frombits(u)
	}
	g.st.age(now, g.waiting() > 0)
	if a.Outcome != Failure && a.Admission == AdmitNone && g.waiting() == 0 {
		// Nobody waits: a success forgets what failures left.
		g.st.observe(now, a, true)
		g.settle(now)
		return
	}
	g.st.observe(now, a, false)
	if a.Outcome == Success && !g.st.pace.backAt.IsZero() {
		// The return ends once no retry that began to wait before it
		// still waits (under a steady load, a success never finds nobody
		// waiting): the queues keep the order of entry, so the oldest
		// waiting of each level tells.
		heldThrough := false
		for l := range g.queue {
			e := g.queue[l].Front()
			for ; e != nil && e.Value.(*Waiter).state != waitQueued; e = e.Next() {
			}
			heldThrough = heldThrough || e != nil && e.Value.(*Waiter).view.since.Before(g.st.pace.backAt)
		}
		if !heldThrough {
			g.st.pace = g.st.pace.rested(g.st.pace.slowest)
		}
	}
	g.guardQuiet = false // news
	g.grantLocked(now)
}

// settle sets the settled word at now; under mu.
func (g *Gate) settle(now time.Time) { g.settled.Store(g.waiting() == 0 && g.st.settled(now)) }

// waiting counts the waiters in the room (State.Waiting: Deferred less
// those that went or whose wait ended); under mu.
func (g *Gate) waiting() int {
	return int(g.counts.Deferred - g.counts.DeferAdmitted - g.counts.DeferGaveUp)
}

// State returns the wrapped budget's state, with the calls waiting now and
// the gate's counters.
func (g *Gate) State() State {
	st := g.b.State()
	g.mu.Lock()
	st.Refused += g.counts.Refused
	st.Waiting, st.Deferred, st.DeferAdmitted, st.DeferGaveUp, st.DeferTurnedAway = g.waiting(), g.counts.Deferred, g.counts.DeferAdmitted, g.counts.DeferGaveUp, g.counts.DeferTurnedAway
	st.Health = g.st.phase.String()
	g.mu.Unlock()
	return st
}

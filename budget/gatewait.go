package budget

import (
	"cmp"
	"container/list"
	"context"
	"math"
	"slices"
	"time"

	"github.com/stagger-go/stagger/internal/clock"
	tune "github.com/stagger-go/stagger/internal/gatetune"
)

// Waiter is one deferred retry, for code that cannot block (package sim,
// on its virtual clock): Enter, then, each time Ready is closed, Take,
// until Take admits it or ends its wait; Leave if the caller leaves
// before. Wait does all of it for a goroutine. A Waiter belongs to one
// goroutine; the Gate's grant loop alone decides it.
type Waiter struct {
	g    *Gate
	view waiterView
	// Under the gate's lock (moveLocked moves it): state; seq, its order
	// of entry, and elem, its place among its level's arrivals (Gate.queue)
	// until it leaves the room; at, its index in its set among the level's
	// heads (class) once its pause has passed (-1: not in it); due, when the grant loop must
	// decide it again without news, dueAt its index in Gate.dues (-1: only
	// news will); round, the grant loop's run that last decided it; how or
	// end, the verdict, sent by closing ready.
	state waiterState
	seq   uint64
	elem  *list.Element
	at    int
	due   time.Time
	dueAt int
	round uint64
	how   Admission
	end   error
	ready chan struct{}
}

// waiterState is where a waiter stands; Gate.moveLocked alone moves it.
type waiterState uint8

const (
	waitNew     waiterState = iota // built by Enter, not in the room yet
	waitQueued                     // waiting for a verdict
	waitGranted                    // admitted: Take asks its guard and the budget
	waitOut                        // gone without admission: its wait ended, or its caller left
	waitTaken                      // gone, admitted: its guard and the budget let it go
)

// Ready returns a channel that is closed when the Gate has decided w:
// Take then says how. A new channel follows each Take that puts w back.
func (w *Waiter) Ready() <-chan struct{} { return w.ready }

// Take, once Ready is closed, returns w's verdict: an admission, for which
// w's guard (when its Request names one that is not closed) and, for a
// probe or a last chance, the budget were asked (AdmitBudget: it paid); or
// the error that ended the wait (Deferrer.Wait lists them). When the guard
// refuses, w waits again in its place (AdmitNone, nil): wait for Ready
// once more. Before Ready is closed, Take does nothing and returns
// AdmitNone, nil. If the guard or the budget panics, w's wait ends and
// what it was granted goes back before the panic reaches the caller.
func (w *Waiter) Take() (Admission, error) { return w.take(func() bool { return false }) }

// Leave ends w's wait, if Take did not: an admission w was granted and
// did not take goes back to the others (the budget refunds what it took
// for it). Call it when the caller leaves; after Take it does nothing.
//
// It is the one cancellation path: a queued waiter's wait ends; an
// admission granted and not taken goes back, the grant loop offers it to
// the others, and what the budget paid for it goes back, outside the lock,
// when the budget is one of this package's that can (a user's keeps it).
func (w *Waiter) Leave() {
	g, paid := w.g, false
	now := g.now()
	g.mu.Lock()
	switch w.state {
	case waitQueued:
		g.moveLocked(now, w, waitOut, context.Canceled)
	case waitGranted:
		paid = w.how == AdmitBudget
		g.moveLocked(now, w, waitOut, nil)
		g.grantLocked(now)
	}
	g.mu.Unlock()
	if rb, ok := g.b.(interface{ refund(Request) }); paid && ok {
		rb.refund(w.view.Request)
	}
}

// Enter registers a deferred retry r that must not go sooner than pause
// from now, of a call whose deadline is deadline (zero: none), and runs
// the grant loop. It fails with ErrOutageLasting when the end rule ends the
// wait at once (its turn comes past its end: the futility rule, for a call
// without a deadline), or
// ErrTooManyWaiting when the room is full and no less critical retry waits
// to be evicted (the criticality rule).
func (g *Gate) Enter(r Request, pause time.Duration, deadline time.Time) (*Waiter, error) {
	now := g.now()
	g.mu.Lock()
	defer g.mu.Unlock()
	g.st.age(now, g.waiting() > 0)
	pause = max(pause, 0)
	view := waiterView{
		Request: r, deadline: deadline, limit: now.Add(g.s.MaxWait - min(max(r.Waited, 0), g.s.MaxWait)), since: now, turnAt: now,
	}
	// Its turn (turnAt) is when, at the estimate, a retry that begins to
	// wait now has its turn (now: no later than the rules say, once its
	// pause has passed). The estimate knows a turn only in an
	// outage that a retry already waited in (span), and for a call already
	// held (Request.Waited) only while no attempt was refused for overload
	// lately (strained: a backend that refuses is up): the backend's
	// return, expected as far off as the outage has lasted (half as far for
	// a retry whose attempt never left the client, Request.Unsent: the
	// connection reconnects on its own backoff, up to seconds after the
	// backend is back, so the outage the gate saw is partly the
	// connection's). The pace while the backend serves gives no turn here:
	// a return's pace grows with its successes, and a turn read from it now
	// would end calls the return then serves. So the end rule ends a wait at
	// the door only here.
	if st := &g.st; st.phase == phaseOutage && st.span > 0 && (r.Waited <= 0 || !st.ev.strained(now)) {
		turn := now.Sub(st.streakAt)
		if r.Unsent {
			turn = time.Duration(float64(turn) / tune.FutileUnsent)
		}
		view.turnAt = now.Add(turn)
		if end, why := st.endAt(now, &view); why == errFutile && ended(now, end) {
			// The end rule, at the door: its turn comes past its end. The
			// lone probe goes at once instead: nobody else waits,
			// tune.FutileEvery failures came since a probe failed, and the
			// probe gap (at least that longest wait) has passed since, so
			// failed calls end at once and the new calls' first attempts,
			// or a rare probe, find the backend's return.
			if lone := g.waiting() == 0 && st.pace.since >= tune.FutileEvery && !st.pace.leased(now) && !now.Before(st.pace.failedAt.Add(max(st.pace.gap, st.span))); !lone {
				g.moveLocked(now, nil, waitOut, ErrOutageLasting)
				return nil, ErrOutageLasting
			}
			// Its outage's lone probe: it goes at once, the probe gap
			// spacing it, its pause waived.
			view.turnAt, view.lone, pause = time.Time{}, true, 0
		}
	}
	if g.waiting() >= g.s.MaxWaiting || !g.shared.tryEnter() {
		// The criticality rule's victim: the latest waiting of the least
		// critical level below it. (Refusing SHEDDABLE retries at once in
		// an outage cost the lab's mixed-criticality goodput.) A granted
		// one is not waiting: it is being taken.
		var v *Waiter
		for l := 0; l < r.Criticality.Index() && v == nil; l++ {
			for e := g.queue[l].Back(); e != nil && v == nil; e = e.Prev() {
				if w := e.Value.(*Waiter); w.state == waitQueued {
					v = w
				}
			}
		}
		if v == nil {
			g.moveLocked(now, nil, waitOut, ErrTooManyWaiting)
			return nil, ErrTooManyWaiting
		}
		g.moveLocked(now, v, waitOut, errEvicted)
	}
	span := g.s.MaxWait
	if !deadline.IsZero() {
		// A wait longer than the longest MaxWait is judged as that long,
		// so that a deadline centuries away overflows no arithmetic.
		span = min(deadline.Sub(now), maxMaxWait)
	}
	g.st.enter(now, pause, span)
	view.pause, view.spread = pause, g.st.rand()
	// pause plus its slack, at most the longest Duration: a caller's
	// pause may be anything.
	slack := time.Duration(tune.HoldSlack * float64(pause))
	view.holdAt = now.Add(pause + min(slack, math.MaxInt64-pause))
	w := &Waiter{g: g, at: -1, dueAt: -1, view: view}
	g.moveLocked(now, w, waitQueued, nil)
	g.grantLocked(now)
	return w, nil
}

// level is w's index among the criticality levels (Gate.queue, Gate.heads):
// its Request's, which its view keeps.
func (w *Waiter) level() int { return w.view.Criticality.Index() }

// class is w's set among its level's heads (Gate.heads): held or not (the
// rules tell a held wait from one that is not), guarded or not (after a
// guard's refusal the guarded wait for news or its time). Its view says
// it, so a change of heldBy moves w between the sets at once.
func (w *Waiter) class() int {
	c := 0
	if w.view.heldBy != "" {
		c = 2
	}
	if w.view.Guard != nil {
		c++
	}
	return c
}

// grantLocked is the one place that admits or ends waits. It decides by
// the rules at now (gateState.decide; an admission taken changes what the
// next one is told) the heads, most critical first, then in byBound's
// order: of each level's sets (held or not, guarded or not) of retries
// whose pause has passed, the first, and the next while one is admitted
// or ends; and
// the waiters whose own time came (dues: the end of a pause, or the time
// a decision named), in the same order. A decision that admits nobody
// sets when the waiter is decided again without news: the time it named,
// or, for one behind the head of its set told the same time (the pacer's),
// only its own end (endAt): the head goes first, and the one behind it is
// decided as the head when the head goes. One whose own time has not come
// (decision.own) leaves the heads until then, so that a head waits for the
// pacer alone and never holds back one behind it whose own time came
// (issue 72: the fleet's return lost served calls to that). So an event
// decides a few heads and the waiters due, each in O(log n), not every
// waiter. Once a guard
// refused, the guarded waiters wait for news or the time the guard named
// (each guard refusing in turn woke every guarded waiter). It sends each
// one decided its verdict and sets the gate's timer to the earliest due
// (none: never); on a virtual clock (WithClock) it only notes it for Tick.
func (g *Gate) grantLocked(now time.Time) {
	guardHeld := g.guardQuiet && (g.guardAt.IsZero() || now.Before(g.guardAt))
	g.round++
	if outage := g.st.phase == phaseOutage; outage != g.wasOutage {
		g.wasOutage = outage
		// Own times are the phase's (decideRules): those out of the
		// heads for one go back when an outage begins or ends, once per
		// change (an O(n) step that a phase flapping under overload
		// would make on every answer). A queued waiter out of the heads
		// is among the dues: its pause, or its own time, is due.
		for _, w := range g.dues.ws {
			if w.at < 0 && !now.Before(w.view.since.Add(w.view.pause)) {
				g.heads[w.level()][w.class()].push(w)
			}
		}
	}
	due := g.scratch[:0]
	for w := g.dues.top(); w != nil && !now.Before(w.due); w = g.dues.top() {
		g.dues.setDue(w, time.Time{})
		if w.at < 0 && now.Before(w.view.since.Add(w.view.pause)) {
			// Due before its pause passed: its end (the end rule bounds
			// every wait, whatever its pause), or again at the earlier of
			// the two when its end moved.
			if end, why := g.st.endAt(now, &w.view); ended(now, end) {
				g.moveLocked(now, w, waitOut, why.heldBy(w.view.heldBy))
			} else {
				g.dues.setDue(w, clock.Earlier(w.view.since.Add(w.view.pause), end))
			}
			continue
		}
		if w.at < 0 {
			g.heads[w.level()][w.class()].push(w) // its pause passed
		}
		due = append(due, w)
	}
	slices.SortFunc(due, func(a, b *Waiter) int { return cmp.Or(b.level()-a.level(), byBound(a, b)) })
	for l, i := len(g.queue)-1, 0; l >= 0; l-- {
		// told: per set, the time its head was told to wait for.
		var told [4]time.Time
		for {
			// A set whose head was decided in this run and waits is done:
			// that head stays its head for the rest of the run (only the
			// waiter decided moves between sets, leaves or is pushed).
			var w *Waiter
			for c := range g.heads[l] {
				if h := g.heads[l][c].top(); h != nil && h.round != g.round && (w == nil || byBound(h, w) < 0) {
					w = h
				}
			}
			// The level's first due waiter not decided in this run.
			for ; i < len(due) && due[i].level() == l && (due[i].state != waitQueued || due[i].round == g.round); i++ {
			}
			if i < len(due) && due[i].level() == l && (w == nil || byBound(due[i], w) < 0) {
				w = due[i]
			}
			if w == nil {
				break
			}
			// Decide w and apply the verdict.
			class, head := w.class(), g.heads[l][w.class()].top() == w // w.level() is l
			w.round = g.round
			d := g.st.decide(now, &w.view)
			if d.heldBy != "" && w.view.heldBy == "" {
				g.heads[l][class].remove(w)
				w.view.heldBy = d.heldBy
				g.heads[l][w.class()].push(w)
			}
			if d.how != AdmitNone && guardHeld && w.view.Guard != nil {
				// Held for news or the guard's time, and to its end.
				end, _ := g.st.endAt(now, &w.view)
				d.how, d.next = AdmitNone, clock.Earlier(g.guardAt, end)
			}
			switch {
			case d.end != nil:
				g.moveLocked(now, w, waitOut, d.end.heldBy(w.view.heldBy))
			case d.how == AdmitNone:
				switch {
				case !d.own.IsZero():
					// Its own time has not come: out of the heads, which
					// the pacer alone holds back, until then (or its end).
					g.heads[l][w.class()].remove(w)
					d.next = clock.Earlier(d.own, d.next)
				case head:
					told[class] = d.next
				case d.next.IsZero() || d.next.Equal(told[class]):
					// Parked behind its head (news decides only heads): its
					// own end, at the latest.
					d.next, _ = g.st.endAt(now, &w.view)
				}
				g.dues.setDue(w, d.next)
			default:
				w.how = d.how
				g.moveLocked(now, w, waitGranted, nil)
			}
		}
	}
	clear(due)
	g.scratch = due[:0]
	g.settle(now)
	next := time.Time{}
	if w := g.dues.top(); w != nil {
		next = w.due
	}
	if g.timerAt = next; g.virtual {
		return
	}
	switch {
	case g.timer != nil && next.IsZero():
		g.timer.Stop()
	case g.timer != nil:
		g.timer.Reset(next.Sub(now))
	case !next.IsZero():
		g.timer = time.AfterFunc(next.Sub(now), func() { g.Tick() })
	}
}

// Tick runs the grant loop at the gate's now and returns when it must run
// again without news (zero: only news will). A Gate on the time package's
// clock runs it itself; one built WithClock does not, and whoever moves
// that clock calls Tick at the time it returned (package sim does).
func (g *Gate) Tick() time.Time {
	now := g.now()
	g.mu.Lock()
	defer g.mu.Unlock()
	g.grantLocked(now)
	return g.timerAt
}

// moveLocked moves w to the state to: the one place a waiter enters the
// room, is granted or leaves it, and where each outcome is counted, once.
// A retry that cannot wait (w nil) is turned away;
// one queued leaves its sets (heads, dues), keeping its place among the
// arrivals until it leaves the room; one granted and not taken (to is not
// waitTaken) gives back what it was granted (the one give-back path,
// semaphore's "pretend we didn't": the pacer's share; what the budget
// paid, Leave refunds). Queued, w gets a new Ready; granted
// (w.how, the grant loop's), it takes the pacer's share. Out, w leaves the
// room (an evicted one's place passes to who evicted it) with the verdict
// end (nil: its caller left). Each verdict on a queued waiter closes its
// Ready.
func (g *Gate) moveLocked(now time.Time, w *Waiter, to waiterState, end error) {
	if w == nil {
		// Turned away at the door: no waiter was built (a long outage turns
		// away every failed call; none allocates).
		g.counts.DeferTurnedAway++
		return
	}
	from := w.state
	switch {
	case from == waitQueued:
		g.heads[w.level()][w.class()].remove(w)
		g.dues.remove(w)
		// A verdict: its Ready closes once w says it.
		g.verdicts++
		defer close(w.ready)
	case from == waitGranted && to != waitTaken:
		g.st.pace = g.st.pace.given(w.how)
	}
	w.state = to
	switch to {
	case waitQueued:
		w.ready = make(chan struct{})
		if from == waitNew {
			g.counts.Deferred++
			w.seq = g.counts.Deferred
			w.elem = g.queue[w.level()].PushBack(w)
			// Eligible once its pause passed, or decided at its end if
			// that comes first.
			end, _ := g.st.endAt(now, &w.view)
			g.dues.setDue(w, clock.Earlier(w.view.since.Add(w.view.pause), end))
		} else {
			// Queued again (its guard refused): due at once, so the grant
			// loop that follows puts it back in its place among the heads
			// (by its bound, oldest first) and decides it again.
			g.dues.setDue(w, now)
		}
	case waitGranted:
		g.st.pace = g.st.pace.taken(now, &w.view, w.how)
	case waitTaken:
		g.counts.DeferAdmitted++
	case waitOut:
		g.counts.DeferGaveUp++
		w.end = end
		if g.st.ev.hasTurn(w.view.Number, w.view.Call) {
			g.st.ev.learnNext = 0
		}
	}
	if to >= waitOut {
		g.queue[w.level()].Remove(w.elem)
		if end != errEvicted {
			g.shared.leave()
		}
	}
}

// take asks w's guard and the budget for the admission w was granted,
// unlocked, then settles it under the lock: taken; given back when the
// caller left (gone) meanwhile; or, when the guard refused, given back
// and w queued again in its place, its guard taken for open. A closed
// guard is no guard: it is not asked. A guard's yes that does not go (the
// caller left, or the budget panicked) goes back to the guard
// (GuardReturner). Before Ready is closed it does nothing. A panic of the
// guard or the budget gives the admission back before it goes on.
func (w *Waiter) take(gone func() bool) (Admission, error) {
	select {
	case <-w.ready:
	default:
		return AdmitNone, nil // not decided yet: no rule let it go
	}
	g := w.g
	if w.state >= waitOut {
		return AdmitNone, w.end
	}
	// open: the guard was asked, and counted the retry when ok; settled:
	// the lock was taken after asking, nothing having panicked, and the
	// caller is still there.
	how, ok, open, settled, next := w.how, true, false, false, time.Time{}
	defer func() {
		if !settled {
			// A panic of the guard or the budget, or a caller that left:
			// w leaves, and what it was granted goes back (the budget
			// refunds what it paid, a GuardReturner takes its yes back),
			// before the panic goes on.
			w.Leave()
			if r, isR := w.view.Guard.(GuardReturner); isR && open && ok {
				r.ReturnRetry()
			}
		}
	}()
	g.mu.Lock()
	news := g.guardNews
	g.mu.Unlock()
	if guard := w.view.Guard; guard != nil && !gone() && !guard.Closed() {
		if gw, isW := guard.(GuardWatcher); isW {
			// Asked before the guard answers, so that a change right
			// after its refusal is not missed: at its change the waiters
			// a guard held are decided again at once (a change is rare,
			// and they are at most the room's).
			gw.WatchChange(g, func() {
				now := g.now()
				g.mu.Lock()
				defer g.mu.Unlock()
				g.guardNews++
				g.guardQuiet = false
				for l := range g.queue {
					for e := g.queue[l].Front(); e != nil; e = e.Next() {
						if w := e.Value.(*Waiter); w.state == waitQueued && w.view.guardOpen {
							g.dues.setDue(w, now)
						}
					}
				}
				g.grantLocked(now)
			})
		}
		// Asked last: the guard's half-open slot goes only to a retry
		// that goes.
		ok, next = guard.AllowRetry()
		open = true
	}
	if ok && how.probing() && !gone() && g.b.Allow(w.view.Request) {
		how = AdmitBudget
	}
	now := g.now()
	g.mu.Lock()
	defer g.mu.Unlock() // before the give-back, which takes the lock
	w.how = how
	if settled = !gone(); !settled {
		return AdmitNone, nil // the deferred give-back
	}
	if ok {
		g.moveLocked(now, w, waitTaken, nil)
		return how, nil
	}
	// Held once past its hold time: the guard, not the hold rule, says
	// when it goes.
	if w.view.heldBy == "" && !now.Before(w.view.holdAt) {
		w.view.heldBy = heldGuard
	}
	w.view.guardOpen = open
	// Quiet until news, unless a guard changed since this one was asked.
	g.guardQuiet, g.guardAt = news == g.guardNews, next
	g.moveLocked(now, w, waitQueued, nil)
	g.grantLocked(now)
	// Queued again, w is the grant loop's: its end is read here, under
	// the lock, or after its next Ready.
	return AdmitNone, w.end
}

// Wait implements Deferrer: Enter, then Take whenever Ready is closed,
// until an admission or the end of the wait; a caller that leaves
// Leaves.
func (g *Gate) Wait(ctx context.Context, r Request, pause time.Duration) (Admission, error) {
	if err := ctx.Err(); err != nil {
		// A caller that left takes nothing, pays nothing.
		return AdmitNone, err
	}
	deadline, _ := ctx.Deadline()
	w, err := g.Enter(r, pause, deadline)
	if err != nil {
		return AdmitNone, err
	}
	for {
		select {
		case <-w.ready:
			a, err := w.take(func() bool { return ctx.Err() != nil })
			if a != AdmitNone || err != nil {
				return a, err
			}
			if err := ctx.Err(); err != nil {
				// Queued again (its guard refused) as its caller left.
				w.Leave()
				return AdmitNone, err
			}
		case <-ctx.Done():
			w.Leave()
			if end, ok := w.end.(*waitEnd); ok {
				return AdmitNone, end // the gate decided first: its end stands
			}
			if err := ctx.Err(); err != context.DeadlineExceeded {
				return AdmitNone, err
			}
			// The deadline, which the end rule ends the wait at when no
			// attempt was timed, came on the context's timer first: the
			// gate's end, with the rule that held the wait (Leave made
			// w out: nothing writes its view any more).
			return AdmitNone, errDeadline.heldBy(w.view.heldBy)
		}
	}
}

package budget

import (
	"context"
	tune "github.com/stagger-go/stagger/internal/gatetune"
	"sync/atomic"
	"time"
)

// Waiter is one deferred retry, for code that cannot block (package sim,
// on its virtual clock): Enter, then Poll whenever the gate's Changed
// channel closes or the time Poll returned comes, until Poll admits it or
// Err says the wait is over, and Leave once. Wait does all of it for a
// goroutine on the real clock. A Waiter belongs to one goroutine.
type Waiter struct {
	g        *Gate
	r        Request
	view     waiterView
	earliest time.Time
	// left: counted out of the waiting room (by Leave or the eviction);
	// under the gate's lock.
	left bool
	// level is the index of r's criticality; prev and next link the
	// waiter in the gate's queue of its level while queued (it competes
	// for admissions: not yet admitted, evicted or gone).
	level      int
	prev, next *Waiter
	queued     bool
	// granted: a less critical waiter's Poll admitted this one (the criticality rule),
	// taken once its own Poll returned it. evicted: a more critical
	// retry took its place (the criticality rule).
	granted Admission
	taken   bool
	evicted atomic.Bool
	// asking: w's Poll holds an admission while it asks w's guard and the
	// budget without the gate's lock; no hand-off or eviction takes w then.
	asking bool
	// ended: the gate ended the wait (the hold and hopeless rules); set only by w's own Poll.
	ended bool
}

// waitingRoom holds a Gate's waiting retries: how many wait (n, mirrored
// in Gate.waiting for the fast paths), and, by level (criticality's
// index), the queues of those that compete for admissions (not yet
// admitted, evicted or gone), for the criticality rule. It is owned by the
// gate's lock.
type waitingRoom struct {
	n     int
	queue [4]waitQueue
}

// victim returns the waiter a retry of the level of index level evicts
// from a full room: the latest to enter of the least critical level below
// it, or nil. A SHEDDABLE retry otherwise waits in an outage like any
// other: refusing it at once there ended its calls sooner but cost
// goodput (the lab's mixed-criticality; BENCHMARKS.md, "Figures behind the
// code's choices").
func (r *waitingRoom) victim(level int) *Waiter {
	for l := range level {
		for v := r.queue[l].tail; v != nil; v = v.prev {
			if !v.asking {
				return v
			}
		}
	}
	return nil
}

// waitQueue is the waiting retries of one level, oldest first.
type waitQueue struct{ head, tail *Waiter }

func (q *waitQueue) push(w *Waiter) {
	w.prev, w.next, w.queued = q.tail, nil, true
	if q.tail != nil {
		q.tail.next = w
	} else {
		q.head = w
	}
	q.tail = w
}

func (q *waitQueue) remove(w *Waiter) {
	if !w.queued {
		return
	}
	if w.prev != nil {
		w.prev.next = w.next
	} else {
		q.head = w.next
	}
	if w.next != nil {
		w.next.prev = w.prev
	} else {
		q.tail = w.prev
	}
	w.prev, w.next, w.queued = nil, nil, false
}

// Enter registers a deferred retry r that must not go sooner than pause
// from now, of a call whose deadline is deadline (zero: none). It fails
// with ErrTooManyWaiting when the bound is reached and no less critical
// retry waits (else the least critical, latest to enter, is evicted: the
// criticality rule).
func (g *Gate) Enter(r Request, pause time.Duration, deadline time.Time) (*Waiter, error) {
	now := g.now()
	level := r.Criticality.Index()
	g.mu.Lock()
	defer g.mu.Unlock()
	// The futility rule: in an outage that outlived the calls' deadlines,
	// a lone waiter (the probe) and a share of the others wait; every
	// other retry fails now. The lone waiter too when neither a probe nor
	// its last chance could go before its deadline: it would wait out
	// its deadline only to fail.
	if g.st.futile(now) && (g.room.n > 0 && g.st.rand() >= tune.FutileHold || g.room.n == 0 && g.st.tooLate(now, pause, deadline, r.Last)) {
		g.gaveUp++
		return nil, ErrOutageLasting
	}
	if g.room.n >= g.s.MaxWaiting {
		v := g.room.victim(level)
		if v == nil {
			g.gaveUp++
			return nil, ErrTooManyWaiting
		}
		g.evictLocked(v, now)
	}
	g.room.n++
	g.settled.Store(false)
	g.deferred++
	pause = max(pause, 0)
	span := g.s.MaxWait
	if !deadline.IsZero() {
		span = deadline.Sub(now)
	}
	g.st.enter(now, pause, span)
	w := &Waiter{g: g, r: r, view: waiterView{pause: pause, deadline: deadline, last: r.Last, took: max(r.Took, 0), spread: g.st.rand(), holdAt: now.Add(pause + time.Duration(tune.HoldSlack*float64(pause)))},
		earliest: now.Add(pause), level: level}
	// A wait already past its hold time (no pause) that begins while the
	// gate holds waits (an outage, an overload) is held from now, as its
	// first decision would hold it: otherwise news that ends the outage
	// between enter and that decision (its caller's goroutine preempted)
	// left it unheld, and the hold rule sent it at once as a probe, past
	// the release rule's pace and order (TestGateEnterHeldBeforePoll).
	if d := g.st.decideRules(now, &w.view); d.hold {
		w.view.held = true
	}
	g.room.queue[level].push(w)
	return w, nil
}

// evictLocked makes v give up (ErrEvicted) and frees its place.
func (g *Gate) evictLocked(v *Waiter, now time.Time) {
	g.room.queue[v.level].remove(v)
	v.evicted.Store(true)
	v.left = true // its Leave has nothing more to do
	g.gaveUp++
	g.notifyLocked() // while v still counts: nobody else may be waiting
	g.room.n--
	g.settle(now)
}

// Err returns ErrEvicted once a more critical retry took w's place (the
// criticality rule), or ErrWaitEnded once the gate ended w's wait (the hold and hopeless rules): w will never
// be admitted, and its call ends with its last status. Leave it then.
func (w *Waiter) Err() error {
	switch {
	case w.evicted.Load():
		return ErrEvicted
	case w.ended:
		return ErrWaitEnded
	}
	return nil
}

// Changed returns a channel closed the next time the gate learns something.
func (g *Gate) Changed() <-chan struct{} {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.changed
}

// Poll asks, now, whether w may go. When it may not, next is when asking
// again could change the answer without news (zero: only news will), or
// the wait is over (Err).
//
// The gate's lock is held while the rules decide and an admission is
// taken, never while w's guard or the budget is asked: a retry the rules
// let go holds its admission (the probe slot or a release credit) while
// Poll asks them unlocked, and gives it back when they refuse.
func (w *Waiter) Poll() (a Admission, next time.Time) {
	g := w.g
	if w.ended || w.evicted.Load() {
		return AdmitNone, time.Time{}
	}
	now := g.now()
	if now.Before(w.earliest) {
		return AdmitNone, w.earliest
	}
	guard := w.r.Guard
	// Whether the guard is open (the guard rule) is read before it is
	// asked: asking may change its state.
	open := guard != nil && !guard.Closed()
	g.mu.Lock()
	g.polls++
	how, next := w.pollLocked(now, open)
	g.mu.Unlock()
	if !how.probing() && !w.asking {
		return how, next
	}
	ok := true
	if open {
		// Asked last, when the gate would let the retry go: the guard's
		// half-open probe slot is taken only by a retry that goes.
		ok, next = guard.AllowRetry()
	}
	if ok && how.probing() && g.b.Allow(w.r) {
		// The budget pays for the probe or the last chance.
		how = AdmitBudget
	}
	if !w.asking {
		return how, time.Time{}
	}
	// A closed guard judges the server: the probe and last-chance rules let
	// only a paid retry go; a release goes unpaid.
	ok = ok && (open || how == AdmitBudget || how == AdmitRelease)
	g.mu.Lock()
	defer g.mu.Unlock()
	return w.settleLocked(now, how, next, ok, open)
}

// pollLocked is Poll under the gate's lock: an admission a less critical
// waiter granted w, or the rules' candidate, handed to the more critical
// waiters first (the criticality rule), then taken. A guarded waiter's
// admission is held (w.asking) until its guard and the budget have been
// asked (settleLocked).
func (w *Waiter) pollLocked(now time.Time, open bool) (Admission, time.Time) {
	g := w.g
	if w.granted != AdmitNone {
		w.taken = true
		return w.granted, time.Time{}
	}
	how, next := w.candidateLocked(now, open)
	for scarce(how) {
		v, vhow := g.handOffLocked(now, w.level)
		if v == nil {
			break
		}
		v.granted = vhow
		g.notifyLocked()
		how, next = w.candidateLocked(now, open)
	}
	switch {
	case how == admitEnd:
		w.endLocked()
		return AdmitNone, time.Time{}
	case how == AdmitNone:
		if g.asking > 0 && (next.IsZero() || next.After(now.Add(time.Millisecond))) {
			// Another waiter holds an admission while its guard or the
			// budget is asked, and gives it back without news if they
			// refuse: ask again soon rather than wait for news.
			next = now.Add(time.Millisecond)
		}
		return AdmitNone, next
	}
	w.takeLocked(now, how)
	if open || w.r.Guard != nil && how.probing() {
		w.asking = true
		g.asking++
	} else {
		g.room.queue[w.level].remove(w)
	}
	return how, time.Time{}
}

// settleLocked ends w's asking: the admission how goes when ok, else it
// is given back, and the wait goes on (held, past its hold time, while the
// guard is open) or ends (past its hold time, a closed guard and an unpaid
// probe: the hold and hopeless rules).
func (w *Waiter) settleLocked(now time.Time, how Admission, next time.Time, ok, open bool) (Admission, time.Time) {
	g := w.g
	w.asking = false
	g.asking--
	if ok {
		g.room.queue[w.level].remove(w)
		return how, time.Time{}
	}
	g.st.unadmit(now, &w.view, how)
	g.admitted--
	pastHold := !w.view.held && !now.Before(w.view.holdAt)
	if open {
		w.view.held = w.view.held || pastHold
		return AdmitNone, next
	}
	if pastHold {
		w.endLocked()
	}
	// Wait for a release, a paid admission or the deadline.
	return AdmitNone, time.Time{}
}

// scarce reports whether an admission the rules give is one that a more
// critical waiter takes first (the criticality rule): a release credit or the probe slot.
// A heal is every healable waiter's own.
func scarce(how Admission) bool {
	return how == AdmitRelease || how == AdmitProbe || how == AdmitLast
}

// handOffLocked finds the first waiter more critical than the level of
// index level, most critical first and oldest first within a level, that
// the rules let go now as a release, a probe or a last chance, and admits
// it; the budget is asked whether it pays when that waiter's Poll takes
// the admission. A waiter with a guard, or asking, is left to its own
// Poll: its guard must be asked before its admission is taken. It returns
// nil when none may go.
func (g *Gate) handOffLocked(now time.Time, level int) (*Waiter, Admission) {
	for l := len(g.room.queue) - 1; l > level; l-- {
		for v := g.room.queue[l].head; v != nil; v = v.next {
			if now.Before(v.earliest) || v.r.Guard != nil || v.asking {
				continue
			}
			how, _ := v.candidateLocked(now, false)
			if !scarce(how) {
				continue
			}
			v.takeLocked(now, how)
			g.room.queue[l].remove(v)
			return v, how
		}
	}
	return nil, AdmitNone
}

// candidateLocked is the rules' decision for w now (gateState.decide),
// applied: how w could go and when asking again could change the answer.
func (w *Waiter) candidateLocked(now time.Time, guardOpen bool) (Admission, time.Time) {
	d := w.g.st.decideAndApply(now, &w.view, guardOpen)
	return d.how, d.next
}

// endLocked ends w's wait (the hold and hopeless rules): it leaves the queue, and its Poll
// says so from now on (Err).
func (w *Waiter) endLocked() {
	w.ended = true
	w.g.room.queue[w.level].remove(w)
}

// takeLocked takes, for w, the admission how the rules gave it.
func (w *Waiter) takeLocked(now time.Time, how Admission) {
	w.g.st.admit(now, &w.view, how)
	w.g.admitted++
}

// Leave unregisters w; call it once, admitted or not. An admission another
// waiter's Poll granted w that w's own Poll never returned is given back:
// the probe slot or the release credit it took (a hand-off takes nothing
// else: the budget is asked when the admission is taken, and a waiter with
// a guard gets no hand-off).
func (w *Waiter) Leave() {
	g := w.g
	now := g.now()
	g.mu.Lock()
	defer g.mu.Unlock()
	// left is read under the lock that the eviction writes it under: a
	// waiter evicted while it leaves is counted out once.
	if w.left {
		return
	}
	w.left = true
	g.room.queue[w.level].remove(w)
	if w.granted != AdmitNone && !w.taken {
		g.st.unadmit(now, &w.view, w.granted)
		g.admitted--
		g.notifyLocked()
	}
	g.room.n--
	g.settle(now)
}

// giveUp counts a waiter that left without admission.
func (g *Gate) giveUp() {
	g.mu.Lock()
	g.gaveUp++
	g.mu.Unlock()
}

// Wait implements Deferrer on the time package's clock.
func (g *Gate) Wait(ctx context.Context, r Request, pause time.Duration) (Admission, error) {
	deadline, hasDeadline := ctx.Deadline()
	w, err := g.Enter(r, pause, deadline)
	if err != nil {
		return AdmitNone, err
	}
	defer w.Leave()
	limit := deadline.Add(-tune.WaitSlack)
	if !hasDeadline {
		limit = g.now().Add(g.s.MaxWait)
	}
	var t *time.Timer
	defer func() {
		if t != nil {
			t.Stop()
		}
	}()
	for {
		changed := g.Changed()
		a, next := w.Poll()
		if a != AdmitNone {
			return a, nil
		}
		if err := w.Err(); err != nil {
			if w.ended {
				g.giveUp() // an eviction was counted when it was made
			}
			return AdmitNone, err
		}
		now := g.now()
		if !now.Before(limit) {
			g.giveUp()
			if hasDeadline {
				return AdmitNone, context.DeadlineExceeded
			}
			return AdmitNone, ErrWaitLimit
		}
		wake := limit
		if !next.IsZero() && next.Before(wake) {
			wake = next
		}
		d := wake.Sub(now)
		if t == nil {
			t = time.NewTimer(d)
		} else {
			t.Reset(d)
		}
		select {
		case <-changed:
			// No drain: with Go 1.23 timers a receive after Stop blocks; with
			// older ones a stale tick only costs one more Poll.
			t.Stop()
		case <-t.C:
		case <-ctx.Done():
			g.giveUp()
			return AdmitNone, ctx.Err()
		}
	}
}

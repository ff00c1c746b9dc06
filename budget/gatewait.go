package budget

import (
	"container/list"
	"context"
	"errors"
	"sync/atomic"
	"time"

	"github.com/stagger-go/stagger/internal/clock"
	tune "github.com/stagger-go/stagger/internal/gatetune"
)

// Waiter is one deferred retry, for code that cannot block (package sim,
// on its virtual clock): Enter, then Poll whenever its Ready channel
// receives or the time Poll returned comes, until Poll admits it or
// says the wait is over, and Leave once. Wait does all of it for a
// goroutine on the real clock. A Waiter belongs to one goroutine.
type Waiter struct {
	g        *Gate
	r        Request
	view     waiterView
	earliest time.Time
	// Under the gate's lock: left, counted out of the room (by Leave or
	// an eviction); level, the index of r's criticality, and elem its
	// place in that queue while it competes for admissions; granted, an
	// admission a less critical waiter's Poll handed it and its own Poll
	// has not returned yet; asking, its Poll holds an admission while it
	// asks the guard and the budget unlocked (no hand-off or eviction
	// takes it then); ended, the rule that ended the wait (nil: none).
	left, asking bool
	ended        *waitEnd
	level        int
	elem         *list.Element
	granted      Admission
	// evicted: a more critical retry took its place.
	evicted atomic.Bool
	// done is Wait's context's Done channel (nil: never done).
	done <-chan struct{}
	// ready holds a wake-up from the gate's dispatcher (Ready); due, under
	// the gate's lock, is the next time Poll said to ask again (zero: on
	// news only), to which its goroutine sleeps.
	ready chan struct{}
	due   time.Time
	// paced, under the gate's lock, is the paced time (decision.paced)
	// it sleeps to as its room's paced waiter.
	paced time.Time
	// refused: its guard or the budget refused what the rules let go,
	// in news epoch refused-1 (waitingRoom.news; 0: never).
	refused uint64
}

// Ready returns a channel that receives when the gate has news that may
// change what Poll says for w (an admission for it, or an earlier time to
// ask again); between news, ask again at the time Poll returned.
func (w *Waiter) Ready() <-chan struct{} { return w.ready }

// signal wakes w's goroutine, if it is not woken already.
func (w *Waiter) signal() {
	select {
	case w.ready <- struct{}{}:
	default:
	}
}

// waitingRoom is how many wait, and by criticality the queues of those
// that compete for admissions, oldest first; paced, the one waiter that
// sleeps to the earliest paced time (decision.paced): the others sleep to
// their own times or news, not all to the one time only one of them may
// take (each release woke every held call). Owned by the gate's lock.
//
// news counts the news (Waiter.refused); guarded, the guarded waiters
// queued (news wakes each); took, the hopeless rule's longest attempt at
// the latest dispatch (gateState.tookNow): if it grows, ends come sooner;
// shared, the backend's and the set's bounds (Backends; nil: none);
// polls, the decisions asked (tests read it).
type waitingRoom struct {
	n       int
	queue   [4]list.List
	paced   *Waiter
	news    uint64
	guarded int
	took    time.Duration
	shared  *room
	polls   uint64
}

// victim is the waiter a retry of level evicts from a full room: the
// latest of the least critical level below it, or nil. (Refusing SHEDDABLE
// retries at once in an outage cost the lab's mixed-criticality goodput.)
func (r *waitingRoom) victim(level int) *Waiter {
	for l := range level {
		for e := r.queue[l].Back(); e != nil; e = e.Prev() {
			if v := e.Value.(*Waiter); !v.asking {
				return v
			}
		}
	}
	return nil
}

// dequeueLocked takes w out of its queue, if it is in it; if it was the
// paced waiter, the dispatcher finds the next.
func (g *Gate) dequeueLocked(w *Waiter, now time.Time) {
	if w.elem != nil {
		g.room.queue[w.level].Remove(w.elem)
		w.elem = nil
		if w.r.Guard != nil {
			g.room.guarded--
		}
	}
	if g.room.paced == w {
		g.room.paced = nil
		g.dispatchLocked(now, false, false)
	}
}

// sleepLocked is how long w, which the rules did not let go at now (d),
// sleeps: to d.next if it is the paced waiter, or becomes it (its paced
// time the earliest, or the same and it as critical); else to its own
// times, or news.
func (g *Gate) sleepLocked(w *Waiter, d decision) time.Time {
	p := g.room.paced
	switch {
	case d.paced.IsZero() || w.r.Guard != nil:
		return d.next
	case p == nil || p == w || d.paced.Before(p.paced) || d.paced.Equal(p.paced) && w.level > p.level:
		g.room.paced, w.paced = w, d.paced
		return d.next
	}
	return d.own
}

// Enter registers a deferred retry r that must not go sooner than pause
// from now, of a call whose deadline is deadline (zero: none). It fails
// with ErrOutageLasting (the futility rule), or ErrTooManyWaiting when
// the room is full and no less critical retry waits to be evicted.
func (g *Gate) Enter(r Request, pause time.Duration, deadline time.Time) (*Waiter, error) {
	now := g.now()
	level := r.Criticality.Index()
	g.mu.Lock()
	defer g.mu.Unlock()
	g.ageLocked(now)
	futile, lone := g.st.futile(now, g.room.n > 0)
	if futile {
		g.counts.DeferGaveUp++
		return nil, ErrOutageLasting
	}
	if g.room.n >= g.s.MaxWaiting || !g.room.shared.tryEnter() {
		v := g.room.victim(level)
		if v == nil {
			g.counts.DeferGaveUp++
			return nil, ErrTooManyWaiting
		}
		g.evictLocked(v, now)
	}
	g.room.n++
	g.settled.Store(false)
	g.counts.Deferred++
	pause = max(pause, 0)
	if lone {
		pause = 0 // the futility rule's lone probe: the probe gap spaces it
	}
	span := g.s.MaxWait
	if !deadline.IsZero() {
		// A wait longer than the longest MaxWait is judged as that long,
		// so that a deadline centuries away overflows no arithmetic.
		span = min(deadline.Sub(now), maxMaxWait)
	}
	g.st.enter(now, pause, span)
	w := &Waiter{g: g, r: r, earliest: now.Add(pause), level: level, ready: make(chan struct{}, 1), view: waiterView{
		pause: pause, deadline: deadline, limit: now.Add(g.s.MaxWait), last: r.Last, took: max(r.Took, 0), spread: g.st.rand(),
		holdAt: now.Add(addSat(pause, time.Duration(tune.HoldSlack*float64(pause)))), lone: lone,
	}}
	// Held from now if its first decision would hold it: news between
	// here and that decision must not find it unheld (the hold rule
	// would send it at once, past the release rule's pace).
	w.decideLocked(now, false)
	w.elem = g.room.queue[level].PushBack(w)
	if r.Guard != nil {
		g.room.guarded++
	}
	return w, nil
}

// evictLocked makes v give up (errEvicted) and frees its place (its place
// in g.room.shared passes to the retry that evicted it).
func (g *Gate) evictLocked(v *Waiter, now time.Time) {
	v.evicted.Store(true)
	g.dequeueLocked(v, now)
	v.left = true
	g.counts.DeferGaveUp++
	v.signal()
	g.room.n--
	g.settle(now)
}

// Poll asks, now, whether w may go. When it may not, next is when asking
// again could change the answer without news (zero: only news will; of
// the waiters the next release, probe or last chance could go to, one is
// told its time, the others hear from Ready when it is theirs), and
// err, once w will never be admitted, says why (a more critical retry
// took its place, which wraps ErrTooManyWaiting, or the Gate ended the
// wait): its call ends with its last status (Leave w then). The rules
// decide and the admission is taken under the gate's lock; w's guard and
// the budget are asked unlocked, and the admission is given back when they
// refuse.
func (w *Waiter) Poll() (a Admission, next time.Time, err error) {
	if a, next = w.poll(); a == AdmitNone {
		if err = w.err(); err == nil && next.IsZero() {
			next = w.g.endAt(&w.view) // news, or its end
		}
	}
	return a, next, err
}

// endAt is when w's wait ends at the gate's now (gateState.endAt).
func (g *Gate) endAt(w *waiterView) time.Time {
	now := g.now()
	g.mu.Lock()
	defer g.mu.Unlock()
	end, _ := g.st.endAt(now, w)
	return end
}

// err returns errEvicted, or the rule that ended w's wait, once w will
// never be admitted.
func (w *Waiter) err() error {
	if w.evicted.Load() {
		return errEvicted
	} else if w.ended != nil {
		return w.ended
	}
	return nil
}

func (w *Waiter) poll() (a Admission, next time.Time) {
	g := w.g
	if w.ended != nil || w.evicted.Load() {
		return AdmitNone, time.Time{}
	}
	now := g.now()
	if now.Before(w.earliest) {
		// Its pause: it ends, or sleeps to the earlier of its pause's end
		// and its wait's.
		g.mu.Lock()
		defer g.mu.Unlock()
		end, why := g.st.endAt(now, &w.view)
		if !ended(now, end) {
			return AdmitNone, clock.Earlier(w.earliest, end)
		}
		w.endLocked(now, why)
		return AdmitNone, time.Time{}
	}
	guard := w.r.Guard
	open := guard != nil && !guard.Closed() // read first: asking may change it
	g.mu.Lock()
	g.room.polls++
	how, next := w.pollLocked(now, open)
	g.mu.Unlock()
	if !how.probing() && !w.asking {
		return how, next
	}
	if w.callerGone() {
		// Nothing is asked for a caller that left: its admission goes
		// back to the next waiter.
		g.mu.Lock()
		defer g.mu.Unlock()
		w.giveBackLocked(now, how)
		return AdmitNone, time.Time{}
	}
	asking := w.asking
	settled := false
	if asking {
		defer func() {
			if !settled { // the guard or the budget panicked
				g.mu.Lock()
				w.settleLocked(now, how, time.Time{}, false, open)
				g.mu.Unlock()
			}
		}()
	}
	ok := true
	if open {
		// Asked last: the guard's half-open slot goes only to a retry
		// that goes.
		ok, next = guard.AllowRetry()
	}
	if ok && how.probing() && g.b.Allow(w.r) {
		how = AdmitBudget
	}
	if !asking {
		return how, time.Time{}
	}
	// A closed guard judges the server: only a paid probe or last chance
	// goes, and a release.
	ok = ok && (open || how == AdmitBudget || how == admitRelease)
	g.mu.Lock()
	defer g.mu.Unlock()
	settled = true
	return w.settleLocked(now, how, next, ok, open)
}

// callerGone reports whether the caller of Wait left (its context ended).
func (w *Waiter) callerGone() bool {
	select {
	case <-w.done:
		return true
	default:
		return false
	}
}

// giveBackLocked gives back the admission how that Poll took for w, whose
// caller left, so that the next waiter may take it; w's wait is over.
func (w *Waiter) giveBackLocked(now time.Time, how Admission) {
	g := w.g
	w.asking = false
	w.ended = errWaitEnded
	g.dequeueLocked(w, now)
	w.returnLocked(now, how)
}

// returnLocked gives back the admission how that w took and will not use,
// and offers it to the other waiters (the dispatcher's give-back run).
func (w *Waiter) returnLocked(now time.Time, how Admission) {
	w.g.st.unadmit(how)
	w.g.counts.DeferAdmitted--
	w.g.dispatchLocked(now, false, false)
}

// pollLocked is Poll under the lock: an admission handed to w, or the
// rules' candidate, offered to the more critical waiters first (the
// criticality rule), then taken. A guarded admission is held (asking)
// until settleLocked.
func (w *Waiter) pollLocked(now time.Time, open bool) (Admission, time.Time) {
	g := w.g
	if how := w.granted; how != AdmitNone {
		w.granted = AdmitNone
		return how, time.Time{}
	}
	d := w.decideLocked(now, open)
	for scarce(d.how) {
		v, vhow := g.handOffLocked(now, w.level)
		if v == nil {
			break
		}
		v.granted = vhow
		v.signal()
		d = w.decideLocked(now, open)
	}
	how := d.how
	switch {
	case how == admitEnd:
		w.endLocked(now, d.end)
		return AdmitNone, time.Time{}
	case how == AdmitNone:
		w.due = g.sleepLocked(w, d)
		return AdmitNone, w.due
	}
	w.takeLocked(now, how)
	if open || w.r.Guard != nil && how.probing() {
		w.asking = true
	} else {
		w.wentLocked(now, how)
	}
	return how, time.Time{}
}

// settleLocked ends w's asking: the admission how goes when ok; else it
// is given back, and the wait goes on (held, while the guard is open) or,
// past its hold time, ends (the hold rule).
func (w *Waiter) settleLocked(now time.Time, how Admission, next time.Time, ok, open bool) (Admission, time.Time) {
	w.asking = false
	if ok {
		w.wentLocked(now, how)
		return how, time.Time{}
	}
	// What it gives back may go to another waiter, never to one refused
	// since the last news (two refused waiters would hand it back and
	// forth); w asks again at next, or on news.
	w.refused, w.due = w.g.room.news+1, next
	w.returnLocked(now, how)
	pastHold := !w.view.held && !now.Before(w.view.holdAt)
	if open {
		w.view.held = w.view.held || pastHold
		return AdmitNone, next
	}
	if pastHold {
		w.endLocked(now, errWaitEnded)
	}
	return AdmitNone, time.Time{}
}

// wentLocked: w goes with its admission how. When it took one that a
// single retry takes at a time, the next in line is woken if it may go
// too (the dispatcher woke only the first).
func (w *Waiter) wentLocked(now time.Time, how Admission) {
	paced := w.g.room.paced == w
	w.g.dequeueLocked(w, now)
	if !paced && (scarce(how) || how == AdmitBudget) {
		w.g.dispatchLocked(now, false, false)
	}
}

// scarce reports whether a more critical waiter takes an admission first:
// a release or the pacer's lease (a heal is every waiter's own).
func scarce(how Admission) bool {
	return how == admitRelease || how == admitProbe || how == admitLast
}

// handOffLocked admits the first waiter more critical than level (most
// critical, then oldest, first) that the rules let go now as a release,
// a probe or a last chance, or returns nil. Guarded and asking waiters
// are left to their own Poll (the guard is asked first).
func (g *Gate) handOffLocked(now time.Time, level int) (*Waiter, Admission) {
	for l := len(g.room.queue) - 1; l > level; l-- {
		for e := g.room.queue[l].Front(); e != nil; e = e.Next() {
			v := e.Value.(*Waiter)
			if now.Before(v.earliest) || v.r.Guard != nil || v.asking {
				continue
			}
			if d := v.decideLocked(now, false); scarce(d.how) {
				v.takeLocked(now, d.how)
				g.dequeueLocked(v, now)
				return v, d.how
			}
		}
	}
	return nil, AdmitNone
}

// decideLocked is the rules' decision for w at now, applied: the one place
// a decision changes a wait.
func (w *Waiter) decideLocked(now time.Time, guardOpen bool) decision {
	d := w.g.st.decide(now, &w.view, guardOpen)
	w.view.held = w.view.held || d.hold
	return d
}

func (w *Waiter) endLocked(now time.Time, why *waitEnd) {
	w.ended = why
	w.g.dequeueLocked(w, now)
}

func (w *Waiter) takeLocked(now time.Time, how Admission) {
	w.g.st.admit(now, &w.view, how)
	w.g.counts.DeferAdmitted++
}

// Leave unregisters w; call it once, admitted or not. An admission handed
// to w that its Poll never returned is given back.
func (w *Waiter) Leave() {
	g := w.g
	now := g.now()
	g.mu.Lock()
	defer g.mu.Unlock()
	if w.left { // evicted
		return
	}
	w.left = true
	g.dequeueLocked(w, now)
	switch {
	case w.granted != AdmitNone:
		w.returnLocked(now, w.granted)
	case len(w.ready) > 0:
		// A wake-up it never took may have been another's to take.
		g.dispatchLocked(now, false, false)
	}
	g.room.n--
	g.room.shared.leave()
	g.settle(now)
}

// Wait implements Deferrer on the time package's clock.
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
	w.done = ctx.Done()
	defer w.Leave()
	t := time.NewTimer(time.Hour)
	defer t.Stop()
	for {
		a, next, err := w.Poll()
		if a != AdmitNone {
			if ctx.Err() == nil {
				return a, nil
			}
			// The admission raced the caller's leaving: it goes back (a
			// budget that paid for it keeps what it took).
			g.mu.Lock()
			w.giveBackLocked(g.now(), a)
			g.counts.DeferGaveUp++
			g.mu.Unlock()
			return AdmitNone, ctx.Err()
		}
		if err != nil {
			if cerr := ctx.Err(); cerr != nil && errors.Is(err, errWaitEnded) {
				err = cerr // Poll saw the caller leave
			}
			if err != errEvicted { // an eviction was counted when made
				g.giveUp()
			}
			return AdmitNone, err
		}
		// No drain after Stop: a Go 1.23 timer's channel is then empty;
		// an older one's stale tick costs one more Poll. next is never
		// zero: a wait's end bounds it.
		t.Reset(next.Sub(g.now()))
		select {
		case <-w.ready:
			t.Stop()
		case <-t.C:
		case <-ctx.Done():
			g.giveUp()
			return AdmitNone, ctx.Err()
		}
	}
}

// giveUp counts a waiter that left without admission.
func (g *Gate) giveUp() {
	g.mu.Lock()
	g.counts.DeferGaveUp++
	g.mu.Unlock()
}

package budget

import (
	"context"
	"time"
)

// Waiter is one deferred retry, for code that cannot block (a simulator on a
// virtual clock): Enter, then Poll whenever the gate's Changed channel
// closes or the time Poll returned comes, and Leave once. Wait does all of
// it for a goroutine on the real clock. A Waiter belongs to one goroutine.
type Waiter struct {
	g        *Gate
	r        Request
	view     waiterView
	earliest time.Time
	left     bool
	ended    bool
}

// Enter registers a deferred retry r that must not go sooner than pause
// from now, of a call whose deadline is deadline (zero: none). It fails
// with ErrTooManyWaiting when the bound is reached.
func (g *Gate) Enter(r Request, pause time.Duration, deadline time.Time) (*Waiter, error) {
	now := g.now()
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.nWaiting >= g.s.MaxWaiting {
		g.gaveUp++
		return nil, ErrTooManyWaiting
	}
	if g.nWaiting == 0 {
		g.forgetLocked(now)
	}
	g.nWaiting++
	g.waiting.Store(int32(g.nWaiting))
	g.deferred++
	pause = max(pause, 0)
	g.st.enter(now, pause)
	return &Waiter{g: g, r: r, view: waiterView{pause: pause, deadline: deadline, last: r.Last, holdAt: now.Add(pause + time.Duration(holdSlack*float64(pause)))}, earliest: now.Add(pause)}, nil
}

// Changed returns a channel closed the next time the gate learns something.
func (g *Gate) Changed() <-chan struct{} {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.changed
}

// Poll asks, now, whether w may go. When it may not, next is when asking
// again could change the answer without news (zero: only news will), or
// the wait ended (Ended).
func (w *Waiter) Poll() (a Admission, next time.Time) {
	g := w.g
	if w.ended {
		return AdmitNone, time.Time{}
	}
	now := g.now()
	if now.Before(w.earliest) {
		return AdmitNone, w.earliest
	}
	g.mu.Lock()
	a, next, tell := w.pollLocked(now)
	g.mu.Unlock()
	if tell != nil {
		tell()
	}
	return a, next
}

// pollLocked is Poll under the gate's lock: the rules' candidate, then the
// guard (rule 4) and the budget. It returns the guard's tell, for Poll to
// call unlocked.
func (w *Waiter) pollLocked(now time.Time) (Admission, time.Time, func()) {
	g := w.g
	guard := w.r.Guard
	// Whether the guard is open (rule 4) is read before it is asked:
	// asking may change its state.
	open := guard != nil && !guard.Closed()
	how, next := g.st.candidate(now, &w.view)
	if open && (how == AdmitNone || how == admitEnd) {
		// While the guard is open it alone says when the retry goes (its
		// half-open probe), and the gate holds the wait.
		how, w.view.held = AdmitProbe, true
	}
	if how == AdmitNone {
		return AdmitNone, next, nil
	}
	if how == admitEnd {
		w.ended = true
		return AdmitNone, time.Time{}, nil
	}
	// A wait past its hold time that the gate does not hold goes now as a
	// probe or ends (rule 6).
	pastHold := !w.view.held && !now.Before(w.view.holdAt)
	// A closed guard judges the server: rules 1 and 2 let only a paid
	// retry go.
	paidOnly := (how == AdmitProbe || how == AdmitLast) && guard != nil && !open
	var tell func()
	if open {
		// Asked last, when the gate would let the retry go: the guard's
		// half-open probe slot is taken only by a retry that goes.
		var ok bool
		ok, next, tell = guard.AllowRetry()
		if !ok {
			w.view.held = w.view.held || pastHold
			return AdmitNone, next, tell
		}
	}
	if paidOnly && !g.b.Allow(w.r) {
		// Wait for a release, a paid admission or the deadline.
		w.ended = pastHold
		return AdmitNone, time.Time{}, tell
	}
	if (how == AdmitProbe || how == AdmitLast) && (paidOnly || g.b.Allow(w.r)) {
		// Paid by the budget (asked under the lock, so that two waiters
		// cannot both take its tokens).
		how = AdmitBudget
	}
	g.st.admit(now, &w.view, how)
	g.admitted++
	return how, time.Time{}, tell
}

// Ended reports whether the gate ended w's wait: it will not go (see Gate,
// rule 6). Leave, and end the call with its last status.
func (w *Waiter) Ended() bool { return w.ended }

// Leave unregisters w; call it once, admitted or not.
func (w *Waiter) Leave() {
	if w.left {
		return
	}
	w.left = true
	g := w.g
	g.mu.Lock()
	g.nWaiting--
	g.waiting.Store(int32(g.nWaiting))
	g.mu.Unlock()
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
	limit := deadline.Add(-waitSlack)
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
		if w.ended {
			g.giveUp()
			return AdmitNone, ErrWaitEnded
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

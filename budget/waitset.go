package budget

import (
	"cmp"
	"time"
)

// waitSet is a binary heap of waiters, the Gate's ordered sets (as
// container/list is its queue of arrivals): by the calls' bounds (a
// level's retries whose pause has passed, its first the head that the
// grant loop decides: byBound) or by the time each must be decided again
// without news (byDue). Each waiter keeps its index in each set it is in,
// so that a waiter leaves either in O(log n). The Gate's lock owns it.
//
// A call's retry that enters again after its attempt failed (a probe in
// an outage, a release refused) arrives late, yet its wait ends sooner
// than theirs who arrived before it: by arrival it went after them and
// its MaxWait ended first (sim fleet, 100 processes: calls lost at
// max-wait after the return).
type waitSet struct {
	ws  []*Waiter
	due bool // ordered by (due, seq), the index in Waiter.dueAt; else by (view.bound(), seq), in Waiter.at
}

// top is the first waiter, or nil.
func (s *waitSet) top() *Waiter {
	if len(s.ws) == 0 {
		return nil
	}
	return s.ws[0]
}

func (s *waitSet) index(w *Waiter) *int {
	if s.due {
		return &w.dueAt
	}
	return &w.at
}

func (s *waitSet) less(i, j int) bool {
	a, b := s.ws[i], s.ws[j]
	if s.due && !a.due.Equal(b.due) {
		return a.due.Before(b.due)
	}
	if s.due {
		return a.seq < b.seq
	}
	return byBound(a, b) < 0
}

// byBound orders two waiters of a level as they go (waitSet's order, and
// the grant loop's across its sets): the one whose bound comes first, then
// the oldest.
func byBound(a, b *Waiter) int {
	return cmp.Or(a.view.bound().Compare(b.view.bound()), cmp.Compare(a.seq, b.seq))
}

// bound is when the end rule ends the wait at the latest: its call's
// deadline, or its MaxWait without one (gateState.endAt). A call with a
// deadline ordered by its MaxWait went behind calls without one whose
// MaxWait ended seconds later than its deadline.
func (v *waiterView) bound() time.Time {
	if !v.deadline.IsZero() {
		return v.deadline
	}
	return v.limit
}

func (s *waitSet) swap(i, j int) {
	s.ws[i], s.ws[j] = s.ws[j], s.ws[i]
	*s.index(s.ws[i]), *s.index(s.ws[j]) = i, j
}

// push adds w, which is in no set of this kind.
func (s *waitSet) push(w *Waiter) {
	s.ws = append(s.ws, w)
	*s.index(w) = len(s.ws) - 1
	s.up(len(s.ws) - 1)
}

// remove takes w out, if it is in s.
func (s *waitSet) remove(w *Waiter) {
	i := *s.index(w)
	if i < 0 || i >= len(s.ws) || s.ws[i] != w {
		return
	}
	last := len(s.ws) - 1
	if i != last {
		s.swap(i, last)
	}
	s.ws[last] = nil
	s.ws = s.ws[:last]
	*s.index(w) = -1
	if i != last {
		s.fix(i)
	}
}

// has reports whether w is in s.
func (s *waitSet) has(w *Waiter) bool {
	i := *s.index(w)
	return i >= 0 && i < len(s.ws) && s.ws[i] == w
}

// setDue re-keys w in a byDue set: in it at due, or out of it when due is
// zero (only news decides it again).
func (s *waitSet) setDue(w *Waiter, due time.Time) {
	in := s.has(w)
	switch {
	case due.IsZero():
		s.remove(w)
		w.due = due
	case in:
		w.due = due
		s.fix(*s.index(w))
	default:
		w.due = due
		s.push(w)
	}
}

func (s *waitSet) fix(i int) {
	if !s.down(i) {
		s.up(i)
	}
}

func (s *waitSet) up(i int) {
	for i > 0 {
		p := (i - 1) / 2
		if !s.less(i, p) {
			return
		}
		s.swap(i, p)
		i = p
	}
}

func (s *waitSet) down(i0 int) bool {
	i, n := i0, len(s.ws)
	for {
		c := 2*i + 1
		if c >= n {
			break
		}
		if r := c + 1; r < n && s.less(r, c) {
			c = r
		}
		if !s.less(c, i) {
			break
		}
		s.swap(i, c)
		i = c
	}
	return i > i0
}

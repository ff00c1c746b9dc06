package budget

import "sync/atomic"

// room counts the calls waiting at once on the Gates that share it, up to
// max, and holds a place in its parent room for each: Backends gives each
// backend's Gates one room (DeferSettings.MaxWaiting: all its methods
// together) inside the set's own (the bound of the whole Backends). A Gate
// asks its room before it lets a retry wait, and a full room refuses, as
// the Gate's own bound does: a place is never taken from another room's
// waiters. A nil *room is no bound. Safe for concurrent use: lock-free, so
// a Gate may call it under its lock.
type room struct {
	n      atomic.Int64
	max    int64
	parent *room
}

// tryEnter takes a place in r and each room above it, or none of them and
// returns false when one is full.
func (r *room) tryEnter() bool {
	if r == nil {
		return true
	}
	for {
		n := r.n.Load()
		if n >= r.max {
			return false
		}
		if r.n.CompareAndSwap(n, n+1) {
			break
		}
	}
	if !r.parent.tryEnter() {
		r.n.Add(-1)
		return false
	}
	return true
}

// leave gives back a place tryEnter took.
func (r *room) leave() {
	for ; r != nil; r = r.parent {
		r.n.Add(-1)
	}
}

// waiting returns how many hold a place in r.
func (r *room) waiting() int {
	if r == nil {
		return 0
	}
	return int(r.n.Load())
}

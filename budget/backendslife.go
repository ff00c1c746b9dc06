package budget

import (
	"sync/atomic"
	"time"
)

// The life of a Backends' keys (Backends says the rules).
const (
	// backendsCap and backendMethodsCap: not measured: chosen so that a
	// service calling hundreds of backends with dozens of methods each
	// stays exact; what they cost in memory is in BENCHMARKS.md ("Issue
	// 56: per-backend state").
	backendsCap       = 1024
	backendMethodsCap = 256
	// backendIdle: past the longest evidence a Gate keeps and the
	// deadlines of the calls it judges, short enough that pod addresses
	// that came and went leave minutes' worth of state.
	backendIdle = 5 * time.Minute
	// backendsSweepEvery: a key is forgotten at most a tenth late, and the
	// walk over every key runs at most twice a minute.
	backendsSweepEvery = backendIdle / 10
	// backendsMaxWaiting: the set's bound of waiting calls (when
	// MaxWaiting is lower): four default rooms, so that a few backends
	// down at once each keep a full room.
	backendsMaxWaiting = 4 * defaultMaxWaiting
)

// epochsKept is how many epochs' starts a Backends keeps: a use in an
// older epoch counts as one in the oldest kept (later, so never forgotten
// sooner). Forgetting looks at least every backendsSweepEvery, and an
// epoch begins at most once per clock reading: 64 of them cover the
// readings between two looks of all but the busiest adders, for 1.5 KiB.
const epochsKept = 64

// tickLocked begins an epoch at now, if the time moved since the latest
// began. Under mu.
func (bs *Backends) tickLocked(now time.Time) {
	e := bs.epoch.Load()
	if !now.After(bs.starts[e%epochsKept]) {
		return
	}
	bs.starts[(e+1)%epochsKept] = now
	bs.epoch.Store(e + 1)
}

// lastUseLocked returns a time no earlier than s's latest use: the start
// of the epoch after the one it was used in (now for the latest). Under
// mu, after tickLocked(now).
func (bs *Backends) lastUseLocked(s *Slot, now time.Time) time.Time {
	cur, e := bs.epoch.Load(), s.epoch.Load()
	if e == cur {
		return now
	}
	next := e + 1
	if cur-next >= epochsKept {
		next = cur - epochsKept + 1
	}
	return bs.starts[next%epochsKept]
}

// idleLocked reports whether s was unused for backendIdle at now.
func (bs *Backends) idleLocked(s *Slot, now time.Time) bool {
	return now.Sub(bs.lastUseLocked(s, now)) >= backendIdle
}

// sweepLocked forgets the keys idle at now, but those a call waits on.
func (bs *Backends) sweepLocked(now time.Time) {
	bs.swept = now
	var forget []string
	for t, b := range *bs.targets.Load() {
		if bs.defers {
			bs.sweepMethodsLocked(b, now)
		}
		if bs.idleLocked(&b.tokens, now) && b.room.waiting() == 0 {
			forget = append(forget, t)
		}
	}
	bs.forgetTargetsLocked(forget...)
}

// sweepMethodsLocked forgets b's methods idle at now that nobody waits on.
func (bs *Backends) sweepMethodsLocked(b *backend, now time.Time) {
	var forget []string
	for m, s := range *b.methods.Load() {
		if bs.idleLocked(s, now) && s.waitedOn() == 0 {
			forget = append(forget, m)
		}
	}
	forgetLocked(&b.methods, forget...)
}

// forgetLRUTargetLocked forgets the least recently used target that
// nobody waits on, if there is one, to make room for a new one.
func (bs *Backends) forgetLRUTargetLocked(now time.Time) {
	var lru time.Time
	name, found := "", false
	for t, b := range *bs.targets.Load() {
		if at := bs.lastUseLocked(&b.tokens, now); (!found || at.Before(lru)) && b.room.waiting() == 0 {
			lru, name, found = at, t, true
		}
	}
	if found {
		bs.forgetTargetsLocked(name)
	}
}

// forgetLRUMethodLocked is forgetLRUTargetLocked for b's methods.
func (bs *Backends) forgetLRUMethodLocked(b *backend, now time.Time) {
	var lru time.Time
	name, found := "", false
	for m, s := range *b.methods.Load() {
		if at := bs.lastUseLocked(s, now); (!found || at.Before(lru)) && s.waitedOn() == 0 {
			lru, name, found = at, m, true
		}
	}
	if found {
		forgetLocked(&b.methods, name)
	}
}

// forgetTargetsLocked forgets the targets named, and their methods.
func (bs *Backends) forgetTargetsLocked(names ...string) {
	if len(names) == 0 {
		return
	}
	targets := *bs.targets.Load()
	for _, t := range names {
		b := targets[t]
		b.tokens.gone.Store(true)
		if bs.defers {
			for _, s := range *b.methods.Load() {
				s.gone.Store(true)
			}
		}
	}
	bs.targets.Store(copyWithout(targets, names))
}

// forgetLocked forgets the Slots named of the map m points to.
func forgetLocked(m *atomic.Pointer[map[string]*Slot], names ...string) {
	if len(names) == 0 {
		return
	}
	cur := *m.Load()
	for _, n := range names {
		cur[n].gone.Store(true)
	}
	m.Store(copyWithout(cur, names))
}

// copyWithout returns a copy of m without the keys named.
func copyWithout[V any](m map[string]V, names []string) *map[string]V {
	out := make(map[string]V, len(m))
	for k, v := range m {
		out[k] = v
	}
	for _, n := range names {
		delete(out, n)
	}
	return &out
}

// waitedOn returns how many calls wait on s's Gate.
func (s *Slot) waitedOn() int {
	if g, ok := s.b.(*Gate); ok {
		return g.State().Waiting
	}
	return 0
}

package breaker

import (
	"strconv"
	"sync"
)

// breakerCap bounds the breakers one Set keeps: a program that makes
// up method or target names at run time must not grow it without end. Past
// it, keys share one overflow breaker per scope.
const breakerCap = 4096

// Set keeps one Breaker per key (see Settings.Scope), made on
// first use, for one settings value. Safe for concurrent use.
type Set struct {
	s        Settings
	opts     []Option
	onChange func(Change)
	mu       sync.RWMutex
	m        map[breakerKey]*Breaker
	overflow *Breaker
}

type breakerKey struct{ target, method string }

// NewSet returns an empty set of breakers built with s, or a
// *SettingsError. onChange (may be nil) hears every breaker's changes.
func NewSet(s Settings, onChange func(Change), opts ...Option) (*Set, error) {
	if err := s.Validate(); err != nil {
		return nil, err
	}
	return &Set{s: s.WithDefaults(), opts: opts, onChange: onChange, m: make(map[breakerKey]*Breaker)}, nil
}

// Settings returns the settings, defaults applied.
func (bs *Set) Settings() Settings { return bs.s }

// Get returns the breaker for a call of method on target, making it on
// first use. A lookup takes a read lock and allocates nothing.
func (bs *Set) Get(target, method string) *Breaker {
	k := breakerKey{target: target}
	if bs.s.Scope == ScopeMethod {
		k.method = method
	}
	bs.mu.RLock()
	b, ok := bs.m[k]
	bs.mu.RUnlock()
	if ok {
		return b
	}
	bs.mu.Lock()
	defer bs.mu.Unlock()
	if b, ok := bs.m[k]; ok {
		return b
	}
	if len(bs.m) >= breakerCap {
		if bs.overflow == nil {
			bs.overflow = bs.newBreaker("(overflow: more than " + strconv.Itoa(breakerCap) + " keys)")
		}
		return bs.overflow
	}
	name := k.target
	if k.method != "" {
		name += " " + k.method
	}
	b = bs.newBreaker(name)
	bs.m[k] = b
	return b
}

func (bs *Set) newBreaker(key string) *Breaker {
	b, err := New(key, bs.s, bs.onChange, bs.opts...)
	if err != nil {
		// Validated in NewSet.
		panic(err)
	}
	return b
}

// Snapshots returns every breaker's state, in no particular order (taken
// outside the set's lock).
func (bs *Set) Snapshots() []Snapshot {
	bs.mu.RLock()
	all := make([]*Breaker, 0, len(bs.m)+1)
	for _, b := range bs.m {
		all = append(all, b)
	}
	if bs.overflow != nil {
		all = append(all, bs.overflow)
	}
	bs.mu.RUnlock()
	out := make([]Snapshot, len(all))
	for i, b := range all {
		out[i] = b.Snapshot()
	}
	return out
}

package budget

import (
	"sort"
	"strconv"
	"sync"
)

// Bounds of one Backends: a program that makes up targets or method names at
// run time must not grow it without end. Past them, the new keys share one
// overflow budget (per target for methods, one for targets), as a
// breaker.Set does. Not measured: chosen so that a service calling hundreds
// of backends with dozens of methods each stays exact.
const (
	backendsCap       = 1024
	backendMethodsCap = 256
)

// Backends keeps the budgets of one Settings value per backend: a process
// calls many servers, and what one of them does must not spend, refill or
// judge another's retries. A backend is a target (the ClientConn's target,
// or a front end's), made on first use.
//
// Each target holds its own tokens (the kind Settings describes: a
// throttle, a token bucket or a ratio). When the settings defer (see
// Settings.Defer), each method of the target has its own Gate over the
// target's tokens: whether retries heal, whether the server is down or
// overloaded, is learnt per method, so a method that is down (a broken
// dependency behind it) does not borrow the healed retries of a flaky one
// beside it on the same connection, while both spend and refill the
// backend's tokens.
//
// Backends are bounded: at most 1,024 targets and 256 methods per target
// are kept; past that, new targets share one overflow budget, and a
// target's new methods share one overflow Gate. Nothing is dropped while
// the process runs.
//
// Safe for concurrent use. Build one with NewBackends; the interceptors
// build one per policy file (and stagger.DialOptions one for the default
// budget) and ask it for every call's budget (Get).
type Backends struct {
	s    Settings
	opts []Option

	mu       sync.RWMutex
	targets  map[string]*backend
	overflow *backend
}

// backend is one target's tokens and, when the settings defer, its
// methods' Gates.
type backend struct {
	tokens   Budget
	gates    map[string]*Gate
	overflow *Gate
}

// NewBackends returns an empty set of budgets built from s on first use, or
// the *SettingsError of an invalid s. A KindNone s makes every Get nil
// (unlimited).
func NewBackends(s Settings, opts ...Option) (*Backends, error) {
	// One budget built now checks the settings as New does.
	if _, err := New(s, opts...); err != nil {
		return nil, err
	}
	return &Backends{s: s, opts: opts, targets: make(map[string]*backend)}, nil
}

// Get returns the budget of a call of method on target: the target's
// tokens, behind the method's Gate when the settings defer. nil when the
// settings are KindNone. A lookup of a known key takes a read lock and
// allocates nothing.
func (bs *Backends) Get(target, method string) Budget {
	if bs == nil || bs.s.Kind == KindNone {
		return nil
	}
	bs.mu.RLock()
	b := bs.targets[target]
	var g *Gate
	if b != nil && b.gates != nil {
		g = b.gates[method]
	}
	bs.mu.RUnlock()
	if b != nil && (b.gates == nil || g != nil) {
		if g != nil {
			return g
		}
		return b.tokens
	}
	return bs.add(target, method)
}

// add makes what Get did not find.
func (bs *Backends) add(target, method string) Budget {
	bs.mu.Lock()
	defer bs.mu.Unlock()
	b, ok := bs.targets[target]
	if !ok {
		if len(bs.targets) >= backendsCap {
			if bs.overflow == nil {
				bs.overflow = bs.newBackend()
			}
			b = bs.overflow
		} else {
			b = bs.newBackend()
			bs.targets[target] = b
		}
	}
	if b.gates == nil {
		return b.tokens
	}
	if g, ok := b.gates[method]; ok {
		return g
	}
	if len(b.gates) >= backendMethodsCap {
		if b.overflow == nil {
			b.overflow = bs.newGate(b.tokens)
		}
		return b.overflow
	}
	g := bs.newGate(b.tokens)
	b.gates[method] = g
	return g
}

func (bs *Backends) newBackend() *backend {
	tokens, err := newKind(bs.s, bs.opts)
	if err != nil {
		// Validated in NewBackends.
		panic("budget: " + err.Error())
	}
	b := &backend{tokens: tokens}
	if bs.s.defers() {
		b.gates = make(map[string]*Gate)
	}
	return b
}

func (bs *Backends) newGate(tokens Budget) *Gate {
	g, err := Deferring(tokens, bs.s.Defer, bs.opts...)
	if err != nil {
		// Validated in NewBackends.
		panic("budget: " + err.Error())
	}
	return g
}

// BackendState is the state of one backend's budget: the target's tokens,
// or one method's Gate over them.
type BackendState struct {
	// Target is the backend; "(overflow)" for the targets past the bound.
	Target string
	// Method is the method whose Gate this is ("" for the target's tokens
	// when the settings do not defer; "(overflow)" for its methods past
	// the bound). The Gates of one target share its tokens: their Level
	// is the same.
	Method string
	State
}

// States returns the state of every budget of the set, sorted by target,
// then method (taken outside the set's lock).
func (bs *Backends) States() []BackendState {
	if bs == nil {
		return nil
	}
	type entry struct {
		target, method string
		b              Budget
	}
	var all []entry
	bs.mu.RLock()
	add := func(target string, b *backend) {
		if b.gates == nil {
			all = append(all, entry{target, "", b.tokens})
			return
		}
		for m, g := range b.gates {
			all = append(all, entry{target, m, g})
		}
		if b.overflow != nil {
			all = append(all, entry{target, overflowName, b.overflow})
		}
	}
	for t, b := range bs.targets {
		add(t, b)
	}
	if bs.overflow != nil {
		add(overflowName+" more than "+strconv.Itoa(backendsCap)+" targets", bs.overflow)
	}
	bs.mu.RUnlock()
	sort.Slice(all, func(i, j int) bool {
		if all[i].target != all[j].target {
			return all[i].target < all[j].target
		}
		return all[i].method < all[j].method
	})
	out := make([]BackendState, len(all))
	for i, e := range all {
		out[i] = BackendState{Target: e.target, Method: e.method, State: e.b.State()}
	}
	return out
}

const overflowName = "(overflow)"

var defaultBackends = sync.OnceValue(func() *Backends {
	bs, err := NewBackends(DefaultSettings())
	if err != nil {
		panic("budget: default settings are invalid: " + err.Error())
	}
	return bs
})

// DefaultBackends returns stagger's default budgets, the ones
// stagger.DialOptions installs when a policy file declares none: one
// default budget (DefaultSettings) per backend, on the real clock, shared
// by every connection of the process to that backend. DefaultSettings says
// how the settings were chosen, and how to share one budget across backends
// instead.
func DefaultBackends() *Backends { return defaultBackends() }

package budget

import (
	"hash/maphash"
	"sort"
	"sync"
	"sync/atomic"
	"time"
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
// The waiting calls have two bounds. DeferSettings.MaxWaiting bounds one
// backend's: its methods' Gates together. The set bounds all of its
// backends' together, at MaxWaiting or 4,096, whichever is more: each
// waiting call holds its goroutine and its request (a few KiB or more),
// and a process that calls a thousand backends must not hold a thousand
// rooms' worth. A retry that finds either
// full evicts a less critical retry of its own method (see Gate, the
// criticality rule) or ends its call (ErrTooManyWaiting, reason budget):
// never another backend's or another method's retry.
//
// Backends forget. A target, or a method of it, that no call looked up for
// 5 minutes is forgotten, and so is what it knew: its next call starts
// afresh, as in a new process. Five minutes is past the deadlines of most
// calls a Gate judges and the ages at which it lets its evidence go, so a
// target forgotten that way had little left to tell; and short
// enough that a client dialling pod addresses as they come and go holds
// a few minutes' worth. At most 1,024 targets, and 256 methods per
// target, are kept (chosen so that a service calling hundreds of backends
// with dozens of methods each stays exact): a new one past them first
// forgets the least recently used sixteenth. Nothing is forgotten while a
// call waits on it (a target, while a call waits on any of its methods; a
// method, while one waits on it), so the set holds at most as many more
// as the bound of its waiting calls. A key idle for 5 minutes is
// forgotten within 6 minutes of its last use, whether or not the set is
// read or added to: a lookup reads no clock, and the set times the uses by
// its readings of the clock, one every 30 seconds from a timer (one per
// set, armed while the set holds a key; it keeps the set alive that long),
// when a key is added and when States is read; each forgets what is idle
// then, and a cap reached forgets at once.
// BENCHMARKS.md ("Issue 56: per-backend state") has the bytes a target
// and a method's Gate take.
//
// Safe for concurrent use. A lookup of a known key (Get, Slot) takes no
// lock and allocates nothing; adding a key builds its budget and Gate
// (the options' clock and random source) before it takes the lock that
// only adders and forgetting share, and never blocks a lookup. Build one
// with NewBackends; the interceptors build one per policy file (and
// stagger.DialOptions one for the default budget) and ask it for every
// call's budget.
type Backends struct {
	s      Settings
	opts   []Option
	now    func() time.Time
	defers bool
	// rooms bounds the waiting calls of all backends (nil: the settings
	// do not defer).
	rooms *room

	// targets: written under mu.
	targets shardedKeyed[*backend]

	// epoch counts the set's readings of the clock that moved: a lookup
	// writes it into its Slot (Slot.touch), and starts holds when the
	// latest of them began (forgetting's, under mu).
	epoch atomic.Uint32

	mu       sync.Mutex
	starts   [epochsKept]time.Time
	swept    time.Time
	ntargets int
	sweep    sweeper
}

// backend is one target's tokens and, when the settings defer, its
// methods' Gates and their room.
type backend struct {
	tokens Slot
	room   *room
	// methods: written under Backends.mu.
	methods keyed[*Slot]
}

// Slot is one key's budget in a Backends: a target's tokens, or, when the
// settings defer, one method's Gate over them. A caller that keeps it
// (the interceptors keep one per method) skips the lookup until Budget
// says the set forgot the key. Safe for concurrent use; a nil *Slot is
// the unlimited budget of a KindNone set.
type Slot struct {
	b   Budget
	set *Backends
	// target is the target's own Slot, for a method's; a use of the
	// method is a use of the target.
	target *Slot
	// epoch is the set's epoch at the latest use; gone: forgotten.
	epoch atomic.Uint32
	gone  atomic.Bool
}

// Budget returns the key's budget, and false once the set has forgotten
// the key: the caller looks it up again (Backends.Slot), and gets a new
// budget that knows nothing of the old one's.
func (s *Slot) Budget() (Budget, bool) {
	if s == nil {
		return nil, true
	}
	if s.gone.Load() {
		return nil, false
	}
	s.touch()
	return s.b, true
}

// touch marks s and its target used now: loads, and a store once per
// epoch, so that lookups of one key on many cores do not fight over its
// cache line, and no clock is read.
func (s *Slot) touch() {
	e := s.set.epoch.Load()
	if s.epoch.Load() != e {
		s.epoch.Store(e)
	}
	if t := s.target; t != nil && t.epoch.Load() != e {
		t.epoch.Store(e)
	}
}

// NewBackends returns an empty set of budgets built from s on first use, or
// the *SettingsError of an invalid s. A KindNone s makes every Get nil
// (unlimited).
func NewBackends(s Settings, opts ...Option) (*Backends, error) {
	// One budget built now checks the settings as New does.
	if _, err := New(s, opts...); err != nil {
		return nil, err
	}
	bs := &Backends{s: s, opts: opts, now: buildOptions(opts).Now, defers: s.defers()}
	bs.targets.seed = maphash.MakeSeed()
	if bs.defers {
		bs.rooms = &room{max: int64(max(s.Defer.withDefaults().MaxWaiting, backendsMaxWaiting))}
	}
	bs.starts[0] = bs.now()
	return bs, nil
}

// Get returns the budget of a call of method on target: the target's
// tokens, behind the method's Gate when the settings defer. nil when the
// settings are KindNone.
func (bs *Backends) Get(target, method string) Budget {
	s := bs.Slot(target, method)
	if s == nil {
		return nil
	}
	// Even if forgotten since: the call it was made for uses it.
	s.touch()
	return s.b
}

// Slot returns the Slot of Get's budget, made if the set has none (or
// forgot it). nil when the settings are KindNone.
func (bs *Backends) Slot(target, method string) *Slot {
	if bs == nil || bs.s.Kind == KindNone {
		return nil
	}
	s := bs.lookup(target, method)
	if s == nil || s.gone.Load() {
		s = bs.add(target, method)
		bs.armSweep()
	}
	return s
}

// lookup returns the key's Slot, or nil.
func (bs *Backends) lookup(target, method string) *Slot {
	b := bs.target(target)
	if b == nil {
		return nil
	}
	if !bs.defers {
		return &b.tokens
	}
	s, _ := b.methods.load(method)
	return s
}

// target returns target's backend, or nil.
func (bs *Backends) target(target string) *backend {
	b, _ := bs.targets.load(target)
	return b
}

// add makes what lookup did not find. What it builds runs the options'
// functions, so it is built unlocked, then put in (or dropped, if another
// call put the key in first).
func (bs *Backends) add(target, method string) *Slot {
	now := bs.now()
	for {
		b := bs.target(target)
		var fresh *backend
		tokens := Budget(nil)
		if b == nil || b.tokens.gone.Load() {
			fresh = bs.newBackend()
			tokens = fresh.tokens.b
		} else {
			tokens = b.tokens.b
		}
		var g *Gate
		if bs.defers {
			g = bs.newGate(tokens)
		}
		bs.mu.Lock()
		s, ok := bs.insertLocked(now, target, method, b, fresh, g)
		bs.mu.Unlock()
		if ok {
			return s
		}
	}
}

// insertLocked puts in fresh (b's successor, when not nil) and g, unless
// the set changed since b was read: then it returns the key's Slot if the
// set has one, or false to build again.
func (bs *Backends) insertLocked(now time.Time, target, method string, b, fresh *backend, g *Gate) (*Slot, bool) {
	bs.tickLocked(now)
	if now.Sub(bs.swept) >= backendsSweepEvery {
		bs.sweepLocked(now)
	}
	if cur := bs.target(target); cur != b {
		if s := bs.lookup(target, method); s != nil && !s.gone.Load() {
			return s, true
		}
		return nil, false
	}
	if b != nil && bs.defers {
		// Another first lookup of the method put its Gate in since b
		// was read: that one is the key's (else it would be orphaned).
		if s, ok := b.methods.load(method); ok && !s.gone.Load() {
			return s, true
		}
	}
	if fresh != nil {
		if bs.ntargets >= backendsCap {
			bs.forgetLRUTargetsLocked(now)
		}
		bs.targets.shard(target).store(target, fresh)
		bs.ntargets++
		b = fresh
	}
	b.tokens.epoch.Store(bs.epoch.Load())
	if !bs.defers {
		return &b.tokens, true
	}
	if len(b.methods.snapshot()) >= backendMethodsCap {
		bs.forgetLRUMethodsLocked(b, now)
	}
	g.shared = b.room
	s := &Slot{b: g, set: bs, target: &b.tokens}
	s.epoch.Store(bs.epoch.Load())
	b.methods.store(method, s)
	return s, true
}

func (bs *Backends) newBackend() *backend {
	tokens, err := newKind(bs.s, bs.opts)
	if err != nil {
		// Validated in NewBackends.
		panic("budget: " + err.Error())
	}
	b := &backend{tokens: Slot{b: tokens, set: bs}}
	if bs.defers {
		b.room = &room{max: int64(bs.s.Defer.withDefaults().MaxWaiting), parent: bs.rooms}
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

// Limits are the bounds a Backends keeps (Backends says how each works).
type Limits struct {
	// Targets is how many targets it keeps, MethodsPerTarget how many
	// methods of each when the settings defer (each its own Gate; 0
	// otherwise: a target's methods share its tokens).
	Targets, MethodsPerTarget int
	// Idle is how long a key nobody looked up is kept.
	Idle time.Duration
	// WaitingPerBackend bounds the calls waiting at once on one backend
	// (DeferSettings.MaxWaiting), Waiting on all of them; both 0 when the
	// settings do not defer.
	WaitingPerBackend, Waiting int
}

// Limits returns the set's bounds.
func (bs *Backends) Limits() Limits {
	l := Limits{Targets: backendsCap, Idle: backendIdle}
	if bs.defers {
		l.MethodsPerTarget = backendMethodsCap
		l.WaitingPerBackend, l.Waiting = bs.s.Defer.withDefaults().MaxWaiting, int(bs.rooms.max)
	}
	return l
}

// BackendState is the state of one backend's budget: the target's tokens,
// or one method's Gate over them.
type BackendState struct {
	// Target is the backend.
	Target string
	// Method is the method whose Gate this is ("" for the target's tokens
	// when the settings do not defer). The Gates of one target share its
	// tokens: their Level is the same.
	Method string
	State
}

// States returns the state of every budget the set holds at one moment
// (after forgetting what it may), sorted by target, then method (each
// state read after the set's lock is let go).
func (bs *Backends) States() []BackendState {
	if bs == nil || bs.s.Kind == KindNone {
		return nil
	}
	// The keys are taken under the lock, so that they are one moment's
	// (a walk over the shards beside an add that forgot others could see
	// both the forgotten and the new, more than the cap); their states are
	// read after it.
	type key struct {
		target, method string
		b              Budget
	}
	var keys []key
	now := bs.now()
	bs.mu.Lock()
	bs.tickLocked(now)
	if now.Sub(bs.swept) >= backendsSweepEvery {
		bs.sweepLocked(now)
	}
	bs.targets.each(func(t string, b *backend) {
		if !bs.defers {
			keys = append(keys, key{t, "", b.tokens.b})
			return
		}
		for m, s := range b.methods.snapshot() {
			keys = append(keys, key{t, m, s.b})
		}
	})
	bs.mu.Unlock()
	out := make([]BackendState, 0, len(keys))
	for _, k := range keys {
		out = append(out, BackendState{Target: k.target, Method: k.method, State: k.b.State()})
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Target != out[j].Target {
			return out[i].Target < out[j].Target
		}
		return out[i].Method < out[j].Method
	})
	return out
}

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

package elsewhere

import (
	"context"
	"sync"
	"sync/atomic"
)

// inUse is set once a config naming the policy was parsed or a balancer of it
// built in this process: until then NewCallContext returns its context
// unchanged, so that programs that never configure the policy pay nothing.
var inUse atomic.Bool

// setKey is the context key of a call's set.
type setKey struct{}

// callSet is one call's record of the backends its attempts were sent to. It
// is itself the context that carries it (embedding the call's context), so
// that NewCallContext costs one allocation. The picker reads and writes it
// under mu, so concurrent hedges of one call see each other's picks.
type callSet struct {
	context.Context
	mu sync.Mutex
	// first holds the first addresses without an allocation (a call makes
	// few attempts: 5 at most by default); more holds the rest.
	first [4]string
	n     int
	more  []string
	// last is the address of the latest pick.
	last string
}

// Value returns the set itself for its key and asks the call's context for
// any other.
func (c *callSet) Value(key any) any {
	if key == any(setKey{}) {
		return c
	}
	return c.Context.Value(key)
}

// usedLocked reports whether addr is in the set.
func (c *callSet) usedLocked(addr string) bool {
	for i := 0; i < c.n && i < len(c.first); i++ {
		if c.first[i] == addr {
			return true
		}
	}
	for _, a := range c.more {
		if a == addr {
			return true
		}
	}
	return false
}

// addLocked records a pick of addr.
func (c *callSet) addLocked(addr string) {
	c.last = addr
	if c.usedLocked(addr) {
		return
	}
	if c.n < len(c.first) {
		c.first[c.n] = addr
	} else {
		c.more = append(c.more, addr)
	}
	c.n++
}

func setFromContext(ctx context.Context) *callSet {
	if ctx == nil {
		return nil
	}
	s, _ := ctx.Value(setKey{}).(*callSet)
	return s
}

// NewCallContext returns a context for one call's attempts: ctx with a new,
// empty set of the backends the call has used, which the policy's picker
// reads and adds to at every pick made with the context or a context derived
// from it. Give every attempt of one call a context derived from the one it
// returns, and each call its own: a set shared by two calls spreads them as
// if they were one.
//
// stagger's interceptors call it for every call that may retry or hedge; call
// it yourself only for calls that do not go through them (grpc-go's own
// retry, for instance, sends every attempt with the call's context).
//
// Until a config naming the policy was parsed or a balancer of it built in
// the process, it returns ctx itself (no allocation); afterwards it costs one
// allocation per call.
func NewCallContext(ctx context.Context) context.Context {
	if !inUse.Load() {
		return ctx
	}
	return &callSet{Context: ctx}
}

// Backend returns the address of the backend that the policy's latest pick
// for ctx's call went to, and "" when ctx carries no set (NewCallContext) or
// no pick was made with it yet. While a call's attempts run one after the
// other it is the address of the latest attempt; while hedges run at once
// it is whichever was picked last.
func Backend(ctx context.Context) string {
	s := setFromContext(ctx)
	if s == nil {
		return ""
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.last
}

// Backends returns the addresses of the backends the policy picked for
// ctx's call, each once, in the order they were first picked; nil when ctx
// carries no set (NewCallContext) or no pick was made with it.
func Backends(ctx context.Context) []string {
	s := setFromContext(ctx)
	if s == nil {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.n == 0 {
		return nil
	}
	out := make([]string, 0, s.n)
	out = append(out, s.first[:min(s.n, len(s.first))]...)
	return append(out, s.more...)
}

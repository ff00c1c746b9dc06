package breaker

import (
	"time"

	"github.com/stagger-go/stagger/budget"
	"github.com/stagger-go/stagger/criticality"
)

// Guard returns b as the budget.Guard of the retries of a call of
// criticality c, so that a budget.Gate asks b before it lets a waiting
// retry of the call go (the breaker's half-open probe and the gate's probe
// are then one attempt). l (may be nil) hears the state changes the asking
// makes. It is a budget.GuardWatcher and a budget.GuardReturner: a retry it let go whose caller left
// before it was sent gives its half-open slot back at once.
func (b *Breaker) Guard(c criticality.Level, l Listener) budget.Guard {
	return guard{b: b, l: l, c: c}
}

type guard struct {
	b *Breaker
	l Listener
	c criticality.Level
}

func (g guard) Closed() bool { return g.b.Closed() }

func (g guard) AllowRetry() (bool, time.Time) { return g.b.AllowRetry(g.c, g.l) }

// ReturnRetry: a retry AllowRetry let go was not sent; the breaker hears it
// as an attempt that never reached a server (Other), which frees the
// half-open slot it took.
func (g guard) ReturnRetry() { g.b.Record(budget.Other, false, g.c, g.l) }

// WatchChange: f runs once at the breaker's next change of state, outside
// its lock (budget.GuardWatcher): a Gate's waiters that the breaker held go
// when another method's probe closes it.
func (g guard) WatchChange(key any, f func()) { g.b.watchChange(key, f) }

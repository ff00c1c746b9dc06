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
// makes.
func (b *Breaker) Guard(c criticality.Level, l Listener) budget.Guard {
	return guard{b: b, l: l, level: c.Index()}
}

type guard struct {
	b     *Breaker
	l     Listener
	level int
}

func (g guard) Closed() bool { return g.b.Closed() }

// ReturnRetry frees the half-open probe slot that AllowRetry gave a retry
// that is not sent.
func (g guard) ReturnRetry() { g.b.returnProbe() }

func (g guard) AllowRetry() (bool, time.Time, func()) {
	if g.b.Closed() {
		return true, time.Time{}, nil
	}
	ok, next, ch, changed := g.b.allowRetry(g.b.now(), g.level)
	if !changed {
		return ok, next, nil
	}
	return ok, next, func() { g.b.tell(ch, g.l) }
}

package budget

import (
	"time"

	"github.com/stagger-go/stagger/internal/clock"
)

// Option configures a budget when it is built.
type Option func(*clock.Options)

// WithClock makes the budget read the time from now instead of time.Now. The
// time only moves a ratio budget's window and a Gate's rules, and stamps
// State; tests and the simulator pass a virtual clock. A nil now means
// time.Now.
func WithClock(now func() time.Time) Option {
	return func(o *clock.Options) { o.SetNow(now) }
}

// WithRandom makes a Gate draw its random numbers (the first release credit
// after an outage: see Gate, the release rule) from f, which must return values in
// [0, 1) and is called under the gate's lock; the simulator passes its
// seeded source. A nil f means math/rand/v2's Float64.
func WithRandom(f func() float64) Option {
	return func(o *clock.Options) { o.SetRand(f) }
}

func buildOptions(opts []Option) clock.Options { return clock.Build(opts) }

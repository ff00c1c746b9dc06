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

// WithRandom makes a Gate seed the generator it draws its random numbers
// from (see Gate, the release and futility rules) with two draws of f,
// which must return values in [0, 1), when the Gate is built: f is never
// called after, nor under the gate's lock. The simulator passes its seeded
// source, so that a run is the same for the same seed. A nil f means
// math/rand/v2's Float64.
func WithRandom(f func() float64) Option {
	return func(o *clock.Options) { o.SetRand(f) }
}

func buildOptions(opts []Option) clock.Options { return clock.Build(opts) }

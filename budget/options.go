package budget

import (
	"math/rand/v2"
	"time"
)

// Option configures a budget when it is built.
type Option func(*options)

type options struct {
	now  func() time.Time
	rand func() float64
}

// WithClock makes the budget read the time from now instead of time.Now. The
// time only moves a ratio budget's window and stamps State; tests and the
// simulator pass a virtual clock. A nil now means time.Now.
func WithClock(now func() time.Time) Option {
	return func(o *options) {
		if now != nil {
			o.now = now
		}
	}
}

// WithRandom makes a Gate draw its random numbers (see Gate, rule 3) from
// f, which must return values in [0, 1) and is called under the gate's
// lock; the simulator passes its seeded source. A nil f means
// math/rand/v2's Float64.
func WithRandom(f func() float64) Option {
	return func(o *options) {
		if f != nil {
			o.rand = f
		}
	}
}

func buildOptions(opts []Option) options {
	o := options{now: time.Now, rand: rand.Float64}
	for _, opt := range opts {
		if opt != nil {
			opt(&o)
		}
	}
	return o
}

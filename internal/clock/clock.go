// Package clock holds the time and randomness that package budget and
// package breaker take as options, so that tests and the simulator can run
// them on a virtual clock with a seeded source.
package clock

import (
	"math/rand/v2"
	"time"
)

// Options are a budget's or a breaker's clock and random source.
type Options struct {
	Now  func() time.Time
	Rand func() float64
	// Virtual: Now is the caller's (SetNow), not the time package's: no
	// timer of the time package fires on it.
	Virtual bool
}

// SetNow sets Now unless now is nil.
func (o *Options) SetNow(now func() time.Time) {
	if now != nil {
		o.Now, o.Virtual = now, true
	}
}

// SetRand sets Rand unless f is nil.
func (o *Options) SetRand(f func() float64) {
	if f != nil {
		o.Rand = f
	}
}

// Build applies opts, nil ones skipped, to time.Now and math/rand/v2's
// Float64.
func Build[O ~func(*Options)](opts []O) Options {
	o := Options{Now: time.Now, Rand: rand.Float64}
	for _, opt := range opts {
		if opt != nil {
			opt(&o)
		}
	}
	return o
}

// Later returns the latest of a and bs.
func Later(a time.Time, bs ...time.Time) time.Time {
	for _, b := range bs {
		if b.After(a) {
			a = b
		}
	}
	return a
}

// Earlier returns the earlier of a and b, a zero time counting as none.
func Earlier(a, b time.Time) time.Time {
	if a.IsZero() || !b.IsZero() && b.Before(a) {
		return b
	}
	return a
}

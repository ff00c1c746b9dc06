package budget

import "time"

// Option configures a budget when it is built.
type Option func(*options)

type options struct {
	now func() time.Time
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

func buildOptions(opts []Option) options {
	o := options{now: time.Now}
	for _, opt := range opts {
		if opt != nil {
			opt(&o)
		}
	}
	return o
}

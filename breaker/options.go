package breaker

import (
	"fmt"
	"time"

	"github.com/stagger-go/stagger/internal/clock"
)

// Option configures a Breaker or a Set when it is built.
type Option func(*clock.Options)

// WithClock makes the breaker read the time from now instead of time.Now;
// tests and the simulator pass a virtual clock. A nil now means time.Now.
func WithClock(now func() time.Time) Option {
	return func(o *clock.Options) { o.SetNow(now) }
}

// WithRandom makes adaptive throttling draw its random numbers from f,
// which must return values in [0, 1) and is called under the breaker's
// lock; the simulator passes its seeded source. A nil f means
// math/rand/v2's Float64.
func WithRandom(f func() float64) Option {
	return func(o *clock.Options) { o.SetRand(f) }
}

func buildOptions(opts []Option) clock.Options { return clock.Build(opts) }

// SettingsError reports a setting that breaks its rule. Field is the
// setting's name in Settings (FailureRatio, BreakDuration...).
type SettingsError struct {
	Field string
	Rule  string
	Value any
}

func (e *SettingsError) Error() string {
	v := e.Value
	if d, ok := v.(time.Duration); ok {
		v = d.String()
	}
	return fmt.Sprintf("breaker: %s: %s, got %v", e.Field, e.Rule, v)
}

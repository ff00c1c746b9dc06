package policy

import (
	"fmt"
	"math"
	"time"

	"github.com/stagger-go/stagger/budget"
)

// longPause is the longest pause a file may write without a warning,
// whatever else bounds the call: a backoff or hedging delay of more than
// an hour is a typo ("99999999999s" saturates at 292 years), and a call
// without a deadline would sit that long in it.
const longPause = time.Hour

// pauseBound is one bound a pause of an entry should stay within, and why.
type pauseBound struct {
	d   time.Duration
	why string
}

// warnLongPauses warns of each pause a method entry of c writes
// (retryPolicy's initialBackoff and maxBackoff, hedgingPolicy's
// hedgingDelay) that is longer than what bounds its call: the entry's
// timeout (no retry or hedge can follow such a pause), the deferring
// budget's defer.maxWait (the longest a call without a deadline is held;
// stagger.DialOptions' default budget when the file declares none), or
// longPause. It names the tightest bound passed. A warning, not an
// error: grpc-go accepts such a file.
func (w *walker) warnLongPauses(c *Config) {
	var maxWait *pauseBound
	s, whose := c.budgetSettings, "the budget's"
	if s.Kind == budget.KindNone {
		s, whose = budget.DefaultSettings(), "the default budget's (stagger.DialOptions; the file declares none)"
	}
	if b, err := budget.New(s); err == nil {
		if _, ok := b.(budget.Deferrer); ok {
			maxWait = &pauseBound{s.WithDefaults().Defer.MaxWait, fmt.Sprintf("%s defer.maxWait (%v), the longest a call without a deadline is held", whose, s.WithDefaults().Defer.MaxWait)}
		}
	}
	hour := pauseBound{longPause, "an hour"}
	for _, e := range c.entries {
		m, path := e.Method, index("methodConfig", e.Index)
		// A timeout gives every call a deadline, and maxWait bounds only
		// the calls without one.
		var timeout, wait *pauseBound
		if m.Timeout > 0 {
			timeout = &pauseBound{m.Timeout, fmt.Sprintf("the entry's timeout (%v): no attempt can follow such a pause", m.Timeout)}
		} else {
			wait = maxWait
		}
		if r := m.Retry; r != nil {
			for _, f := range []struct {
				key string
				d   time.Duration
			}{{"initialBackoff", r.Backoff.Initial}, {"maxBackoff", r.Backoff.Max}} {
				w.warnLongPause(join(path, "retryPolicy."+f.key), f.d, timeout, wait, &hour)
			}
		}
		if h := m.Hedging; h != nil {
			w.warnLongPause(join(path, "hedgingPolicy.hedgingDelay"), h.Delay, timeout, &hour)
		}
	}
}

// warnLongPause warns when d passes one of bounds (nil ones skipped),
// naming the tightest it passes.
func (w *walker) warnLongPause(path string, d time.Duration, bounds ...*pauseBound) {
	var passed *pauseBound
	for _, b := range bounds {
		if b != nil && d > b.d && (passed == nil || b.d < passed.d) {
			passed = b
		}
	}
	if passed == nil {
		return
	}
	shown, typo := d.String(), ""
	if d == math.MaxInt64 {
		shown = "the longest duration (about 292 years)"
	}
	if d > longPause {
		typo = " (a typo?)"
		if passed.d < longPause {
			typo = ", and than an hour (a typo?)"
		}
	}
	w.warn(path, "%s is longer than %s%s", shown, passed.why, typo)
}

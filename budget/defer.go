package budget

import (
	"context"
	"errors"
	"math"
	"sync"
	"sync/atomic"
	"time"
)

// DeferMode says whether a budget's refused retries wait (see Gate).
type DeferMode uint8

const (
	// DeferAuto: stagger's own kinds defer (token bucket, ratio); the gRFC A6
	// throttle refuses at once, as A6 says.
	DeferAuto DeferMode = iota
	// DeferOn: refused retries wait, whatever the kind.
	DeferOn
	// DeferOff: refused retries end their call at once.
	DeferOff
)

// DeferSettings configure deferral (a policy file's "defer"). A zero field
// takes the default written beside it. Comparable with ==.
type DeferSettings struct {
	Mode DeferMode
	// MaxWaiting bounds the calls waiting at once on one budget; a retry
	// refused past it ends its call at once (reason budget). In [1, 1e6];
	// default 1024. Each waiting call holds its goroutine and its request.
	MaxWaiting int
	// MaxWait bounds the wait of a call without a deadline: past it the
	// call ends with its last status. In [1ms, 1h]; default 10s.
	MaxWait time.Duration
}

// Defaults of DeferSettings.
const (
	DefaultMaxWaiting = 1024
	DefaultMaxWait    = 10 * time.Second
)

// WithDefaults returns s with each zero field replaced by its default.
func (s DeferSettings) WithDefaults() DeferSettings {
	if s.MaxWaiting == 0 {
		s.MaxWaiting = DefaultMaxWaiting
	}
	if s.MaxWait == 0 {
		s.MaxWait = DefaultMaxWait
	}
	return s
}

// Validate reports the first setting that breaks its rule, as a
// *SettingsError naming the policy file's field (under "defer").
func (s DeferSettings) Validate() error {
	if s.Mode > DeferOff {
		return &SettingsError{Field: "defer", Rule: "must be auto, on or off", Value: s.Mode}
	}
	if s.MaxWaiting < 0 || s.MaxWaiting > 1e6 {
		return &SettingsError{Field: "defer.maxWaiting", Rule: "must be in [1, 1e6]", Value: s.MaxWaiting}
	}
	if s.MaxWait != 0 && (s.MaxWait < time.Millisecond || s.MaxWait > time.Hour) {
		return &SettingsError{Field: "defer.maxWait", Rule: "must be in [1ms, 1h]", Value: s.MaxWait}
	}
	return nil
}

// on reports whether a budget of kind k defers under s.
func (s DeferSettings) on(k Kind) bool {
	switch s.Mode {
	case DeferOn:
		return true
	case DeferOff:
		return false
	}
	return k == KindTokenBucket || k == KindRatio
}

// Admission says how a deferred retry was let go.
type Admission uint8

const (
	// AdmitNone: not a deferred retry (an attempt the budget admitted at
	// once, or a first attempt).
	AdmitNone Admission = iota
	// AdmitBudget: the budget's own Allow admitted it, asked again.
	AdmitBudget
	// AdmitRelease: released after the server came back, at the pace of the
	// successes the process sees (see Gate).
	AdmitRelease
	// AdmitProbe: sent as a probe: nothing reached the server for as long
	// as the retry's pause, and no other probe was out.
	AdmitProbe
)

// String returns "none", "budget", "release" or "probe".
func (a Admission) String() string {
	switch a {
	case AdmitBudget:
		return "budget"
	case AdmitRelease:
		return "release"
	case AdmitProbe:
		return "probe"
	}
	return "none"
}

// Deferrer is a Budget whose refused retries may wait for a later admission
// (Gate). The interceptors ask Allow first; when it refuses, they call Wait.
type Deferrer interface {
	Budget
	// Wait blocks the calling goroutine until the retry r, which Allow
	// refused, is admitted, no sooner than pause from now. It returns how,
	// or an error: ErrTooManyWaiting at once when the bound is reached,
	// ErrWaitLimit when a call without a deadline waited MaxWait, the
	// context's error when ctx ends (its deadline is treated as reached a
	// millisecond early: no retry starts with less left).
	Wait(ctx context.Context, r Request, pause time.Duration) (Admission, error)
}

var (
	// ErrTooManyWaiting: the budget's bound of waiting calls is reached.
	ErrTooManyWaiting = errors.New("budget: too many calls waiting for a retry")
	// ErrWaitLimit: a call without a deadline waited DeferSettings.MaxWait.
	ErrWaitLimit = errors.New("budget: a deferred retry waited its longest (defer.maxWait)")
)

// Release pacing, once the server is back (the first success after
// failures): a release credit lets one waiting retry go. Credits accrue at
// ReleasePerSecond, and by gain with every success the process records;
// gain starts at ReleaseGainStart, doubles with every deferred retry that
// succeeds, up to ReleaseGainMax, and halves (not below the start) with
// every released retry that fails, while the credits drop to nothing: TCP's
// slow start, counted in the process's own successes, so that released
// retries stay a bounded share of the traffic the server is seen to take.
// Credits never exceed one, so releases come one at a time, never in a
// burst.
const (
	ReleasePerSecond = 1.5
	ReleaseGainStart = 1.0 / 16
	ReleaseGainMax   = 3.0 / 16
	// ProbeGapMax bounds the quiet time a probe needs.
	ProbeGapMax = 30 * time.Second
	// waitSlack: no retry starts with less than this before the deadline.
	waitSlack = time.Millisecond
)

// Gate adds deferral to a budget: a retry the budget refuses waits, within
// its call's deadline, instead of ending the call, and goes when one of
// these admits it, asked in this order every time the gate learns something
// (an attempt recorded) and when a probe falls due:
//
//  1. while attempts fail, one deferred retry at a time, when no attempt
//     reached the server (recorded a success or a failure) for as long as
//     the quiet time: paid for by the budget when its Allow admits it now
//     (AdmitBudget), else as a probe (AdmitProbe). Fresher evidence than the
//     retry would bring keeps coming from other calls' attempts, so it
//     waits; a process with no other traffic probes at its backoff's pace.
//     The quiet time starts at the retry's own pause and doubles with every
//     deferred retry that fails, up to 30s; a success resets it;
//  2. once the server is back (the last attempt that reached it
//     succeeded): a release credit, paced as ReleasePerSecond says: a few
//     per second and a growing share of the process's successes, one at a
//     time. A failure goes back to 1.
//
// No retry is admitted sooner than its pause. The waiting calls are bounded
// (DeferSettings.MaxWaiting); a call without a deadline waits at most
// MaxWait. Waiting costs the caller's goroutine only: no goroutine or timer
// is started but the one Wait sleeps on.
//
// A Gate is a Budget: Record and Allow pass through to the budget it wraps
// (Allow counts in the budget's State like any other). When nobody waits,
// Record costs one atomic load beyond the budget's own.
type Gate struct {
	b   Budget
	s   DeferSettings
	now func() time.Time

	// waiting mirrors the count under mu, for Record's fast path.
	waiting atomic.Int32
	// succeeded: a success was recorded while nobody waited, so the state
	// the last outage left (probe gap, gain) is stale.
	succeeded atomic.Bool

	mu          sync.Mutex
	nWaiting    int
	lastReached time.Time
	failing     bool
	probesOut   int
	probeGap    time.Duration
	credits     float64
	creditAt    time.Time
	gain        float64
	changed     chan struct{}
	// counters for State.
	deferred, admitted, gaveUp uint64
}

// Deferring wraps b so that its refused retries wait (see Gate). s.Mode is
// not consulted: the caller chose to defer.
func Deferring(b Budget, s DeferSettings, opts ...Option) (*Gate, error) {
	if b == nil {
		return nil, errors.New("budget: Deferring: nil budget (a nil budget is unlimited and never refuses)")
	}
	if err := s.Validate(); err != nil {
		return nil, err
	}
	o := buildOptions(opts)
	return &Gate{b: b, s: s.WithDefaults(), now: o.now, gain: ReleaseGainStart, changed: make(chan struct{})}, nil
}

// Unwrap returns the budget the gate wraps.
func (g *Gate) Unwrap() Budget { return g.b }

// Settings returns the gate's settings, defaults applied.
func (g *Gate) Settings() DeferSettings { return g.s }

// Allow asks the wrapped budget.
func (g *Gate) Allow(r Request) bool { return g.b.Allow(r) }

// Record tells the wrapped budget, then the gate, how an attempt ended.
func (g *Gate) Record(a Attempt) {
	g.b.Record(a)
	if g.waiting.Load() == 0 && a.Admission == AdmitNone {
		if a.Outcome == Success && !g.succeeded.Load() {
			g.succeeded.Store(true)
		}
		return
	}
	now := g.now()
	g.mu.Lock()
	defer g.mu.Unlock()
	if (a.Admission == AdmitProbe || a.Admission == AdmitBudget) && g.probesOut > 0 {
		g.probesOut--
	}
	switch a.Outcome {
	case Success:
		g.lastReached = now
		if g.failing {
			// The server is back: release slowly, from now.
			g.failing, g.gain, g.probeGap = false, ReleaseGainStart, 0
			g.credits, g.creditAt = 0, now
		}
		if a.Admission != AdmitNone {
			g.gain = math.Min(2*g.gain, ReleaseGainMax)
		}
		g.accrueLocked(now, g.gain)
	case Failure:
		g.lastReached = now
		g.failing, g.credits = true, 0
		if a.Admission == AdmitProbe || a.Admission == AdmitBudget {
			g.probeGap = min(2*g.probeGap, ProbeGapMax)
		}
		if a.Admission == AdmitRelease || a.Admission == AdmitBudget {
			g.gain = math.Max(g.gain/2, ReleaseGainStart)
		}
	}
	g.notifyLocked()
}

// accrueLocked adds the credits earned since creditAt, and extra; at most
// one is kept.
func (g *Gate) accrueLocked(now time.Time, extra float64) {
	if d := now.Sub(g.creditAt); d > 0 {
		g.credits += ReleasePerSecond * d.Seconds()
	}
	g.creditAt = now
	g.credits = math.Min(g.credits+extra, 1)
}

func (g *Gate) notifyLocked() {
	close(g.changed)
	g.changed = make(chan struct{})
}

// State returns the wrapped budget's state, with the calls waiting now and
// the gate's counters.
func (g *Gate) State() State {
	st := g.b.State()
	g.mu.Lock()
	st.Waiting, st.Deferred, st.DeferAdmitted, st.DeferGaveUp = g.nWaiting, g.deferred, g.admitted, g.gaveUp
	g.mu.Unlock()
	return st
}

// Waiter is one deferred retry, for code that cannot block (a simulator on a
// virtual clock): Enter, then Poll whenever the gate's Changed channel
// closes or the time Poll returned comes, and Leave once. Wait does all of
// it for a goroutine on the real clock.
type Waiter struct {
	g        *Gate
	r        Request
	pause    time.Duration
	earliest time.Time
	left     bool
}

// Enter registers a deferred retry r that must not go sooner than pause
// from now. It fails with ErrTooManyWaiting when the bound is reached.
func (g *Gate) Enter(r Request, pause time.Duration) (*Waiter, error) {
	now := g.now()
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.nWaiting >= g.s.MaxWaiting {
		g.gaveUp++
		return nil, ErrTooManyWaiting
	}
	if g.nWaiting == 0 && g.succeeded.Swap(false) {
		// Successes since the last wait: the last outage's state is stale.
		g.gain, g.probeGap = ReleaseGainStart, 0
	}
	g.nWaiting++
	g.waiting.Store(int32(g.nWaiting))
	g.deferred++
	// The refused retry's own attempt just ended: it is the latest evidence.
	g.lastReached = now
	if !g.failing {
		g.failing, g.credits = true, 0
	}
	g.probeGap = max(g.probeGap, pause)
	return &Waiter{g: g, r: r, pause: max(pause, 0), earliest: now.Add(max(pause, 0))}, nil
}

// Changed returns a channel closed the next time the gate learns something.
func (g *Gate) Changed() <-chan struct{} {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.changed
}

// Poll asks, now, whether w may go. When it may not, next is when asking
// again could change the answer without news (zero: only news will).
func (w *Waiter) Poll() (a Admission, next time.Time) {
	g := w.g
	now := g.now()
	if now.Before(w.earliest) {
		return AdmitNone, w.earliest
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if !g.failing {
		g.accrueLocked(now, 0)
		if g.credits >= 1 {
			g.credits--
			g.admitted++
			return AdmitRelease, time.Time{}
		}
		// Rounded up, and at least a millisecond: a wait of 0 would spin.
		d := time.Duration(math.Ceil((1 - g.credits) / ReleasePerSecond * float64(time.Second)))
		return AdmitNone, now.Add(max(d, time.Millisecond))
	}
	if g.probesOut > 0 {
		return AdmitNone, time.Time{}
	}
	// While attempts fail, a deferred retry goes only when the process
	// has been quiet for the quiet time, one at a time: paid by the budget
	// when it admits it (asked under the lock, so that two waiters cannot
	// both take its tokens), else as a probe.
	due := g.lastReached.Add(max(w.pause, g.probeGap))
	if now.Before(due) {
		return AdmitNone, due
	}
	g.probesOut++
	g.admitted++
	if g.b.Allow(w.r) {
		return AdmitBudget, time.Time{}
	}
	return AdmitProbe, time.Time{}
}

// Leave unregisters w; call it once, admitted or not.
func (w *Waiter) Leave() {
	if w.left {
		return
	}
	w.left = true
	g := w.g
	g.mu.Lock()
	g.nWaiting--
	g.waiting.Store(int32(g.nWaiting))
	g.mu.Unlock()
}

// giveUp counts a waiter that left without admission.
func (g *Gate) giveUp() {
	g.mu.Lock()
	g.gaveUp++
	g.mu.Unlock()
}

// Wait implements Deferrer on the time package's clock.
func (g *Gate) Wait(ctx context.Context, r Request, pause time.Duration) (Admission, error) {
	w, err := g.Enter(r, pause)
	if err != nil {
		return AdmitNone, err
	}
	defer w.Leave()
	limit, hasDeadline := ctx.Deadline()
	if hasDeadline {
		limit = limit.Add(-waitSlack)
	} else {
		limit = g.now().Add(g.s.MaxWait)
	}
	var t *time.Timer
	defer func() {
		if t != nil {
			t.Stop()
		}
	}()
	for {
		changed := g.Changed()
		a, next := w.Poll()
		if a != AdmitNone {
			return a, nil
		}
		now := g.now()
		if !now.Before(limit) {
			g.giveUp()
			if hasDeadline {
				return AdmitNone, context.DeadlineExceeded
			}
			return AdmitNone, ErrWaitLimit
		}
		wake := limit
		if !next.IsZero() && next.Before(wake) {
			wake = next
		}
		d := wake.Sub(now)
		if t == nil {
			t = time.NewTimer(d)
		} else {
			t.Reset(d)
		}
		select {
		case <-changed:
			// No drain: with Go 1.23 timers a receive after Stop blocks; with
			// older ones a stale tick only costs one more Poll.
			t.Stop()
		case <-t.C:
		case <-ctx.Done():
			g.giveUp()
			return AdmitNone, ctx.Err()
		}
	}
}

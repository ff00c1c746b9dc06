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
	// as the quiet time (see Gate), and no other probe was out.
	AdmitProbe
	// AdmitLast: sent as its call's last chance, just before the deadline,
	// while attempts fail: a probe that the call itself needs.
	AdmitLast
)

// String returns "none", "budget", "release", "probe" or "last".
func (a Admission) String() string {
	switch a {
	case AdmitLast:
		return "last"
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
// every released retry that fails: TCP's slow start, counted in the
// process's own successes, so that released retries stay a bounded share
// of the traffic the server is seen to take (the time-based part is kept
// small: it is the same in every process, however many there are). Credits
// never exceed one, so releases come one at a time, never in a burst.
const (
	ReleasePerSecond = 1.0
	ReleaseGainStart = 1.0 / 16
	ReleaseGainMax   = 3.0 / 16
	// OutageStreak failures in a row, with no success between, make an
	// outage (see Gate): release credits drop to nothing and new retries
	// queue behind the waiting ones. Fewer, under random failures, are
	// not one.
	OutageStreak = 2
	// ProbeGapMax bounds the probe and last-chance gaps (see Gate).
	ProbeGapMax = 30 * time.Second
	// QuietGapMax bounds what failures other than probes make of the probe
	// gap: a process whose calls stop after an outage probes within it.
	QuietGapMax = 4 * time.Second
	// LastChanceLead is the least time before its call's deadline at which
	// a waiting retry goes as the call's last chance (AdmitLast); twice the
	// latest deferred attempt's duration when that is longer.
	LastChanceLead = 50 * time.Millisecond
	// waitSlack: no retry starts with less than this before the deadline.
	waitSlack = time.Millisecond
)

// Gate adds deferral to a budget: a retry the budget refuses waits, within
// its call's deadline, instead of ending the call, and goes when one of
// these admits it, asked every time the gate learns something (an attempt
// recorded) and when a wait falls due:
//
//  1. while attempts fail (the last attempt that reached the server
//     failed), one deferred retry at a time, paid for by the budget when
//     its Allow admits it now (AdmitBudget), else as a probe (AdmitProbe),
//     when nothing reached the server for the quiet time: the longer of
//     the retry's own pause and the probe gap. The gap starts at the first
//     waiting retry's pause, doubles with every attempt that fails, the
//     new calls' first attempts included (up to QuietGapMax; a probe that
//     fails doubles it up to ProbeGapMax, and to no less than its own
//     pause), and halves with every success. A process that keeps sending
//     calls learns from them instead of probing; a quiet one probes at its
//     backoff's pace, slowed by every failure. The last attempt of a call
//     with a deadline (Request.Last) is not spent on a probe: it waits for
//     rule 2;
//  2. while attempts fail, a retry whose call has a deadline goes as that
//     call's last chance (AdmitLast, or AdmitBudget when paid) at the
//     deadline less LastChanceLead (or twice the latest deferred retry's
//     duration), when no other deferred retry is out, nothing reached the
//     server for its pause (fresher evidence than it would bring), and the
//     last deferred retry that failed ended at least the last-chance gap
//     ago. That gap starts at the first waiting retry's pause, doubles with
//     every deferred retry that fails and halves with every success: the
//     call has nothing to lose, and a long outage does not get one more
//     attempt per call;
//  3. once the server is back (the last attempt that reached it
//     succeeded): a release credit, paced as ReleasePerSecond says: about
//     one per second and a growing share of the process's successes, one
//     at a time. An outage (OutageStreak failures in a row) drops the
//     credits; the first credit after it is drawn at random, so that
//     processes that saw the recovery at the same moment do not release at
//     the same moment, or is a whole one when a deferred retry found the
//     server back (the waiting call whose last chance would have come next
//     must not lose it to the probe that came first). Fewer failures in a
//     row (random failures of a serving server) leave the credits alone.
//
// While calls wait during an outage, Allow refuses every retry (not
// hedges) without asking the budget: a new retry queues behind the waiting
// ones and goes by the same rules, so that budget-paid retries cannot burn
// a call's attempts against a server known to be failing, or pile onto one
// that is back but full.
//
// No retry is admitted sooner than its pause. The waiting calls are bounded
// (DeferSettings.MaxWaiting); a call without a deadline waits at most
// MaxWait. Waiting costs the caller's goroutine only: no goroutine or timer
// is started but the one Wait sleeps on.
//
// A Gate is a Budget: Record and Allow pass through to the budget it wraps
// (Allow counts in the budget's State like any other). When nobody waits,
// recording a success costs one atomic load beyond the budget's own; a
// failure takes the gate's lock and reads the clock.
type Gate struct {
	b    Budget
	s    DeferSettings
	now  func() time.Time
	rand func() float64

	// waiting mirrors the count under mu, for Record's and Allow's fast
	// paths.
	waiting atomic.Int32
	// succeeded: a success was recorded while nobody waited, so the state
	// the last outage left (probe gap, gain, new calls' failures) is stale.
	succeeded atomic.Bool
	// outageNow mirrors outage, for Allow.
	outageNow atomic.Bool

	mu          sync.Mutex
	nWaiting    int
	lastReached time.Time
	failing     bool
	// streak counts the failures since the last success; outage is set
	// when it reaches OutageStreak, until a success.
	streak    int
	outage    bool
	probesOut int
	probeAt   time.Time
	// probeTook is how long the latest deferred retry took.
	probeTook         time.Duration
	probeGap, lastGap time.Duration
	// probeFailed is when the latest deferred retry failed; probePause
	// the pause of the one out.
	probeFailed time.Time
	probePause  time.Duration
	// enterPause is the pause of the latest retry to begin waiting.
	enterPause time.Duration
	credits    float64
	creditAt   time.Time
	gain       float64
	changed    chan struct{}
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
	return &Gate{b: b, s: s.WithDefaults(), now: o.now, rand: o.rand, gain: ReleaseGainStart, creditAt: o.now(), changed: make(chan struct{})}, nil
}

// Unwrap returns the budget the gate wraps.
func (g *Gate) Unwrap() Budget { return g.b }

// Settings returns the gate's settings, defaults applied.
func (g *Gate) Settings() DeferSettings { return g.s }

// Allow asks the wrapped budget, except that while calls wait during an
// outage (OutageStreak failures in a row) it refuses every retry (hedges
// are asked as usual): the retry then waits with them.
func (g *Gate) Allow(r Request) bool {
	if !r.Hedge && g.waiting.Load() > 0 && g.outageNow.Load() {
		return false
	}
	return g.b.Allow(r)
}

// Record tells the wrapped budget, then the gate, how an attempt ended.
func (g *Gate) Record(a Attempt) {
	g.b.Record(a)
	if a.Outcome != Failure && a.Admission == AdmitNone && g.waiting.Load() == 0 {
		if a.Outcome == Success && !g.succeeded.Load() {
			g.succeeded.Store(true)
		}
		return
	}
	now := g.now()
	g.mu.Lock()
	defer g.mu.Unlock()
	g.staleLocked(now)
	if a.Admission.probing() && g.probesOut > 0 {
		g.probesOut--
		g.probeTook = now.Sub(g.probeAt)
	}
	switch a.Outcome {
	case Success:
		g.lastReached = now
		g.streak = 0
		g.failing = false
		if g.outage {
			// The server is back: release slowly, from now, from a credit
			// drawn at random (processes that saw the recovery together
			// must not release together).
			g.setOutage(false)
			g.gain = ReleaseGainStart
			g.credits, g.creditAt = g.rand(), now
			if a.Admission.probing() {
				// A deferred retry found the server back: one more goes
				// at once (the one whose deadline is nearest, if it asks
				// first), the first of the releases.
				g.credits = 1
			}
		}
		if a.Admission != AdmitNone {
			g.gain = math.Min(2*g.gain, ReleaseGainMax)
		}
		// Every success halves the gaps: a server that serves again is
		// probed sooner when it fails again, one that fails most attempts
		// (overloaded) is not probed back to back.
		g.probeGap, g.lastGap = g.probeGap/2, g.lastGap/2
		g.accrueLocked(now, g.gain)
	case Failure:
		g.lastReached = now
		g.failing = true
		if g.streak++; g.streak >= OutageStreak {
			g.setOutage(true)
			g.credits = 0
		}
		if a.Admission.probing() {
			// Never below the failed retry's own pause (successes may
			// have halved the gaps to nothing).
			base := max(g.probePause, time.Millisecond)
			g.probeGap = min(max(2*g.probeGap, base), ProbeGapMax)
			g.lastGap = min(max(2*g.lastGap, base), ProbeGapMax)
			g.probeFailed = now
		} else if g.probeGap < QuietGapMax {
			// From the latest waiting retry's pause when successes
			// halved the gap to nothing.
			g.probeGap = min(max(2*g.probeGap, g.enterPause), QuietGapMax)
		}
		if a.Admission == AdmitRelease || a.Admission == AdmitBudget {
			g.gain = math.Max(g.gain/2, ReleaseGainStart)
		}
	}
	g.notifyLocked()
}

// probing reports whether a deferred retry let go this way was the one
// probe out (rules 1 and 2 of Gate).
func (a Admission) probing() bool {
	return a == AdmitProbe || a == AdmitBudget || a == AdmitLast
}

// staleLocked forgets what the last outage left when successes were
// recorded since, while nobody waited.
func (g *Gate) staleLocked(now time.Time) {
	if g.succeeded.Swap(false) {
		g.gain, g.probeGap, g.lastGap = ReleaseGainStart, 0, 0
		g.streak = 0
		g.failing = false
		if g.outage {
			g.setOutage(false)
			g.credits, g.creditAt = g.rand(), now
		}
	}
}

// setOutage sets outage and its mirror for Allow.
func (g *Gate) setOutage(on bool) {
	g.outage = on
	g.outageNow.Store(on)
}

// leadLocked is how long before its deadline a last chance goes.
func (g *Gate) leadLocked() time.Duration {
	return max(LastChanceLead, 2*g.probeTook)
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

// notifyLocked wakes the waiters, if any (nobody else holds the channel).
func (g *Gate) notifyLocked() {
	if g.nWaiting == 0 {
		return
	}
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
	deadline time.Time
	left     bool
}

// Enter registers a deferred retry r that must not go sooner than pause
// from now, of a call whose deadline is deadline (zero: none). It fails
// with ErrTooManyWaiting when the bound is reached.
func (g *Gate) Enter(r Request, pause time.Duration, deadline time.Time) (*Waiter, error) {
	now := g.now()
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.nWaiting >= g.s.MaxWaiting {
		g.gaveUp++
		return nil, ErrTooManyWaiting
	}
	if g.nWaiting == 0 {
		g.staleLocked(now)
	}
	g.nWaiting++
	g.waiting.Store(int32(g.nWaiting))
	g.deferred++
	pause = max(pause, 0)
	// The refused retry's own attempt just ended: it is the latest evidence.
	g.lastReached = now
	g.failing = true
	g.probeGap, g.lastGap, g.enterPause = max(g.probeGap, pause), max(g.lastGap, pause), pause
	return &Waiter{g: g, r: r, pause: pause, earliest: now.Add(pause), deadline: deadline}, nil
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
	a, next, ch, changed := w.pollLocked(now)
	g.mu.Unlock()
	if changed {
		w.r.Breaker.tell(ch, w.r.Listener)
	}
	return a, next
}

// pollLocked is Poll under the gate's lock. It returns the change of the
// request's breaker, if asking it made one, for Poll to tell unlocked.
func (w *Waiter) pollLocked(now time.Time) (a Admission, next time.Time, ch BreakerChange, changed bool) {
	g := w.g
	br := w.r.Breaker
	// breakerAllows asks the request's breaker last, when the gate would
	// let the retry go: the half-open probe slot is taken only by a retry
	// that goes.
	breakerAllows := func() bool {
		if br == nil || br.Closed() {
			return true
		}
		var ok bool
		ok, next, ch, changed = br.allowRetry(now)
		return ok
	}
	if !g.failing {
		g.accrueLocked(now, 0)
		if g.credits >= 1 {
			if !breakerAllows() {
				return AdmitNone, next, ch, changed
			}
			g.credits--
			g.admitted++
			return AdmitRelease, time.Time{}, ch, changed
		}
		// Rounded up, and at least a millisecond: a wait of 0 would spin.
		d := time.Duration(math.Ceil((1 - g.credits) / ReleasePerSecond * float64(time.Second)))
		return AdmitNone, now.Add(max(d, time.Millisecond)), ch, changed
	}
	if g.probesOut > 0 {
		return AdmitNone, time.Time{}, ch, changed
	}
	// While attempts fail, one deferred retry goes at a time: as a probe
	// after the quiet time, or as its call's last chance.
	var due time.Time
	how := AdmitNone
	if !w.r.Last || w.deadline.IsZero() {
		due, how = g.lastReached.Add(max(w.pause, g.probeGap)), AdmitProbe
	}
	if !w.deadline.IsZero() {
		last := later(w.deadline.Add(-g.leadLocked()), g.probeFailed.Add(g.lastGap), g.lastReached.Add(w.pause))
		if how == AdmitNone || last.Before(due) {
			due, how = last, AdmitLast
		}
	}
	if now.Before(due) {
		return AdmitNone, due, ch, changed
	}
	paidOnly := br != nil && br.Closed()
	if !breakerAllows() {
		return AdmitNone, next, ch, changed
	}
	if paidOnly && !g.b.Allow(w.r) {
		// A breaker guards the call and is closed: it is the judge of
		// whether the server fails, and its half-open probe the probe;
		// a free probe would only repeat a call that failed (a key that
		// always fails). Wait for a release, a paid admission or the
		// deadline.
		return AdmitNone, time.Time{}, ch, changed
	}
	g.probesOut++
	g.probeAt, g.probePause = now, w.pause
	g.admitted++
	// Paid by the budget when it admits it (asked under the lock, so that
	// two waiters cannot both take its tokens).
	if paidOnly || g.b.Allow(w.r) {
		return AdmitBudget, time.Time{}, ch, changed
	}
	return how, time.Time{}, ch, changed
}

func later(a time.Time, bs ...time.Time) time.Time {
	for _, b := range bs {
		if b.After(a) {
			a = b
		}
	}
	return a
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
	deadline, _ := ctx.Deadline()
	w, err := g.Enter(r, pause, deadline)
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

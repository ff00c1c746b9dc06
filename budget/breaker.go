package budget

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// BreakerSettings configure a circuit breaker and client-side adaptive
// throttling (a policy file's circuitBreaker and adaptiveThrottling). They
// share one sliding window of the attempts one Breaker guards. A zero
// field takes the default written beside it; the policy file rejects an
// explicit zero. Comparable with ==.
type BreakerSettings struct {
	// FailureRatio trips the breaker: when, over SamplingWindow, at least
	// MinimumThroughput first attempts got an answer and at least this
	// share of them failed. Only first attempts count: they sample the
	// server as the callers meet it, where retries repeat the calls that
	// failed (a key that always fails would count once per attempt). In
	// (0, 1]; default 0.5.
	FailureRatio float64
	// MinimumThroughput is the fewest answered first attempts in the
	// window before the ratio counts. In [1, 1e6]; default 20.
	MinimumThroughput int
	// ConsecutiveFailures first attempts failed in a row (no success of
	// any attempt between) trip the breaker while the window holds fewer
	// than MinimumThroughput answers: a client too quiet for the ratio
	// still stops calling a server that fails everything, and a busy one
	// is judged by the ratio alone (under 20 % random failures, 5 in a row
	// come once in 3,000 first attempts). In [1, 1e6]; default 5.
	ConsecutiveFailures int
	// SamplingWindow is the window's length, in [100ms, 24h]; default 10s.
	// It is kept as a ring of 10 slices: counts leave it a tenth at a time.
	SamplingWindow time.Duration
	// BreakDuration is the least time the breaker stays open before it
	// lets one probe through (half-open), in [1ms, 1h]; default 1s. Each
	// probe that fails doubles it, up to MaxBreakDuration; closing resets
	// it.
	BreakDuration time.Duration
	// ProbeEvery: the break also lasts until this many first attempts
	// were refused since the breaker opened (each failed probe doubles
	// it, up to 1000), so that probes stay a small share of what the
	// client asks, however many clients there are: a client of 10 calls a
	// second probes about every second, one of 1 call a second every 10
	// (a thousand such clients probing every second would double the load
	// of a server that is down). In [1, 1e6]; default 10.
	ProbeEvery int
	// MaxBreakDuration bounds the break however few first attempts are
	// refused (a quiet client, or only retries waiting), and the doubled
	// BreakDuration; in [BreakDuration, 24h]; default 10s.
	MaxBreakDuration time.Duration
	// NoTrip: the breaker never opens (adaptive throttling alone).
	NoTrip bool
	// ThrottleK turns on client-side adaptive throttling of first attempts
	// (Google SRE book, "Handling Overload"): a first attempt is rejected
	// locally with probability max(0, (requests − K × accepts) /
	// (requests + 1)), counted over the window, where requests are the
	// attempts asked for (rejected ones included) and accepts those the
	// server answered without failing. 0: off; else in [1, 100]; the SRE
	// book's K is 2.
	ThrottleK float64
	// Scope says what one Breaker guards: every method of one target
	// (ScopeTarget) or one method of one target (ScopeMethod, the default).
	Scope Scope
	// NoPacing turns off the pacing of first attempts held while their
	// connection was not ready (see Breaker.Pace; the interceptors hold
	// waitForReady calls).
	NoPacing bool
}

// Scope says what one Breaker guards.
type Scope uint8

const (
	// ScopeMethod: one breaker per target and method, so that one failing
	// method (or one whose keys fail) does not stop the others.
	ScopeMethod Scope = iota
	// ScopeTarget: one breaker per target (the ClientConn's target string),
	// for a target whose methods fail together.
	ScopeTarget
)

// String returns "method" or "target".
func (s Scope) String() string {
	switch s {
	case ScopeMethod:
		return "method"
	case ScopeTarget:
		return "target"
	}
	return "Scope(" + strconv.Itoa(int(s)) + ")"
}

// Defaults of BreakerSettings.
const (
	DefaultFailureRatio      = 0.5
	DefaultMinimumThroughput = 20
	DefaultConsecutive       = 5
	DefaultSamplingWindow    = 10 * time.Second
	DefaultBreakDuration     = time.Second
	DefaultMaxBreakDuration  = 5 * time.Second
	DefaultProbeEvery        = 10
	maxProbeEvery            = 1000
	DefaultThrottleK         = 2.0
)

// WithDefaults returns s with each zero field replaced by its default
// (ThrottleK stays 0: off).
func (s BreakerSettings) WithDefaults() BreakerSettings {
	if s.FailureRatio == 0 {
		s.FailureRatio = DefaultFailureRatio
	}
	if s.MinimumThroughput == 0 {
		s.MinimumThroughput = DefaultMinimumThroughput
	}
	if s.ConsecutiveFailures == 0 {
		s.ConsecutiveFailures = DefaultConsecutive
	}
	if s.SamplingWindow == 0 {
		s.SamplingWindow = DefaultSamplingWindow
	}
	if s.BreakDuration == 0 {
		s.BreakDuration = DefaultBreakDuration
	}
	if s.ProbeEvery == 0 {
		s.ProbeEvery = DefaultProbeEvery
	}
	if s.MaxBreakDuration == 0 {
		s.MaxBreakDuration = max(DefaultMaxBreakDuration, s.BreakDuration)
	}
	return s
}

// Validate reports the first setting that breaks its rule, as a
// *SettingsError naming the policy file's field. Zero fields are valid
// (defaults); NaN and infinities are not.
func (s BreakerSettings) Validate() error {
	f := s.WithDefaults()
	switch {
	case !(f.FailureRatio > 0 && f.FailureRatio <= 1):
		return &SettingsError{Field: "circuitBreaker.failureRatio", Rule: "must be in (0, 1]", Value: s.FailureRatio}
	case f.MinimumThroughput < 1 || f.MinimumThroughput > 1e6:
		return &SettingsError{Field: "circuitBreaker.minimumThroughput", Rule: "must be in [1, 1e6]", Value: s.MinimumThroughput}
	case f.ConsecutiveFailures < 1 || f.ConsecutiveFailures > 1e6:
		return &SettingsError{Field: "circuitBreaker.consecutiveFailures", Rule: "must be in [1, 1e6]", Value: s.ConsecutiveFailures}
	case f.SamplingWindow < 100*time.Millisecond || f.SamplingWindow > 24*time.Hour:
		return &SettingsError{Field: "circuitBreaker.samplingWindow", Rule: "must be in [100ms, 24h]", Value: s.SamplingWindow}
	case f.BreakDuration < time.Millisecond || f.BreakDuration > time.Hour:
		return &SettingsError{Field: "circuitBreaker.breakDuration", Rule: "must be in [1ms, 1h]", Value: s.BreakDuration}
	case f.ProbeEvery < 1 || f.ProbeEvery > 1e6:
		return &SettingsError{Field: "circuitBreaker.probeEvery", Rule: "must be in [1, 1e6]", Value: s.ProbeEvery}
	case f.MaxBreakDuration < f.BreakDuration || f.MaxBreakDuration > 24*time.Hour:
		return &SettingsError{Field: "circuitBreaker.maxBreakDuration", Rule: "must be in [breakDuration, 24h]", Value: s.MaxBreakDuration}
	case s.ThrottleK != 0 && !(s.ThrottleK >= 1 && s.ThrottleK <= 100):
		return &SettingsError{Field: "adaptiveThrottling.k", Rule: "must be in [1, 100]", Value: s.ThrottleK}
	case s.Scope > ScopeTarget:
		return &SettingsError{Field: "circuitBreaker.scope", Rule: "must be METHOD or TARGET", Value: s.Scope}
	case s.NoTrip && s.ThrottleK == 0:
		return &SettingsError{Field: "circuitBreaker", Rule: "neither trips nor throttles (NoTrip without ThrottleK)", Value: "NoTrip"}
	}
	return nil
}

// BreakerState is a breaker's state.
type BreakerState uint8

const (
	// BreakerClosed: attempts go (subject to throttling and the budget).
	BreakerClosed BreakerState = iota
	// BreakerOpen: first attempts fail fast and retries wait, until the
	// break is over.
	BreakerOpen
	// BreakerHalfOpen: the break is over; one attempt at a time (a first
	// attempt, or a waiting retry let go by the Gate) goes as a probe.
	BreakerHalfOpen
)

// String returns "closed", "open" or "half-open".
func (s BreakerState) String() string {
	switch s {
	case BreakerClosed:
		return "closed"
	case BreakerOpen:
		return "open"
	case BreakerHalfOpen:
		return "half-open"
	}
	return "BreakerState(" + strconv.Itoa(int(s)) + ")"
}

// BreakerChange is one change of a breaker's state, as hooks hear it.
type BreakerChange struct {
	// Key names what the breaker guards: the target, and the method under
	// ScopeMethod ("target /svc/Method").
	Key      string
	From, To BreakerState
	// Failures and Answered are the window's counts when it opened.
	Failures, Answered uint64
	// Break is how long it stays open (To == BreakerOpen).
	Break time.Duration
	At    time.Time
}

// ErrBreakerOpen is what Admit's refusal wraps when the breaker is open;
// ErrThrottled when adaptive throttling rejected the attempt.
var (
	ErrBreakerOpen = errors.New("circuit breaker open")
	ErrThrottled   = errors.New("adaptive throttling rejected the call locally")
)

// Refusal is why Breaker.Admit refused an attempt: it names the breaker
// and says when the next probe may go.
type Refusal struct {
	Key string
	// Err is ErrBreakerOpen or ErrThrottled.
	Err error
	// Retry is when the breaker lets its next probe go (open), or zero.
	Retry time.Time
	// P is the throttling probability the attempt drew against.
	P float64
	// at is when it was refused.
	at time.Time
}

func (r *Refusal) Error() string {
	if r.Err == ErrThrottled {
		return fmt.Sprintf("stagger: %v (%s; p=%.2f)", r.Err, r.Key, r.P)
	}
	return fmt.Sprintf("stagger: %v (%s; next probe in %v)", r.Err, r.Key, max(r.Retry.Sub(r.at), 0).Round(time.Millisecond))
}

func (r *Refusal) Unwrap() error { return r.Err }

// Window counters of a Breaker, of first attempts only.
const (
	brRequests = iota // asked for, throttled ones included
	brAccepts         // answered without failing
	brFailures        // answered with a failure
)

// Breaker is a circuit breaker and client-side adaptive throttling for one
// key (see Breakers): closed, it counts its first attempts' outcomes over
// a sliding window and opens when FailureRatio of at least
// MinimumThroughput answered first attempts failed, or when
// ConsecutiveFailures first attempts failed in a row; open, it refuses first attempts (fail fast:
// Admit) and retries (AllowRetry: a Gate keeps them waiting) for
// BreakDuration; then, half-open, it lets one attempt go as a probe, a first
// attempt or a waiting retry, whichever asks first, the same probe a Gate
// sends (one probe mechanism: the Gate asks AllowRetry before it lets a
// retry of this key go). Whatever attempt is answered next decides: a
// success closes it, a failure opens it again for twice as long (up to
// MaxBreakDuration). A probe that never reports frees its slot after the
// current break.
//
// While closed with ThrottleK set, Admit rejects first attempts locally with
// the SRE book's probability; retries are the budget's to admit.
//
// Outcomes: Success and a Failure are answers; Other (the caller's own
// deadline or cancellation, an attempt that never reached a server) counts
// only as a request. State changes reach the Breakers' onChange and the
// asking call's BreakerListener after every lock is released. A Breaker is safe for concurrent use. Closed without
// throttling, Admit and AllowRetry are one atomic load and Record of a
// success one atomic add (most of the time: see foldEvery); throttling adds
// an atomic add to Admit while it is far from rejecting; none allocates.
type Breaker struct {
	key      string
	s        BreakerSettings
	now      func() time.Time
	rand     func() float64
	onChange func(BreakerChange)

	// state mirrors st for the fast paths.
	state atomic.Uint32
	// pendReq and pendAcc count the first attempts asked for (throttling
	// only) and the successes recorded on the fast paths, not yet in w:
	// they are folded into it under the lock, at least every foldEvery,
	// so a success costs an atomic add, and at most foldEvery−1 of them
	// are counted a little late. mayThrottle: the window, plus a batch of
	// requests without accepts, could make throttling reject: every Admit
	// takes the lock.
	pendReq, pendAcc atomic.Uint32
	mayThrottle      atomic.Bool
	// streak counts the first attempts failed in a row; a success of any
	// attempt resets it.
	streak atomic.Int32

	mu       sync.Mutex
	st       BreakerState
	w        window
	breakFor time.Duration
	// retryAt: when the open breaker lets a probe go; probeOut: a probe is
	// out, since probeAt.
	retryAt time.Time
	// openedAt: when it last opened; refusedOpen: first attempts refused
	// since; probeEvery: how many must be before a probe (ProbeEvery,
	// doubled per failed probe).
	openedAt    time.Time
	refusedOpen int
	probeEvery  int
	probeOut    bool
	probeAt     time.Time
	// paceAt is the start Pace gave the latest held attempt.
	paceAt   time.Time
	opened   uint64
	rejected uint64
	thrott   uint64
}

// NewBreaker returns a closed breaker for key, or a *SettingsError. onChange
// (may be nil) hears every state change, outside the breaker's lock.
func NewBreaker(key string, s BreakerSettings, onChange func(BreakerChange), opts ...Option) (*Breaker, error) {
	if err := s.Validate(); err != nil {
		return nil, err
	}
	s = s.WithDefaults()
	o := buildOptions(opts)
	b := &Breaker{key: key, s: s, now: o.now, rand: o.rand, onChange: onChange, w: newWindow(o.now(), s.SamplingWindow), breakFor: s.BreakDuration, probeEvery: s.ProbeEvery}
	b.mayThrottle.Store(s.ThrottleK > 0)
	return b, nil
}

// Key returns what the breaker guards.
func (b *Breaker) Key() string { return b.key }

// Settings returns the breaker's settings, defaults applied.
func (b *Breaker) Settings() BreakerSettings { return b.s }

// Admit asks for a first attempt; l (may be nil) hears the state change
// the asking makes. It returns nil when it may go, or a
// *Refusal: the breaker is open (wrapping ErrBreakerOpen) or throttling
// drew a rejection (ErrThrottled). An attempt Admit lets go must be
// reported to Record when it ends.
func (b *Breaker) Admit(l BreakerListener) error {
	if BreakerState(b.state.Load()) == BreakerClosed {
		if b.s.ThrottleK == 0 {
			return nil
		}
		if !b.mayThrottle.Load() {
			if b.pendReq.Add(1)%foldEvery == 0 {
				b.fold()
			}
			return nil
		}
	}
	return b.admit(l)
}

// foldEvery is how many fast-path counts wait before they are folded into
// the window.
const foldEvery = 64

// fold folds the fast paths' counts into the window now.
func (b *Breaker) fold() {
	now := b.now()
	b.mu.Lock()
	b.foldLocked(now)
	b.mu.Unlock()
}

// foldLocked folds the fast paths' counts into the window at now, and
// decides whether Admit must take the lock: when, even after foldEvery
// more requests without an accept, throttling would still not reject
// (requests − K × accepts stays below zero), it need not.
func (b *Breaker) foldLocked(now time.Time) {
	if n := b.pendReq.Swap(0); n > 0 {
		b.w.add(now, brRequests, uint64(n))
	}
	if n := b.pendAcc.Swap(0); n > 0 {
		b.w.add(now, brAccepts, uint64(n))
	}
	if b.s.ThrottleK > 0 {
		b.w.advance(now)
		slack := float64(b.w.sum[brRequests]+foldEvery) - b.s.ThrottleK*float64(b.w.sum[brAccepts])
		b.mayThrottle.Store(slack >= 0)
	}
}

// AllowRetry asks for a retry or a hedge: true when the breaker is closed,
// or when this retry may go as the half-open probe; else false and when to
// ask again without news (the break's end, or zero: after the probe
// reports). A retry it lets go must be reported to Record. l (may be nil)
// hears the state change the asking makes.
func (b *Breaker) AllowRetry(l BreakerListener) (bool, time.Time) {
	if BreakerState(b.state.Load()) == BreakerClosed {
		return true, time.Time{}
	}
	ok, next, ch, changed := b.allowRetry(b.now())
	if changed {
		b.tell(ch, l)
	}
	return ok, next
}

// Closed reports whether the breaker is closed now (one atomic load).
func (b *Breaker) Closed() bool { return BreakerState(b.state.Load()) == BreakerClosed }

// allowRetry is AllowRetry at now, with the state change it made for the
// caller to tell once it holds no lock.
func (b *Breaker) allowRetry(now time.Time) (ok bool, next time.Time, ch BreakerChange, changed bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	ch, changed = b.probeLocked(now)
	err := b.admitLocked(now, true)
	if err == nil {
		return true, time.Time{}, ch, changed
	}
	return false, err.Retry, ch, changed
}

func (b *Breaker) admit(l BreakerListener) error {
	now := b.now()
	b.mu.Lock()
	ch, changed := b.probeLocked(now)
	err := b.admitLocked(now, false)
	b.mu.Unlock()
	if changed {
		b.tell(ch, l)
	}
	if err == nil {
		return nil
	}
	return err
}

// admitLocked counts every first attempt asked for as a request (the
// SRE book's requests include those rejected locally); retries are not
// requests (the window counts first attempts only).
func (b *Breaker) admitLocked(now time.Time, retry bool) *Refusal {
	if !retry {
		b.w.add(now, brRequests, 1)
	}
	switch {
	case b.st == BreakerHalfOpen && !b.probeOut:
		b.probeOut, b.probeAt = true, now
	case b.st != BreakerClosed:
		b.rejected++
		if !retry {
			b.refusedOpen++
		}
		next := b.retryAt
		if b.refusedOpen < b.probeEvery {
			next = later(next, b.openedAt.Add(b.s.MaxBreakDuration))
		}
		if b.st == BreakerHalfOpen {
			next = b.probeAt.Add(b.breakFor)
		}
		return &Refusal{Key: b.key, Err: ErrBreakerOpen, Retry: next, at: now}
	case !retry && b.s.ThrottleK > 0:
		req, acc := float64(b.w.sum[brRequests]), float64(b.w.sum[brAccepts])
		if p := (req - 1 - b.s.ThrottleK*acc) / req; p > 0 && b.rand() < p {
			b.thrott++
			return &Refusal{Key: b.key, Err: ErrThrottled, P: p, at: now}
		}
	}
	return nil
}

// probeLocked moves an open breaker whose break is over to half-open, and
// frees the slot of a probe that did not report within the break.
func (b *Breaker) probeLocked(now time.Time) (BreakerChange, bool) {
	b.foldLocked(now)
	if b.st == BreakerHalfOpen && b.probeOut && !now.Before(b.probeAt.Add(b.breakFor)) {
		b.probeOut = false
	}
	if b.st != BreakerOpen || now.Before(b.retryAt) {
		return BreakerChange{}, false
	}
	if b.refusedOpen < b.probeEvery && now.Before(b.openedAt.Add(b.s.MaxBreakDuration)) {
		return BreakerChange{}, false
	}
	return b.setLocked(now, BreakerHalfOpen), true
}

// Record tells the breaker how an attempt it let go ended; first says it
// was its call's first attempt (only those count toward tripping; any
// attempt decides a half-open breaker). l (may be nil) hears the state
// change it makes.
func (b *Breaker) Record(o Outcome, first bool, l BreakerListener) {
	closed := BreakerState(b.state.Load()) == BreakerClosed
	if closed && o == Success {
		if b.streak.Load() != 0 {
			b.streak.Store(0)
		}
		if first && b.pendAcc.Add(1)%foldEvery == 0 {
			b.fold()
		}
		return
	}
	if closed && (o == Other || o == Failure && !first) {
		return
	}
	now := b.now()
	b.mu.Lock()
	ch, changed := b.probeLocked(now)
	switch o {
	case Success:
		b.streak.Store(0)
		if first {
			b.w.add(now, brAccepts, 1)
		}
		if b.st == BreakerHalfOpen {
			ch, changed = b.setLocked(now, BreakerClosed), true
		}
	case Failure:
		if first {
			b.w.add(now, brFailures, 1)
			b.streak.Add(1)
		}
		switch b.st {
		case BreakerHalfOpen:
			b.breakFor = min(2*b.breakFor, b.s.MaxBreakDuration)
			b.probeEvery = min(2*b.probeEvery, max(maxProbeEvery, b.s.ProbeEvery))
			ch, changed = b.openLocked(now), true
		case BreakerClosed:
			if first && b.tripsLocked() {
				ch, changed = b.openLocked(now), true
			}
		}
	default:
		if b.st == BreakerHalfOpen {
			b.probeOut = false
		}
	}
	b.mu.Unlock()
	if changed {
		b.tell(ch, l)
	}
}

// tripsLocked reports whether the window's answers open the breaker.
func (b *Breaker) tripsLocked() bool {
	if b.s.NoTrip {
		return false
	}
	fail := b.w.sum[brFailures]
	answered := fail + b.w.sum[brAccepts]
	if answered < uint64(b.s.MinimumThroughput) {
		// Too few for the ratio: failures in a row decide.
		return int(b.streak.Load()) >= b.s.ConsecutiveFailures
	}
	return float64(fail) >= b.s.FailureRatio*float64(answered)
}

func (b *Breaker) openLocked(now time.Time) BreakerChange {
	ch := b.setLocked(now, BreakerOpen)
	ch.Failures, ch.Answered = b.w.sum[brFailures], b.w.sum[brFailures]+b.w.sum[brAccepts]
	ch.Break = b.breakFor
	b.retryAt = now.Add(b.breakFor)
	b.openedAt, b.refusedOpen = now, 0
	b.opened++
	return ch
}

func (b *Breaker) setLocked(now time.Time, to BreakerState) BreakerChange {
	ch := BreakerChange{Key: b.key, From: b.st, To: to, At: now}
	b.st = to
	b.state.Store(uint32(to))
	b.probeOut = false
	if to == BreakerClosed {
		// A fresh start: the failures that opened it are history.
		b.breakFor, b.probeEvery = b.s.BreakDuration, b.s.ProbeEvery
		b.w.reset()
		b.streak.Store(0)
		b.mayThrottle.Store(b.s.ThrottleK > 0)
	}
	return ch
}

// tell reports ch to the breaker's own onChange and to l, the listener of
// the call whose asking or outcome made the change.
func (b *Breaker) tell(ch BreakerChange, l BreakerListener) {
	if b.onChange != nil {
		b.onChange(ch)
	}
	if l != nil {
		l.BreakerChanged(ch)
	}
}

// BreakerListener hears the state changes a call's asking or outcome made
// (the interceptors pass their hooks and logger), outside every lock.
type BreakerListener interface {
	BreakerChanged(BreakerChange)
}

// PaceGain is how much faster than the rate the server answered first
// attempts over the window Pace lets held first attempts go: new calls keep
// arriving beside them, so the server sees up to 1 + PaceGain times its
// usual load until the backlog is gone (the lab's refused-wfr: a peak
// under 2× capacity), while the held calls' deadlines run.
const PaceGain = 1.25

// Pace returns how long a first attempt that was held while its connection
// was not ready (a waitForReady call) waits, once the connection is ready,
// before it goes: held attempts go one at a time, at PaceGain times the
// rate the server answered first attempts over the window (at least one a
// second), so
// that the calls that queued during an outage reach the recovering server
// at the pace the process sent them before it, beside the new calls,
// instead of all at once. It reserves the start it returns.
func (b *Breaker) Pace() time.Duration {
	now := b.now()
	b.mu.Lock()
	defer b.mu.Unlock()
	b.foldLocked(now)
	rate := math.Max(PaceGain*float64(b.w.sum[brAccepts]+b.w.sum[brFailures])/b.s.SamplingWindow.Seconds(), 1)
	at := b.paceAt.Add(time.Duration(float64(time.Second) / rate))
	if at.Before(now) {
		at = now
	}
	b.paceAt = at
	return at.Sub(now)
}

// BreakerSnapshot is a breaker's state for metrics and logs.
type BreakerSnapshot struct {
	Key   string
	State BreakerState
	// Requests, Accepts and Failures are the window's counts now.
	Requests, Accepts, Failures uint64
	// ThrottleP is the probability a first attempt is rejected now (0
	// without throttling).
	ThrottleP float64
	// Break is the current break; Retry when the open breaker lets a
	// probe go.
	Break time.Duration
	Retry time.Time
	// Opened counts the times it opened; Rejected the attempts it refused
	// while not closed; Throttled the first attempts throttling rejected.
	Opened, Rejected, Throttled uint64
	At                          time.Time
}

// Snapshot returns the breaker's state now.
func (b *Breaker) Snapshot() BreakerSnapshot {
	now := b.now()
	b.mu.Lock()
	ch, changed := b.probeLocked(now)
	b.w.advance(now)
	s := BreakerSnapshot{
		Key: b.key, State: b.st,
		Requests: b.w.sum[brRequests], Accepts: b.w.sum[brAccepts], Failures: b.w.sum[brFailures],
		Break: b.breakFor, Opened: b.opened, Rejected: b.rejected, Throttled: b.thrott, At: now,
	}
	if b.st == BreakerOpen {
		s.Retry = b.retryAt
	}
	if b.s.ThrottleK > 0 && s.Requests > 0 {
		req := float64(s.Requests) + 1
		s.ThrottleP = math.Max(0, (req-1-b.s.ThrottleK*float64(s.Accepts))/req)
	}
	b.mu.Unlock()
	if changed {
		b.tell(ch, nil)
	}
	return s
}

// breakerCap bounds the breakers one Breakers keeps: a program that makes
// up method or target names at run time must not grow it without end. Past
// it, keys share one overflow breaker per scope.
const breakerCap = 4096

// Breakers keeps one Breaker per key (see BreakerSettings.Scope), made on
// first use, for one settings value. Safe for concurrent use.
type Breakers struct {
	s        BreakerSettings
	opts     []Option
	onChange func(BreakerChange)
	mu       sync.RWMutex
	m        map[breakerKey]*Breaker
	overflow *Breaker
}

type breakerKey struct{ target, method string }

// NewBreakers returns an empty set of breakers built with s, or a
// *SettingsError. onChange (may be nil) hears every breaker's changes.
func NewBreakers(s BreakerSettings, onChange func(BreakerChange), opts ...Option) (*Breakers, error) {
	if err := s.Validate(); err != nil {
		return nil, err
	}
	return &Breakers{s: s.WithDefaults(), opts: opts, onChange: onChange, m: make(map[breakerKey]*Breaker)}, nil
}

// Settings returns the settings, defaults applied.
func (bs *Breakers) Settings() BreakerSettings { return bs.s }

// Get returns the breaker for a call of method on target, making it on
// first use. A lookup takes a read lock and allocates nothing.
func (bs *Breakers) Get(target, method string) *Breaker {
	k := breakerKey{target: target}
	if bs.s.Scope == ScopeMethod {
		k.method = method
	}
	bs.mu.RLock()
	b, ok := bs.m[k]
	bs.mu.RUnlock()
	if ok {
		return b
	}
	bs.mu.Lock()
	defer bs.mu.Unlock()
	if b, ok := bs.m[k]; ok {
		return b
	}
	if len(bs.m) >= breakerCap {
		if bs.overflow == nil {
			bs.overflow = bs.newBreaker("(overflow: more than " + strconv.Itoa(breakerCap) + " keys)")
		}
		return bs.overflow
	}
	name := k.target
	if k.method != "" {
		name += " " + k.method
	}
	b = bs.newBreaker(name)
	bs.m[k] = b
	return b
}

func (bs *Breakers) newBreaker(key string) *Breaker {
	b, err := NewBreaker(key, bs.s, bs.onChange, bs.opts...)
	if err != nil {
		// Validated in NewBreakers.
		panic(err)
	}
	return b
}

// Snapshots returns every breaker's state, in no particular order (taken
// outside the set's lock).
func (bs *Breakers) Snapshots() []BreakerSnapshot {
	bs.mu.RLock()
	all := make([]*Breaker, 0, len(bs.m)+1)
	for _, b := range bs.m {
		all = append(all, b)
	}
	if bs.overflow != nil {
		all = append(all, bs.overflow)
	}
	bs.mu.RUnlock()
	out := make([]BreakerSnapshot, len(all))
	for i, b := range all {
		out[i] = b.Snapshot()
	}
	return out
}

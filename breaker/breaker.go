package breaker

import (
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/stagger-go/stagger/budget"
	"github.com/stagger-go/stagger/internal/window"
)

// State is a breaker's state.
type State uint8

const (
	// StateClosed: attempts go (subject to throttling and the budget).
	StateClosed State = iota
	// StateOpen: first attempts fail fast and retries wait, until the
	// break is over.
	StateOpen
	// StateHalfOpen: the break is over; one attempt at a time (a first
	// attempt, or a waiting retry let go by the Gate) goes as a probe.
	StateHalfOpen
)

// String returns "closed", "open" or "half-open".
func (s State) String() string {
	switch s {
	case StateClosed:
		return "closed"
	case StateOpen:
		return "open"
	case StateHalfOpen:
		return "half-open"
	}
	return "State(" + strconv.Itoa(int(s)) + ")"
}

// Change is one change of a breaker's state, as hooks hear it.
type Change struct {
	// Key names what the breaker guards: the target, and the method under
	// ScopeMethod ("target /svc/Method").
	Key      string
	From, To State
	// Failures and Answered are the window's counts when it opened.
	Failures, Answered uint64
	// Break is how long it stays open (To == StateOpen).
	Break time.Duration
	At    time.Time
}

// ErrOpen is what Admit's refusal wraps when the breaker is open;
// ErrThrottled when adaptive throttling rejected the attempt.
var (
	ErrOpen      = errors.New("circuit breaker open")
	ErrThrottled = errors.New("adaptive throttling rejected the call locally")
)

// Refusal is why Breaker.Admit refused an attempt: it names the breaker
// and says when the next probe may go.
type Refusal struct {
	Key string
	// Err is ErrOpen or ErrThrottled.
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
// key (see Set): closed, it counts its first attempts' outcomes over
// a sliding window and opens when FailureRatio of at least
// MinimumThroughput answered first attempts failed, or when
// ConsecutiveFailures first attempts failed in a row; open, it refuses first attempts (fail fast:
// Admit) and retries (AllowRetry: a Gate keeps them waiting) for
// BreakDuration; then, half-open, it lets one attempt go as a probe, a first
// attempt or a waiting retry, whichever asks first, the same probe a Gate
// sends (one probe mechanism: the Gate asks it, through Guard, before it lets a
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
// only as a request. State changes reach the Set's onChange and the
// asking call's Listener after every lock is released. A Breaker is safe for concurrent use.
// Closed without
// throttling, Admit and AllowRetry are one atomic load and Record of a
// success one atomic add (most of the time: see foldEvery); throttling adds
// an atomic add to Admit while it is far from rejecting; none allocates.
type Breaker struct {
	key      string
	s        Settings
	now      func() time.Time
	rand     func() float64
	onChange func(Change)

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
	st       State
	w        window.Window
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

// New returns a closed breaker for key, or a *SettingsError. onChange
// (may be nil) hears every state change, outside the breaker's lock.
func New(key string, s Settings, onChange func(Change), opts ...Option) (*Breaker, error) {
	if err := s.Validate(); err != nil {
		return nil, err
	}
	s = s.WithDefaults()
	o := buildOptions(opts)
	b := &Breaker{key: key, s: s, now: o.Now, rand: o.Rand, onChange: onChange, w: window.New(o.Now(), s.SamplingWindow), breakFor: s.BreakDuration, probeEvery: s.ProbeEvery}
	b.mayThrottle.Store(s.ThrottleK > 0)
	return b, nil
}

// Key returns what the breaker guards.
func (b *Breaker) Key() string { return b.key }

// Settings returns the breaker's settings, defaults applied.
func (b *Breaker) Settings() Settings { return b.s }

// Admit asks for a first attempt; l (may be nil) hears the state change
// the asking makes. It returns nil when it may go, or a
// *Refusal: the breaker is open (wrapping ErrOpen) or throttling
// drew a rejection (ErrThrottled). An attempt Admit lets go must be
// reported to Record when it ends.
func (b *Breaker) Admit(l Listener) error {
	if State(b.state.Load()) == StateClosed {
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
		b.w.Add(now, brRequests, uint64(n))
	}
	if n := b.pendAcc.Swap(0); n > 0 {
		b.w.Add(now, brAccepts, uint64(n))
	}
	if b.s.ThrottleK > 0 {
		b.w.Advance(now)
		slack := float64(b.w.Sum[brRequests]+foldEvery) - b.s.ThrottleK*float64(b.w.Sum[brAccepts])
		b.mayThrottle.Store(slack >= 0)
	}
}

// AllowRetry asks for a retry or a hedge: true when the breaker is closed,
// or when this retry may go as the half-open probe; else false and when to
// ask again without news (the break's end, or zero: after the probe
// reports). A retry it lets go must be reported to Record. l (may be nil)
// hears the state change the asking makes.
func (b *Breaker) AllowRetry(l Listener) (bool, time.Time) {
	if State(b.state.Load()) == StateClosed {
		return true, time.Time{}
	}
	ok, next, ch, changed := b.allowRetry(b.now())
	if changed {
		b.tell(ch, l)
	}
	return ok, next
}

// Closed reports whether the breaker is closed now (one atomic load).
func (b *Breaker) Closed() bool { return State(b.state.Load()) == StateClosed }

// allowRetry is AllowRetry at now, with the state change it made for the
// caller to tell once it holds no lock.
func (b *Breaker) allowRetry(now time.Time) (ok bool, next time.Time, ch Change, changed bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	ch, changed = b.probeLocked(now)
	err := b.admitLocked(now, true)
	if err == nil {
		return true, time.Time{}, ch, changed
	}
	return false, err.Retry, ch, changed
}

func (b *Breaker) admit(l Listener) error {
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
		b.w.Add(now, brRequests, 1)
	}
	switch {
	case b.st == StateHalfOpen && !b.probeOut:
		b.probeOut, b.probeAt = true, now
	case b.st != StateClosed:
		b.rejected++
		if !retry {
			b.refusedOpen++
		}
		next := b.retryAt
		if b.refusedOpen < b.probeEvery {
			next = later(next, b.openedAt.Add(b.s.MaxBreakDuration))
		}
		if b.st == StateHalfOpen {
			next = b.probeAt.Add(b.breakFor)
		}
		return &Refusal{Key: b.key, Err: ErrOpen, Retry: next, at: now}
	case !retry && b.s.ThrottleK > 0:
		req, acc := float64(b.w.Sum[brRequests]), float64(b.w.Sum[brAccepts])
		if p := (req - 1 - b.s.ThrottleK*acc) / req; p > 0 && b.rand() < p {
			b.thrott++
			return &Refusal{Key: b.key, Err: ErrThrottled, P: p, at: now}
		}
	}
	return nil
}

// probeLocked moves an open breaker whose break is over to half-open, and
// frees the slot of a probe that did not report within the break.
func (b *Breaker) probeLocked(now time.Time) (Change, bool) {
	b.foldLocked(now)
	if b.st == StateHalfOpen && b.probeOut && !now.Before(b.probeAt.Add(b.breakFor)) {
		b.probeOut = false
	}
	if b.st != StateOpen || now.Before(b.retryAt) {
		return Change{}, false
	}
	if b.refusedOpen < b.probeEvery && now.Before(b.openedAt.Add(b.s.MaxBreakDuration)) {
		return Change{}, false
	}
	return b.setLocked(now, StateHalfOpen), true
}

// Record tells the breaker how an attempt it let go ended; first says it
// was its call's first attempt (only those count toward tripping; any
// attempt decides a half-open breaker). l (may be nil) hears the state
// change it makes.
func (b *Breaker) Record(o budget.Outcome, first bool, l Listener) {
	closed := State(b.state.Load()) == StateClosed
	if closed && o == budget.Success {
		if b.streak.Load() != 0 {
			b.streak.Store(0)
		}
		if first && b.pendAcc.Add(1)%foldEvery == 0 {
			b.fold()
		}
		return
	}
	if closed && (o == budget.Other || o == budget.Failure && !first) {
		return
	}
	now := b.now()
	b.mu.Lock()
	ch, changed := b.probeLocked(now)
	switch o {
	case budget.Success:
		b.streak.Store(0)
		if first {
			b.w.Add(now, brAccepts, 1)
		}
		if b.st == StateHalfOpen {
			ch, changed = b.setLocked(now, StateClosed), true
		}
	case budget.Failure:
		if first {
			b.w.Add(now, brFailures, 1)
			b.streak.Add(1)
		}
		switch b.st {
		case StateHalfOpen:
			b.breakFor = min(2*b.breakFor, b.s.MaxBreakDuration)
			b.probeEvery = min(2*b.probeEvery, max(maxProbeEvery, b.s.ProbeEvery))
			ch, changed = b.openLocked(now), true
		case StateClosed:
			if first && b.tripsLocked() {
				ch, changed = b.openLocked(now), true
			}
		}
	default:
		if b.st == StateHalfOpen {
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
	fail := b.w.Sum[brFailures]
	answered := fail + b.w.Sum[brAccepts]
	if answered < uint64(b.s.MinimumThroughput) {
		// Too few for the ratio: failures in a row decide.
		return int(b.streak.Load()) >= b.s.ConsecutiveFailures
	}
	return float64(fail) >= b.s.FailureRatio*float64(answered)
}

func (b *Breaker) openLocked(now time.Time) Change {
	ch := b.setLocked(now, StateOpen)
	ch.Failures, ch.Answered = b.w.Sum[brFailures], b.w.Sum[brFailures]+b.w.Sum[brAccepts]
	ch.Break = b.breakFor
	b.retryAt = now.Add(b.breakFor)
	b.openedAt, b.refusedOpen = now, 0
	b.opened++
	return ch
}

func (b *Breaker) setLocked(now time.Time, to State) Change {
	ch := Change{Key: b.key, From: b.st, To: to, At: now}
	b.st = to
	b.state.Store(uint32(to))
	b.probeOut = false
	if to == StateClosed {
		// A fresh start: the failures that opened it are history.
		b.breakFor, b.probeEvery = b.s.BreakDuration, b.s.ProbeEvery
		b.w.Reset()
		b.streak.Store(0)
		b.mayThrottle.Store(b.s.ThrottleK > 0)
	}
	return ch
}

// tell reports ch to the breaker's own onChange and to l, the listener of
// the call whose asking or outcome made the change.
func (b *Breaker) tell(ch Change, l Listener) {
	if b.onChange != nil {
		b.onChange(ch)
	}
	if l != nil {
		l.BreakerChanged(ch)
	}
}

// Listener hears the state changes a call's asking or outcome made
// (the interceptors pass their hooks and logger), outside every lock.
type Listener interface {
	BreakerChanged(Change)
}

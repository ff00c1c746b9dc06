package breaker

import (
	"github.com/stagger-go/stagger/internal/clock"

	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/stagger-go/stagger/budget"
	"github.com/stagger-go/stagger/criticality"
	"github.com/stagger-go/stagger/internal/fence"
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

// Window counters of a Breaker, of first attempts only, three per
// criticality level: counter i of the level of index l is 3l + i.
const (
	brRequests = iota // asked for, throttled ones included
	brAccepts         // answered without failing
	brFailures        // answered with a failure
	brPerLevel
)

// counter is the window's index of counter i of the level of index l.
func counter(l, i int) int { return brPerLevel*l + i }

// total sums counter i over the levels.
func total(c *window.LevelCounts, i int) uint64 {
	return c[i] + c[brPerLevel+i] + c[2*brPerLevel+i] + c[3*brPerLevel+i]
}

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
// the SRE book's probability; retries are the budget's to admit. Counting
// its own rejections as requests makes "reject all" a fixed point, so three
// rules keep something going to the server, per level:
//
//   - the cap: the probability is at most 0.8, as Envoy's admission
//     control caps it by default (failsafe-go's adaptive throttler: 0.9);
//   - the probe rule: when the throttle has let none of the level's first
//     attempts go for a second, it lets the next one go whatever the
//     probability, so that a quiet client too sees a recovered server
//     within a second;
//   - the back rule: a first attempt the server serves while the level is
//     throttled and none of its first attempts had been served for half
//     the window ends the throttling: the level's requests and accepts in
//     the window, counted while the server was down, are forgotten.
//
// Criticality (the level each asking and Record names; Unset counts as
// CRITICAL; a process whose calls name none behaves as before levels
// existed):
//
//   - Throttling keeps the window's requests and accepts per level, as the
//     SRE book's client-side throttling does, and draws each level's
//     rejection from its own counts with its own K: ThrottleK for CRITICAL,
//     1 + (ThrottleK − 1) × 3/4 for SHEDDABLE, × 7/8 for SHEDDABLE_PLUS and
//     × 2 for CRITICAL_PLUS (K = 2: 1.75, 1.875, 2, 3). A level the server
//     sheds is throttled without its rejections throttling the others; when
//     the server fails every level alike, the less critical are rejected
//     first (a lower K rejects at a higher share of accepts).
//   - Tripping counts every level's first attempts, as above, but the most
//     critical level with MinimumThroughput answers in the window must fail
//     at FailureRatio too: a server that sheds the less critical while it
//     serves the most critical is not down, and its breaker stays closed.
//   - Half-open, the probe goes to the most critical level refused while the
//     breaker was open: a less critical first attempt or retry is refused
//     for one more break after the breaker turned half-open, unless the probe
//     went by then; after that, whichever asks first. Open, every level is
//     refused alike.
//
// Outcomes: Success and a Failure are answers; Other (the caller's own
// deadline or cancellation, an attempt that never reached a server) counts
// only as a request. State changes reach the Gates its guards refused
// (budget.GuardWatcher), the Set's onChange and the asking call's Listener
// after every lock is released. A Breaker is safe for concurrent use.
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
	// pendReq and pendAcc count, per level, the first attempts asked for
	// (throttling only) and the successes recorded on the fast paths, not
	// yet in w: they are folded into it under the lock, at least every
	// foldEvery of a level, so a success costs an atomic add, and at most
	// foldEvery−1 of them are counted a little late. mayThrottle: the
	// level's counts, plus a batch of requests without accepts, could make
	// throttling reject: every Admit of the level takes the lock.
	pendReq, pendAcc [4]atomic.Uint32
	mayThrottle      [4]atomic.Bool
	// ks are the levels' K (zero without throttling).
	ks [4]float64
	// streak counts the first attempts failed in a row; a success of any
	// attempt resets it.
	streak atomic.Int32

	mu       sync.Mutex
	st       State
	w        window.Window[window.LevelCounts]
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
	// topRefused: the index of the most critical level refused since the
	// breaker last opened (-1: none); halfAt: when it turned half-open.
	topRefused int
	halfAt     time.Time
	// lastSent and lastAccept, per level, while throttling: when the
	// throttle last let a first attempt go, and when the server last
	// served one (the probe rule and the back rule; see Breaker).
	lastSent, lastAccept [4]time.Time
	// paceAt is the start Pace gave the latest held attempt.
	paceAt time.Time
	// watchers hear the next state change once (watchChange), one per key.
	watchers []watcher
	opened   uint64
	rejected uint64
	thrott   uint64
}

// New returns a closed breaker for key, or a *SettingsError. onChange
// (may be nil) hears every state change, outside the breaker's lock; its
// panic is recovered (see the package doc).
func New(key string, s Settings, onChange func(Change), opts ...Option) (*Breaker, error) {
	if err := s.Validate(); err != nil {
		return nil, err
	}
	s = s.WithDefaults()
	o := buildOptions(opts)
	b := &Breaker{key: key, s: s, now: o.Now, rand: o.Rand, onChange: onChange, w: window.New[window.LevelCounts](o.Now(), s.SamplingWindow), breakFor: s.BreakDuration, probeEvery: s.ProbeEvery, topRefused: -1}
	if s.ThrottleK > 0 {
		for i, f := range throttleKShares {
			b.ks[i] = 1 + (s.ThrottleK-1)*f
		}
		// Exactly the setting, whatever the rounding above.
		b.ks[criticality.Critical.Index()] = s.ThrottleK
	}
	b.storeMayThrottle(s.ThrottleK > 0)
	// Counted from the breaker's birth: a new breaker has not yet gone a
	// second without sending, nor half a window without an accept.
	for l := range b.lastSent {
		b.lastSent[l], b.lastAccept[l] = b.w.Start(), b.w.Start()
	}
	return b, nil
}

// Key returns what the breaker guards.
func (b *Breaker) Key() string { return b.key }

// Settings returns the breaker's settings, defaults applied.
func (b *Breaker) Settings() Settings { return b.s }

func (b *Breaker) storeMayThrottle(v bool) {
	for i := range b.mayThrottle {
		b.mayThrottle[i].Store(v)
	}
}

// Admit asks for a first attempt of criticality c; l (may be nil) hears
// the state change the asking makes. It returns nil when it may go, or a
// *Refusal: the breaker is open (wrapping ErrOpen) or throttling
// drew a rejection (ErrThrottled). An attempt Admit lets go must be
// reported to Record when it ends.
func (b *Breaker) Admit(c criticality.Level, l Listener) error {
	if State(b.state.Load()) == StateClosed {
		if b.s.ThrottleK == 0 {
			return nil
		}
		i := c.Index()
		if !b.mayThrottle[i].Load() {
			if b.pendReq[i].Add(1)%foldEvery == 0 {
				b.fold()
			}
			return nil
		}
	}
	return b.admit(c, l)
}

// fold folds the fast paths' counts into the window now.
func (b *Breaker) fold() {
	now := b.now()
	b.mu.Lock()
	b.foldLocked(now)
	b.mu.Unlock()
}

// foldLocked folds the fast paths' counts into the window at now, and
// decides, per level, whether Admit must take the lock: when, even after
// foldEvery more requests without an accept, throttling would still not
// reject (requests − K × accepts stays below zero), it need not.
func (b *Breaker) foldLocked(now time.Time) {
	for l := range b.pendReq {
		// A load first: most levels have nothing pending, and a load is
		// cheaper than a swap.
		if b.pendReq[l].Load() != 0 {
			b.w.Add(now, counter(l, brRequests), uint64(b.pendReq[l].Swap(0)))
		}
		if b.pendAcc[l].Load() != 0 {
			b.w.Add(now, counter(l, brAccepts), uint64(b.pendAcc[l].Swap(0)))
			b.lastAccept[l] = now
		}
	}
	if b.s.ThrottleK > 0 {
		b.w.Advance(now)
		for l, k := range b.ks {
			slack := float64(b.w.Sum[counter(l, brRequests)]+foldEvery) - k*float64(b.w.Sum[counter(l, brAccepts)])
			b.mayThrottle[l].Store(slack >= 0)
		}
	}
}

// AllowRetry asks for a retry or a hedge of criticality c: true when the
// breaker is closed, or when this retry may go as the half-open probe; else
// false and when to ask again without news (the break's end, or zero: after
// the probe reports). A retry it lets go must be reported to Record. l (may
// be nil) hears the state change the asking makes.
func (b *Breaker) AllowRetry(c criticality.Level, l Listener) (bool, time.Time) {
	if State(b.state.Load()) == StateClosed {
		return true, time.Time{}
	}
	ok, next, ch, changed := b.allowRetry(b.now(), c.Index())
	if changed {
		b.tellAsked(ch, l, c, ok)
	}
	return ok, next
}

// Closed reports whether the breaker is closed now (one atomic load).
func (b *Breaker) Closed() bool { return State(b.state.Load()) == StateClosed }

// allowRetry is AllowRetry at now, with the state change it made for the
// caller to tell once it holds no lock.
func (b *Breaker) allowRetry(now time.Time, level int) (ok bool, next time.Time, ch Change, changed bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	ch, changed = b.probeLocked(now)
	err := b.admitLocked(now, level, true)
	if err == nil {
		return true, time.Time{}, ch, changed
	}
	return false, err.Retry, ch, changed
}

func (b *Breaker) admit(c criticality.Level, l Listener) error {
	now := b.now()
	b.mu.Lock()
	ch, changed := b.probeLocked(now)
	err := b.admitLocked(now, c.Index(), false)
	b.mu.Unlock()
	if changed {
		b.tellAsked(ch, l, c, err == nil)
	}
	if err == nil {
		return nil
	}
	return err
}

// admitLocked counts every first attempt asked for as a request (the
// SRE book's requests include those rejected locally); retries are not
// requests (the window counts first attempts only). level is the asking
// call's level's index.
func (b *Breaker) admitLocked(now time.Time, level int, retry bool) *Refusal {
	if !retry {
		b.w.Add(now, counter(level, brRequests), 1)
	}
	// Half-open, a level below the most critical refused while open waits
	// one more break for that level to take the probe.
	held := b.st == StateHalfOpen && level < b.topRefused && now.Before(b.halfAt.Add(b.breakFor*probeHoldBreaks))
	switch {
	case b.st == StateHalfOpen && !b.probeOut && !held:
		b.probeOut, b.probeAt = true, now
	case b.st != StateClosed:
		b.rejected++
		if !retry {
			b.refusedOpen++
		}
		b.topRefused = max(b.topRefused, level)
		next := b.retryAt
		if b.refusedOpen < b.probeEvery {
			next = clock.Later(next, b.openedAt.Add(b.s.MaxBreakDuration))
		}
		if b.st == StateHalfOpen {
			next = b.probeAt.Add(b.breakFor)
			if !b.probeOut {
				next = b.halfAt.Add(b.breakFor * probeHoldBreaks)
			}
		}
		return &Refusal{Key: b.key, Err: ErrOpen, Retry: next, at: now}
	case !retry && b.s.ThrottleK > 0:
		if p := min(b.rejectionLocked(level), maxThrottleRejection); p > 0 && now.Sub(b.lastSent[level]) < throttleProbeEvery && b.rand() < p {
			b.thrott++
			return &Refusal{Key: b.key, Err: ErrThrottled, P: p, at: now}
		}
		b.lastSent[level] = now
	}
	return nil
}

// rejectionLocked is the SRE book's rejection probability of the level of
// index level, from the window's counts (the asking included), before the
// cap: (requests − 1 − K × accepts) ÷ requests; ≤ 0 when it would not
// reject.
func (b *Breaker) rejectionLocked(level int) float64 {
	req, acc := float64(b.w.Sum[counter(level, brRequests)]), float64(b.w.Sum[counter(level, brAccepts)])
	if req == 0 {
		return 0
	}
	return (req - 1 - b.ks[level]*acc) / req
}

// acceptLocked counts a served first attempt of the level of index level
// at now; while the throttle rejects the level and the server had served
// none of its first attempts for half the window, it first forgets the
// level's requests and accepts (the back rule).
func (b *Breaker) acceptLocked(now time.Time, level int) {
	if b.s.ThrottleK > 0 && b.st == StateClosed && b.rejectionLocked(level) > 0 &&
		now.Sub(b.lastAccept[level]) >= b.s.SamplingWindow*throttleBackSlices/window.Slices {
		b.w.Forget(counter(level, brRequests))
		b.w.Forget(counter(level, brAccepts))
	}
	b.w.Add(now, counter(level, brAccepts), 1)
	b.lastAccept[level] = now
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
// attempt decides a half-open breaker), c the call's criticality. l (may
// be nil) hears the state change it makes.
func (b *Breaker) Record(o budget.Outcome, first bool, c criticality.Level, l Listener) {
	closed := State(b.state.Load()) == StateClosed
	// A first attempt served while the throttle may reject its level takes
	// the lock: the back rule may apply.
	if closed && o == budget.Success && !(first && b.s.ThrottleK > 0 && b.mayThrottle[c.Index()].Load()) {
		if b.streak.Load() != 0 {
			b.streak.Store(0)
		}
		if first && b.pendAcc[c.Index()].Add(1)%foldEvery == 0 {
			b.fold()
		}
		return
	}
	level := c.Index()
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
			b.acceptLocked(now, level)
		}
		if b.st == StateHalfOpen {
			ch, changed = b.setLocked(now, StateClosed), true
		}
	case budget.Failure:
		if first {
			b.w.Add(now, counter(level, brFailures), 1)
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
	sum := &b.w.Sum
	fail := total(sum, brFailures)
	answered := fail + total(sum, brAccepts)
	if answered < uint64(b.s.MinimumThroughput) {
		// Too few for the ratio: failures in a row decide.
		return int(b.streak.Load()) >= b.s.ConsecutiveFailures
	}
	if float64(fail) < b.s.FailureRatio*float64(answered) {
		return false
	}
	// The most critical level with enough answers must fail too.
	for l := criticality.NumLevels - 1; l >= 0; l-- {
		lf := sum[counter(l, brFailures)]
		la := lf + sum[counter(l, brAccepts)]
		if la >= uint64(b.s.MinimumThroughput) {
			return float64(lf) >= b.s.FailureRatio*float64(la)
		}
	}
	return true
}

func (b *Breaker) openLocked(now time.Time) Change {
	ch := b.setLocked(now, StateOpen)
	fail := total(&b.w.Sum, brFailures)
	ch.Failures, ch.Answered = fail, fail+total(&b.w.Sum, brAccepts)
	ch.Break = b.breakFor
	b.retryAt = now.Add(b.breakFor)
	b.openedAt, b.refusedOpen, b.topRefused = now, 0, -1
	b.opened++
	return ch
}

func (b *Breaker) setLocked(now time.Time, to State) Change {
	ch := Change{Key: b.key, From: b.st, To: to, At: now}
	b.st = to
	b.state.Store(uint32(to))
	b.probeOut = false
	if to == StateHalfOpen {
		b.halfAt = now
	}
	if to == StateClosed {
		// A fresh start: the failures that opened it are history.
		b.breakFor, b.probeEvery = b.s.BreakDuration, b.s.ProbeEvery
		b.w.Reset()
		b.streak.Store(0)
		b.storeMayThrottle(b.s.ThrottleK > 0)
	}
	return ch
}

// tell reports ch to the breaker's own onChange and to l, the listener of
// the call whose asking or outcome made the change.
func (b *Breaker) tell(ch Change, l Listener) {
	b.mu.Lock()
	ws := b.watchers
	b.watchers = nil
	b.mu.Unlock()
	for _, w := range ws {
		w.f()
	}
	if b.onChange != nil {
		// No call owns the Set's own listener: its panic is fenced.
		fence.Run(fence.BreakerChange, func() { b.onChange(ch) })
	}
	if l != nil {
		l.BreakerChanged(ch)
	}
}

// watcher is a function that hears the next state change once, and its
// key.
type watcher struct {
	key any
	f   func()
}

// watchChange has f called once, outside the lock, at the next state
// change; a later call with the same key replaces f, so a key holds one
// place at most.
func (b *Breaker) watchChange(key any, f func()) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for i := range b.watchers {
		if b.watchers[i].key == key {
			b.watchers[i].f = f
			return
		}
	}
	b.watchers = append(b.watchers, watcher{key, f})
}

// tellAsked tells ch, which an asking of criticality c made (ok: it was
// let go); a hook that panics must not keep the probe slot the asking may
// have taken: it is given back, as an attempt that never went, before the
// panic goes on.
func (b *Breaker) tellAsked(ch Change, l Listener, c criticality.Level, ok bool) {
	told := false
	defer func() {
		if !told && ok {
			b.Record(budget.Other, false, c, nil)
		}
	}()
	b.tell(ch, l)
	told = true
}

// Listener hears the state changes a call's asking or outcome made
// (the interceptors pass their hooks and logger), outside every lock. A
// Listener's panic reaches the caller that asked; a probe slot the asking
// took is given back first.
type Listener interface {
	BreakerChanged(Change)
}

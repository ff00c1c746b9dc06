package budget

import (
	"cmp"
	"context"
	"errors"
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
	// MaxWaiting bounds the calls waiting at once on one budget: in a
	// Backends, on one backend (all its methods together; the set bounds
	// all its backends' too, see Backends). A retry refused past it ends
	// its call at once (reason budget). In [1, 1e6]; default 1024. Each
	// waiting call holds its goroutine and its request.
	MaxWaiting int
	// MaxWait bounds the waits of a call without a deadline, all its
	// deferred retries together (Request.Waited): past it the call ends
	// with its last status. In [1ms, 1h]; default 10s.
	MaxWait time.Duration
}

// Defaults of DeferSettings: 1024 waiting calls hold about as many
// goroutines and requests (a few MiB); 10 s is the longest a call without a
// deadline is held, about what a restart takes.
const (
	defaultMaxWaiting = 1024
	defaultMaxWait    = 10 * time.Second
	maxMaxWait        = time.Hour
)

// withDefaults returns s with each zero field replaced by its default.
func (s DeferSettings) withDefaults() DeferSettings {
	s.MaxWaiting, s.MaxWait = cmp.Or(s.MaxWaiting, defaultMaxWaiting), cmp.Or(s.MaxWait, defaultMaxWait)
	return s
}

// validate reports the first setting that breaks its rule, as a
// *SettingsError naming the setting.
func (s DeferSettings) validate() error {
	if s.Mode > DeferOff {
		return &SettingsError{Field: "Mode", Rule: "must be auto, on or off", Value: s.Mode}
	}
	if s.MaxWaiting < 0 || s.MaxWaiting > 1e6 {
		return &SettingsError{Field: "MaxWaiting", Rule: "must be in [1, 1e6]", Value: s.MaxWaiting}
	}
	if s.MaxWait != 0 && (s.MaxWait < time.Millisecond || s.MaxWait > maxMaxWait) {
		return &SettingsError{Field: "MaxWait", Rule: "must be in [1ms, 1h]", Value: s.MaxWait}
	}
	return nil
}

// on reports whether a budget of kind k defers under s.
func (s DeferSettings) on(k Kind) bool {
	return s.Mode == DeferOn || s.Mode != DeferOff && (k == KindTokenBucket || k == KindRatio)
}

// Admission says how a deferred retry was let go: AdmitNone and AdmitBudget
// when its budget paid for it; the other admissions are a Gate's, by its
// rules, unpaid (String names them: "release", "probe", "last" for its
// call's last chance, "heal"; see Gate).
type Admission uint8

const (
	// AdmitNone: not a deferred retry (an attempt the budget admitted at
	// once, or a first attempt).
	AdmitNone Admission = iota
	// AdmitBudget: the budget's own Allow admitted it, asked again.
	AdmitBudget
	// admitRelease: by the release rule (see Gate).
	admitRelease
	// admitProbe: as the probe (see Gate, the probe and hold rules).
	admitProbe
	// admitLast: as its call's last chance (see Gate).
	admitLast
	// admitHeal: by the heal rule (see Gate): the server is flaky, not down.
	admitHeal
)

// String returns "none", "budget", "release", "probe", "last" or "heal"
// ("none" past the last Admission too).
func (a Admission) String() string {
	return [...]string{"none", "budget", "release", "probe", "last", "heal", "none"}[min(a, admitHeal+1)]
}

// Deferrer is a Budget whose refused retries may wait for a later admission
// (Gate). The interceptors ask Allow first; when it refuses, they call Wait.
type Deferrer interface {
	Budget
	// Wait blocks the calling goroutine until the retry r, which Allow
	// refused, is admitted, no sooner than pause from now, and returns
	// how. Otherwise it returns why not: ErrTooManyWaiting (too many wait,
	// or a more critical retry took r's place), ErrOutageLasting, the
	// context's error when its caller left, an error that wraps
	// context.DeadlineExceeded when its deadline came, or another error
	// when the wait ended otherwise (a Gate's hold rule, its end rule
	// before the deadline, hopeless, or DeferSettings.MaxWait for a call
	// without a deadline). The interceptors end the call with
	// its last status on every error (CANCELED when its caller cancelled
	// it), for the reason budget after ErrTooManyWaiting, outage after
	// ErrOutageLasting and deferred after any other.
	Wait(ctx context.Context, r Request, pause time.Duration) (Admission, error)
}

// Admitter is a Budget whose Allow may admit a retry without the budget
// paying for it (a Gate: the heal rule lets a straggler's retry go
// unpaid). The interceptors ask a budget that implements it through Admit
// instead of Allow, and tell it in the retry's Attempt.Admission, so that a
// token bucket does not refund what it never took. A user's budget that
// wraps a Gate implements it by passing Admit through.
type Admitter interface {
	Budget
	// Admit is Allow, and says how it admitted r: AdmitNone when the
	// budget paid, another Admission when it let r go unpaid.
	Admit(r Request) (Admission, bool)
}

// Guard is what guards a call besides the budget: a circuit breaker
// (package breaker). A Gate asks the guard a waiting retry's Request names
// before it lets the retry go, so that the guard's probe and the gate's are
// one attempt (see Gate, the guard rule).
type Guard interface {
	// Closed reports whether the guard lets every attempt go now: a
	// closed guard is no guard, and the Gate asks it nothing more.
	Closed() bool
	// AllowRetry asks for one retry now: ok when it may go (then the guard
	// has counted it, and its outcome must reach the guard, or, when it is
	// not sent, GuardReturner.ReturnRetry); else next is
	// when asking again could change the answer without news (zero: only
	// news will). The Gate asks it holding no lock, only for a retry its
	// rules let go, and sends the retry when it says ok.
	AllowRetry() (ok bool, next time.Time)
}

// GuardWatcher is a Guard that tells of its changes: before a Gate asks it
// for a retry, it asks to hear of the guard's next change of state, so that
// the waiters a refusal held go as soon as the guard closes, whoever's
// answer closed it (a circuit breaker that another method's probe closed).
// A Guard without it is asked again at the time its refusal named, or on
// the Gate's own news.
type GuardWatcher interface {
	Guard
	// WatchChange calls f once, holding no lock, at the guard's next
	// change of state; a later call with the same key before then
	// replaces the earlier f.
	WatchChange(key any, f func())
}

// GuardReturner is a Guard that takes a yes back: a Gate calls ReturnRetry
// when a retry that AllowRetry let go is not sent after all (its caller
// left first, or the budget panicked), so that what the guard counted for
// it (a circuit breaker's half-open slot) is free at once. A Guard without
// it frees that by its own means (package breaker's, after a break).
type GuardReturner interface {
	Guard
	// ReturnRetry gives back one yes of AllowRetry whose retry was not
	// sent. The Gate calls it holding no lock.
	ReturnRetry()
}

// The errors of Deferrer.Wait that the interceptors tell apart (reasons
// budget and outage).
var (
	// ErrTooManyWaiting: the budget's bound of waiting calls is reached
	// (or, wrapped, a more critical retry took this one's place).
	ErrTooManyWaiting = errors.New("budget: too many calls waiting for a retry")
	// ErrOutageLasting: the server has been down longer than the calls'
	// deadlines, and the retry fails at once (Gate, the futility rule).
	ErrOutageLasting = errors.New("budget: the server has been down longer than the call waits (three of its deadlines, or MaxWait without one): its retries fail at once until a probe heals")
)

// The other ends of a Gate's wait, which the interceptors treat alike.
var (
	// errEvicted: a more critical retry took this one's place in a full
	// room (Gate, the criticality rule). It wraps ErrTooManyWaiting.
	errEvicted = &waitEnd{rule: "criticality", why: "a more critical retry took its place", base: ErrTooManyWaiting}
	// errWaitLimit: a call without a deadline waited DeferSettings.MaxWait;
	// errDeadline: its call's deadline came, and no attempt of its method
	// was timed (else the wait ends an attempt earlier: errHopeless). It
	// wraps context.DeadlineExceeded.
	errWaitLimit = &waitEnd{rule: "max-wait", why: "a call without a deadline waited its longest (defer.maxWait)"}
	errDeadline  = &waitEnd{rule: "deadline", why: "its call's deadline came", base: context.DeadlineExceeded}
	// errWaitEnded: the Gate ended the wait by its hold rule; errHopeless,
	// by its hopeless rule (it wraps errWaitEnded).
	errWaitEnded = &waitEnd{rule: "hold", why: "not let go by its pause, with no outage or overload to wait for"}
	errHopeless  = &waitEnd{rule: "hopeless", why: "no retry could finish before the deadline", base: errWaitEnded}
	// errFutile: the backend's return, at the estimate, comes past the
	// wait's end (the futility rule; Enter returns ErrOutageLasting).
	errFutile = &waitEnd{rule: "futility", why: "the outage outlasts the wait", base: ErrOutageLasting}
)

// waitEnd is how a Gate ended a wait: the rule of its wait contract that
// ended it (WaitRule; see Gate) and why, and the rule that held it past
// its pause until then, if one did (HeldBy). The interceptors read both
// into interceptor.Report and interceptor.Error.
type waitEnd struct {
	rule, why string
	base      error
	held      string
}

// The rules that hold a wait past its pause (waitEnd.HeldBy).
const (
	heldOutage   = "outage"
	heldOverload = "overload"
	heldGuard    = "breaker"
)

func (e *waitEnd) Error() string {
	s := "budget: the gate ended a deferred retry's wait (" + e.rule + "): " + e.why
	if e.held != "" {
		s += "; held by the " + e.held + " rule"
	}
	return s
}
func (e *waitEnd) Unwrap() error { return e.base }

// Is reports whether target is e's rule's end, whatever held it.
func (e *waitEnd) Is(target error) bool {
	t, ok := target.(*waitEnd)
	return ok && t.rule == e.rule && t.why == e.why
}
func (e *waitEnd) WaitRule() string { return e.rule }

// HeldBy names the rule that held the wait past its pause, "" when none
// did: "outage" (the backend is down), "overload" (most attempts were
// signs of overload) or "breaker" (the retry's guard was open).
func (e *waitEnd) HeldBy() string { return e.held }

// heldBy returns e for a wait that rule held ("" : none), a copy when it
// must say so.
func (e *waitEnd) heldBy(rule string) *waitEnd {
	if rule == "" {
		return e
	}
	c := *e
	c.held = rule
	return &c
}

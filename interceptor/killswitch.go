package interceptor

import (
	"context"
	"errors"
	"os"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors/logging"
	"google.golang.org/grpc"
	"google.golang.org/grpc/status"

	"github.com/stagger-go/stagger/criticality"
	"github.com/stagger-go/stagger/policy"
)

// DisableEnv is the environment variable that turns stagger off in a
// process from its start, without a deploy of new code: set to anything
// but "", "0", "false", "off" or "no" (in any case), it is SetDisabled(true)
// before main runs. It is read once, when the program starts; SetDisabled
// changes the switch afterwards, and a policy file's top-level
// "disabled": true turns stagger off for the calls that follow the file
// (policy.Config.Disabled), reloaded like the rest of the file.
const DisableEnv = "STAGGER_DISABLE"

// switchedOff is the process-wide switch (SetDisabled): one atomic load
// per call. switchMu serialises its changes; switchSaid: its state was
// logged, by SetDisabled or by the first call that found it on (offFor).
var (
	switchedOff atomic.Bool
	switchMu    sync.Mutex
	switchSaid  atomic.Bool
)

func init() { switchedOff.Store(envOn(os.Getenv(DisableEnv))) }

// envOn reports whether v, DisableEnv's value, turns the switch on: an
// operator who sets it in an emergency must not find that "yes" or "1 "
// did nothing, so every value but the few that say no turns it on.
func envOn(v string) bool {
	switch strings.ToLower(strings.TrimSpace(v)) {
	case "", "0", "false", "off", "no":
		return false
	}
	return true
}

// SetDisabled turns stagger off in the whole process (on true) or back on
// (on false), at once, for every interceptor. The environment variable
// DisableEnv (STAGGER_DISABLE) sets it when the program starts; a policy
// file's top-level "disabled": true does the same for the calls that
// follow the file (policy.Config.Disabled), so an operator can turn it
// without code: edit the file, and its Source (policy.WatchFile) reloads
// it; it takes effect when a call first follows the reloaded file.
//
// While it is on, each call is sent once: no retry, no hedge, no
// per-attempt timer, no wait of any kind (budget, Gate, breaker, pacing),
// no breaker or throttle refusal; the calls themselves go on, with the
// policy file's timeout, waitForReady and message size limits, the call's
// criticality header and idempotency key. Turning it on ends what is
// running too: every call held in a budget's Gate (budget.Deferrer) ends
// at once with its last attempt's status, as if no retry had been on
// offer, and a running call makes no retry after its next failure; both
// end with reason policy.ReasonDisabled. (A call in its pause before a
// retry sends that retry, whose failure then ends it.)
//
// It shows: slog.Default() hears each change at warn level ("stagger:
// switched off ..." with stagger.switch, what turned it: "SetDisabled",
// "STAGGER_DISABLE" (said by the first call after the start) or "policy
// file"; "stagger: switched back on ..." at info level), hooks hear the
// end of each call (EventEnd, with Event.Disabled and Reason
// policy.ReasonDisabled, whatever its code), and WithReport fills
// Report.Disabled and Report.Reason the same way (the otel module's
// stagger.client.call.ends counts them under stagger.reason "disabled").
// Disabled reports the process's switch and State.Disabled a file's; the
// otel module's stagger.client.switch gauge reads both at each collection,
// so a dashboard shows the switch while it is on, whether calls run or
// not. It differs
// from the per-call Disable, which hands the call to grpc untouched and
// tells only its Report.
//
// Safe for concurrent use.
func SetDisabled(on bool) {
	switchMu.Lock()
	changed := switchedOff.Swap(on) != on
	if changed {
		switchSaid.Store(true)
	}
	switchMu.Unlock()
	if changed {
		if on {
			heldRetries.end(nil)
		}
		saySwitch(nil, on, "SetDisabled")
	}
}

// Disabled reports whether stagger is off in the process (SetDisabled,
// DisableEnv); a policy file's "disabled" is policy.Config.Disabled.
func Disabled() bool { return switchedOff.Load() }

// errSwitchedOff ends the wait of a retry held in a budget's Deferrer when
// the switch turns on (holdContext).
var errSwitchedOff = errors.New("interceptor: stagger switched off")

// heldRetries is every retry held now in a budget's Deferrer (holdContext), so
// that turning the switch on ends them all at once. It holds the cancel
// functions of their contexts, not a context of its own: a context made
// by one goroutine and ended by another would tie together what a test's
// synctest bubbles keep apart.
var heldRetries holdSet

type holdSet struct {
	mu sync.Mutex
	m  map[*heldRetry]struct{}
}

// heldRetry is one retry held, by a call with State st (nil: none).
type heldRetry struct {
	cancel context.CancelCauseFunc
	st     *State
}

// end ends the waits of the retries held by calls with State st, or of
// every one for a nil st.
func (h *holdSet) end(st *State) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for r := range h.m {
		if st == nil || r.st == st {
			r.cancel(errSwitchedOff)
			delete(h.m, r)
		}
	}
}

// holdContext returns the context a retry of a call with State st (nil:
// none) waits in, in a budget's Deferrer: ctx, ended too when the switch
// turns on (the process's, or st's file's), so that turning it on ends
// every held call at once (switchEnded tells it). stop releases it; only
// a held retry pays for it, never a call that does not wait.
func holdContext(ctx context.Context, st *State) (_ context.Context, stop func()) {
	wctx, cancel := context.WithCancelCause(ctx)
	r := &heldRetry{cancel: cancel, st: st}
	heldRetries.mu.Lock()
	// Read under the lock the switches' sweeps take after they turn: a
	// switch turned before is seen here, one turned after sees r.
	if switchedOff.Load() || st != nil && st.fileOff.Load() {
		cancel(errSwitchedOff)
	} else {
		if heldRetries.m == nil {
			heldRetries.m = make(map[*heldRetry]struct{})
		}
		heldRetries.m[r] = struct{}{}
	}
	heldRetries.mu.Unlock()
	return wctx, func() {
		heldRetries.mu.Lock()
		delete(heldRetries.m, r)
		heldRetries.mu.Unlock()
		cancel(nil)
	}
}

// switchEnded reports whether the switch ended ctx, a holdContext's.
func switchEnded(ctx context.Context) bool { return context.Cause(ctx) == errSwitchedOff }

// offFor reports whether a call that follows cfg starts with stagger off:
// the process's switch, or cfg's "disabled". The first call to find the
// process's switch on before anything said so (DisableEnv at the start)
// says it.
func offFor(cfg *policy.Config) bool {
	if switchedOff.Load() {
		if !switchSaid.Load() && switchSaid.CompareAndSwap(false, true) {
			saySwitch(nil, true, DisableEnv)
		}
		return true
	}
	return cfg.Disabled()
}

// offNow reports whether the switch is on now for a running call with
// options o: the process's, or its file's as the file is now.
func (o *options) offNow() bool { return switchedOff.Load() || o.config().Disabled() }

// fileSwitch turns the switch of the State's file to cfg's, the file a
// call follows now (when it first follows a new file: methodMiss). The
// first call to find it changed, among the interceptors sharing the
// State, turns it: on, it ends every retry the State's calls hold; either
// way it says so to the logger, or slog.Default().
func (k *core) fileSwitch(cfg *policy.Config) {
	is, st := cfg.Disabled(), k.opts.state
	if st.fileOff.Load() == is || !st.fileOff.CompareAndSwap(!is, is) {
		return
	}
	if is {
		heldRetries.end(st)
	}
	saySwitch(k.opts.logger, is, "policy file")
}

// Disabled reports whether the policy file the State's interceptors follow
// turns stagger off ("disabled": true, policy.Config.Disabled), as of the
// latest call that followed a new file; for a gauge beside the process's
// switch (the package's Disabled). A nil State returns false.
func (s *State) Disabled() bool { return s != nil && s.fileOff.Load() }

// saySwitch tells l (nil: slog.Default()) that the switch turned on (at
// warn level) or off (info), and what turned it (by).
func saySwitch(l logging.Logger, on bool, by string) {
	msg, level := msgSwitchedOn, logging.LevelInfo
	if on {
		msg, level = msgSwitchedOff, logging.LevelWarn
	}
	if l == nil {
		l = slogDefault
	}
	l.Log(context.Background(), level, msg, "stagger.switch", by)
}

// disabledReport fills r for a call with Disable, which stagger hands to
// grpc untouched, on target with criticality crit: one attempt, reason
// policy.ReasonDisabled, and its code when grpc finishes the call (the
// grpc.OnFinish it appends to opts).
func disabledReport(r *Report, target string, crit criticality.Level, opts []grpc.CallOption) []grpc.CallOption {
	*r = Report{Attempts: 1, Reason: policy.ReasonDisabled, Target: target, Criticality: crit}
	return append(opts[:len(opts):len(opts)], grpc.OnFinish(func(err error) { r.Code = status.Code(err) }))
}

// switchOff makes pl the plan of a call made while the process-wide switch
// is on: one attempt, nothing that retries, hedges or waits.
func switchOff(pl *plan) plan {
	p := *pl
	p.pol, p.retrying, p.hedged = nil, false, nil
	p.perAttempt, p.hedgeOnTimeout, p.notice = 0, false, false
	p.budget, p.budgets = nil, nil
	p.breakers, p.brCache = nil, nil
	p.capped, p.unapplied, p.invalid = 0, policy.ReasonNone, nil
	return p
}

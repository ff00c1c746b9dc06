package interceptor

import (
	"context"
	"os"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors/logging"
	"google.golang.org/grpc"
	"google.golang.org/grpc/status"

	"github.com/stagger-go/stagger/criticality"
	"github.com/stagger-go/stagger/internal/holdset"
	"github.com/stagger-go/stagger/policy"
)

// DisableEnv is the environment variable that turns stagger off in a
// process without a deploy of new code: read once, before main runs, any
// value but "", "0", "false", "off" or "no" (in any case) is SetDisabled(true).
const DisableEnv = "STAGGER_DISABLE"

// switchedOff is the process's switch; switchSaid: its state was logged.
// switchMu orders SetDisabled's change and its switchSaid with the first
// call's look at them (sayEnv), so a call that starts as SetDisabled turns
// the switch on cannot say DisableEnv turned it.
var (
	switchedOff atomic.Bool
	switchSaid  atomic.Bool
	switchMu    sync.Mutex
)

func init() { switchedOff.Store(envOn(os.Getenv(DisableEnv))) }

// envOn: every value but a no turns the switch on, so what is typed in an
// emergency ("yes", "1 ") works.
func envOn(v string) bool {
	switch strings.ToLower(strings.TrimSpace(v)) {
	case "", "0", "false", "off", "no":
		return false
	}
	return true
}

// SetDisabled turns stagger off in the whole process (on true) or back on
// (on false), at once, for every interceptor; a policy file's top-level
// "disabled": true does the same for the calls that follow the file
// (policy.Config.Disabled), from the first of them after a reload.
//
// While it is on, each call is sent once: no retry, no hedge, no
// per-attempt timer, no wait (budget, Gate, breaker, pacing), no breaker or
// throttle refusal; the call keeps the file's timeout, waitForReady and
// message size limits, its criticality header and idempotency key. Turning
// it on ends what runs too: a call held in a budget's Gate ends at once
// with its last attempt's status, and a running call makes no retry after
// its next failure (a call in its pause sends that retry first); both end
// with reason policy.ReasonDisabled.
//
// Each change is logged at warn level (on) or info (off), with stagger.switch:
// "SetDisabled", "STAGGER_DISABLE" (said by the first call) or "policy file".
// Calls made while it is on end with Report.Disabled. Disabled and
// State.Disabled read the switches, for a gauge. Safe for concurrent use.
func SetDisabled(on bool) {
	switchMu.Lock()
	changed := switchedOff.Swap(on) != on
	if changed {
		switchSaid.Store(true)
	}
	switchMu.Unlock()
	if changed {
		switched(nil, nil, on, "SetDisabled")
	}
}

// Disabled reports whether stagger is off in the process (SetDisabled,
// DisableEnv); a policy file's "disabled" is policy.Config.Disabled.
func Disabled() bool { return switchedOff.Load() }

// heldRetries is every retry held now in a budget's Deferrer, under the
// State of its call (nil: none), so that turning a switch on ends them.
var heldRetries holdset.Set[*State]

// holdContext returns the context a retry of a call with State st waits
// in in a Deferrer: ctx, ended too when a switch turns on (the process's,
// or st's file's). Only a held retry pays for it.
func holdContext(ctx context.Context, st *State) (_ context.Context, stop func()) {
	return heldRetries.Hold(ctx, st, func() bool { return switchedOff.Load() || st != nil && st.fileOff.Load() })
}

// offFor reports whether a call that follows cfg starts with stagger off;
// the first to find the process's switch on unsaid says it (sayEnv).
func offFor(cfg *policy.Config) bool {
	if switchedOff.Load() {
		if !switchSaid.Load() {
			sayEnv()
		}
		return true
	}
	return cfg.Disabled()
}

// sayEnv says that DisableEnv turned the switch on, unless it was said
// since or SetDisabled changed it: under switchMu, no SetDisabled is half
// done. Both decide under switchMu and log after it, so a log handler that
// calls SetDisabled cannot deadlock.
func sayEnv() {
	switchMu.Lock()
	say := switchedOff.Load() && !switchSaid.Load()
	if say {
		switchSaid.Store(true)
	}
	switchMu.Unlock()
	if say {
		switched(nil, nil, true, DisableEnv)
	}
}

func (o *options) offNow() bool { return switchedOff.Load() || o.config().Disabled() }

// fileSwitch turns the State's file switch to cfg's, and says so, as the
// first call follows a file that changed it.
func (k *core) fileSwitch(cfg *policy.Config) {
	is, st := cfg.Disabled(), k.opts.state
	if st.fileOff.Load() != is && st.fileOff.CompareAndSwap(!is, is) {
		switched(k.opts.logger, st, is, "policy file")
	}
}

// Disabled reports whether the policy file the State's interceptors follow
// turns stagger off (policy.Config.Disabled), as of the latest call that
// followed a new file. A nil State returns false.
func (s *State) Disabled() bool { return s != nil && s.fileOff.Load() }

// switched follows a switch's turn: on, the retries held under State st
// (nil: all) end; l (nil: slog.Default()) hears what turned it.
func switched(l logging.Logger, st *State, on bool, by string) {
	msg, level := msgSwitchedOn, logging.LevelInfo
	if on {
		heldRetries.End(st)
		msg, level = msgSwitchedOff, logging.LevelWarn
	}
	if l == nil {
		l = slogDefault
	}
	l.Log(context.Background(), level, msg, "stagger.switch", by)
}

// disabledReport fills r for a call with Disable, its code by OnFinish.
func disabledReport(r *Report, target string, crit criticality.Level, opts []grpc.CallOption) []grpc.CallOption {
	*r = Report{Attempts: 1, Reason: policy.ReasonDisabled, Target: target, Criticality: crit}
	return append(opts[:len(opts):len(opts)], grpc.OnFinish(func(err error) { r.Code = status.Code(err) }))
}

// switchOff returns pl as the switch makes it: one attempt, nothing that
// retries, hedges or waits.
func switchOff(pl *plan) plan {
	p := *pl
	p.pol, p.retrying, p.hedged = nil, false, nil
	p.perAttempt, p.hedgeOnTimeout, p.notice = 0, false, false
	p.budget, p.budgets = nil, nil
	p.breakers, p.brCache = nil, nil
	p.capped, p.unapplied, p.invalid = 0, policy.ReasonNone, nil
	return p
}

package interceptor

import (
	"os"
	"strings"
	"sync/atomic"

	"github.com/stagger-go/stagger/policy"
)

// DisableEnv is the environment variable that turns stagger off in a
// process from its start, without a deploy of new code: set to anything
// but "", "0", "false", "off" or "no" (in any case), it is SetDisabled(true)
// before main runs. It is read once, when the program starts; SetDisabled
// changes the switch afterwards.
const DisableEnv = "STAGGER_DISABLE"

// switchedOff is the process-wide switch (SetDisabled): one atomic load
// per call.
var switchedOff atomic.Bool

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
// (on false), at once, for every interceptor and every call that starts
// after it: a call already running finishes under the rules it started
// with. The environment variable DisableEnv (STAGGER_DISABLE) sets it when
// the program starts.
//
// While it is on, each call is sent once: no retry, no hedge, no
// per-attempt timer, no wait of any kind (budget, Gate, breaker, pacing),
// no breaker or throttle refusal; the calls themselves go on, with the
// policy file's timeout, waitForReady and message size limits, the call's
// criticality header and idempotency key. Hooks still hear the end of each
// call (EventEnd, Event.Disabled) and WithReport fills Report.Disabled, so
// that a dashboard shows the switch is on. It differs from the per-call
// Disable, which hands the call to grpc untouched and reports nothing.
//
// Safe for concurrent use.
func SetDisabled(on bool) { switchedOff.Store(on) }

// Disabled reports whether stagger is off in the process (SetDisabled,
// DisableEnv).
func Disabled() bool { return switchedOff.Load() }

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

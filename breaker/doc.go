// Package breaker holds stagger's circuit breakers, client-side adaptive
// throttling and the pacing of calls held while their connection was down.
// The interceptors use them when a policy file declares circuitBreaker or
// adaptiveThrottling (or interceptor.WithBreakers is given).
//
// # Model
//
// A Breaker guards one key: a target, or a target and a method (Settings.Scope).
// A Set makes one per key on first use, at most 4096, past which keys share
// one overflow breaker. Closed, a Breaker counts the outcomes of the first
// attempts it guards over a sliding window and opens when too many failed,
// or, too quiet for the window, when several failed in a row; open, it
// refuses first attempts (a *Refusal wrapping ErrOpen: the call fails fast)
// and retries; after its break it lets one attempt through as a probe, whose
// outcome closes it or opens it again for longer. Breaker's documentation
// states the rules, Settings the numbers and their defaults.
//
// With Settings.ThrottleK set, a closed Breaker also rejects first attempts
// locally (ErrThrottled) with the Google SRE book's probability,
// max(0, (requests − K × accepts) / (requests + 1)), over the same window,
// capped at 0.8; it lets a first attempt go at least once a second, and
// forgets a long outage's counts at the first first attempt served after
// it (Breaker states the rules), so that a recovered server gets its
// traffic back within a second whatever the outage's length. An open
// breaker probes at least every MaxBreakDuration (1 s by default) for the
// same reason.
//
// Every asking names the call's criticality (package criticality; Unset
// counts as CRITICAL, and a process whose calls name none sees no
// difference): throttling keeps counts per level and rejects the less
// critical first, the breaker does not open while the most critical calls
// are served, and its half-open probe goes to the most critical level that
// was refused (Breaker states the rules).
// Pace spaces out first attempts that were held while their connection was
// not ready, so that they reach a recovering server at the pace the process
// sent them before the outage.
//
// A Breaker works with a budget.Gate: Breaker.Guard gives the Gate what it
// asks before it lets a waiting retry go, so that the breaker's half-open
// probe and the gate's probe are one attempt.
//
// # Concurrency
//
// Breaker and Set are safe for concurrent use. State changes reach the
// Set's onChange and the asking call's Listener after every lock is
// released; a panic of onChange is recovered (logged to slog.Default and
// counted, as interceptor.RecoveredPanics says), as no call owns it, while
// a Listener's reaches the call that asked. Time enters through WithClock, randomness through WithRandom.
// Errors of New and NewSet are *SettingsError, naming the setting, the rule
// and the value.
package breaker

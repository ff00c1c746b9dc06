// Package budget holds stagger's retry budgets: one Budget interface and three
// kinds, the gRFC A6 throttle, a token bucket (the AWS SDKs' standard mode) and
// a ratio of retries to requests over a sliding window. One budget is shared by
// every call of a process, so that retries cannot multiply an outage's load.
//
// # Model
//
// The interceptors tell a budget how every attempt ended (Record) and ask it
// before every retry and every hedge (Allow); hedges are charged exactly like
// retries. A nil Budget means unlimited: the interceptors check for nil, and
// New returns nil for KindNone.
//
//   - Throttle (gRFC A6 retryThrottling): tokens start at maxTokens; a
//     retryable failure takes 1 (even on a call's last attempt), a success
//     gives tokenRatio (kept to 3 decimals); retries pass while
//     tokens > maxTokens/2. Allow spends nothing.
//   - TokenBucket (AWS SDK standard mode): a retry pays retryCost up front
//     (timeoutRetryCost after a per-attempt timeout) or is refused; a
//     successful retry is refunded; a first-try success adds successReward.
//     Defaults 500 / 5 / 10 / 1, starting full.
//   - Ratio (Finagle, Google SRE book): over the last window (default 10 s),
//     retries + 1 ≤ max(percent × first attempts, minRetriesPerSecond ×
//     window). Defaults 10% and 0.1 retries/s: the floor is one retry per
//     window, which is 10% of a client making one call a second, so it only
//     lifts clients quieter than that, and by at most one retry per 10 s.
//
// Every operation has a form taking the time (RecordAt, AllowAt, StateAt) and
// a wrapper reading the clock given by WithClock (time.Now by default). The
// throttle and the bucket do not depend on time; their Record and Allow do not
// read the clock at all. The ratio's window is a fixed ring of 10 slices
// brought up to date when the budget is used: no goroutine, no timer, bounded
// memory however long it runs.
//
// # Deferral
//
// A budget that only counts must starve a client riding out a restart to
// protect against a thousand clients in a storm: one process cannot tell
// them apart. Time can: a Gate (Deferring; New wraps the token bucket and
// the ratio in one unless Settings.Defer says off, and the throttle only
// when it says on, so that gRFC A6's retryThrottling refuses at once as A6
// says) lets a retry the budget refused wait, within its call's deadline,
// and go later: one at a time while attempts fail, as a probe when nothing
// else has reached the server for a quiet time that grows with every
// failure (a quiet process retries at its backoff's pace, slowed by every
// failure; a busy one learns from its new calls' attempts instead), or as
// its call's last chance just before the deadline (the last attempt of a
// call with a deadline is kept for it); and, once an attempt succeeds
// again, released one at a time, at a pace that grows with the successes
// the process sees. During an outage (failures in a row) a gate with
// waiting calls also holds back the retries its budget would admit: they
// wait with the others. The interceptors find a
// Deferrer by type assertion on the budget; a user's own Budget keeps
// working as it is (refusals end the call) unless wrapped with Deferring.
// Waiting calls are bounded per Gate (DeferSettings.MaxWaiting), and a call
// without a deadline waits at most MaxWait. See Gate for the rules and their
// constants.
//
// # Circuit breakers and adaptive throttling
//
// A Breaker (one per key: a target, or a target and method; Breakers makes
// them on first use, at most 4096 per set) counts the attempts it guards
// over a sliding window of 10 slices and opens when FailureRatio of at
// least MinimumThroughput answered attempts failed; open, Admit refuses
// first attempts with a *Refusal (ErrBreakerOpen) and AllowRetry refuses
// retries, for BreakDuration; then it lets one attempt through as a probe,
// whose outcome closes it or opens it again for twice as long (up to
// MaxBreakDuration). A Gate asks the breaker a waiting retry's Request
// names before it lets the retry go, so the gate's probe and the breaker's
// are one. With ThrottleK set, Admit also rejects first attempts locally
// (ErrThrottled) with the SRE book's probability, over the same window.
// Pace spaces out first attempts that were held while their connection was
// down. State changes reach the Breakers' onChange and the asking call's
// BreakerListener outside every lock.
//
// # Stagger's default budget
//
// Default (DefaultSettings) is a token bucket with the AWS costs and reward
// but a capacity of 100 that starts at 9 tokens: while everything fails, a
// fresh process gets one retry paid by the bucket and then needs a success
// for each next one (the retries it refuses meanwhile wait: Deferral);
// while a few attempts fail, refunds and rewards keep it full. It was chosen
// with the model in storm_test.go (DESIGN.md model 2); see Default for the
// figures. The ratio and the throttle cannot meet both storm-lab goals: they
// do not see whether retries succeed, so a share small enough to hold
// amplification at p = 1 refuses the retries that p = 0.1 needs.
//
// # Concurrency and zero values
//
// Every budget is safe for concurrent use. A Gate takes one mutex while
// calls wait and when it records a failure: otherwise its Record costs one
// atomic load more than its budget's. Throttle and TokenBucket keep
// integer thousandths of a token in one atomic word and update it by
// compare-and-swap; Ratio takes one mutex. Their zero values are not usable:
// build them with NewThrottle, NewTokenBucket, NewRatio or New. In
// TokenBucketSettings and RatioSettings a zero field takes its default;
// ThrottleSettings has no defaults (a policy file must give both fields, as
// in gRFC A6). Errors are *SettingsError and name the policy file's field,
// the rule and the value.
package budget

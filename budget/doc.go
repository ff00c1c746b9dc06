// Package budget holds stagger's retry budgets: one Budget interface and three
// kinds, the gRFC A6 throttle, a token bucket (the AWS SDKs' standard mode) and
// a ratio of retries to requests over a sliding window, and the Gate that
// lets a refused retry wait instead of failing. A budget is shared by every
// call to one backend, so that retries cannot multiply an outage's load;
// Backends keeps one per backend (each target its tokens, each of its
// methods its Gate over them), so that what one backend does never spends,
// refills or judges another's retries.
//
// # Model
//
// The interceptors tell a budget how every attempt ended (Record) and ask it
// before every retry and every hedge (Allow); hedges are charged exactly like
// retries. An attempt that never left the client (its connection refused)
// is no evidence of the server: they record it as Other and number the
// attempts without it, and its retry waits for the connection instead of
// asking (the budget protects the server from the retries it sees; that
// retry reaches it once, as the call's first try). A nil Budget means unlimited: the interceptors check for nil, and
// New returns nil for KindNone. Users may implement Budget.
//
//   - The throttle (KindThrottle, gRFC A6 retryThrottling): tokens start at
//     maxTokens; a retryable failure takes 1 (even on a call's last
//     attempt), a success gives tokenRatio (kept to 3 decimals); retries
//     pass while tokens > maxTokens/2. Allow spends nothing.
//   - The token bucket (KindTokenBucket, AWS SDK standard mode): a retry
//     pays retryCost up front (timeoutRetryCost after a per-attempt
//     timeout) or is refused; a successful retry is refunded; a first-try
//     success adds successReward. Defaults 500 / 5 / 10 / 1, starting full.
//   - The ratio (KindRatio, Finagle, Google SRE book): over the last window
//     (default 10 s), retries + 1 ≤ max(percent × first attempts,
//     minRetriesPerSecond × window). Defaults 10% and 0.1 retries/s: the floor is one retry per
//     window, which is 10% of a client making one call a second, so it only
//     lifts clients quieter than that, and by at most one retry per 10 s.
//
// Time enters one way: the clock given by WithClock (time.Now by default).
// The throttle and the bucket do not depend on time; their Record and Allow
// do not read the clock at all. The ratio's window is a fixed ring of 10
// slices brought up to date when the budget is used: no goroutine, no timer,
// bounded memory however long it runs.
//
// # Deferral
//
// A budget that only counts must starve a client riding out a restart to
// protect against a thousand clients in a storm: one process cannot tell
// them apart. Time can. A Gate (Deferring) lets a retry the budget refused
// wait, within its call's deadline. Its model is one estimate per backend
// and method, the pace at which held retries may go beside the new calls,
// learnt from the backend's answers (a refusal for overload without a
// pushback halves it and never makes the backend down; failures in a row where retries do not heal
// do) and, where the backend sends load reports (Load), steered by the
// utilization they report, as every process of a fleet hears it (Gate),
// and two rules on it. Go: a retry goes once its pause has passed and
// the budget pays or the estimate has room, the most critical first. End: a
// wait ends once its turn plus an attempt cannot come before its deadline,
// or MaxWait in all without one, whatever its pause; in an outage a new
// failed call ends at once (but for a rare lone probe) once the outage has
// lasted three of its deadlines, or what it has left of MaxWait. The Gate's
// doc states them, `stagger check` prints them. No process keeps a floor
// that sums with a fleet: without load reports, the calls a process held
// through an outage go back at least at min(0.4λ, 1/s), λ the rate its
// calls began to wait at in the outage, so N processes send at least
// Σ min(0.4λᵢ, 1/s) a second, never more than 0.4 times the fleet's own load
// whatever N (the fewer than four a process held go each at its own time);
// their own successes grow it, refusals cut it back to that. New wraps the token bucket and the ratio in a Gate unless
// Settings.Defer says off, and the throttle only when it says on, so that
// gRFC A6's retryThrottling refuses at once as A6 says. The interceptors
// find a Deferrer by type assertion on the budget; a user's own Budget
// keeps working as it is (refusals end the call) unless wrapped with
// Deferring. A retry whose call a circuit breaker guards names it as its
// Request.Guard (package breaker builds one), and the Gate asks it too.
//
// # Criticality
//
// A Request names its call's criticality (package criticality). The
// budgets keep a reserve by it, so that the less critical are refused
// first and CRITICAL_PLUS may dip below where the others stop
// (Request.Criticality states the shares), and a Gate hands its releases,
// probes and last chances to the most critical waiting retries first,
// and evicts the least critical when its waiting room is full (Gate, the criticality
// rule). A request that names
// none counts as CRITICAL, which every kind treats exactly as it treated
// every request before levels existed (gRFC A6's throttle included).
//
// # Stagger's default budget
//
// DefaultBackends (DefaultSettings, per backend) is a token bucket with the AWS costs and reward
// but a capacity of 100 that starts at 9 tokens, wrapped in a Gate: while
// everything fails, a fresh process gets one retry paid by the bucket and
// then needs a success for each next one (the retries it refuses meanwhile
// wait in the Gate); while a few attempts fail, refunds and rewards keep it
// full. DefaultSettings says how it was chosen.
//
// # Concurrency and zero values
//
// Every budget is safe for concurrent use. A Gate takes one mutex while
// calls wait and when it records a failure: otherwise its Record of a
// success costs one atomic load more than its budget's, and one store
// when the answer carries a load report (Gate says exactly). The throttle and the token bucket keep integer thousandths of
// a token in one atomic word and update it by compare-and-swap; the ratio
// takes one mutex. New builds every kind; a Gate's zero value is not
// usable (New or Deferring builds one). In
// TokenBucketSettings and RatioSettings a zero field takes its default;
// ThrottleSettings has no defaults (a policy file must give both fields, as
// in gRFC A6). Errors are *SettingsError and name the setting, the rule and
// the value.
package budget

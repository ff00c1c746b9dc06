// Package sim is a deterministic discrete-event simulator of retry storms. It
// drives stagger's own policy and budget code (policy.Backoff.Delay,
// policy.Policy.Decide, the budget kinds built with budget.WithClock) on a
// virtual clock, so a model of thousands of clients over many seconds runs in
// milliseconds and the same seed always gives the same figures.
//
// Five models:
//
//   - OCC contention (AWS Architecture Blog, 2015): clients race to update a
//     row; compares no backoff, plain exponential, full, equal and
//     decorrelated jitter by work (writes) and time to finish.
//   - Random failures (M. Brooker, 2022): Poisson calls against a server that
//     fails each attempt with probability p; amplification (attempts ÷
//     calls) and success rate per retry policy and budget.
//   - Partial failure (M. Brooker, 2022, where a circuit breaker turns a
//     partial failure into a complete one): the same calls, each with a
//     key, against a server that fails every attempt of the calls of a
//     fraction of the keys (20 % by default) and serves every other;
//     amplification, success, and success among the calls the server would
//     serve, per retry policy and budget. A call's key is a draw in [0, 1)
//     from its client process's own PCG stream (the key fails when the
//     draw is below the fraction), so a process's n-th call has the same
//     key whatever the contender or the fraction, and the keys leave the
//     runs' other draws as they were.
//   - Outage and recovery: a capacity-limited server that is down for a
//     while; load during the outage, peak after recovery, time to drain.
//     BlipConfig sets it up as the lab's blip scenario (a 1.5 s outage under
//     light load, with 2 s call deadlines), where what counts is how many
//     of the outage's calls the retries heal.
//   - Fleet: the lab's fleet scenario (`stagger lab -scenario fleet`) on
//     virtual time, at fleet sizes no machine runs in real time: N client
//     processes, each with its own budget (for stagger its own Gate),
//     share a fixed total load against a server with room for Capacity
//     attempts a second, Concurrency at a time with no queue (it refuses
//     with RESOURCE_EXHAUSTED past that, as the lab's server does), which
//     answers UNAVAILABLE for a while; the outage calls served, when the
//     held ones finish after the return, those that fail before their own
//     bound, the peak after the return and the refusals, beside plain
//     retries and the no-retry baseline (FleetConfig). Its processes tell
//     the budget what the interceptors tell it and the older models leave
//     out: a refusal for overload (Attempt.Overload), how long an admitted
//     retry took (Attempt.Took), the call's waits so far (Request.Waited,
//     so a call without a deadline waits MaxWait in all, as the
//     interceptors' calls do) and the latest served retry's time
//     (Request.Took).
//
// The two failure models, FailRate and Partial, are one sweep
// (FailureConfig): their server fails every attempt of a call whose key is
// below a fraction of failing keys, and each other attempt with probability
// p; FailRate sweeps p with no failing keys, Partial the fraction with p
// 0. Both run Contenders() by default, as Outage does, so a strategy added
// to that line-up runs in every model.
//
// Deadlines: in the failure and outage models a call may have a deadline
// (CallTimeout; default none), counted from its start, as a caller's
// context has one. Decide is told the time left, so a pause that cannot
// end before the deadline is not taken and the call fails at once; when
// the deadline passes during an attempt the call fails then, the budget is
// told nothing of that attempt (Decide sees the caller done), and its
// answer is dropped, though an attempt already sent still reaches the
// server. A call that has not succeeded by its deadline fails. Without a
// deadline no deadline event is scheduled and the runs are what they were
// before deadlines existed, figure for figure, as long as no retry is
// deferred (a deferred retry waits until its deadline, or MaxWait).
//
// Budgets: a retry the budget refuses (Allow) ends its call, unless the
// budget defers (budget.New wraps the token bucket and the ratio in a
// budget.Gate; the throttle refuses at once). Then the retry waits as it
// does through the interceptors, driven by the Gate's own non-blocking API
// on the virtual clock: Enter (a full gate, budget.ErrTooManyWaiting, ends
// the call as a refusal), then the gate's grant loop, run by Tick right
// after every Record on that budget and at the time Tick returned; each
// waiter whose Ready is closed is taken (Take), in the order the waiters
// entered. Admitted, the retry leaves the gate and is sent at once (the
// grant loop never admits it before its pause), and its attempt is
// recorded with the admission Take returned (AdmitNone for every other
// attempt). A waiter whose wait the grant loop ends (at its call's
// deadline or, without one, the gate's DeferSettings.MaxWait
// after it entered, less the call's earlier waits in the fleet model: the
// other models leave Request.Waited zero, so each wait is bounded alone,
// as the interceptors did before issue 63) leaves and its call fails. So without a deadline a deferred call may end up to
// MaxWait (10 s by default) after its last attempt, past the end of the
// arrivals; the Outage model's Drain counts it.
//
// The simulator has no ceiling of its own: `stagger sim outage` and
// `stagger sim blip` print the lab's (lab.CeilingOf) for calls offered
// evenly at the model's load.
//
// Model: one Sim per run holds the clock, an event queue ordered by time and
// then by scheduling order, and a PCG random source. Events are closures run
// one at a time; nothing sleeps and no goroutine stands for a client.
//
// Concurrency: a Sim is used by one goroutine. The model functions (OCC,
// FailRate, Partial, Outage, Fleet) may run independent runs on several goroutines, and their
// results do not depend on how many.
package sim

// Package sim is a deterministic discrete-event simulator of retry storms. It
// drives stagger's own policy and budget code (policy.Backoff.Delay,
// policy.Policy.Decide, the budget kinds built with budget.WithClock) on a
// virtual clock, so a model of thousands of clients over many seconds runs in
// milliseconds and the same seed always gives the same figures.
//
// Three models, as DESIGN.md describes them:
//
//   - OCC contention (AWS Architecture Blog, 2015): clients race to update a
//     row; compares no backoff, plain exponential, full, equal and
//     decorrelated jitter by work (writes) and time to finish.
//   - Random failures (M. Brooker, 2022): Poisson calls against a server that
//     fails each attempt with probability p; amplification (attempts ÷
//     calls) and success rate per retry policy and budget.
//   - Outage and recovery: a capacity-limited server that is down for a
//     while; load during the outage, peak after recovery, time to drain.
//
// Model: one Sim per run holds the clock, an event queue ordered by time and
// then by scheduling order, and a PCG random source. Events are closures run
// one at a time; nothing sleeps and no goroutine stands for a client.
//
// Concurrency: a Sim is used by one goroutine. The model functions (OCC,
// FailRate, Outage) may run independent runs on several goroutines, and their
// results do not depend on how many.
package sim

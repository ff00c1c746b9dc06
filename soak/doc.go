// Package soak runs stagger under random faults for a long time and checks,
// while it runs and at the end, that nothing is lost, nothing runs twice and
// nothing leaks: `make soak` (SOAK_TIME, default 10m; SOAK_SEED) runs
// TestSoak, which calls Run.
//
// # The fleet
//
// Three replicas of the test service (package testserver) on loopback TCP,
// each behind stagger's server side (package server: shedding past 48
// calls at once, don't-retry propagation, de-duplication of keyed writes
// in a memory store the replicas share and, when redis-server is on PATH,
// in a Redis store too: a write carries the key header of one of them).
// Beside them a second backend, payments: one testserver of its own, with
// faults of its own. Seven client processes' worth of clients, each with
// its own connection to every replica (round_robin or stagger_elsewhere)
// and one to payments, its own policy file and its own budgets, one per
// backend (budget.Backends, each method's a Gate over its backend's
// tokens): the default budget; a circuit breaker;
// adaptive throttling; three crowds whose Gate holds only two waiting
// calls (one behind a breaker too), so that a more critical retry evicts a
// less critical one while callers give up; and the churn process, whose
// Gate holds one. Twelve callers per process call in a loop at a random
// criticality with a random deadline (up to 2 s), and three in ten give up
// (cancel) at a random moment: keyed non-idempotent Writes, hedged Gets,
// Puts with a per-attempt timeout, and the three kinds of stream. A crowd
// is impatient: 24 callers, each request three calls under one deadline
// (up to 0.6 s), six in ten cancelled within 50 ms, retries after 1 ms,
// and a budget that pays for almost none, so that its retries wait in the
// Gate. The churn process's 24 callers each send four Gets at random
// criticalities under one deadline (50 to 500 ms); every Get of half the
// requests fails every attempt, retried a millisecond apart, so that the
// request's retries reach the Gate together; the caller gives up on the
// request when one of its retries is deferred: half the time at that
// moment, as the other retries enter the Gate and may evict a call of the
// same request that is leaving, else within 3 ms. That is the race between a
// waiter's Leave and its eviction (issue 38), which the crowds alone met
// too rarely to find. Two callers per process call payments (Put), one
// call every 70 ms each. Beside them the pods client dials pod addresses
// as they come and go: a new target (a name no pod had, to one replica)
// about every run's length over 2,048, each making two calls before it is
// closed, so that its budgets (budget.Backends, default budget) meet more
// targets than they keep and forget while they serve.
//
// # The faults
//
// Every replica fails one attempt in ten while faults run. A seeded injector
// draws, every 0.7 s on average, one fault of: a replica off the network
// and back on its port (every connection and call cut), a burst of
// UNAVAILABLE, of RESOURCE_EXHAUSTED with a pushback, a share of attempts
// failed (a flaky replica), a slowdown, a burst of replies lost with their
// connection after the store kept them, a long outage of every replica,
// and a restart of Redis (SIGKILL; its append-only file keeps every key).
// Each replica also sends every connection a GOAWAY every four seconds or
// so. The faults overlap. Payments' faults come from a source of their
// own, one at a time, every three seconds on average: an outage of 2 to
// 5 s, past every deadline, or a flaky spell. The seed fixes the workload and the schedule of
// faults, not how goroutines interleave: a replay of a seed meets the same
// faults and calls, and a race needs the same luck again.
//
// # The invariants
//
// The servers keep a ledger: the innermost interceptor records every Write
// whose handler finished. Checked as the run goes: no keyed write applied
// twice, none acknowledged OK and not applied, every call ended exactly
// once for the interceptor (one EventEnd), every stream's messages whole
// and in order, every Gate's count of waiting calls within [0,
// MaxWaiting], the pods' calls waiting on one backend within MaxWaiting
// (all its methods together) and their budgets holding no more targets
// than their cap and the calls waiting. Each backend counts the calls made and the attempts it
// received while it was down for longer than any call's deadline (the
// replicas in a long outage, payments in its own): at the end, over 50
// calls or more, more than 1.5 attempts per call is a retry storm. The faults pause for five seconds at half time and stop
// five seconds before the end; at the end of each calm window the load
// stops and the heap is measured with no call in flight and the running
// checks paused (their copies of every Gate's state are no leak; after two
// collections, the least of three samples; on runs that judge the heap,
// ten seconds later, once the ledger forgot the writes that ended); at
// half time the load then resumes. After the last, every process sends calls of every method,
// CRITICAL_PLUS with a 5 s deadline, one at a time, until its breakers are
// closed (10 s at most): under the load a half-open breaker's probe may
// end by its caller's cancellation, which says nothing of the server, and
// the crowds' callers give up before a Chat ends on loaded cores. Then
// checked: nobody waiting in a Gate, every breaker closed, goroutines back
// within 5 of where they were, and, on runs of two minutes or more, the
// heap up less than 5 % from half time to the end. The first invariant
// broken stops the run; Result carries it, the seed and the history before
// it. Under `make soak` the race detector halts the process at the first
// race it sees, after the seed was printed, and GOMAXPROCS is twice the
// CPUs (SOAK_CPU): the system then preempts goroutines at any instruction,
// which opens the windows of races between real events (at GOMAXPROCS=2
// on two CPUs two five-minute runs of one seed did not find the race
// above). CI runs a 40 s soak under -race on every change (.ci/run), with
// seed 1 each time, so that it judges the change, not a new seed's luck.
//
// Run is for one caller at a time (it counts the process's goroutines and
// heap).
package soak

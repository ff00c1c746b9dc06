package soak

import "time"

// The soak's numbers, each with why it is what it is.
const (
	// replicas: the smallest fleet where a retry or a hedge can go
	// elsewhere while one replica restarts and another is slow.
	replicas = 3
	// workersPerProcess callers per client process, each with one call
	// in flight (crowdCallers with crowdFanOut in a crowd): 252 calls over six processes
	// keep two shared cores busy under -race without queueing every call
	// behind the race detector.
	workersPerProcess = 12
	// smallRoom is MaxWaiting of the processes whose Gate is meant to be
	// full: two places make a more critical retry evict a less critical
	// one many times a second during an outage.
	smallRoom = 2

	// A crowd (a small room's process) fans each request out into
	// crowdFanOut calls under one deadline, at most crowdTimeoutMax, and
	// cancels crowdCancelShare of them: calls waiting in the Gate leave
	// together, queueing on its lock, while other retries arrive and evict.
	// Its budget (crowdBudget) pays for few retries, so that many wait.
	crowdCallers     = 2 * workersPerProcess
	crowdFanOut      = 3
	crowdPatience    = 50 * time.Millisecond // a cancelled crowd request gives up within it
	crowdTimeoutMax  = 600 * time.Millisecond
	crowdCancelShare = 0.6
	// The churn process hunts the race between a waiter that leaves and
	// the eviction that takes its place (budget's Waiter.Leave, fixed in
	// issue 38): the crowds above reach 15-25 deferrals a second, which
	// found it in none of 6 seeds (~32 min). churnRoom, one place, makes
	// every more critical retry evict the waiter; churnCallers callers fan
	// each request out into churnFanOut Gets at random criticalities;
	// every Get of churnFailShare of the requests fails every attempt
	// (retried a millisecond apart: churnPolicy), so that the request's
	// retries reach the Gate together, under a deadline of churnTimeoutMin to
	// churnTimeoutMax, longer than an attempt takes on the loaded fleet
	// (a few milliseconds to a few hundred under -race: shorter ones,
	// and cancels timed from the request's start, ended most requests
	// before any retry reached the Gate). The caller gives up when the
	// first retry of its request is deferred: churnCancelAtOnce of the
	// requests at once, as that retry enters the Gate and may evict
	// another of the request's calls that is leaving, the others within
	// churnPatience.
	churnRoom         = 1
	churnCallers      = 2 * workersPerProcess
	churnFanOut       = 4
	churnFailShare    = 0.5
	churnTimeoutMin   = 50 * time.Millisecond
	churnTimeoutMax   = 500 * time.Millisecond
	churnPatience     = 3 * time.Millisecond
	churnCancelAtOnce = 0.5
	// shedLimit is each replica's concurrency limit (server side): about
	// the calls in flight at one replica when all three serve, so that it
	// sheds only while a replica is slow or the others are down (at 16 it
	// shed most calls all the time: 12 % succeeded, seed 3).
	shedLimit = 48
	// flakyShare of the attempts a flaky replica fails (UNAVAILABLE);
	// baseFailures, of every replica's at all times: retries are part of
	// the load even between faults, and the crowds' wait in their Gates.
	flakyShare   = 0.3
	baseFailures = 0.1
	// callTimeoutMin and callTimeoutMax bound a call's deadline: long
	// enough for two or three backed-off retries, short enough that a
	// call outlives no fault by much.
	callTimeoutMin = 150 * time.Millisecond
	callTimeoutMax = 2 * time.Second
	// cancelShare of the calls are cancelled by their caller at a random
	// time within their deadline: callers that give up, also while their
	// retry waits in a Gate.
	cancelShare = 0.3
	// serviceDelay is every attempt's scripted work; a slowdown multiplies
	// it (testserver.SetDelayFactor).
	serviceDelay = 2 * time.Millisecond
	// listLength is the messages of a ListItems, Upload or Chat call.
	listLength = 5

	// faultGapMean is the mean pause between two faults (exponential):
	// often enough that faults overlap, rarely enough that calls succeed
	// between them.
	faultGapMean = 700 * time.Millisecond
	// faultSpanMin and faultSpanMax bound a short fault (a restart, a
	// burst, a slowdown); a long outage lasts outageMin to outageMax,
	// past the longest call deadline, so calls wait in their Gates.
	faultSpanMin = 100 * time.Millisecond
	faultSpanMax = 1500 * time.Millisecond
	outageMin    = 2 * time.Second
	outageMax    = 5 * time.Second
	// slowFactor multiplies serviceDelay in a slowdown: 2 ms become 80 ms,
	// past the timed method's per-attempt timeout (50 ms).
	slowFactor = 40
	// resetShare of the replies of a replica in a reset burst are lost
	// after the server stored them.
	resetShare = 0.3
	// connectionAge makes each replica send every connection a GOAWAY
	// after about this long (grpc-go adds ±10 %), with a grace after
	// which streams still open are cut.
	connectionAge      = 4 * time.Second
	connectionAgeGrace = 2 * time.Second

	// calmTail is how long the load runs on without faults at half time
	// and after the last fault: the heap is measured at its end, and the
	// breakers close again (their break is 1 s) before the final checks.
	calmTail = 5 * time.Second
	// ledgerHorizon is how long the ledger keeps a write after its call
	// ended: past the longest lease a store grants (deadline and a second),
	// a later run of it would be a run twice.
	ledgerHorizon = 10 * time.Second
	// storeTTL keeps an outcome past every retry of its call (calls end
	// within callTimeoutMax), and the memory store's bound keeps its heap
	// flat: at a few hundred writes a second, 4096 entries outlive a call
	// by far.
	storeTTL        = 30 * time.Second
	memStoreEntries = 4096
	// goroutineSlack and heapGrowth are the end checks' tolerances (the
	// issue's: goroutines back within 5, heap up less than 5 % over the
	// second half). The heap is judged only on runs of heapMinRun or
	// more: a shorter run's halves are dominated by the fleet's warm-up.
	goroutineSlack = 5
	heapGrowth     = 0.05
	heapMinRun     = 2 * time.Minute
	// heapSamples samples, heapSampleGap apart, each after a collection,
	// with the load stopped at the end of a calm window, give the heap at
	// half time and at the end: their least. Measured under the load (as
	// before), the calls in flight and the buffers of the connections they
	// used swung the measure by a quarter with no leak in the profiles
	// (seed 12, 5m: +26 %).
	heapSamples   = 3
	heapSampleGap = 200 * time.Millisecond
	// redisPoolSize caps the Redis client's connections (go-redis's
	// default is ten per CPU), each with its read and write buffers: a
	// pool that grew to the load's peak, or refilled after a restart of
	// Redis, must not be read as a leak.
	redisPoolSize = 8
	// probeSpan bounds the tail's probes (probeBreakers): past two of the
	// longest breaks (maxBreakDuration 2 s) and a probe. probeCallTimeout
	// is each probe call's deadline, longer than any call takes on a calm
	// fleet; probeGap the pause between two rounds of a process's calls.
	probeSpan        = 10 * time.Second
	probeCallTimeout = 5 * time.Second
	probeGap         = 100 * time.Millisecond
	// payments, the second backend: paymentsCallers per process call it,
	// one call every paymentsEvery each (98 calls a second over seven
	// processes, the lab's two-backends scale); its faults, an outage
	// past every deadline or a flaky spell, come one at a time, one every
	// paymentsFaultGap on average after the last ended.
	paymentsCallers  = 2
	paymentsEvery    = 70 * time.Millisecond
	paymentsFaultGap = 3 * time.Second
	// downAttemptsMax is the most attempts per call a backend may receive
	// while down past every deadline, judged over downMinCalls calls or
	// more: one retry in ten goes (the Gate's futility rule) and a call
	// that began just before the outage had its retries in it. A storm
	// (every retry sent) is 3 to 4.
	downAttemptsMax = 1.5
	downMinCalls    = 50
	// The pods client (pods) dials a target every run's length over twice
	// the budgets' cap, within podEveryMin and podEveryMax (a 40 s run:
	// 2,048 targets, one every 20 ms; a 10 min one: 2,400), each making
	// podCalls calls with deadlines up to podTimeoutMax (short: a pod
	// lives a call or two), podsAtOnce at most at a time.
	podEveryMin   = 5 * time.Millisecond
	podEveryMax   = 250 * time.Millisecond
	podCalls      = 2
	podTimeoutMax = 300 * time.Millisecond
	podsAtOnce    = 64
	// historyLines is the history printed around the first broken
	// invariant.
	historyLines = 200
	// watchEvery is how often the running checks look at every Gate.
	watchEvery = 20 * time.Millisecond
)

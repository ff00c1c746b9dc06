// Package lab is the live storm lab behind lab/cmd/stagger-lab (`stagger lab`) and `make demo`: real
// gRPC calls, from many concurrent clients, against a testserver that pays
// for its work, through an outage, an overload or a slowdown, made side by
// side by stagger, the retry layers people use instead of it, and a client
// that does not retry at all.
//
// # Model
//
// Run runs one scenario. Every contender gets its own testserver (its own
// chain of three in ScenarioChain; same capacity, same outage, same
// offered load) and its own Clients client
// connections, one per simulated client process; all contenders run at the
// same time, so a run takes Duration plus the time its last calls need to end
// (at most CallTimeout), plus up to a second before the load starts (see
// below). Each client issues calls open loop at Rate/Clients
// calls per second, each in its own goroutine, with a CallTimeout deadline:
// an open loop keeps offering load while calls fail, as real traffic does, so
// retries add to it instead of replacing it.
//
// # The server pays for its work
//
// Every scenario with a trigger (an outage, an overload or a slowdown,
// from OutageStart to OutageEnd; Scenario.HasTrigger) but ScenarioChain
// runs on a worker server (testserver.Workers): Workers workers (default
// 10) take the attempts in arrival order from a FIFO queue of at most
// Queue; a worker spends ServiceTime, Workers ÷ Capacity (20 ms by
// default), on an attempt it serves, and a tenth of it on one it rejects
// with RESOURCE_EXHAUSTED because the queue is full, or drops because its
// deadline passed while it waited; a caller that gives up (its deadline,
// or a per-attempt timer that cancels the attempt) does not stop the work,
// which is then wasted (Result.Wasted). So the server serves at most
// Capacity attempts per second, a burst of retries queues behind the calls
// that could succeed, and a storm costs what it would cost a real server:
// an outage can outlast its trigger. (Until issue 29 the outage scenarios
// counted Capacity in one-second windows, testserver.Capacity.PerSecond,
// and served whatever burst landed in a window with room: storms cost
// nothing there, and the clients that caused them looked best.)
//
// The connections are made first; the load then starts on the next whole
// second of the server's clock, so that the server's arrival bins and the
// timeline's seconds line up with the load's (the wait costs up to a second
// of wall time). Times in a Config (OutageStart, OutageEnd, Duration) count
// from the start of the load. The outage, from OutageStart to OutageEnd, is
// either UNAVAILABLE answers, which cost the workers nothing
// (ScenarioUnavailable; ScenarioBlip: a 1.5 s outage under light load, 1
// call/s per client; ScenarioMetastable, below; over bufconn) or a server
// that is gone: its TCP listener and connections closed so that
// connections are refused (ScenarioRefused over loopback TCP, and
// ScenarioRefusedWait, the same with grpc.WaitForReady on every call).
//
// Contenders (Contenders lists them; all get MaxAttempts attempts, the first
// included, and retry UNAVAILABLE and RESOURCE_EXHAUSTED):
//
//   - stagger: stagger.DialOptions with a policy.Policy of Backoff (gRFC A6
//     proportional jitter, ×U(0.8, 1.2)) and the default retry budget
//     (budget.DefaultSettings), one budget per client, as
//     budget.DefaultBackends is one per process; budget.New makes it defer (budget.Gate): a retry it
//     refuses waits, within the call's deadline, for a later admission;
//   - stagger-nobudget: the same without a budget;
//   - grpc-middleware: go-grpc-middleware v2's retry interceptor, WithMax,
//     BackoffExponentialWithJitter(Backoff.Initial, 0.2) (the same ±20 %, and
//     the same pauses while they stay below Backoff.Max: it has no cap);
//   - failsafe-go: failsafe-go's retrypolicy through its failsafegrpc
//     interceptor, with Backoff's pauses, ±20 % jitter (WithJitterFactor)
//     and failsafe-go's default retry budget, one per client: a retry is
//     refused when at least 3 retries are in flight and they are more than
//     20 % of the client's executions in flight. It bounds concurrent
//     retries, not their rate, so against fast failures it rarely binds. A
//     refused retry ends the call with failsafe-go's budget.ErrExceeded, not
//     a gRPC status;
//   - grpc-go: grpc-go's built-in retry from a service config with Backoff's
//     initialBackoff, maxBackoff and backoffMultiplier; grpc-go (since v1.69)
//     jitters each pause by ×U(0.8, 1.2) as gRFC A6 says, as stagger does,
//     and caps attempts at grpc.WithMaxCallAttempts (default 5);
//   - grpc-go-throttle: the same with retryThrottling {maxTokens 10,
//     tokenRatio 0.1}, per connection as grpc-go keeps it;
//   - naive: a loop that retries after a fixed Backoff.Initial;
//   - no-retry: a plain connection with grpc-go's retry off: one attempt
//     per call, the same deadline. Every scenario has it (in ScenarioChain
//     on every hop): a retry layer must never do worse.
//
// The unavailable, blip and flaky-quiet scenarios also show two connect-go
// clients (the gRPC protocol over h2c, to the same grpc-go server over
// bufconn; each attempt counted by an interceptor after the retry layer):
// stagger-connect, with package staggerconnect given what the stagger row
// gets (the same engine behind Connect's interceptor), and
// connect-no-retry, a Connect client without a retry layer.
//
// In ScenarioSlowdown, ScenarioSlowdown90, ScenarioMetastable and
// ScenarioStragglers every contender that has a per-attempt timeout gets
// PerAttemptTimeout (200 ms, the call's deadline 1 s; in ScenarioStragglers
// 3 × StragglerBase, 60 ms, the deadline 2 s): stagger its perAttemptRecvTimeout,
// go-grpc-middleware retry.WithPerRetryTimeout, failsafe-go a timeout
// policy inside its retry policy (which then retries timeout.ErrExceeded),
// the naive loop a context per attempt (and retries DEADLINE_EXCEEDED).
// grpc-go has no per-attempt timeout: its rows, as no-retry's, wait for
// their attempt until the call's deadline.
//
// The peers are today's releases (Versions reports them, and the CLI prints
// them): the lab is a module of its own, so that the core module can keep
// requiring the oldest grpc-go it supports.
//
// ScenarioFlakyQuiet is a quiet process against a flaky server, no trigger
// and no capacity limit: one client, 5 calls/s for 4 s, 3 attempts, a 2 s
// deadline, Backoff 100 ms doubling; the first FlakyFailAttempts (2)
// attempts of every call fail UNAVAILABLE (a script per call), the third
// is served, so a client that retries heals every call in about 0.3 s.
// stagger gets its policy from a policy file that declares no budget, as
// a new user would write it (stagger.DialOptions, with a default budget of
// its own per client, as budget.DefaultBackends is one per process).
// ScenarioFlakyQuietRandom is the same with 4 clients for 10 s and a
// server that fails each attempt with probability FailureRate (0.5). A
// client retries only after a failure, so it sees the draws as how many
// of a call's first attempts fail (at least k with probability 0.5^k);
// that number is drawn per call from the client's own seeded source and
// scripted, so every contender meets the same failures in the same calls
// (common random numbers: a draw per attempt arriving gave each contender
// a sample of its own, ±2 points apart by chance alone).
//
// ScenarioSlowdown runs at 75 % of Capacity; from OutageStart to OutageEnd
// (2 s to 3 s of 8 s) the work a worker begins takes Slow (3) times as
// long, and the queue (Queue: Capacity × 2 × PerAttemptTimeout, 200,
// 0.4 s of work at full speed) fills. A client without retries waits its
// turn within its deadline and is served; a per-attempt timer cuts the
// waiting attempts off, its retries join the back of the queue, and the
// server serves the attempts cut off for nobody. ScenarioSlowdown90 is the
// same at 90 % with Slow 4. ScenarioMetastable runs at 75 % for 14 s, with
// an UNAVAILABLE outage from 2 s to 3 s as its trigger, then the same
// offered load for 11 s: the question is whether the server comes back.
//
// ScenarioLongOutage is ScenarioUnavailable with an outage that outlives
// the calls' deadlines ten times over: UNAVAILABLE from 2 s to 22 s of a
// 30 s run, a 2 s deadline, every contender and no-retry. A blip is healed
// by waiting; here waiting is pure cost, which FailP50, FailP99 and
// MeanInFlight show beside success; SuccessAfter and Recover show whether
// each contender lets traffic back once the server serves again (a breaker
// that stays open, a throttle that keeps rejecting). SweepConfig runs it
// with an outage of any length from 2 s on and 8 s of run after it;
// `make lab-figures` sweeps OutageSweep's lengths (0.5, 2, 5 and 20 s).
//
// ScenarioStragglers is a quiet process against a server with stragglers,
// no trigger and no capacity limit: one client, 5 calls/s for 40 s, 3
// attempts, a 2 s deadline; every attempt takes StragglerBase (20 ms), one
// in ten (StragglerOdds, drawn per attempt from the client's seeded
// source, so that every contender meets the same stragglers) StragglerFactor
// (20) times as long. The contenders are those of the slowdowns, with a
// per-attempt timeout of 3 × StragglerBase (60 ms): stagger's
// perAttemptRecvTimeout under its default budget, beside
// go-grpc-middleware's WithPerRetryTimeout. What is measured is the p99
// and the attempts per call: a client that cuts a straggler and retries
// ends the call in about 60 ms + its first pause + 20 ms instead of 400 ms.
//
// ScenarioSlowReplica has no outage and other contenders
// (HedgingContenders, and no-retry), and no server limit: every attempt takes SlowBase, one in twenty (drawn
// per attempt from a source seeded per client, so every contender meets the
// same slow attempts) takes SlowFactor times as long; stagger without
// hedging, with a hedging policy of 3 attempts and a SlowHedgeDelay delay, and
// with the adaptive delay. It shows p50, p99 and p99.9 and the attempts per
// call that hedging costs. Its default Rate is half the capacity, so that
// hedges are not rejected.
//
// ScenarioSlowReplicaStream is the same with a server stream: every call is
// a ListItems of SlowStreamMessages (5) messages, whose first message
// leaves when the attempt's SlowBase (or ten times that) has passed, the
// others right after it; the contenders (HedgingStreamContenders) are the
// same three, the hedging ones hedging the stream until it commits (its
// first response headers, which come with its first message here; the
// other attempts are then cancelled). It shows the time to the first
// message (Result.FirstP50, FirstP99, FirstP999) and the extra attempts
// (attempts per call − 1): at the defaults hedging should cut the p99 of
// the first message from 10×SlowBase to about 2.5×SlowBase, 4× less, for
// about one hedge in twenty calls.
//
// ScenarioBadReplica has no trigger and no server limit: three replicas
// over loopback TCP, reached by every client connection through a resolver
// that returns their three addresses, the first answering every attempt
// UNAVAILABLE for the whole run; 4 clients (busy connections, 100 calls/s
// each), 3 attempts, 4 s. The contenders (BadReplicaContenders) balance
// with round_robin, but stagger-elsewhere, which runs stagger over the
// stagger_elsewhere policy (package balancer/elsewhere): its retries go to
// a replica the call has not met. Result.BadCalls and BadRepeats count,
// from the bad replica's own records, the calls that met it and those that
// met it more than once; under round_robin a retry goes to whichever
// replica is next in the connection's rotation, the bad one included.
//
// ScenarioSlowReplica3 is the same three replicas, none failing, of which
// the first is slow: every attempt takes SlowBase on the others and
// SlowFactor times as long on it (testserver.Server.SetDelayFactor); 4 clients,
// 250 calls/s in all, 4 s. The contenders (SlowReplica3Contenders) are
// stagger hedging (3 attempts, SlowHedgeDelay apart) over round_robin and
// over the stagger_elsewhere policy (stagger-elsewhere), and no-retry. A
// third of the calls send their first attempt to the slow replica; under
// round_robin the hedge goes to whichever replica is next in the
// connection's rotation, the slow one included, so such a call waits for a
// third attempt; with stagger_elsewhere it goes to another replica and the
// call takes about SlowHedgeDelay+SlowBase. Result.HedgeRepeats counts,
// from the replicas' records, the calls that sent a hedge to the replica
// their first attempt went to; the figures are p50, p99 and p99.9.
//
// ScenarioOverload has no outage but an overload, with a server that pays
// for its work (testserver.Workers, over bufconn): Workers workers (default
// 10) take the attempts in arrival order from a FIFO queue of at most Queue
// (default 5 × Workers); a worker spends ServiceTime, Workers ÷ Capacity
// (20 ms by default), on an attempt it serves, and a tenth of it (2 ms) on
// one it rejects with RESOURCE_EXHAUSTED because the queue is full (the
// next worker to be free does that before it takes from the queue), or
// drops because its deadline passed while it waited. An attempt whose
// caller gives up while it is served costs the whole service time (the
// server notices only when it answers). From OutageStart to OutageEnd
// (default 2 s to 6 s of a 10 s run) only half the workers work, so the
// capacity halves, from 500 to 250 attempts/s by default, while the offered
// load stays at Rate, 80 % of the full capacity by default: 160 % of the
// reduced one. With one attempt per call the server refuses about 160
// calls/s, at 2 ms each; every retry is more work refused at 2 ms, so
// retrying without restraint takes worker time from the calls that could
// succeed (the contenders without a budget or throttling send several
// times the reduced capacity during the overload, and their goodput
// falls). The defaults keep the
// other scenarios' Capacity and Rate; 10 workers halve into a whole 5;
// the queue holds a tenth of a second of work at full capacity, a fifth
// during the overload: far within the 2 s deadline, so that what is
// measured is the cost of refusing, not of waiting. The contenders are
// OverloadContenders: Contenders, as for the outages.
//
// Its ceiling reckons with the reduced capacity during the overload.
//
// ScenarioMixedCriticality is ScenarioOverload with calls of two
// criticalities (package criticality): of every ten calls a client makes,
// three are CRITICAL (CriticalShare) and seven SHEDDABLE. In front of the
// workers the server runs stagger's server side with a concurrency limit
// of Config.ConcurrencyLimit (Workers + Queue/2, 35 by default) and its
// default criticality shares, the same for every contender; an attempt the
// limit refuses costs the workers a rejection, as one the queue refuses
// does (testserver.Server.Refused), so that a limit in front does not
// make storms free. Only stagger-criticality says its calls' criticality
// (criticality.NewContext, as a user would); the others' calls all arrive
// as CRITICAL, stagger's because it is the same layer without it, the
// peers' for want of a way to say it. Result.CriticalSuccess and
// SheddableSuccess are each level's success (the peers' printed beside:
// they serve both alike); goodput says whether serving the CRITICAL first
// cost the server work. The contenders are MixedCriticalityContenders.
//
// ScenarioChain is a call chain, over bufconn: the users call A, A calls
// B, B calls C, three in-process testservers, A and B relaying every call
// to the next (testserver.WithRelay) under the handler's context, each
// through one client connection (a process of its own). Every hop retries
// through the contender's retry layer with MaxAttempts attempts (default
// 3) and the Backoff (default 10 ms doubling up to 100 ms, so that a user
// call that makes 27 attempts at C takes about 0.4 s, far within its 2 s
// deadline), none but stagger with a retry budget or breakers, and no
// server limits its attempts (Capacity only scales OutageLoad and
// PeakAfter): what is measured is how retries propagate, and (stagger
// beside stagger-nobudget) what a budget's Gate adds to it. C answers UNAVAILABLE from
// OutageStart to OutageEnd (default 1 s to 3 s of a 4 s run, 100 calls/s).
// Each user call has a Script key of its own, so each server's records
// tell which user call every attempt came from. The contenders are
// ChainContenders: stagger on every hop with stagger's server side
// (package server) on A and B, with its default budget and without one,
// and without the server side; grpc-go's built-in retry
// on every hop; go-grpc-middleware on every hop; grpc-go's built-in retry
// at the top with stagger and the server side below ("mixed": the gRFC A6
// "do not retry" trailer works across libraries); and go-grpc-middleware
// at the top, which ignores that trailer, with stagger below and
// server.WithRetryAtOneLayer on A and B.
//
// Its measures (Result.OutageCalls, TopAttemptsPerCall,
// MiddleAttemptsPerCall, BottomAttemptsPerCall, SuccessAfter) are taken
// over the user calls made and returned during C's outage, every attempt
// of which met C down: the attempts that reached A, B and C per such
// call. With 3 attempts per hop and nothing coordinating, 3, 9 and 27;
// with "do not retry" propagated up the chain, 1, 1 and 3, the
// no-amplification limit. With go-grpc-middleware at the top 3, 3 and 5:
// A's retried requests make one attempt at B, which carries
// stagger-upstream-retry, so B makes one at C too. SuccessAfter is the success rate of the user
// calls made from OutageEnd on, once C is back. The overall SuccessRate
// favours the contenders that retry longest: a call that fails at once
// fails, one that retries until past OutageEnd may succeed. In this
// scenario OutageAttempts, OutageLoad, Load and PeakAfter are C's (the
// attempts that reached it), the other measures the users' (PeakGoroutines
// too: A's and B's connections belong to the servers). Its Ceiling is
// reckoned as ScenarioUnavailable's, with Capacity.
//
// Measures, per contender (Result says each exactly): attempts per call
// (every attempt a connection began, counted by a stats.Handler, so
// grpc-go's own retries are counted too; transparent retries are not),
// success rate, p50/p99/p99.9 latency of the successful calls and p50/p99
// of the failed ones, attempts made during the trigger ÷ what the server
// could have served in that time (Capacity when up; the reduced or slowed
// capacity in ScenarioOverload and the slowdowns), and the peak of
// attempts the server received per 100 ms after the trigger ÷ capacity per
// 100 ms. After the trigger: Recover, the whole seconds from its end until
// the calls made in every later second succeed at RecoverThreshold (95 %)
// or more (Recovered false if never by the end of the run), and
// SuccessAfter, the success of the calls made from AfterGap (2 s) after
// its end. Goodput is the calls that succeeded from the trigger's start ÷
// what the server could serve then (Config.CapacityAt); Wasted the share
// of the server's work done for callers that had gone; Timeline the run
// second by second (calls made and how many of them succeeded, attempts
// begun, calls that returned successfully). Load is the server's arrival
// series (testserver.Server.Arrivals), 100 ms per bin, from the start of
// the load. WritePlot draws the timeline.
//
// What a contender holds while it heals, per contender: the most calls in
// flight at once (made, not yet returned), the most attempts in flight at
// once (from the stats.Handler's Begin to its End; a call waiting for a
// ready connection is in an attempt), and the most calls waiting at once: a
// call waits from the end of an attempt, when none of its attempts is in
// flight, until its next attempt begins or it returns (a backoff pause,
// pushback, or a budget holding its retry back). These three are exact,
// from the begin and end times of every call, attempt and wait on the time
// package's clock; intervals are half-open, so on virtual time an attempt
// over bufconn, which takes no time, is never in flight. And the most
// goroutines of the contender's client side alive at once, sampled every
// 100 ms from the goroutine profile: goroutines inherit the runtime/pprof
// labels of the goroutine that starts them, and everything a contender's
// clients start runs under a label of its own (its calls' goroutines, one
// per client offering calls, its connections', any its retry layer
// starts), while its server does not. A goroutine the runtime starts for
// a timer (time.AfterFunc) takes the labels of whatever goroutine its
// thread was running, if any, so a short-lived one may now and then count
// for the wrong contender, or for none. A sample costs about 1.5 µs per goroutine in the process.
// Beside the peaks, the mean number of calls in flight during the trigger
// (MeanInFlight, exact from the same times): what a retry layer's waits
// cost the caller over the outage, where a peak shows only its worst
// moment.
//
// Each run also gives its scenario's ceiling (Ceiling): the success rate an
// ideal client could reach without ever sending more than the capacity:
// the calls made outside the outage succeed at once, within capacity per
// 100 ms; the others are served, earliest deadline first, by the capacity
// those leave after the outage, each before its deadline. The refused
// scenarios and ScenarioMetastable follow the same rule; ScenarioOverload
// and the slowdowns reckon with the capacity left during the trigger; the
// slow replicas have no trigger nor limit (1); the flaky scenarios the
// chance that one of a call's attempts is served (1, and 1 − 0.5³). The
// worker server serves no burst faster than its capacity, so no contender
// passes the ceiling but by a hair (workers idled by the overload finish
// what they began).
//
// # The fleet
//
// RunFleet runs ScenarioFleet (`stagger lab -scenario fleet`), which has
// its own FleetConfig and FleetReport: a fleet's outage and return, in
// real time over loopback TCP. Clients (20) client processes' worth of
// retry layers, each its own grpc.ClientConn (and for stagger its own
// default budgets: budget.NewBackends(budget.DefaultSettings()) per
// client, what stagger.DialOptions installs as budget.DefaultBackends in
// each pod, from a policy file that declares no budget), call one worker
// server (testserver.Workers) with room for Capacity (1000) attempts a
// second: Workers (50) at a time, 50 ms each, no queue, so an attempt
// that finds every worker busy is refused with RESOURCE_EXHAUSTED (at a
// tenth of the service time, as the worker server charges). The load,
// Load × Capacity calls a second (40 % by default; 80 % is the other
// figure of issue 63), is spread over the clients, open loop, evenly
// (ArrivalsEven, the default: a smooth load, so that a refusal after the
// return is one the retries caused) or as Poisson processes
// (ArrivalsPoisson, seeded); every call has Deadline (none by default).
// After Warmup (2 s) the server answers UNAVAILABLE for Outage (10 s),
// then serves again while the load goes on for After (15 s); the calls
// still in flight then get Drain (60 s) before the lab cancels them
// (FleetResult.Cut). Every contender gets the same policy: FleetAttempts
// (4) attempts, FleetBackoff (0.1 s doubling to 1 s, ×U(0.8, 1.2)), on
// UNAVAILABLE and RESOURCE_EXHAUSTED. The contenders (FleetContenders):
// stagger, grpc-go with retryThrottling (10, 0.1, per connection),
// go-grpc-middleware, failsafe-go and no-retry, one after another, each
// against a server of its own, so that each has the machine to itself.
//
// Every call has a Script key of its own, so the server's records of its
// attempts say when each arrived, whether it was the call's first, and
// how the server answered; FleetResult's figures come from them: the
// attempts per 100 ms after the return against Capacity (the first
// second, the peak, the time above 1.1× and 1.0×), the RESOURCE_EXHAUSTED
// sent after the return and how many hit first attempts of calls made
// after it, the calls made in the outage served and when they finished
// after the return, the calls that failed after the return while the
// server had room (it refused nothing in that 100 ms and the one before)
// and why, the longest call, the latencies, and the attempts that arrived
// in the outage per call made in it. Beside them, the counts that check
// the measurement (the clients' stats handlers against the server's
// Stats and records) and what the machine did: how late the clients made
// their calls, how long first attempts took to reach the server, the CPU
// the process used. On a busy machine the first two grow: the figures
// then measure the machine, not the retry layer.
//
// Beside the figures stands the room's limit (FleetResult.Limit): the
// share of the outage calls an oracle serves, sending them from the return
// on, earliest bound first, into the room the calls after the return
// leave, never above Capacity. With Reports (`-reports`) the server sends
// a load report (gRFC A51) on every answer while up, its busy workers over
// Workers, through grpc-go's orca package; stagger's clients read them
// (FleetResult.Reported), and their budgets act on nothing of them yet.
//
// # The migrating team
//
// RunMigrate runs the migration scenarios (MigrateScenarios; `stagger lab
// -scenario migrate-refused`, migrate-outage, migrate-burst), which have
// their own MigrateConfig and MigrateReport: what a team met moving one
// client from go-grpc-middleware's retry to stagger by the migration
// guide. Each contender (MigrateContenders) is one client, calling open
// loop a backend of its own over bufconn (or loopback TCP), all at once:
// stagger from the team's policy file (MigrateAttempts, 5, and
// MigrateBackoff: 0.1 s doubling to 10 s, PROPORTIONAL jitter; both
// codes; no budget declared, so default budgets of the client's own),
// go-grpc-middleware as the team had it (WithMax(5),
// BackoffExponential(100 ms), both codes) and no-retry.
// ScenarioMigrateRefused refuses each attempt with RESOURCE_EXHAUSTED, no
// pushback, with probability FailureRate (0.3; each call's refusals drawn
// from a seeded source, the same for every contender), 30 calls/s for 10
// s, no deadline; ScenarioMigrateOutage answers UNAVAILABLE from 2 s to
// 5 s of 8 s, 20 calls/s, a 1 s deadline; ScenarioMigrateBurst refuses
// every attempt with RESOURCE_EXHAUSTED for the first 2 s of 8 s, 20
// calls/s, no deadline, then serves them all. The backends answer at
// once and are not worker servers: one client at 20 or 30 calls/s is no
// storm, its failures are scripted, and what is measured is what each
// retry layer makes of the failures it meets. MigrateResult gives success,
// attempts per call, p50/p99 of the calls served and failed, the longest
// call, the calls made in the trigger served and when the last of them
// ended after it, and the failures by reason. On virtual time
// go-grpc-middleware, which has no jitter, is exact: 114 of 160 calls
// through the outage, its longest call 1.5 s after the burst.
//
// # Time
//
// The lab runs on the time package's clock: real time for the demo, virtual
// time inside a testing/synctest bubble (bufconn scenarios only), which is
// how the tests run it with tiny parameters. Jitter comes from each
// library's own random source, so two real runs differ a little.
//
// # Concurrency
//
// Run may be called from several goroutines; runs share nothing but the
// process's CPU (which is what a busy 2-core machine makes of latencies).
package lab

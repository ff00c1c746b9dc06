// Package lab is the live storm lab behind `stagger lab` and `make demo`: real
// gRPC calls, from many concurrent clients, against testserver in
// capacity-limited mode with an outage, made side by side by stagger and the
// retry layers people use instead of it.
//
// # Model
//
// Run runs one scenario. Every contender gets its own testserver (same
// capacity, same outage, same offered load) and its own Clients client
// connections, one per simulated client process; all contenders run at the
// same time, so a run takes Duration plus the time its last calls need to end
// (at most CallTimeout). Each client issues calls open loop at Rate/Clients
// calls per second, each in its own goroutine, with a CallTimeout deadline:
// an open loop keeps offering load while calls fail, as real traffic does, so
// retries add to it instead of replacing it.
//
// The server admits at most Capacity attempts per one-second window
// (testserver.Capacity.PerSecond) and answers the rest RESOURCE_EXHAUSTED.
// The outage, from OutageStart to OutageEnd after the server started, is
// either UNAVAILABLE answers (ScenarioUnavailable, over bufconn) or a server
// that is gone: its TCP listener and connections closed so that connections
// are refused (ScenarioRefused over loopback TCP, and ScenarioRefusedWait,
// the same with grpc.WaitForReady on every call).
//
// Contenders (Contenders lists them; all get MaxAttempts attempts, the first
// included, and retry UNAVAILABLE and RESOURCE_EXHAUSTED):
//
//   - stagger: stagger.DialOptions with a policy.Policy of Backoff (gRFC A6
//     proportional jitter, ×U(0.8, 1.2)) and the default retry budget
//     (budget.DefaultSettings), one budget per client, as budget.Default is
//     one per process;
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
//   - naive: a loop that retries after a fixed Backoff.Initial.
//
// The peers are today's releases (Versions reports them, and the CLI prints
// them): the lab is a module of its own, so that the core module can keep
// requiring the oldest grpc-go it supports.
//
// ScenarioSlowReplica has no outage and other contenders
// (HedgingContenders): every attempt takes SlowBase, one in twenty (drawn
// per attempt from a source seeded per client, so every contender meets the
// same slow attempts) takes SlowFactor times as long; stagger without
// hedging, with a hedging policy of 3 attempts and a SlowHedgeDelay delay, and
// with the adaptive delay. It shows p50, p99 and p99.9 and the attempts per
// call that hedging costs. Its default Rate is half the capacity, so that
// hedges are not rejected.
//
// Measures, per contender: attempts per call (every attempt a connection
// began, counted by a stats.Handler, so grpc-go's own retries are counted
// too; transparent retries are not), success rate, p50/p99/p99.9 latency of
// the successful calls, attempts made during the outage ÷ what the server
// could have served in that time, and the peak of attempts the server
// received per 100 ms after the outage ÷ capacity per 100 ms. Load is the
// server's arrival series (testserver.Server.Arrivals), 100 ms per bin.
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

package interceptor

import "time"

// The interceptors' tuning numbers, unexported so that a retune does not
// change the API; each line says what set it ("not measured": the argument).
// The per-attempt timer's are its evidence's, in internal/pace.

// The per-method cache (call.go).
const (
	// methodSlots: not measured; a client calls tens of methods, a shared slot costs a map lookup.
	methodSlots = 64
	// methodCacheMax bounds made-up method names: not measured, far above a real client's.
	methodCacheMax = 4096
	// cacheLine pads methodInfo's own unaryAttempt, which calls write, from what every call reads.
	cacheLine = 64
)

// Hedging (hedge.go; the histogram's own numbers are internal/quantile's).
const (
	// hedgeQuantile: at most one call in twenty hedged; measured in BENCHMARKS.md's hedging section.
	hedgeQuantile = 0.95
	// hedgeResultsRoom: not measured; above the attempts a file allows unless its cap is raised.
	hedgeResultsRoom = 8
)

// callerDeadlineSlack covers late timers and proxies that round grpc-timeout down: not measured.
const callerDeadlineSlack = time.Millisecond

// saidMax bounds a saidOnce (notices said once per method): not measured; made-up method names cannot grow it.
const saidMax = 1024

// stateCap bounds the settings a State keeps (budgets, breakers): not measured; a few files.
const stateCap = 64

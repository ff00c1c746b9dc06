package interceptor

import (
	"time"

	"github.com/stagger-go/stagger/internal/gatetune"
)

// The interceptors' tuning numbers, unexported so that a retune does not
// change the API; each line says what set it ("not measured": the argument).

// The per-attempt timer (attemptTimer) and its evidence (pace).
const (
	// slowSuccessPart of the timeout makes a success overload: least waste on
	// slowdown-90 (BENCHMARKS.md, "Figures behind the code's choices").
	slowSuccessPart = 4
	// laterSendAgePart (pace.slowForAll): slowSuccessPart's, with which the rule was measured.
	laterSendAgePart = 4
	// stragglerFastPart (pace.straggler): not measured; timeouts are a few times the latency.
	stragglerFastPart = 2
	// paceSends slices of a paceSliceParts-th of the timeout: TestRealTimeTimerSlowForAll, under
	// load, lost the evidence in a ring of four sends.
	paceSends      = 16
	paceSliceParts = 8
	// scoutGapMax, in timeouts: not measured; as the Gate's probeGapMax bounds its probes.
	scoutGapMax = 64
)

// paceFresh is the Gate's overload hold, so that pace and the Gate forget a slow server together.
var paceFresh = gatetune.OverloadHold

// The per-method cache (call.go).
const (
	// methodSlots: not measured; a client calls tens of methods, a shared slot costs a map lookup.
	methodSlots = 64
	// methodCacheMax bounds made-up method names: not measured, far above a real client's.
	methodCacheMax = 4096
	// cacheLine pads methodInfo.spare, which calls write, from what every call reads.
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

// stateCap bounds the settings a State keeps (budgets, breakers): not measured; a few files.
const stateCap = 64

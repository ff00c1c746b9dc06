package breaker

import "time"

// The breaker's and the throttle's tuning numbers (see Breaker), in one place;
// unexported so that a retune does not change the API.
const (
	// probeHoldBreaks: half-open, the probe waits this many breaks for the
	// most critical level that was refused while the breaker was open. A
	// level that asked during the break and does not ask again within
	// another one has gone quiet; waiting longer would only delay the
	// recovery of the levels that still call.
	probeHoldBreaks = 1
	// maxProbeEvery: each failed half-open probe doubles the first
	// attempts the probe is one of (Settings.ProbeEvery), up to this many
	// (or ProbeEvery itself when set higher). Not measured: chosen so that
	// in a long outage a busy client's probes stay one first attempt in a
	// thousand, while MaxBreakDuration still bounds the break for a quiet
	// client.
	maxProbeEvery = 1000
	// foldEvery is how many fast-path counts of a level wait before they
	// are folded into the window, under the lock. Measured with the
	// interceptor's BenchmarkUnarySuccess when it came in: a breaker adds
	// 12-15 ns to a successful call at 64, with no allocation (other values
	// not compared); the price is that up to 63 counts of a level reach
	// the window late.
	foldEvery = 64

	// maxThrottleRejection caps the throttle's rejection probability.
	// The SRE formula counts its own rejections as requests, so "reject
	// every first attempt" is a fixed point: without a cap a throttle that
	// reached it after a long outage lets nothing through to learn that the
	// server is back. Envoy's admission control caps it at 0.8 by default
	// (max_rejection_probability), failsafe-go's adaptive throttler at 0.9
	// (its maximum rejection rate). In the lab 0.8 did as well as 0.9 or
	// better (BENCHMARKS.md, "Figures behind the code's choices"): Envoy's default, then.
	maxThrottleRejection = 0.8
	// throttleProbeEvery: whatever the rejection probability, a level whose
	// first attempts the throttle has let none through for this long lets
	// the next one go, so that a client sees a recovered server within a
	// second whatever the outage's length (at the cap alone, a client
	// asking 8 first attempts a second waits longer than a second for
	// one to go once in five times).
	throttleProbeEvery = time.Second
	// throttleBackSlices: a level's first attempt served after none was
	// served for this many of the window's ten slices (half the window:
	// with K = 2 the throttle starts rejecting once the server has served
	// fewer than half the window's requests) while the throttle rejects
	// the level ends its throttling at once (the back rule): the window's
	// requests and accepts of the level were counted while the server was
	// down, and would otherwise keep rejecting the recovered server's
	// callers until they slide out of the window (about 13 s after a
	// 20-s outage at the cap, 8 calls/s, K = 2).
	throttleBackSlices = 5
)

// throttleKShares[l.Index()] scales ThrottleK − 1 into level l's K:
// K_l = 1 + (ThrottleK − 1) × share, CRITICAL's K being ThrottleK itself.
// Against a server that serves a share α of what it is sent, a level whose
// K is below 1/α is throttled and one above it is not, so the lower K is
// rejected first. TestThrottleCriticalityModel (`go test -v -run
// ThrottleCriticalityModel ./breaker`: 30 % CRITICAL and 70 % SHEDDABLE
// calls at twice a server's capacity, rejections costing a tenth of a
// call, K = 2, five seeds) chose SHEDDABLE's three quarters (K = 1.75):
// against a server that fails every level alike, CRITICAL success rises
// from 44 % (no levels) and 46 % (one K, counts per level) to 58 %, and
// the goodput from 0.867 to 0.884 of capacity; against a server that
// serves CRITICAL first, the counts per level alone lift CRITICAL from 85
// to 98 %, and a lower K only throttles SHEDDABLE calls the server had room
// for (goodput 0.866 at 1.75, 0.839 at 1.5, 0.774 at 1.25; no levels
// 0.867). SHEDDABLE_PLUS sits halfway to CRITICAL; CRITICAL_PLUS's 2 keeps
// it unthrottled until the server fails two of three of its calls (K = 3).
var throttleKShares = [4]float64{0.75, 0.875, 1, 2}

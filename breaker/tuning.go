package breaker

// The breaker's tuning numbers by criticality (see Breaker), in one place;
// unexported so that a retune does not change the API.
const (
	// probeHoldBreaks: half-open, the probe waits this many breaks for the
	// most critical level that was refused while the breaker was open. A
	// level that asked during the break and does not ask again within
	// another one has gone quiet; waiting longer would only delay the
	// recovery of the levels that still call.
	probeHoldBreaks = 1
)

// throttleKShares[l.Index()] scales ThrottleK − 1 into level l's K:
// K_l = 1 + (ThrottleK − 1) × share, CRITICAL's K being ThrottleK itself.
// At equilibrium against a server that serves a share α of what it is
// sent, a level whose K is below 1/α is throttled and one above it is not,
// so the lower K is rejected first; the server then wastes K − 1 rejections
// per accepted call of the level. TestThrottleCriticalityModel (30 %
// CRITICAL, 70 % SHEDDABLE at twice a server's capacity, K = 2) chose
// SHEDDABLE's quarter: CRITICAL's success per attempt rises from the 50 %
// of one K for all to about 60 %, and a SHEDDABLE call still probes (K > 1
// finds capacity that comes back). CRITICAL_PLUS's 2 keeps it unthrottled
// until the server fails two of three of its attempts (K = 3).
var throttleKShares = [4]float64{0.25, 0.5, 1, 2}

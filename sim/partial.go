package sim

// PartialConfig configures the partial-failure model. The zero value of
// each field takes the default written beside it (FailureConfig's beside
// them).
type PartialConfig struct {
	// FailKeys lists the fractions of keys whose calls the server fails,
	// every attempt of them, each in [0, 1]. Default 0.2.
	FailKeys []float64
	FailureConfig
}

// PartialResult is one run: one fraction of failing keys, one client count,
// one contender.
type PartialResult struct {
	FailKeys float64
	FailureStats
	// HealthyCalls counts the calls whose key the server never fails: the
	// most that can succeed.
	HealthyCalls int
	// HealthySuccessRate is Successes ÷ HealthyCalls: the share of what the
	// server would serve that the contender got served. Below 1, the
	// contender failed calls the server would have served.
	HealthySuccessRate float64
}

// Partial runs the partial-failure model (M. Brooker, "Fixing retries with
// token buckets and circuit breakers", 2022, where a breaker turns a
// partial failure into a complete one): FailRate's calls, each with a key,
// against a server that fails every attempt of the calls whose key is among
// a fraction FailKeys of the keys (UNAVAILABLE) and serves every other
// attempt. A call's key is a draw in [0, 1) from its client process's own
// source, seeded with Seed: the key fails when the draw is below FailKeys.
// Results come in the order FailKeys × Clients × Contenders.
func Partial(cfg PartialConfig) ([]PartialResult, error) {
	if len(cfg.FailKeys) == 0 {
		cfg.FailKeys = []float64{0.2}
	}
	runs, err := cfg.sweep("partial", "fail keys", cfg.FailKeys, func(f float64) failingServer { return failingServer{failKeys: f} })
	if err != nil {
		return nil, err
	}
	res := make([]PartialResult, len(runs))
	for i, r := range runs {
		res[i] = PartialResult{FailKeys: r.x, FailureStats: r.FailureStats, HealthyCalls: r.healthy}
		if r.healthy > 0 {
			res[i].HealthySuccessRate = float64(r.Successes) / float64(r.healthy)
		}
	}
	return res, nil
}

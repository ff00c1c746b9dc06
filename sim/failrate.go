package sim

// FailRateConfig configures the random-failure model. The zero value of each
// field takes the default written beside it (FailureConfig's beside them).
type FailRateConfig struct {
	// P lists the probabilities that the server fails an attempt, each in
	// [0, 1]. Default 0.05, 0.1, 0.2, 0.5, 0.75, 1.
	P []float64
	FailureConfig
}

// FailRateResult is one run: one p, one client count, one contender.
type FailRateResult struct {
	P float64
	FailureStats
}

// FailRate runs the random-failure model (the package's random-failures model): Poisson calls
// at Rate in all, split evenly over each client count's processes, against a
// server that fails each attempt with probability p (UNAVAILABLE). Every
// one-way hop takes |Normal(10 ms, 2 ms)|. Results come in the order
// P × Clients × Contenders.
func FailRate(cfg FailRateConfig) ([]FailRateResult, error) {
	if len(cfg.P) == 0 {
		cfg.P = []float64{0.05, 0.1, 0.2, 0.5, 0.75, 1}
	}
	runs, err := cfg.sweep("failrate", "p", cfg.P, func(p float64) failingServer { return failingServer{p: p} })
	if err != nil {
		return nil, err
	}
	res := make([]FailRateResult, len(runs))
	for i, r := range runs {
		res[i] = FailRateResult{P: r.x, FailureStats: r.FailureStats}
	}
	return res, nil
}

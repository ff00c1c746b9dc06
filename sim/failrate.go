package sim

import (
	"fmt"
	"runtime"
	"time"
)

// FailRateConfig configures the random-failure model. The zero value of each
// field takes the default written beside it.
type FailRateConfig struct {
	// P lists the probabilities that the server fails an attempt, each in
	// [0, 1]. Default 0.05, 0.1, 0.2, 0.5, 0.75, 1.
	P []float64
	// Clients lists how many client processes share the traffic, each with
	// its own budget. Default 100.
	Clients []int
	// Rate is the total rate of calls of all processes, per second.
	// Default 1000 (Brooker's 100 clients × 10 calls/s).
	Rate float64
	// Duration is how long calls arrive. Default 10 s. Calls still running
	// then are finished and counted.
	Duration time.Duration
	// CallTimeout is each call's deadline, counted from its start: the
	// call's attempts stop when it passes, and a call that has not
	// succeeded by then fails. Default 0: no deadline.
	CallTimeout time.Duration
	// Seed seeds every run.
	Seed uint64
	// Contenders to compare. Default Contenders().
	Contenders []Contender
	// Workers bounds the goroutines that run simulations at once. Default
	// GOMAXPROCS. The results do not depend on it.
	Workers int
}

// FailRateResult is one run: one p, one client count, one contender.
type FailRateResult struct {
	P         float64
	Clients   int
	Contender string
	// Calls, Attempts and Successes count over the whole run.
	Calls, Attempts, Successes int
	// Amplification is Attempts ÷ Calls.
	Amplification float64
	// SuccessRate is Successes ÷ Calls.
	SuccessRate float64
}

// FailRate runs the random-failure model (DESIGN.md, model 2): Poisson calls
// at Rate in all, split evenly over each client count's processes, against a
// server that fails each attempt with probability p (UNAVAILABLE). Every
// one-way hop takes |Normal(10 ms, 2 ms)|. Results come in the order
// P × Clients × Contenders.
func FailRate(cfg FailRateConfig) ([]FailRateResult, error) {
	if len(cfg.P) == 0 {
		cfg.P = []float64{0.05, 0.1, 0.2, 0.5, 0.75, 1}
	}
	if len(cfg.Clients) == 0 {
		cfg.Clients = []int{100}
	}
	if cfg.Rate == 0 {
		cfg.Rate = 1000
	}
	if cfg.Duration == 0 {
		cfg.Duration = 10 * time.Second
	}
	if len(cfg.Contenders) == 0 {
		cfg.Contenders = Contenders()
	}
	if cfg.Workers <= 0 {
		cfg.Workers = runtime.GOMAXPROCS(0)
	}
	for _, p := range cfg.P {
		if !(p >= 0 && p <= 1) {
			return nil, fmt.Errorf("sim: failrate p must be in [0, 1], got %v", p)
		}
	}
	for _, n := range cfg.Clients {
		if n < 1 || n > 100000 {
			return nil, fmt.Errorf("sim: failrate clients must be in [1, 100000], got %d", n)
		}
	}
	if !(cfg.Rate > 0 && cfg.Rate <= 1e6) {
		return nil, fmt.Errorf("sim: failrate rate must be in (0, 1e6] calls/s, got %v", cfg.Rate)
	}
	if cfg.Duration < 0 || cfg.Duration > time.Hour {
		return nil, fmt.Errorf("sim: failrate duration must be in (0, 1h], got %v", cfg.Duration)
	}
	if cfg.CallTimeout < 0 || cfg.CallTimeout > time.Hour {
		return nil, fmt.Errorf("sim: failrate call timeout must be in [0, 1h] (0: none), got %v", cfg.CallTimeout)
	}
	np, nc, nk := len(cfg.P), len(cfg.Clients), len(cfg.Contenders)
	return runIndexed(cfg.Workers, np*nc*nk, func(i int) (FailRateResult, error) {
		pi, ci, ki := i/(nc*nk), i/nk%nc, i%nk
		// Contenders share a stream (common random numbers).
		s := New(cfg.Seed, 1<<63|uint64(pi)<<32|uint64(ci))
		return failRateRun(s, cfg.P[pi], cfg.Clients[ci], cfg.Rate, cfg.Duration, cfg.CallTimeout, &cfg.Contenders[ki])
	})
}

func failRateRun(s *Sim, p float64, clients int, rate float64, d, timeout time.Duration, c *Contender) (FailRateResult, error) {
	var t callTotals
	serve := func() bool { return s.rng.Float64() >= p }
	for i := 0; i < clients; i++ {
		pr, err := newProc(s, c, &t, timeout, serve)
		if err != nil {
			return FailRateResult{}, err
		}
		pr.poisson(rate/float64(clients), d)
	}
	s.Run()
	r := FailRateResult{P: p, Clients: clients, Contender: c.Name, Calls: t.calls, Attempts: t.attempts, Successes: t.successes}
	if t.calls > 0 {
		r.Amplification = float64(t.attempts) / float64(t.calls)
		r.SuccessRate = float64(t.successes) / float64(t.calls)
	}
	return r, nil
}

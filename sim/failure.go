package sim

import (
	"fmt"
	"math/rand/v2"
	"runtime"
	"time"
)

// FailureConfig is what the failure models (FailRate, Partial) share: the
// calls, the processes that make them and the contenders. The zero value
// of each field takes the default written beside it.
type FailureConfig struct {
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
	// Contenders to compare. Default Contenders(), so that a contender
	// added there runs in every model.
	Contenders []Contender
	// Workers bounds the goroutines that run simulations at once. Default
	// GOMAXPROCS. The results do not depend on it.
	Workers int
}

// FailureStats are the figures of one failure-model run: one client count,
// one contender.
type FailureStats struct {
	Clients   int
	Contender string
	// Calls, Attempts and Successes count over the whole run.
	Calls, Attempts, Successes int
	// Amplification is Attempts ÷ Calls.
	Amplification float64
	// SuccessRate is Successes ÷ Calls.
	SuccessRate float64
}

// failingServer is the failure models' server. Every call has a key, a
// draw in [0, 1) that all its attempts share: the server fails every
// attempt of the calls whose key is below failKeys (Partial), and each
// other attempt with probability p (FailRate).
type failingServer struct{ p, failKeys float64 }

// fails says whether the server fails an attempt of a call with the given
// key; u is the attempt's own draw in [0, 1).
func (f failingServer) fails(key, u float64) bool { return key < f.failKeys || u < f.p }

// keyStream is the PCG stream of client process i's keys (keyStream|i):
// apart from the runs' own streams, and the same in every run of a sweep,
// so that a process's n-th call has the same key whatever the contender or
// the model's parameter (common random numbers), and drawing keys leaves
// the runs' own draws as they were.
const keyStream = 1 << 61

// failureRun is one run of a sweep.
type failureRun struct {
	// x is the model's parameter.
	x float64
	FailureStats
	// healthy counts the calls whose key the server does not fail.
	healthy int
}

// sweep runs a failure model, named model in errors: for each value x of
// its parameter (named param in errors, each in [0, 1]), each client count
// and each contender, one run of Poisson calls at Rate in all, split evenly
// over the processes, against server(x). Every one-way hop takes
// |Normal(10 ms, 2 ms)|. Results come in the order xs × Clients ×
// Contenders.
func (cfg FailureConfig) sweep(model, param string, xs []float64, server func(x float64) failingServer) ([]failureRun, error) {
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
	for _, x := range xs {
		if !(x >= 0 && x <= 1) {
			return nil, fmt.Errorf("sim: %s %s must be in [0, 1], got %v", model, param, x)
		}
	}
	for _, n := range cfg.Clients {
		if n < 1 || n > 100000 {
			return nil, fmt.Errorf("sim: %s clients must be in [1, 100000], got %d", model, n)
		}
	}
	if !(cfg.Rate > 0 && cfg.Rate <= 1e6) {
		return nil, fmt.Errorf("sim: %s rate must be in (0, 1e6] calls/s, got %v", model, cfg.Rate)
	}
	if cfg.Duration < 0 || cfg.Duration > time.Hour {
		return nil, fmt.Errorf("sim: %s duration must be in (0, 1h], got %v", model, cfg.Duration)
	}
	if cfg.CallTimeout < 0 || cfg.CallTimeout > time.Hour {
		return nil, fmt.Errorf("sim: %s call timeout must be in [0, 1h] (0: none), got %v", model, cfg.CallTimeout)
	}
	nx, nc, nk := len(xs), len(cfg.Clients), len(cfg.Contenders)
	return runIndexed(cfg.Workers, nx*nc*nk, func(i int) (failureRun, error) {
		xi, ci, ki := i/(nc*nk), i/nk%nc, i%nk
		// Contenders share a stream (common random numbers).
		s := New(cfg.Seed, 1<<63|uint64(xi)<<32|uint64(ci))
		r, err := cfg.run(s, server(xs[xi]), cfg.Clients[ci], &cfg.Contenders[ki])
		r.x = xs[xi]
		return r, err
	})
}

// run is one run of a sweep: clients processes, each making Poisson calls
// at its share of Rate, each call with a key from its process's own source.
func (cfg *FailureConfig) run(s *Sim, srv failingServer, clients int, c *Contender) (failureRun, error) {
	var (
		t       callTotals
		healthy int
	)
	serve := func(key float64) bool { return !srv.fails(key, s.rng.Float64()) }
	for i := 0; i < clients; i++ {
		pr, err := newProc(s, c, &t, cfg.CallTimeout, serve)
		if err != nil {
			return failureRun{}, err
		}
		keys := rand.New(rand.NewPCG(cfg.Seed, keyStream|uint64(i)))
		pr.key = func() float64 {
			k := keys.Float64()
			if k >= srv.failKeys {
				healthy++
			}
			return k
		}
		pr.poisson(cfg.Rate/float64(clients), cfg.Duration)
	}
	s.Run()
	r := failureRun{healthy: healthy, FailureStats: FailureStats{Clients: clients, Contender: c.Name, Calls: t.calls, Attempts: t.attempts, Successes: t.successes}}
	if t.calls > 0 {
		r.Amplification = float64(t.attempts) / float64(t.calls)
		r.SuccessRate = float64(t.successes) / float64(t.calls)
	}
	return r, nil
}

package sim

import (
	"fmt"
	"math"
	"runtime"
	"time"

	"github.com/stagger-go/stagger/policy"
)

// Strategy is a backoff strategy for the OCC model: how long a client waits
// after a failed write before it reads again.
type Strategy struct {
	// Name is how tables and flags call it.
	Name string
	// Backoff gives the pause through policy.Backoff.Delay, unless NoPause.
	Backoff policy.Backoff
	// NoPause: retry at once (the "no backoff" line of the 2015 post).
	NoPause bool
}

// pause is the pause before retry number retry (1 = first retry); prev is the
// pause before the previous retry (Backoff.Initial for the first).
func (st Strategy) pause(retry int, prev time.Duration, u float64) time.Duration {
	if st.NoPause {
		return 0
	}
	return st.Backoff.Delay(retry, prev, u)
}

// OCCStrategies are the five strategies of the AWS post (2015), in its order.
// Its expo(n) = min(cap, base×2^n) with base 5 ms, cap 2 s, and n = 1 on the
// first retry, is Delay's term with Initial 10 ms; decorrelated jitter starts
// its sleep at the base, 5 ms.
func OCCStrategies() []Strategy {
	expo := func(j policy.Jitter) policy.Backoff {
		return policy.Backoff{Initial: 10 * time.Millisecond, Max: 2 * time.Second, Multiplier: 2, Jitter: j}
	}
	return []Strategy{
		{Name: "no-backoff", NoPause: true},
		{Name: "exponential", Backoff: expo(policy.JitterNone)},
		{Name: "full", Backoff: expo(policy.JitterFull)},
		{Name: "equal", Backoff: expo(policy.JitterEqual)},
		{Name: "decorrelated", Backoff: policy.Backoff{Initial: 5 * time.Millisecond, Max: 2 * time.Second, Multiplier: 2, Jitter: policy.JitterDecorrelated}},
	}
}

// OCCConfig configures the OCC contention model. The zero value of each field
// takes the default written beside it.
type OCCConfig struct {
	// Clients lists the numbers of contending clients to simulate. Default
	// 10, 50, 100, 190.
	Clients []int
	// Runs is the number of runs averaged per client count and strategy.
	// Default 100.
	Runs int
	// Seed seeds every run (each run draws from its own PCG stream).
	Seed uint64
	// Strategies to compare. Default OCCStrategies().
	Strategies []Strategy
	// Workers bounds the goroutines that run simulations at once. Default
	// GOMAXPROCS. The results do not depend on it.
	Workers int
}

// OCCResult is the mean over the runs for one client count and strategy.
type OCCResult struct {
	Clients  int
	Strategy string
	// MeanTime is when the last client finished its write, on average.
	MeanTime time.Duration
	// MeanCalls is the number of writes sent, on average (the post's "work").
	MeanCalls float64
}

// maxOCCClients bounds one run: no backoff makes work grow with the square
// of the clients.
const maxOCCClients = 10000

// OCC runs the OCC contention model (the first of the package's models): N clients start at
// t = 0, each reads a row's version and writes it back; a write succeeds only
// when the version is unchanged since the read. Every one-way hop takes
// |Normal(10 ms, 2 ms)|. A failed write is retried (read, then write) after
// the strategy's pause. Results come in the order Clients × Strategies.
func OCC(cfg OCCConfig) ([]OCCResult, error) {
	if len(cfg.Clients) == 0 {
		cfg.Clients = []int{10, 50, 100, 190}
	}
	if cfg.Runs == 0 {
		cfg.Runs = 100
	}
	if len(cfg.Strategies) == 0 {
		cfg.Strategies = OCCStrategies()
	}
	if cfg.Workers <= 0 {
		cfg.Workers = runtime.GOMAXPROCS(0)
	}
	if cfg.Runs < 0 {
		return nil, fmt.Errorf("sim: occ runs must be positive, got %d", cfg.Runs)
	}
	for _, n := range cfg.Clients {
		if n < 1 || n > maxOCCClients {
			return nil, fmt.Errorf("sim: occ clients must be in [1, %d], got %d", maxOCCClients, n)
		}
	}
	type out struct {
		finish time.Duration
		writes int
	}
	nc, ns := len(cfg.Clients), len(cfg.Strategies)
	// Index (ci*ns+si)*Runs+run: client count, then strategy, then run.
	outs, _ := runIndexed(cfg.Workers, nc*ns*cfg.Runs, func(i int) (out, error) {
		ci, si, run := i/(ns*cfg.Runs), i/cfg.Runs%ns, i%cfg.Runs
		n := cfg.Clients[ci]
		// The stream depends on the client count and the run, not the
		// strategy: strategies meet the same network draws at first (common
		// random numbers), which sharpens comparisons.
		s := New(cfg.Seed, uint64(n)<<32|uint64(run))
		f, w := occRun(s, n, cfg.Strategies[si])
		return out{f, w}, nil
	})

	res := make([]OCCResult, 0, nc*ns)
	for ci, n := range cfg.Clients {
		for si, st := range cfg.Strategies {
			var sumT, sumW float64
			for run := 0; run < cfg.Runs; run++ {
				o := outs[(ci*ns+si)*cfg.Runs+run]
				sumT += float64(o.finish)
				sumW += float64(o.writes)
			}
			r := float64(cfg.Runs)
			res = append(res, OCCResult{Clients: n, Strategy: st.Name, MeanTime: time.Duration(math.Round(sumT / r)), MeanCalls: sumW / r})
		}
	}
	return res, nil
}

// hop is one one-way network hop: |Normal(10 ms, 2 ms)|.
func hop(s *Sim) time.Duration {
	d := 10*time.Millisecond + time.Duration(s.rng.NormFloat64()*float64(2*time.Millisecond))
	if d < 0 {
		d = -d
	}
	return d
}

// occRun is one run with n clients; it returns when the last client finished
// and how many writes were sent.
func occRun(s *Sim, n int, st Strategy) (finish time.Duration, writes int) {
	version := 0
	type client struct {
		retry int
		prev  time.Duration
	}
	clients := make([]client, n)
	var read func(c *client)
	read = func(c *client) {
		s.After(hop(s), func() {
			seen := version
			s.After(hop(s), func() {
				writes++
				s.After(hop(s), func() {
					ok := version == seen
					if ok {
						version++
					}
					s.After(hop(s), func() {
						if ok {
							finish = s.now
							return
						}
						c.retry++
						if c.retry == 1 {
							c.prev = st.Backoff.Initial
						}
						p := st.pause(c.retry, c.prev, s.rng.Float64())
						c.prev = p
						if p == 0 {
							read(c)
							return
						}
						s.After(p, func() { read(c) })
					})
				})
			})
		})
	}
	for i := range clients {
		read(&clients[i])
	}
	s.Run()
	return finish, writes
}

package sim

import (
	"fmt"
	"runtime"
	"time"
)

// Bin is the width of the outage model's arrival counts.
const Bin = 100 * time.Millisecond

// OutageConfig configures the outage model. The zero value of each field
// takes the default written beside it.
type OutageConfig struct {
	// Capacity is how many attempts per second the server can serve, in
	// bins of 100 ms: past Capacity/10 in a bin it refuses with
	// UNAVAILABLE. Default 1000.
	Capacity float64
	// Load is the total rate of calls (first attempts) per second of all
	// client processes. Default 800.
	Load float64
	// Clients is the number of client processes, each with its own budget.
	// Default 100.
	Clients int
	// Duration is how long calls arrive. Default 10 s.
	Duration time.Duration
	// OutageStart and OutageEnd bound the outage, during which the server
	// answers every attempt UNAVAILABLE. Default 2 s and 5 s.
	OutageStart, OutageEnd time.Duration
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

// BlipConfig is the outage model set up as the lab's blip scenario
// (lab.ScenarioBlip): 50 clients making 1 call/s each (Load 50), capacity
// 500 attempts/s, the server answering UNAVAILABLE from 2 s to 3.5 s of an
// 8 s run, and a 2 s deadline on every call. The fields it leaves zero
// (Seed, Contenders, Workers) take Outage's defaults.
func BlipConfig() OutageConfig {
	return OutageConfig{
		Capacity: 500, Load: 50, Clients: 50, Duration: 8 * time.Second,
		OutageStart: 2 * time.Second, OutageEnd: 3500 * time.Millisecond,
		CallTimeout: 2 * time.Second,
	}
}

// OutageResult is one contender's run.
type OutageResult struct {
	Contender string
	// Calls, Attempts and Successes count over the whole run.
	Calls, Attempts, Successes int
	// SuccessRate is Successes ÷ Calls.
	SuccessRate float64
	// OutageLoad is the attempts per second that reached the server during
	// the outage, ÷ Capacity.
	OutageLoad float64
	// PeakAfter is the most attempts that reached the server in one 100 ms
	// bin after the recovery, ÷ Capacity/10.
	PeakAfter float64
	// Drain is the time from the recovery until the outage's backlog is
	// gone: the later of the end of the last call that started before the
	// recovery, and the end of the run of 100 ms bins over capacity that
	// begins at the recovery.
	Drain time.Duration
	// Arrivals counts the attempts that reached the server per 100 ms bin.
	Arrivals []int
}

// Outage runs the outage model (the package's outage and recovery model): Poisson calls at Load
// against a server with Capacity that is down from OutageStart to
// OutageEnd, each call with a CallTimeout deadline when one is set. Results
// come in the order of Contenders.
func Outage(cfg OutageConfig) ([]OutageResult, error) {
	if cfg.Capacity == 0 {
		cfg.Capacity = 1000
	}
	if cfg.Load == 0 {
		cfg.Load = 800
	}
	if cfg.Clients == 0 {
		cfg.Clients = 100
	}
	if cfg.Duration == 0 {
		cfg.Duration = 10 * time.Second
	}
	if cfg.OutageStart == 0 && cfg.OutageEnd == 0 {
		cfg.OutageStart, cfg.OutageEnd = 2*time.Second, 5*time.Second
	}
	if len(cfg.Contenders) == 0 {
		cfg.Contenders = Contenders()
	}
	if cfg.Workers <= 0 {
		cfg.Workers = runtime.GOMAXPROCS(0)
	}
	switch {
	case !(cfg.Capacity >= 10 && cfg.Capacity <= 1e6):
		return nil, fmt.Errorf("sim: outage capacity must be in [10, 1e6] calls/s, got %v", cfg.Capacity)
	case !(cfg.Load > 0 && cfg.Load <= 1e6):
		return nil, fmt.Errorf("sim: outage load must be in (0, 1e6] calls/s, got %v", cfg.Load)
	case cfg.Clients < 1 || cfg.Clients > 100000:
		return nil, fmt.Errorf("sim: outage clients must be in [1, 100000], got %d", cfg.Clients)
	case cfg.Duration < Bin || cfg.Duration > time.Hour:
		return nil, fmt.Errorf("sim: outage duration must be in [100ms, 1h], got %v", cfg.Duration)
	case cfg.OutageStart < 0 || cfg.OutageEnd <= cfg.OutageStart || cfg.OutageEnd > cfg.Duration:
		return nil, fmt.Errorf("sim: outage window must satisfy 0 <= start < end <= duration %v, got [%v, %v)", cfg.Duration, cfg.OutageStart, cfg.OutageEnd)
	case cfg.CallTimeout < 0 || cfg.CallTimeout > time.Hour:
		return nil, fmt.Errorf("sim: outage call timeout must be in [0, 1h] (0: none), got %v", cfg.CallTimeout)
	}
	return runIndexed(cfg.Workers, len(cfg.Contenders), func(i int) (OutageResult, error) {
		// Contenders share a stream (common random numbers).
		return outageRun(New(cfg.Seed, 1<<62), &cfg, &cfg.Contenders[i])
	})
}

func outageRun(s *Sim, cfg *OutageConfig, c *Contender) (OutageResult, error) {
	perBin := cfg.Capacity * Bin.Seconds()
	var (
		t        callTotals
		arrivals []int
		served   []int
		outage   int
		lastCall time.Duration
	)
	serve := func(float64) bool {
		b := int(s.now / Bin)
		for len(arrivals) <= b {
			arrivals = append(arrivals, 0)
			served = append(served, 0)
		}
		arrivals[b]++
		if s.now >= cfg.OutageStart && s.now < cfg.OutageEnd {
			outage++
			return false
		}
		if float64(served[b]) >= perBin {
			return false
		}
		served[b]++
		return true
	}
	done := func(start time.Duration, _ bool, _ string) {
		if start < cfg.OutageEnd && s.now > lastCall {
			lastCall = s.now
		}
	}
	for i := 0; i < cfg.Clients; i++ {
		pr, err := newProc(s, c, &t, cfg.CallTimeout, serve)
		if err != nil {
			return OutageResult{}, err
		}
		pr.done = done
		pr.poisson(cfg.Load/float64(cfg.Clients), cfg.Duration)
	}
	s.Run()

	r := OutageResult{Contender: c.Name, Calls: t.calls, Attempts: t.attempts, Successes: t.successes, Arrivals: arrivals}
	if t.calls > 0 {
		r.SuccessRate = float64(t.successes) / float64(t.calls)
	}
	r.OutageLoad = float64(outage) / (cfg.OutageEnd - cfg.OutageStart).Seconds() / cfg.Capacity
	first := int(cfg.OutageEnd / Bin)
	for b := first; b < len(arrivals); b++ {
		if p := float64(arrivals[b]) / perBin; p > r.PeakAfter {
			r.PeakAfter = p
		}
	}
	// Only the overload that starts at the recovery is the outage's: a
	// later bin over capacity is the noise of Poisson arrivals.
	drained := lastCall
	for b := first; b < len(arrivals) && float64(arrivals[b]) > perBin; b++ {
		if end := time.Duration(b+1) * Bin; end > drained {
			drained = end
		}
	}
	if drained > cfg.OutageEnd {
		r.Drain = drained - cfg.OutageEnd
	}
	return r, nil
}

package sim

import (
	"errors"
	"fmt"
	"runtime"
	"time"

	"github.com/stagger-go/stagger/budget"
	"github.com/stagger-go/stagger/internal/fleet"
	"github.com/stagger-go/stagger/policy"
	"google.golang.org/grpc/codes"
)

// FleetConfig configures the fleet model: the lab's fleet scenario
// (`stagger lab -scenario fleet`) on virtual time, so that it runs at
// fleet sizes no machine's cores can run in real time. Processes client
// processes, each with its own budget (for stagger its own Gate, as
// separate pods have), call one server that serves Concurrency attempts at
// a time, each for Concurrency ÷ Capacity, with no queue: an attempt that
// finds no worker free is refused at once with RESOURCE_EXHAUSTED, and the
// refusal costs the next worker to be free a tenth of the service time (the
// lab's server, testserver's Workers mode with no queue). The server
// answers UNAVAILABLE, at once and at no cost, from Warmup to Warmup +
// Outage (the return), and the load goes on for After. The zero value of
// each field takes the default written beside it. A FleetConfig is a plain
// value.
type FleetConfig struct {
	// Processes is the number of client processes; default 20. The total
	// load stays Load × Capacity whatever their number.
	Processes int
	// Capacity is the attempts per second the server serves; default
	// 1000. Concurrency is how many it serves at once; default 50, so
	// that an attempt costs a worker Concurrency ÷ Capacity (50 ms).
	Capacity, Concurrency int
	// Load is the offered calls per second as a share of Capacity;
	// default 0.4.
	Load float64
	// Warmup is the load before the outage (default 2 s), Outage the
	// outage (default 10 s), After the load after the return (default 15
	// s). Each is a whole number of Bins.
	Warmup, Outage, After time.Duration
	// CallTimeout is each call's deadline, counted from its start;
	// default 0: none (the lab's default).
	CallTimeout time.Duration
	// Reports: the server sends a load report (gRFC A51) on every answer
	// while it is up, as the interceptors read it (budget.Attempt.Load):
	// its busy workers over Concurrency as it takes or refuses the
	// attempt. A down server sends none. The Gate's pace for held
	// retries follows them; the contenders without a Gate read nothing of
	// them.
	Reports bool
	// Poisson spaces each process's calls as a Poisson process of its
	// share of the rate; by default they are even, as the lab's are: each
	// process calls every Processes ÷ rate seconds, the processes' first
	// calls spread evenly over one interval.
	Poisson bool
	// Hop is the mean one-way network hop; each hop is |Normal(Hop,
	// Hop/5)|. Default 200 µs (loopback TCP, as in the lab).
	Hop time.Duration
	// Seed seeds every run.
	Seed uint64
	// Contenders to compare. Default FleetContenders().
	Contenders []Contender
	// Workers bounds the goroutines that run simulations at once. Default
	// GOMAXPROCS. The results do not depend on it.
	Workers int
}

// FleetPolicy is the fleet's retry policy, the lab's fleet's
// (lab.FleetAttempts, lab.FleetBackoff): 4 attempts (the first included),
// pauses of 0.1 s doubling to at most 1 s with gRFC A6's jitter (the
// same as SimBackoff), on UNAVAILABLE and RESOURCE_EXHAUSTED.
func FleetPolicy() policy.Policy {
	return policy.Policy{MaxAttempts: fleet.Attempts, Backoff: fleet.Backoff, RetryableCodes: policy.NewCodeSet(codes.Unavailable, codes.ResourceExhausted)}
}

// FleetContenders returns the fleet model's line-up: "stagger", the
// fleet's policy with stagger's default budget (budget.DefaultSettings,
// whose refused retries wait in a Gate), each process its own, as the
// lab's stagger builds its own budget.Backends per client; "retry-3", the
// same policy without a budget; and "no-retry", the baseline.
func FleetContenders() []Contender {
	pol := FleetPolicy()
	once := pol
	once.MaxAttempts = 1
	return []Contender{
		{Name: "stagger", Policy: pol, Budget: budget.DefaultSettings()},
		{Name: "retry-3", Policy: pol},
		{Name: "no-retry", Policy: once},
	}
}

// FleetResult is what one contender's fleet did, with the lab's figures
// (lab.FleetResult) of the same names. Times "after the return" count
// from the end of the outage; "outage calls" are the calls made during
// it. Attempts are counted where they reach the server.
type FleetResult struct {
	Contender string
	Processes int
	// Calls is the calls made, Served those that succeeded, Attempts the
	// attempts sent.
	Calls, Served, Attempts int
	// OutageCalls is the calls made during the outage, OutageServed those
	// of them that succeeded, HeldAtReturn those still running at the
	// return.
	OutageCalls, OutageServed, HeldAtReturn int
	// Bound is how long a call may last by its own bound: CallTimeout,
	// or without one the Gate's MaxWait (the waits of a call together;
	// zero for a contender without a Gate). OutageFailedEarly is the
	// outage calls that failed after the return sooner than Bound after
	// they began (every outage call that failed after the return when
	// Bound is zero).
	Bound             time.Duration
	OutageFailedEarly int
	// HeldP50, HeldP90 and HeldMax are when the outage calls that
	// succeeded finished, after the return.
	HeldP50, HeldP90, HeldMax time.Duration
	// FirstSecond is the attempts that arrived in the first second after
	// the return; PeakAfter the most that arrived in one Bin after it, ÷
	// Capacity × Bin.
	FirstSecond int
	PeakAfter   float64
	// Above11 and Above10 are the time after the return spent above 1.1×
	// and above 1.0× Capacity (in whole Bins).
	Above11, Above10 time.Duration
	// RefusedBefore is the RESOURCE_EXHAUSTED the server sent in the
	// warmup; RefusedAfter those it sent after the return, of which
	// RefusedFresh hit first attempts of calls made after the return.
	RefusedBefore, RefusedAfter, RefusedFresh int
	// FailedAfter is the calls that failed after the return; FailedRoom
	// those that failed while the server had room (it refused nothing
	// in the Bin of the failure and the Bin before). AfterReasons counts
	// FailedAfter by reason, most first: the policy's reason and the
	// last code ("attempts/UNAVAILABLE"), "deferred/" or "turned-away/"
	// and the Gate's rule, "budget", "deadline".
	FailedAfter, FailedRoom int
	AfterReasons            []FleetReason
	// DownAttempts is the attempts that arrived during the outage;
	// DownPerCall, DownAttempts ÷ OutageCalls.
	DownAttempts int
	DownPerCall  float64
	// Longest is the longest call; P50 and P99 are of the calls that
	// succeeded, FailP50 and FailP99 of those that failed.
	Longest, P50, P99, FailP50, FailP99 time.Duration
	// ReturnBins is the attempts that arrived per Bin in the first 3 s
	// after the return.
	ReturnBins []int
	// Limit is the room's limit: the share of the outage calls an oracle
	// serves, sending them from the return on, earliest bound first, into
	// the room the calls made after the return leave, never above
	// Capacity, each before Bound (without one, before the default Gate's
	// MaxWait: the share a client that holds calls no longer could serve).
	Limit float64
}

// FleetReason is a kind of failure and how many calls failed so.
type FleetReason = fleet.Reason

// shape is cfg's load and server.
func (cfg *FleetConfig) shape() fleet.Shape {
	return fleet.Shape{Clients: cfg.Processes, Capacity: cfg.Capacity, Workers: cfg.Concurrency, Load: cfg.Load,
		Warmup: cfg.Warmup, Outage: cfg.Outage, After: cfg.After}
}

// withDefaults returns cfg with every zero field set to its default.
func (cfg FleetConfig) withDefaults() FleetConfig {
	s := cfg.shape().WithDefaults()
	cfg.Processes, cfg.Capacity, cfg.Concurrency, cfg.Load = s.Clients, s.Capacity, s.Workers, s.Load
	cfg.Warmup, cfg.Outage, cfg.After = s.Warmup, s.Outage, s.After
	if cfg.Hop == 0 {
		cfg.Hop = 200 * time.Microsecond
	}
	if len(cfg.Contenders) == 0 {
		cfg.Contenders = FleetContenders()
	}
	if cfg.Workers <= 0 {
		cfg.Workers = runtime.GOMAXPROCS(0)
	}
	return cfg
}

// validate reports every field of cfg (after its defaults) that a run
// cannot use.
func (cfg *FleetConfig) validate() error {
	var errs []error
	bad := func(field, rule string, v any) {
		errs = append(errs, fmt.Errorf("sim: fleet: %s: %s, got %v", field, rule, v))
	}
	s := cfg.shape()
	s.CheckRoom("Processes", "Concurrency", 100000, bad)
	s.CheckTimes(bad)
	if cfg.CallTimeout < 0 || cfg.CallTimeout > time.Hour {
		bad("CallTimeout", "must be in [0, 1h] (0: none)", cfg.CallTimeout)
	}
	if cfg.Hop < 0 || cfg.Hop > time.Second {
		bad("Hop", "must be in [0, 1s]", cfg.Hop)
	}
	return errors.Join(errs...)
}

// ServiceTime is the worker time an attempt costs: Concurrency ÷ Capacity
// (after the defaults).
func (cfg FleetConfig) ServiceTime() time.Duration {
	cfg = cfg.withDefaults()
	return cfg.shape().ServiceTime()
}

// Fleet runs the fleet model (see FleetConfig) for each contender, each
// on its own simulator from the same seed (common random numbers).
// Results come in the order of Contenders.
func Fleet(cfg FleetConfig) ([]FleetResult, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	return runIndexed(cfg.Workers, len(cfg.Contenders), func(i int) (FleetResult, error) {
		return fleetRun(New(cfg.Seed, 1<<60), &cfg, &cfg.Contenders[i])
	})
}

// fleetServer is the lab's server: Concurrency workers that take an
// attempt when one is free and refuse it otherwise (testserver's Workers
// with no queue), down in [down, back).
type fleetServer struct {
	service, down, back time.Duration
	// free is when each worker is done with the work it has begun; last
	// is when the latest work began (work is begun in order).
	free []time.Duration
	last time.Duration
	// reports: answers carry a load report (FleetConfig.Reports).
	reports bool
	// arrivals and refused count attempts per Bin.
	arrivals, refused []int
	downAttempts      int
	refusedBefore     int
	refusedAfter      int
	refusedFresh      int
}

// next is the worker that takes work arriving at at, and when: the
// earliest time, no earlier than at and the latest start, that a worker is
// free; ties go to the lowest worker.
func (f *fleetServer) next(at time.Duration) (worker int, start time.Duration) {
	worker = -1
	for i, fr := range f.free {
		t := max(at, f.last, fr)
		if worker < 0 || t < start {
			worker, start = i, t
		}
	}
	return worker, start
}

// load is the report on an answer sent at now: the workers busy over all.
func (f *fleetServer) load(now time.Duration) budget.Load {
	if !f.reports {
		return budget.Load{}
	}
	busy := 0
	for _, fr := range f.free {
		if fr > now {
			busy++
		}
	}
	return budget.Load{Utilization: float64(busy) / float64(len(f.free)), Reported: true}
}

// answer takes attempt n of a call that began at start, arriving at now.
func (f *fleetServer) answer(now, start time.Duration, n int) (time.Duration, budget.Load, error) {
	b := int(now / Bin)
	for len(f.arrivals) <= b {
		f.arrivals = append(f.arrivals, 0)
		f.refused = append(f.refused, 0)
	}
	f.arrivals[b]++
	if now >= f.down && now < f.back {
		f.downAttempts++
		return 0, budget.Load{}, errFailed
	}
	w, t := f.next(now)
	if t > now {
		// No worker free: refused at once, the refusal worked off by the
		// next worker to be free.
		f.free[w], f.last = t+f.service/10, t
		f.refused[b]++
		switch {
		case now < f.down:
			f.refusedBefore++
		case now >= f.back:
			f.refusedAfter++
			if n == 1 && start >= f.back {
				f.refusedFresh++
			}
		}
		return 0, f.load(now), errRefused
	}
	f.free[w], f.last = now+f.service, now
	return f.service, f.load(now), nil
}

func fleetRun(s *Sim, cfg *FleetConfig, c *Contender) (FleetResult, error) {
	down := cfg.Warmup
	back := down + cfg.Outage
	end := back + cfg.After
	srv := &fleetServer{service: cfg.ServiceTime(), down: down, back: back, free: make([]time.Duration, cfg.Concurrency), reports: cfg.Reports}
	hopSD := float64(cfg.Hop) / 5
	net := func() time.Duration {
		d := cfg.Hop + time.Duration(s.rng.NormFloat64()*hopSD)
		if d < 0 {
			d = -d
		}
		return d
	}
	var (
		t      callTotals
		calls  []fleet.Call
		defers bool // the contender's budget is a Gate
	)
	done := func(start time.Duration, ok bool, why string) {
		calls = append(calls, fleet.Call{Begin: start, End: s.now, OK: ok, Reason: why})
	}
	answer := func(start time.Duration, n int) (time.Duration, budget.Load, error) {
		return srv.answer(s.now, start, n)
	}
	rate := cfg.Load * float64(cfg.Capacity)
	interval := time.Duration(float64(cfg.Processes) / rate * float64(time.Second))
	for i := range cfg.Processes {
		pr, err := newProc(s, c, &t, cfg.CallTimeout, nil)
		if err != nil {
			return FleetResult{}, err
		}
		pr.answer, pr.net, pr.facts, pr.done = answer, net, true, done
		defers = pr.gate != nil
		if cfg.Poisson {
			pr.poisson(rate/float64(cfg.Processes), end)
			continue
		}
		var next func()
		next = func() {
			pr.call()
			if at := s.now + interval; at < end {
				s.At(at, next)
			}
		}
		// Process i's first call is i ÷ rate seconds in: the fleet's calls
		// are evenly spaced, and a process whose first call would come
		// after the load makes none (as in the lab).
		if first := time.Duration(float64(i) / rate * float64(time.Second)); first < end {
			s.At(first, next)
		}
	}
	s.Run()

	r := FleetResult{Contender: c.Name, Processes: cfg.Processes, Calls: t.calls, Served: t.successes, Attempts: t.attempts,
		DownAttempts: srv.downAttempts, RefusedBefore: srv.refusedBefore, RefusedAfter: srv.refusedAfter, RefusedFresh: srv.refusedFresh}
	switch {
	case cfg.CallTimeout > 0:
		r.Bound = cfg.CallTimeout
	case defers:
		r.Bound = c.Budget.WithDefaults().Defer.MaxWait
	}
	shape := cfg.shape()
	cf := shape.Calls(calls, srv.refused, r.Bound)
	r.OutageCalls, r.OutageServed, r.HeldAtReturn, r.OutageFailedEarly = cf.OutageCalls, cf.OutageServed, cf.HeldAtReturn, cf.OutageFailedEarly
	r.HeldP50, r.HeldP90, r.HeldMax = cf.HeldP50, cf.HeldP90, cf.HeldMax
	r.FailedAfter, r.FailedRoom, r.AfterReasons = cf.FailedAfter, cf.FailedRoom, cf.AfterReasons
	r.Longest, r.P50, r.P99, r.FailP50, r.FailP99 = cf.Longest, cf.P50, cf.P99, cf.FailP50, cf.FailP99
	rf := shape.Return(srv.arrivals)
	r.FirstSecond, r.ReturnBins, r.PeakAfter, r.Above11, r.Above10 = rf.FirstSecond, rf.ReturnBins, rf.PeakAfter, rf.Above11, rf.Above10
	limitBound := r.Bound
	if limitBound == 0 {
		limitBound = budget.DefaultSettings().WithDefaults().Defer.MaxWait
	}
	r.Limit = shape.Limit(calls, limitBound)
	if r.OutageCalls > 0 {
		r.DownPerCall = float64(r.DownAttempts) / float64(r.OutageCalls)
	}
	return r, nil
}

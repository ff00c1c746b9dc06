package lab

import (
	"errors"
	"fmt"
	"time"

	"github.com/stagger-go/stagger/internal/fleet"
)

// ScenarioFleet names the fleet scenario (RunFleet): it has its own
// configuration (FleetConfig) and report (FleetReport), so it is not among
// Scenarios and Run does not run it.
const ScenarioFleet Scenario = "fleet"

// Arrivals is how a fleet's clients space their calls.
type Arrivals string

const (
	// ArrivalsEven: each client calls every Clients ÷ rate seconds, the
	// clients' first calls spread evenly over one interval (as Run's
	// scenarios do): the server meets a smooth load, so that a refusal
	// after the return is one the retries caused, not a chance bunching.
	ArrivalsEven Arrivals = "even"
	// ArrivalsPoisson: each client's calls are a Poisson process of rate ÷
	// Clients (exponential gaps drawn from the client's own source, seeded
	// by FleetConfig.Seed and its index); the fleet's sum is a Poisson
	// process of the whole rate.
	ArrivalsPoisson Arrivals = "poisson"
)

// The fleet's retry policy, the same for every contender: FleetAttempts
// attempts (the first included), pauses from FleetBackoff, on UNAVAILABLE
// and RESOURCE_EXHAUSTED.
const FleetAttempts = fleet.Attempts

// FleetBackoff is the fleet's backoff: 0.1 s, doubling, at most 1 s, gRFC
// A6's jitter.
var FleetBackoff = fleet.Backoff

// FleetConfig describes a fleet run: Clients client processes' worth of
// independent retry layers (each its own connection, and for stagger its
// own default budgets, as separate pods have) calling one server over
// loopback TCP that has room for Capacity attempts a second (Workers
// workers, no queue: RESOURCE_EXHAUSTED past that), answers UNAVAILABLE
// for Outage after Warmup, then serves again while the load goes on for
// After. The zero value of each field means its default. A FleetConfig is
// a plain value.
type FleetConfig struct {
	// Clients is the number of client processes; default 20.
	Clients int
	// Capacity is the attempts per second the server serves; default
	// 1000. Workers is how many it serves at once; default 50, so that
	// an attempt costs a worker Workers ÷ Capacity (50 ms).
	Capacity, Workers int
	// Load is the offered calls per second as a share of Capacity, spread
	// over the clients; default 0.4.
	Load float64
	// Deadline is every call's deadline; 0 (the default) means none.
	Deadline time.Duration
	// Warmup is the load before the outage (default 2 s), Outage the
	// outage (default 10 s), After the load after the return (default 15
	// s). Each is a whole number of Bins.
	Warmup, Outage, After time.Duration
	// Drain bounds how long the lab waits, once the load has ended, for
	// the calls still in flight; those it then cancels count in
	// FleetResult.Cut. Default 60 s.
	Drain time.Duration
	// Reports: the server sends a load report (gRFC A51, through grpc-go's
	// orca package) on every answer while it is up: its busy workers over
	// Workers as the attempt arrives (testserver's Workers.ReportLoad).
	// stagger's clients read it into their budgets, which act on nothing
	// of it yet.
	Reports bool
	// Arrivals is how calls are spaced; default ArrivalsEven.
	Arrivals Arrivals
	// Seed seeds the clients' draws under ArrivalsPoisson.
	Seed uint64
	// Contenders names the contenders to run, one after another; default
	// every one of FleetContenders.
	Contenders []string
}

// shape is c's load and server.
func (c FleetConfig) shape() fleet.Shape {
	return fleet.Shape{Clients: c.Clients, Capacity: c.Capacity, Workers: c.Workers, Load: c.Load,
		Warmup: c.Warmup, Outage: c.Outage, After: c.After}
}

// Defaults returns c with every zero field set to its default.
func (c FleetConfig) Defaults() FleetConfig {
	s := c.shape().WithDefaults()
	c.Clients, c.Capacity, c.Workers, c.Load = s.Clients, s.Capacity, s.Workers, s.Load
	c.Warmup, c.Outage, c.After = s.Warmup, s.Outage, s.After
	if c.Drain == 0 {
		c.Drain = time.Minute
	}
	if c.Arrivals == "" {
		c.Arrivals = ArrivalsEven
	}
	if c.Contenders == nil {
		c.Contenders = namesOf(FleetContenders())
	}
	return c
}

// Validate reports every field of c (after Defaults) that a run cannot use.
func (c FleetConfig) Validate() error {
	var errs []error
	bad := func(field, rule string, v any) {
		errs = append(errs, fmt.Errorf("lab: fleet: %s: %s, got %v", field, rule, v))
	}
	s := c.shape()
	s.CheckRoom("Clients", "Workers", 10000, bad)
	if c.Deadline < 0 {
		bad("Deadline", "must be >= 0 (0: none)", c.Deadline)
	}
	s.CheckTimes(bad)
	if c.After > 0 && c.After < 3*time.Second {
		bad("After", "must be at least 3s (the return's first 3 s are measured)", c.After)
	}
	if c.Drain <= 0 {
		bad("Drain", "must be > 0", c.Drain)
	}
	if c.Arrivals != ArrivalsEven && c.Arrivals != ArrivalsPoisson {
		bad("Arrivals", fmt.Sprintf("must be %q or %q", ArrivalsEven, ArrivalsPoisson), fmt.Sprintf("%q", c.Arrivals))
	}
	checkContenders(c.Contenders, FleetContenders(), bad)
	return errors.Join(errs...)
}

// Rate is the calls per second offered to the server: Load × Capacity.
func (c FleetConfig) Rate() float64 { return c.Load * float64(c.Capacity) }

// ServiceTime is the worker time an attempt costs: Workers ÷ Capacity.
func (c FleetConfig) ServiceTime() time.Duration { return c.shape().ServiceTime() }

// labConfig is the Config the shared contenders build their retry layers
// from: the fleet's policy, no per-attempt timeout.
func (c FleetConfig) labConfig() *Config {
	return &Config{Scenario: ScenarioUnavailable, MaxAttempts: FleetAttempts, Backoff: FleetBackoff}
}

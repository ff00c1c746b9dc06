package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"strings"

	"github.com/stagger-go/stagger/lab"
)

const fleetUsage = `usage: stagger lab -scenario fleet [flags]

A fleet's outage and return, in real time over loopback TCP: -clients
client processes' worth of retry layers (each its own connection and, for
stagger, its own default budgets, as separate pods have) call one server
with room for -capacity attempts a second (-workers at a time, no queue:
RESOURCE_EXHAUSTED past that), which answers UNAVAILABLE for -outage after
-warmup, then serves again while the load goes on for -after. The policy:
4 attempts, 0.1 s doubling to 1 s, on UNAVAILABLE and RESOURCE_EXHAUSTED.
Contenders, one after another, each with its own server: stagger,
grpc-go-throttle (retryThrottling 10/0.1 per connection), grpc-middleware,
failsafe-go, no-retry. A run with the defaults takes about 2.5 minutes.

Per contender: the attempts per second arriving in the first second after
the return (and × capacity), the peak 100 ms after it (× capacity), the
time above 1.1× and 1.0× capacity after it; the RESOURCE_EXHAUSTED the
server sent after the return, and how many hit first attempts of calls
made after it; the calls made in the outage that were served, and when
those finished after the return (p50/p90/max); the calls that failed after
the return, and of them those that failed while the server had room (it
refused nothing in that 100 ms and the one before), with their rule and
text; the attempts that arrived in the outage per call made in it; the
longest call; p50/p99 of the calls that succeeded and failed. Then the
attempts per 100 ms of the first 3 s back, and the counts that check the
measurement: the clients' attempts, the server's, how late calls were made
and the CPU the process used.

Flags:
`

// fleetScenario reports whether args run the fleet scenario, which has
// flags of its own.
func fleetScenario(args []string) bool {
	for i, a := range args {
		switch a {
		case "-scenario=fleet", "--scenario=fleet":
			return true
		case "-scenario", "--scenario":
			if i+1 < len(args) && args[i+1] == string(lab.ScenarioFleet) {
				return true
			}
		}
	}
	return false
}

func fleetMain(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("stagger lab -scenario fleet", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), fleetUsage)
		fs.PrintDefaults()
	}
	d := lab.FleetConfig{}.Defaults()
	fs.String("scenario", string(lab.ScenarioFleet), "fleet (runs alone)")
	clients := fs.Int("clients", d.Clients, "client processes, each its own connection and retry layer")
	capacity := fs.Int("capacity", d.Capacity, "attempts per second the server serves")
	workers := fs.Int("workers", d.Workers, "attempts the server serves at once (each costs -workers ÷ -capacity)")
	load := fs.Float64("load", d.Load, "calls per second offered, as a share of -capacity")
	deadline := fs.Duration("deadline", 0, "every call's deadline (0: none)")
	warmup := fs.Duration("warmup", d.Warmup, "load before the outage")
	outage := fs.Duration("outage", d.Outage, "how long the server answers UNAVAILABLE")
	after := fs.Duration("after", d.After, "load after the return")
	drain := fs.Duration("drain", d.Drain, "how long the calls in flight get after the load before they are cancelled")
	arrivals := fs.String("arrivals", string(d.Arrivals), "even or poisson")
	reports := fs.Bool("reports", false, "the server sends a load report (gRFC A51: busy workers over workers) on every answer while up, which steers the Gate's return")
	seed := fs.Uint64("seed", 0, "seed of the poisson arrivals")
	var contenders stringList
	fs.Var(&contenders, "contenders", "contenders to run, comma-separated (default: all): "+strings.Join(labNames(lab.FleetContenders()), ", "))
	out := format("table")
	fs.Var(&out, "format", "output: table or json")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if out == "csv" {
		return usagef("-format csv: the fleet prints table or json")
	}
	cfg := lab.FleetConfig{
		Clients: *clients, Capacity: *capacity, Workers: *workers, Load: *load, Deadline: *deadline,
		Warmup: *warmup, Outage: *outage, After: *after, Drain: *drain,
		Arrivals: lab.Arrivals(*arrivals), Seed: *seed, Contenders: contenders, Reports: *reports,
	}
	if err := cfg.Defaults().Validate(); err != nil {
		return usageError{err}
	}
	rep, err := lab.RunFleet(ctx, cfg)
	if err != nil {
		return err
	}
	if out == "json" {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(rep)
	}
	return lab.WriteFleet(stdout, rep)
}

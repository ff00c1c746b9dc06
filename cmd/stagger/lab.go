package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"slices"
	"strings"
	"time"

	"github.com/stagger-go/stagger/lab"
)

func init() {
	commands["lab"] = command{
		summary: "live storm lab: real gRPC, stagger against the other retry layers, side by side",
		run:     runLab,
	}
}

const labUsage = `usage: stagger lab [flags]

Runs real gRPC calls over bufconn (or loopback TCP) from many concurrent
clients against an in-process server with limited capacity and an outage,
with each retry layer side by side, and prints attempts per call, success,
latency and the load after recovery. The defaults finish in about 10 s.

Scenarios (-scenario, comma-separated to run several one after another):
  unavailable  the server answers UNAVAILABLE during the outage (bufconn)
  refused      the server is gone, connections are refused (TCP)
  refused-wfr  the same, every call with grpc.WaitForReady
  blip         a short UNAVAILABLE outage under light load (bufconn): by
               default 1 call/s per client (50 in all) and -outage-start 2s,
               -outage-end 3.5s; a flag given on the command line wins
  slow-replica no outage; one attempt in twenty is ten times slower: stagger
               without and with hedging (p50/p99/p99.9, attempts per call)
  slow-replica-stream
               the same with a server stream of 5 messages whose first
               message takes what the attempt takes: stagger without and
               with hedged streams (hedges race until one commits); the
               time to the first message (p50/p99/p99.9) and the extra
               attempts
  overload     a server that pays for its work (bufconn): 10 workers, a FIFO
               queue of 50, 20 ms per attempt served (10 workers ÷
               -capacity), 2 ms per attempt rejected; half the workers
               from 2s to 6s of 10s (the scenario's defaults), so the
               offered 80% of -capacity is 160% of what is left. GOODPUT:
               calls that succeeded in the overload, per second, ÷ the
               reduced capacity
  chain        users → A → B → C, three servers (bufconn), every hop
               retrying (3 attempts by default, no budget), C answering
               UNAVAILABLE from 1s to 3s of 4s, 100 calls/s: attempts
               reaching C per user call made and returned in the outage
               (27 when nothing coordinates, 3 at best), and the users'
               success once C is back; C's load chart

Each table but chain's (no server of the chain limits its attempts) opens
with the scenario's ceiling: the success rate an ideal client could reach
without ever sending more than the capacity (the lab package's Ceiling).
Peaks per contender: calls in flight, calls waiting
between attempts, and goroutines of its client side (sampled every 100 ms).

Flags (the defaults shown are those of unavailable):
`

func runLab(args []string, stdout, stderr io.Writer) int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	err := labMain(ctx, args, stdout, stderr)
	switch {
	case err == nil:
		return 0
	case errors.Is(err, flag.ErrHelp):
		return 0
	case errors.Is(err, errUsage):
		fmt.Fprintf(stderr, "stagger lab: %v\n", errors.Unwrap(err))
		return 2
	}
	fmt.Fprintf(stderr, "stagger lab: %v\n", err)
	return 1
}

// stringList is a comma-separated list of names, as a flag.
type stringList []string

func (l *stringList) String() string {
	if l == nil {
		return ""
	}
	return strings.Join(*l, ",")
}

func (l *stringList) Set(v string) error {
	var out []string
	for _, f := range strings.Split(v, ",") {
		if f = strings.TrimSpace(f); f != "" {
			out = append(out, f)
		}
	}
	*l = out
	return nil
}

func labMain(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("stagger lab", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), labUsage)
		fs.PrintDefaults()
	}
	d := lab.Config{}.Defaults()
	scenarios := stringList{string(lab.ScenarioUnavailable)}
	fs.Var(&scenarios, "scenario", "scenarios to run, comma-separated: "+strings.Join(labScenarioNames(), ", "))
	duration := fs.Duration("duration", d.Duration, "how long calls are offered (overload: 10s; chain: 4s)")
	start := fs.Duration("outage-start", d.OutageStart, "when the outage (overload: half the workers) starts (chain: 1s)")
	end := fs.Duration("outage-end", d.OutageEnd, "when the outage ends (blip: 3.5s; overload: 6s; chain: 3s)")
	clients := fs.Int("clients", d.Clients, "client connections per contender, each with its own budget")
	capacity := fs.Int("capacity", d.Capacity, "attempts per second the server admits (overload: serves with all its workers)")
	rate := fs.Float64("rate", 0, "calls per second offered per contender (0: 80% of -capacity; blip: 1 per client; slow-replica, slow-replica-stream: 50%; chain: 100)")
	attempts := fs.Int("attempts", d.MaxAttempts, "attempt limit of every contender, the first included (1-5; chain: 3, on every hop)")
	timeout := fs.Duration("call-timeout", d.CallTimeout, "deadline of each call")
	var contenders stringList
	fs.Var(&contenders, "contenders", "contenders to run, comma-separated (default: all of the scenario's): "+
		strings.Join(lab.ContenderNames(), ", ")+labOnly(lab.ScenarioOverload)+
		"; for slow-replica: "+strings.Join(labNames(lab.HedgingContenders()), ", ")+
		"; for slow-replica-stream: "+strings.Join(labNames(lab.HedgingStreamContenders()), ", ")+
		"; for chain: "+strings.Join(labNames(lab.ChainContenders()), ", "))
	out := format("table")
	fs.Var(&out, "format", "output: table, csv or json")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	// Zero means "default" to lab.Config; on the command line it is a mistake.
	for _, z := range []struct {
		name string
		zero bool
	}{{"duration", *duration == 0}, {"clients", *clients == 0}, {"capacity", *capacity == 0}, {"attempts", *attempts == 0}, {"call-timeout", *timeout == 0}} {
		if z.zero {
			return usagef("-%s must not be 0", z.name)
		}
	}
	if len(scenarios) == 0 {
		return usagef("-scenario must name at least one scenario")
	}
	// A flag not given leaves the field zero, so that each scenario takes
	// its own default (blip's outage and rate are not unavailable's).
	given := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { given[f.Name] = true })
	pick := func(name string, v time.Duration) time.Duration {
		if given[name] {
			return v
		}
		return 0
	}
	maxAttempts := 0 // chain's 3 is not unavailable's 5
	if given["attempts"] {
		maxAttempts = *attempts
	}
	var reports []*lab.Report
	for _, sc := range scenarios {
		cfg := lab.Config{
			Scenario: lab.Scenario(sc), Duration: pick("duration", *duration),
			Clients: *clients, Capacity: *capacity, Rate: *rate, MaxAttempts: maxAttempts,
			CallTimeout: *timeout, Contenders: contenders,
		}
		if given["outage-start"] || given["outage-end"] {
			// One bound given: the other is the scenario's.
			d := lab.Config{Scenario: cfg.Scenario}.Defaults()
			cfg.OutageStart, cfg.OutageEnd = d.OutageStart, d.OutageEnd
			if given["outage-start"] {
				cfg.OutageStart = *start
			}
			if given["outage-end"] {
				cfg.OutageEnd = *end
			}
		}
		if err := cfg.Defaults().Validate(); err != nil {
			return usageError{err}
		}
		rep, err := lab.Run(ctx, cfg)
		if err != nil {
			return err
		}
		if out == "table" {
			if err := writeLabTable(stdout, rep); err != nil {
				return err
			}
			continue
		}
		reports = append(reports, rep)
	}
	switch out {
	case "csv":
		return writeLabCSV(stdout, reports)
	case "json":
		return writeLabJSON(stdout, reports)
	}
	return nil
}

func labNames(cs []lab.Contender) []string {
	var out []string
	for _, c := range cs {
		out = append(out, c.Name)
	}
	return out
}

// labOnly names the contenders only scenario s runs besides
// lab.Contenders, as "; for overload also: a, b", or "" when none.
func labOnly(s lab.Scenario) string {
	var only []string
	for _, n := range labNames(lab.ContendersFor(s)) {
		if !slices.Contains(lab.ContenderNames(), n) {
			only = append(only, n)
		}
	}
	if len(only) == 0 {
		return ""
	}
	return fmt.Sprintf("; for %s also: %s", s, strings.Join(only, ", "))
}

func labScenarioNames() []string {
	var out []string
	for _, s := range lab.Scenarios() {
		out = append(out, string(s))
	}
	return out
}

// labSeconds formats a duration for the table's header line.
func labSeconds(d time.Duration) string { return d.Round(time.Millisecond).String() }

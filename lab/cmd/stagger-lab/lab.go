package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
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
clients against an in-process server, with each retry layer side by side
and a client that does not retry at all (no-retry), and prints attempts per
call, success, latency and recovery. The defaults finish in about 10 s (the
metastable scenario in about 16 s).

Every scenario with an outage, an overload or a slowdown (its trigger)
runs on a server that pays for its work: -workers workers (10) serve the
attempts in arrival order from a FIFO queue of -queue attempts (50;
slowdown and metastable: 0.4 s of work, 200); each attempt served costs
a worker -workers ÷ -capacity (20 ms), each attempt rejected because the
queue is full, or dropped because its deadline passed while it waited, a
tenth of that; a caller that gives up does not stop the work. So a storm
of retries costs what the same attempts would cost a real server, and
the server does work for callers that are gone (WASTED).

Scenarios (-scenario, comma-separated to run several one after another):
  unavailable  the server answers UNAVAILABLE during the outage (bufconn)
  refused      the server is gone, connections are refused (TCP)
  refused-wfr  the same, every call with grpc.WaitForReady
  blip         a short UNAVAILABLE outage under light load (bufconn): by
               default 1 call/s per client (50 in all) and -outage-start 2s,
               -outage-end 3.5s; a flag given on the command line wins
  flaky-quiet  a quiet process (1 client, 5 calls/s for 4 s, 3 attempts,
               deadline 2s, backoff 0.1 s doubling) against a flaky server:
               the first two attempts of every call fail UNAVAILABLE, the
               third is served; no capacity limit, no trigger. stagger
               reads a policy file that declares no budget (the default
               budget, one per client)
  flaky-quiet-random
               the same with 4 clients for 10 s and a server that fails
               each attempt with probability 0.5
  slowdown     75% of -capacity; the service time is 3× as long in
               [2s, 3s) of 8s; deadline 1s; per-attempt timeouts of 200ms
               for every contender that has one (stagger's
               perAttemptRecvTimeout, go-grpc-middleware's
               WithPerRetryTimeout, failsafe-go's timeout policy inside its
               retry policy, the naive loop's context); grpc-go has no
               per-attempt timeout, so its rows (and no-retry's) have none
  slowdown-90  the same at 90% of -capacity with a 4× slowdown
  metastable   75% of -capacity for 14s; the server answers UNAVAILABLE in
               [2s, 3s) (the trigger), then serves again at the same
               offered load: does it come back? Per-attempt timeouts as in
               slowdown
  slow-replica no outage and no capacity limit; one attempt in twenty is ten
               times slower: stagger without and with hedging
               (p50/p99/p99.9, attempts per call)
  slow-replica-stream
               the same with a server stream of 5 messages whose first
               message takes what the attempt takes: stagger without and
               with hedged streams (hedges race until one commits); the
               time to the first message (p50/p99/p99.9) and the extra
               attempts
  overload     no outage, but half the workers from 2s to 6s of 10s (the
               scenario's defaults), so the offered 80% of -capacity is
               160% of what is left (bufconn)
  mixed-criticality
               overload with 3 calls in 10 CRITICAL, 7 SHEDDABLE; stagger's
               server side limits the calls in the server to 35 (its
               refusals cost a rejection), for everyone; only
               stagger-criticality says each call's criticality: the
               success of each level and goodput
  chain        users → A → B → C, three servers (bufconn), every hop
               retrying (3 attempts by default; only stagger with a
               budget, its default, beside stagger-nobudget), C answering
               UNAVAILABLE from 1s to 3s of 4s, 100 calls/s: attempts
               reaching C per user call made and returned in the outage
               (27 when nothing coordinates, 3 at best), and the users'
               success once C is back; C's load chart
  bad-replica  three replicas behind every connection (TCP, 4 clients,
               400 calls/s for 4 s, 3 attempts), one answering every call
               UNAVAILABLE; every contender over round_robin but
               stagger-elsewhere (the stagger_elsewhere policy): the calls
               that met the bad replica, and more than once (BAD REPEATS)
  slow-replica-3
               three replicas behind every connection (TCP, 4 clients,
               250 calls/s for 4 s), every attempt on the first ten times
               slower (200ms against 20ms); stagger hedging (3 attempts,
               30ms apart) over round_robin and over stagger_elsewhere
               (stagger-elsewhere), and no-retry: p50/p99/p99.9, and the
               calls that sent a hedge to the replica their first attempt
               went to (HEDGE REPEATS, the replicas' records)
  long-outage  unavailable with an outage that outlives the calls' 2 s
               deadline ten times over: UNAVAILABLE in [2s, 22s) of 30s,
               every contender and no-retry: what the waits cost the caller
               (FAIL P50/P99, MEAN IN FLIGHT IN TRIGGER) and whether traffic
               comes back (SUCCESS AFTER, RECOVER). Other lengths: give
               -outage-end and -duration (make lab-figures sweeps 0.5, 2, 5
               and 20 s, each with 8 s after it)
  stragglers   a quiet process (1 client, 5 calls/s for 40 s, 3 attempts,
               deadline 2s): attempts take 20ms, one in ten 20× as long
               (400ms); a per-attempt timeout of 60ms (3× the fast attempt)
               for every contender that has one, as in slowdown; stagger
               with its default budget: p50/p99/p99.9 and attempts per call

Each table but chain's (no server of the chain limits its attempts) opens
with the scenario's ceiling: the success rate an ideal client could reach
without ever sending more than the capacity (the lab package's Ceiling).
Figures per contender: SUCCESS AFTER, the success of the calls made from
2 s after the trigger's end; RECOVER, the seconds from the trigger's end
until the calls of every later second succeed at 95% or more ("never" if
they do not by the end of the run); GOODPUT, the calls that succeeded from
the trigger's start on ÷ what the server could serve then; WASTED, the
share of the server's work done for callers that had gone; P50/P99 of the
successful calls and FAIL P50/P99 of the failed ones. Peaks: calls in
flight, calls waiting between attempts, and goroutines of its client side
(sampled every 100 ms), and MEAN IN FLIGHT IN TRIGGER, the mean number of
calls in flight during the trigger: what the waits cost the caller. -format json adds a per-second timeline (calls,
attempts, successes, the server's capacity) per contender; -plot DIR
draws it, one SVG per scenario (DIR/SCENARIO.svg).

  fleet        a fleet's outage and return, in real time over loopback TCP,
               with flags of its own: stagger lab -scenario fleet -h
  migrate-refused, migrate-outage, migrate-burst
               what a team met moving one client from go-grpc-middleware's
               retry to stagger (one client, a 30 % refusal rate, a 3 s
               outage, a 2 s burst of refusals), with flags of their own:
               stagger lab -scenario migrate-refused -h

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
	if fleetScenario(args) {
		return fleetMain(ctx, args, stdout, stderr)
	}
	if migrateScenario(args) {
		return migrateMain(ctx, args, stdout, stderr)
	}
	fs := flag.NewFlagSet("stagger lab", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), labUsage)
		fs.PrintDefaults()
	}
	d := lab.Config{}.Defaults()
	scenarios := stringList{string(lab.ScenarioUnavailable)}
	fs.Var(&scenarios, "scenario", "scenarios to run, comma-separated: "+strings.Join(labScenarioNames(), ", "))
	duration := fs.Duration("duration", d.Duration, "how long calls are offered (overload, mixed-criticality, flaky-quiet-random: 10s; chain, flaky-quiet, bad-replica, slow-replica-3: 4s; metastable: 14s; long-outage: 30s; stragglers: 40s)")
	start := fs.Duration("outage-start", d.OutageStart, "when the trigger (outage; overload: half the workers; slowdown) starts (chain: 1s)")
	end := fs.Duration("outage-end", d.OutageEnd, "when the trigger ends (blip: 3.5s; overload, mixed-criticality: 6s; chain, slowdown, slowdown-90, metastable: 3s; long-outage: 22s)")
	clients := fs.Int("clients", d.Clients, "client connections per contender, each with its own budget (flaky-quiet, stragglers: 1; flaky-quiet-random, bad-replica, slow-replica-3: 4)")
	capacity := fs.Int("capacity", d.Capacity, "attempts per second the server serves with all its workers")
	workers := fs.Int("workers", d.Workers, "workers of the server (an attempt costs one -workers ÷ -capacity)")
	queue := fs.Int("queue", 0, "attempts the server lets wait for a worker (0: 5 × -workers; slowdown, slowdown-90, metastable: 0.4 s of work at -capacity)")
	slow := fs.Float64("slow", 0, "how many times as long the service takes in the slowdown (0: 3; slowdown-90: 4)")
	perAttempt := fs.Duration("per-attempt-timeout", 0, "per-attempt timeout in slowdown, slowdown-90, metastable and stragglers (0: 200ms; stragglers: 60ms)")
	plotDir := fs.String("plot", "", "write one SVG picture per scenario into this directory (DIR/SCENARIO.svg)")
	rate := fs.Float64("rate", 0, "calls per second offered per contender (0: 80% of -capacity; blip: 1 per client; slow-replica, slow-replica-stream, slow-replica-3: 50%; chain: 100; flaky-quiet, flaky-quiet-random, stragglers: 5 per client; slowdown, metastable: 75%; slowdown-90: 90%)")
	attempts := fs.Int("attempts", d.MaxAttempts, "attempt limit of every contender, the first included (1-5; chain, flaky-quiet, flaky-quiet-random, stragglers, bad-replica, slow-replica-3: 3, on every hop)")
	timeout := fs.Duration("call-timeout", d.CallTimeout, "deadline of each call (slowdown, slowdown-90, metastable: 1s)")
	var contenders stringList
	fs.Var(&contenders, "contenders", "contenders to run, comma-separated (default: all of the scenario's): "+
		strings.Join(lab.ContenderNames(), ", ")+labOnly(lab.ScenarioOverload)+
		"; for slow-replica: "+strings.Join(labNames(lab.HedgingContenders()), ", ")+
		"; for slow-replica-stream: "+strings.Join(labNames(lab.HedgingStreamContenders()), ", ")+
		"; for chain: "+strings.Join(labNames(lab.ChainContenders()), ", ")+
		"; for bad-replica: "+strings.Join(labNames(lab.BadReplicaContenders()), ", ")+
		"; for slow-replica-3: "+strings.Join(labNames(lab.SlowReplica3Contenders()), ", ")+
		labOnly(lab.ScenarioMixedCriticality))
	fullTable := fs.Bool("full", false, "print every column of the table and what each contender is, as wide as it takes (default: the main columns, 100 wide)")
	out := format("table")
	fs.Var(&out, "format", "output: table, csv or json")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	// Zero means "default" to lab.Config; on the command line it is a mistake.
	for _, z := range []struct {
		name string
		zero bool
	}{{"duration", *duration == 0}, {"clients", *clients == 0}, {"capacity", *capacity == 0}, {"workers", *workers == 0}, {"attempts", *attempts == 0}, {"call-timeout", *timeout == 0}} {
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
	// The flaky scenarios have their own clients, the slowdowns their own
	// deadline.
	clientsGiven := 0
	if given["clients"] {
		clientsGiven = *clients
	}
	callTimeout := pick("call-timeout", *timeout)
	if *plotDir != "" {
		if err := os.MkdirAll(*plotDir, 0o755); err != nil {
			return fmt.Errorf("-plot: %w", err)
		}
	}
	var reports []*lab.Report
	for _, sc := range scenarios {
		if sc == string(lab.ScenarioFleet) {
			return usagef("-scenario fleet runs alone, with flags of its own (stagger lab -scenario fleet -h)")
		}
		cfg := lab.Config{
			Scenario: lab.Scenario(sc), Duration: pick("duration", *duration),
			Clients: clientsGiven, Capacity: *capacity, Workers: *workers, Queue: *queue, Slow: *slow,
			PerAttemptTimeout: *perAttempt, Rate: *rate, MaxAttempts: maxAttempts,
			CallTimeout: callTimeout, Contenders: contenders,
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
		if *plotDir != "" {
			if err := writeLabPlot(*plotDir, rep); err != nil {
				return err
			}
		}
		if out == "table" {
			if err := writeLabTable(stdout, rep, *fullTable); err != nil {
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

// writeLabPlot writes rep's picture to dir/SCENARIO.svg.
func writeLabPlot(dir string, rep *lab.Report) (err error) {
	f, err := os.Create(filepath.Join(dir, string(rep.Config.Scenario)+".svg"))
	if err != nil {
		return fmt.Errorf("-plot: %w", err)
	}
	defer func() {
		if cerr := f.Close(); err == nil && cerr != nil {
			err = fmt.Errorf("-plot: %w", cerr)
		}
	}()
	return lab.WritePlot(f, rep)
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

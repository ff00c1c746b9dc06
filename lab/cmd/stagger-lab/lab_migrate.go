package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/stagger-go/stagger/lab"
)

const migrateUsage = `usage: stagger lab -scenario migrate-refused[,migrate-outage,migrate-burst] [flags]

What a team met moving one client from go-grpc-middleware's retry to
stagger by the migration guide: one client per contender, calls open loop
against a backend of its own, all contenders at once. The policy: 5
attempts, 0.1 s doubling; stagger from a policy file (maxBackoff 10s,
PROPORTIONAL jitter, UNAVAILABLE and RESOURCE_EXHAUSTED, no budget
declared: the default budgets), go-grpc-middleware WithMax(5),
BackoffExponential(100ms), both codes; and no-retry.

  migrate-refused  each attempt refused with RESOURCE_EXHAUSTED with
                   probability -failure-rate (0.3), no pushback; 30
                   calls/s for 10 s, no deadline
  migrate-outage   UNAVAILABLE from 2 s to 5 s; 20 calls/s for 8 s, a 1 s
                   deadline
  migrate-burst    every attempt refused with RESOURCE_EXHAUSTED, no
                   pushback, for the first 2 s of 8 s at 20 calls/s, then
                   every attempt served; no deadline (-duration 2s: the
                   load ends with the burst)

Per contender: the calls, success, attempts per call, p50/p99 of the calls
that succeeded and of those that failed, the longest call, the calls made
in the outage or burst that were served and when the last of them ended
after it (in migrate-refused the last call after the load), the calls cut
past -drain, and the most frequent failures (stagger's with the rule that
ended its wait). A flag given on the command line wins over every
scenario's default.

Flags:
`

// migrateScenario reports whether args run a migration scenario, which
// has flags of its own.
func migrateScenario(args []string) bool {
	for i, a := range args {
		v, ok := "", false
		switch {
		case strings.HasPrefix(a, "-scenario="), strings.HasPrefix(a, "--scenario="):
			v, ok = a[strings.Index(a, "=")+1:], true
		case (a == "-scenario" || a == "--scenario") && i+1 < len(args):
			v, ok = args[i+1], true
		}
		if ok && strings.Contains(v, "migrate-") {
			return true
		}
	}
	return false
}

func migrateMain(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("stagger lab -scenario migrate-...", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), migrateUsage)
		fs.PrintDefaults()
	}
	var scenarios stringList
	var names []string
	for _, s := range lab.MigrateScenarios() {
		names = append(names, string(s))
	}
	fs.Var(&scenarios, "scenario", "migration scenarios to run, one after another, comma-separated: "+strings.Join(names, ", "))
	duration := fs.Duration("duration", 0, "how long calls are offered (default: migrate-refused 10s, the others 8s)")
	start := fs.Duration("outage-start", 0, "when the outage or burst starts (default: migrate-outage 2s, migrate-burst 0s)")
	end := fs.Duration("outage-end", 0, "when the outage or burst ends (default: migrate-outage 5s, migrate-burst 2s)")
	rate := fs.Float64("rate", 0, "calls per second (default: migrate-refused 30, the others 20)")
	deadline := fs.Duration("deadline", 0, "every call's deadline (default: none, migrate-outage 1s; negative: none)")
	failureRate := fs.Float64("failure-rate", 0, "migrate-refused: the probability of refusing each attempt (default 0.3)")
	tcp := fs.Bool("tcp", false, "call over loopback TCP instead of bufconn")
	drain := fs.Duration("drain", 0, "how long the calls in flight get after the load before they are cancelled (default 1m)")
	var contenders stringList
	fs.Var(&contenders, "contenders", "contenders to run, comma-separated (default: all): "+strings.Join(labNames(lab.MigrateContenders()), ", "))
	out := format("table")
	fs.Var(&out, "format", "output: table or json")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if out == "csv" {
		return usagef("-format csv: the migration scenarios print table or json")
	}
	var reports []*lab.MigrateReport
	for _, sc := range scenarios {
		if !slices.Contains(lab.MigrateScenarios(), lab.Scenario(sc)) {
			return usagef("-scenario %s: the migration scenarios run apart from the others, with flags of their own (stagger lab -scenario migrate-refused -h)", sc)
		}
	}
	for _, sc := range scenarios {
		cfg := lab.MigrateConfig{
			Scenario: lab.Scenario(sc), Duration: *duration, TriggerStart: *start, TriggerEnd: *end,
			Rate: *rate, Deadline: *deadline, FailureRate: *failureRate, TCP: *tcp, Drain: *drain, Contenders: contenders,
		}
		if given := flagGiven(fs, "outage-start"); given != flagGiven(fs, "outage-end") {
			// One bound given: the other is the scenario's.
			d := lab.MigrateConfig{Scenario: cfg.Scenario}.Defaults()
			if !given {
				cfg.TriggerStart = d.TriggerStart
			} else {
				cfg.TriggerEnd = d.TriggerEnd
			}
		}
		if err := cfg.Defaults().Validate(); err != nil {
			return usageError{err}
		}
		rep, err := lab.RunMigrate(ctx, cfg)
		if err != nil {
			return err
		}
		if out == "json" {
			reports = append(reports, rep)
			continue
		}
		if len(reports) > 0 || sc != scenarios[0] {
			fmt.Fprintln(stdout)
		}
		if err := lab.WriteMigrate(stdout, rep); err != nil {
			return err
		}
	}
	if out == "json" {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(reports)
	}
	return nil
}

// flagGiven reports whether the command line set the flag name.
func flagGiven(fs *flag.FlagSet, name string) bool {
	given := false
	fs.Visit(func(f *flag.Flag) { given = given || f.Name == name })
	return given
}

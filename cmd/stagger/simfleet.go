package main

import (
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/stagger-go/stagger/budget"
	"github.com/stagger-go/stagger/sim"
)

// simFleet runs the fleet model: the lab's fleet scenario on virtual time.
func simFleet(args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("fleet", stderr)
	processes := fs.Int("processes", 20, "client processes, each with its own budget (its own Gate); the total load stays -load × -capacity")
	fs.IntVar(processes, "clients", 20, "the same as -processes")
	load := fs.Float64("load", 0.4, "calls per second offered, as a share of -capacity")
	capacity := fs.Int("capacity", 1000, "attempts per second the server serves")
	concurrency := fs.Int("concurrency", 50, "attempts the server serves at once, each for -concurrency ÷ -capacity; past that it refuses (RESOURCE_EXHAUSTED)")
	warmup := fs.Duration("warmup", 2*time.Second, "load before the outage")
	outage := fs.Duration("outage", 10*time.Second, "how long the server answers UNAVAILABLE")
	after := fs.Duration("after", 15*time.Second, "load after the return")
	timeout := fs.Duration("call-timeout", 0, "deadline of each call (0: none)")
	poisson := fs.Bool("poisson", false, "Poisson arrivals per process (default: even, as the lab's)")
	reports := fs.Bool("reports", false, "the server sends a load report (gRFC A51: busy workers over workers) on every answer while up, which steers the Gate's return")
	hop := fs.Duration("hop", 200*time.Microsecond, "mean one-way network hop")
	seed := fs.Uint64("seed", 1, "random seed (same seed, same output)")
	only := fs.String("contenders", "", "comma-separated subset of: "+strings.Join(fleetContenderNames(), ", ")+" (default all)")
	out := format("table")
	fs.Var(&out, "format", "output: table or json")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if out == "csv" {
		return usagef("-format csv: the fleet prints table or json")
	}
	// Zero means "default" to sim; on the command line it is a mistake.
	switch {
	case *processes == 0:
		return usagef("-processes must be > 0")
	case *load == 0:
		return usagef("-load must be > 0")
	case *capacity == 0:
		return usagef("-capacity must be > 0")
	case *concurrency == 0:
		return usagef("-concurrency must be > 0")
	case *warmup == 0 || *outage == 0 || *after == 0:
		return usagef("-warmup, -outage and -after must be > 0")
	case *hop == 0:
		return usagef("-hop must be > 0")
	}
	cs, err := fleetContenders(*only)
	if err != nil {
		return err
	}
	cfg := sim.FleetConfig{Processes: *processes, Capacity: *capacity, Concurrency: *concurrency, Load: *load,
		Warmup: *warmup, Outage: *outage, After: *after, CallTimeout: *timeout, Poisson: *poisson, Reports: *reports, Hop: *hop,
		Seed: *seed, Contenders: cs}
	res, err := sim.Fleet(cfg)
	if err != nil {
		return usageError{err}
	}
	return writeFleet(stdout, out, &cfg, res)
}

func fleetContenderNames() []string {
	var names []string
	for _, c := range sim.FleetContenders() {
		names = append(names, c.Name)
	}
	return names
}

// fleetContenders returns the fleet's line-up that only names ("": all).
func fleetContenders(only string) ([]sim.Contender, error) {
	all := sim.FleetContenders()
	if only == "" {
		return all, nil
	}
	var cs []sim.Contender
	for _, name := range strings.Split(only, ",") {
		name = strings.TrimSpace(name)
		found := false
		for _, c := range all {
			if c.Name == name {
				cs, found = append(cs, c), true
			}
		}
		if !found {
			return nil, usagef("-contenders: unknown contender %q (known: %s)", name, strings.Join(fleetContenderNames(), ", "))
		}
	}
	return cs, nil
}

type fleetJSON struct {
	Contender         string              `json:"contender"`
	Processes         int                 `json:"processes"`
	Calls             int                 `json:"calls"`
	Served            int                 `json:"served"`
	Attempts          int                 `json:"attempts"`
	OutageCalls       int                 `json:"outage_calls"`
	OutageServed      int                 `json:"outage_served"`
	OutageServedRate  float64             `json:"outage_served_rate"`
	LimitServedRate   float64             `json:"limit_served_rate"`
	HeldAtReturn      int                 `json:"held_at_return"`
	BoundS            float64             `json:"bound_s"`
	OutageFailedEarly int                 `json:"outage_failed_early"`
	HeldP50S          float64             `json:"held_p50_s"`
	HeldP90S          float64             `json:"held_p90_s"`
	HeldMaxS          float64             `json:"held_max_s"`
	FirstSecond       int                 `json:"first_second"`
	PeakAfter         float64             `json:"peak_after"`
	Above11S          float64             `json:"above_1_1_s"`
	Above10S          float64             `json:"above_1_0_s"`
	RefusedBefore     int                 `json:"refused_before"`
	RefusedAfter      int                 `json:"refused_after"`
	RefusedFresh      int                 `json:"refused_fresh"`
	FailedAfter       int                 `json:"failed_after"`
	FailedRoom        int                 `json:"failed_room"`
	AfterReasons      []sim.FleetReason   `json:"after_reasons"`
	DownAttempts      int                 `json:"down_attempts"`
	DownPerCall       float64             `json:"down_per_call"`
	LongestS          float64             `json:"longest_s"`
	OKP50S            float64             `json:"ok_p50_s"`
	OKP99S            float64             `json:"ok_p99_s"`
	FailP50S          float64             `json:"fail_p50_s"`
	FailP99S          float64             `json:"fail_p99_s"`
	ReturnBins        []int               `json:"return_bins"`
	Config            fleetConfigJSONPart `json:"config"`
}

type fleetConfigJSONPart struct {
	Load          float64 `json:"load"`
	Capacity      int     `json:"capacity"`
	Concurrency   int     `json:"concurrency"`
	ServiceMS     float64 `json:"service_ms"`
	OutageS       float64 `json:"outage_s"`
	CallTimeoutS  float64 `json:"call_timeout_s"`
	Seed          uint64  `json:"seed"`
	PoissonArrive bool    `json:"poisson"`
	Reports       bool    `json:"reports"`
}

func share(n, d int) float64 {
	if d == 0 {
		return 0
	}
	return float64(n) / float64(d)
}

func writeFleet(w io.Writer, f format, cfg *sim.FleetConfig, res []sim.FleetResult) error {
	sec := func(d time.Duration) float64 { return d.Seconds() }
	if f == "json" {
		part := fleetConfigJSONPart{cfg.Load, cfg.Capacity, cfg.Concurrency, float64(cfg.ServiceTime()) / float64(time.Millisecond),
			sec(cfg.Outage), sec(cfg.CallTimeout), cfg.Seed, cfg.Poisson, cfg.Reports}
		out := make([]fleetJSON, len(res))
		for i, r := range res {
			out[i] = fleetJSON{r.Contender, r.Processes, r.Calls, r.Served, r.Attempts,
				r.OutageCalls, r.OutageServed, share(r.OutageServed, r.OutageCalls), r.Limit, r.HeldAtReturn,
				sec(r.Bound), r.OutageFailedEarly, sec(r.HeldP50), sec(r.HeldP90), sec(r.HeldMax),
				r.FirstSecond, r.PeakAfter, sec(r.Above11), sec(r.Above10),
				r.RefusedBefore, r.RefusedAfter, r.RefusedFresh, r.FailedAfter, r.FailedRoom, r.AfterReasons,
				r.DownAttempts, r.DownPerCall, sec(r.Longest), sec(r.P50), sec(r.P99), sec(r.FailP50), sec(r.FailP99),
				r.ReturnBins, part}
		}
		return writeJSON(w, out)
	}
	deadline := "no deadline"
	if cfg.CallTimeout > 0 {
		deadline = "deadline " + cfg.CallTimeout.String()
	}
	arrivals := "even"
	if cfg.Poisson {
		arrivals = "poisson"
	}
	fmt.Fprintf(w, "fleet on virtual time: %d processes, each its own budget; one server: %d at a time × %v = %d attempts/s, no queue (RESOURCE_EXHAUSTED past that)\n",
		res[0].Processes, cfg.Concurrency, cfg.ServiceTime(), cfg.Capacity)
	reported := ""
	if cfg.Reports {
		reported = "; the server reports its load on every answer"
	}
	fmt.Fprintf(w, "load %.0f%% of capacity (%.0f calls/s, %s arrivals), %s; UNAVAILABLE from %v to %v (the return), load until %v; seed %d%s\n\n",
		100*cfg.Load, cfg.Load*float64(cfg.Capacity), arrivals, deadline, cfg.Warmup, cfg.Warmup+cfg.Outage, cfg.Warmup+cfg.Outage+cfg.After,
		cfg.Seed, reported)
	s := func(d time.Duration) string { return fmtFloat(d.Seconds(), 1) + "s" }
	rows := make([][]string, len(res))
	for i, r := range res {
		rows[i] = []string{r.Contender,
			fmt.Sprintf("%s%% of %d", fmtFloat(100*share(r.OutageServed, r.OutageCalls), 1), r.OutageCalls), fmtFloat(100*r.Limit, 1) + "%",
			s(r.HeldP50) + "/" + s(r.HeldP90) + "/" + s(r.HeldMax),
			strconv.Itoa(r.OutageFailedEarly),
			fmtFloat(r.PeakAfter, 2) + "x", s(r.Above11), strconv.Itoa(r.RefusedAfter), strconv.Itoa(r.RefusedFresh),
			strconv.Itoa(r.FailedAfter), strconv.Itoa(r.FailedRoom), fmtFloat(r.DownPerCall, 2),
			fmtFloat(100*share(r.Served, r.Calls), 1) + "%",
			s(r.P50) + "/" + s(r.P99), s(r.FailP50) + "/" + s(r.FailP99)}
	}
	err := writeTable(w, []string{"CONTENDER", "OUTAGE SERVED", "ROOM'S LIMIT", "HELD DONE P50/P90/MAX", "FAILED < BOUND", "PEAK", ">1.1x",
		"REFUSED AFTER", "OF FRESH 1STS", "FAILED AFTER", "WITH ROOM", "ATT/CALL DOWN", "SERVED", "OK P50/P99", "FAIL P50/P99"}, rows)
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "\nROOM'S LIMIT: the outage calls an oracle serves, sending them from the return on, earliest bound first, into the room the calls after the return leave, never above capacity, each within its bound (below; none: the default Gate's maxWait, %v)\n", budget.DefaultSettings().WithDefaults().Defer.MaxWait)
	fmt.Fprintf(w, "FAILED < BOUND: the outage calls that failed after the return sooner than their own bound after they began:")
	for i, r := range res {
		bound := "none (every one)"
		if r.Bound > 0 {
			bound = r.Bound.String()
		}
		sep := ","
		if i == 0 {
			sep = ""
		}
		fmt.Fprintf(w, "%s %s %s", sep, r.Contender, bound)
	}
	fmt.Fprintf(w, "\n\nfailed after the return, by reason (the policy's reason or the Gate's rule, and the last code):\n")
	for _, r := range res {
		if len(r.AfterReasons) == 0 {
			fmt.Fprintf(w, "%-10s none\n", r.Contender)
			continue
		}
		for i, rr := range r.AfterReasons {
			name := r.Contender
			if i > 0 {
				name = ""
			}
			if i == 4 {
				fmt.Fprintf(w, "%-10s ... %d kinds more\n", name, len(r.AfterReasons)-4)
				break
			}
			fmt.Fprintf(w, "%-10s %6d  %s\n", name, rr.Count, rr.Reason)
		}
	}
	return nil
}

//go:build go1.25

package lab

import (
	"context"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"testing/synctest"
	"time"
)

// TestLabFigures makes the lab's published figures (BENCHMARKS.md) on
// virtual time: each scenario at its defaults, in a synctest bubble, so
// that what is measured is the retry layers and the server's model, not
// the machine (on real time every contender runs at once on the same
// cores, and a contender's storm takes CPU from the others' clients). It
// runs only when LAB_FIGURES names a file, which gets a Markdown table per
// scenario: the median of LAB_FIGURES_RUNS runs (3 by default) and their
// spread [min, max]. LAB_FIGURES_SCENARIOS (comma-separated) picks the
// scenarios: by default every one over bufconn (the refused ones need
// loopback TCP, which a bubble cannot run: use the stagger command).
// LAB_FIGURES_CONTENDERS (comma-separated) picks the contenders (by
// default each scenario's all), for quicker comparisons while tuning; a
// scenario runs those of them it has, and none of them leaves it out.
// LAB_FIGURES_SWEEP (comma-separated durations, `make lab-figures` gives
// OutageSweep's) adds a table per outage length: ScenarioLongOutage at
// SweepConfig(length); the default scenarios then leave long-outage out
// when the sweep has its 20 s, which is the same run.
// LAB_FIGURES_PLOT names a directory for each scenario's picture
// (WritePlot, the first run's). `make lab-plot` runs it for metastable
// and long-outage.
func TestLabFigures(t *testing.T) {
	out := os.Getenv("LAB_FIGURES")
	if out == "" {
		t.Skip("LAB_FIGURES names no file")
	}
	runs := 3
	if n, err := strconv.Atoi(os.Getenv("LAB_FIGURES_RUNS")); err == nil && n > 0 {
		runs = n
	}
	var scenarios []Scenario
	for _, s := range strings.Split(os.Getenv("LAB_FIGURES_SCENARIOS"), ",") {
		if s = strings.TrimSpace(s); s != "" {
			scenarios = append(scenarios, Scenario(s))
		}
	}
	var sweep []time.Duration
	for _, d := range strings.Split(os.Getenv("LAB_FIGURES_SWEEP"), ",") {
		if d = strings.TrimSpace(d); d != "" {
			l, err := time.ParseDuration(d)
			if err != nil {
				t.Fatalf("LAB_FIGURES_SWEEP: %v", err)
			}
			sweep = append(sweep, l)
		}
	}
	if scenarios == nil {
		for _, s := range Scenarios() {
			// Loopback TCP cannot run in a synctest bubble.
			if s != ScenarioRefused && s != ScenarioRefusedWait && !s.replicated() &&
				!(s == ScenarioLongOutage && slices.Contains(sweep, SweepConfig(20*time.Second).OutageEnd-SweepConfig(20*time.Second).OutageStart)) {
				scenarios = append(scenarios, s)
			}
		}
	}
	var configs []Config
	for _, s := range scenarios {
		configs = append(configs, Config{Scenario: s})
	}
	for _, d := range sweep {
		configs = append(configs, SweepConfig(d))
	}
	var contenders []string
	for _, c := range strings.Split(os.Getenv("LAB_FIGURES_CONTENDERS"), ",") {
		if c = strings.TrimSpace(c); c != "" {
			contenders = append(contenders, c)
		}
	}
	var md strings.Builder
	for _, cfg := range configs {
		s := cfg.Scenario
		// The named contenders this scenario has; a scenario with none of
		// them is left out, said (slow-replica has no "stagger").
		cfg.Contenders = nil
		for _, c := range contenders {
			if slices.Contains(namesOf(contendersFor(s)), c) {
				cfg.Contenders = append(cfg.Contenders, c)
			}
		}
		if len(contenders) > 0 && len(cfg.Contenders) == 0 {
			t.Logf("%s: none of LAB_FIGURES_CONTENDERS (%s) runs in it: left out", s, strings.Join(contenders, ","))
			continue
		}
		var reps []*Report
		for i := 0; i < runs; i++ {
			synctest.Test(t, func(t *testing.T) {
				rep, err := Run(context.Background(), cfg)
				if err != nil {
					t.Fatalf("%s: %v", s, err)
				}
				reps = append(reps, rep)
			})
		}
		if dir := os.Getenv("LAB_FIGURES_PLOT"); dir != "" {
			name := string(s)
			if cfg.OutageEnd != 0 {
				// A sweep's point.
				name += "-" + (cfg.OutageEnd - cfg.OutageStart).String()
			}
			f, err := os.Create(filepath.Join(dir, name+".svg"))
			if err != nil {
				t.Fatal(err)
			}
			if err := WritePlot(f, reps[0]); err != nil {
				t.Fatal(err)
			}
			if err := f.Close(); err != nil {
				t.Fatal(err)
			}
		}
		writeFigures(&md, reps)
	}
	if err := os.WriteFile(out, []byte(md.String()), 0o644); err != nil {
		t.Fatal(err)
	}
}

// writeFigures writes one scenario's table: per contender, each figure's
// median over the runs and its spread.
func writeFigures(md *strings.Builder, reps []*Report) {
	cfg := reps[0].Config
	title := string(cfg.Scenario)
	if cfg.Scenario == ScenarioLongOutage {
		title += fmt.Sprintf(", outage %v of %v", cfg.OutageEnd-cfg.OutageStart, cfg.Duration)
	}
	fmt.Fprintf(md, "\n#### %s (%d runs on virtual time; ceiling %.1f %%)\n\n", title, len(reps), 100*reps[0].Ceiling)
	trigger := cfg.Scenario.HasTrigger()
	head := []string{"contender", "success", "p50 / p99 ok (ms)", "p50 / p99 failed (ms)", "attempts/call"}
	if trigger {
		head = append(head, "load in trigger ÷ cap", "recover_s", "success_after", "wasted", "goodput", "calls in flight: mean in trigger / peak")
	}
	mixed := cfg.Scenario == ScenarioMixedCriticality
	if mixed {
		head = append(head, "critical_success", "sheddable_success")
	}
	fmt.Fprintf(md, "| %s |\n|%s\n", strings.Join(head, " | "), strings.Repeat("---|", len(head)))
	for i, name := range cfg.Contenders {
		var rs []Result
		for _, rep := range reps {
			rs = append(rs, rep.Results[i])
		}
		fig := func(f func(Result) float64, scale float64, prec int, suffix string) string {
			var v []float64
			for _, r := range rs {
				v = append(v, f(r)*scale)
			}
			slices.Sort(v)
			med := v[len(v)/2]
			if len(v)%2 == 0 {
				med = (v[len(v)/2-1] + v[len(v)/2]) / 2
			}
			s := strconv.FormatFloat(med, 'f', prec, 64) + suffix
			if lo, hi := v[0], v[len(v)-1]; strconv.FormatFloat(lo, 'f', prec, 64) != strconv.FormatFloat(hi, 'f', prec, 64) {
				s += fmt.Sprintf(" [%s, %s]", strconv.FormatFloat(lo, 'f', prec, 64), strconv.FormatFloat(hi, 'f', prec, 64))
			}
			return s
		}
		ms := func(d func(Result) time.Duration) func(Result) float64 {
			return func(r Result) float64 { return float64(d(r)) / float64(time.Millisecond) }
		}
		row := []string{name,
			fig(func(r Result) float64 { return r.SuccessRate }, 100, 1, " %"),
			fig(ms(func(r Result) time.Duration { return r.P50 }), 1, 0, "") + " / " + fig(ms(func(r Result) time.Duration { return r.P99 }), 1, 0, ""),
			fig(ms(func(r Result) time.Duration { return r.FailP50 }), 1, 0, "") + " / " + fig(ms(func(r Result) time.Duration { return r.FailP99 }), 1, 0, ""),
			fig(func(r Result) float64 { return r.AttemptsPerCall }, 1, 2, ""),
		}
		if trigger {
			never := 0
			for _, r := range rs {
				if !r.Recovered {
					never++
				}
			}
			recover := fig(func(r Result) float64 {
				if !r.Recovered {
					return math.Inf(1)
				}
				return r.Recover.Seconds()
			}, 1, 0, "")
			recover = strings.ReplaceAll(recover, "+Inf", "never")
			row = append(row,
				fig(func(r Result) float64 { return r.OutageLoad }, 1, 2, "×"),
				recover,
				fig(func(r Result) float64 { return r.SuccessAfter }, 100, 1, " %"),
				fig(func(r Result) float64 { return r.Wasted }, 100, 1, " %"),
				fig(func(r Result) float64 { return r.Goodput }, 1, 2, ""),
				fig(func(r Result) float64 { return r.MeanInFlight }, 1, 0, "")+" / "+fig(func(r Result) float64 { return float64(r.PeakInFlight) }, 1, 0, ""))
		}
		if mixed {
			row = append(row,
				fig(func(r Result) float64 { return r.CriticalSuccess }, 100, 1, " %"),
				fig(func(r Result) float64 { return r.SheddableSuccess }, 100, 1, " %"))
		}
		fmt.Fprintf(md, "| %s |\n", strings.Join(row, " | "))
	}
}

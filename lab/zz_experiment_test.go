//go:build go1.25

package lab

import (
	"context"
	"os"
	"testing"
	"testing/synctest"
	"time"
)

func TestZZExperiment(t *testing.T) {
	sc := os.Getenv("LAB_SCENARIO")
	if sc == "" {
		t.Skip()
	}
	cfg := Config{Scenario: Scenario(sc)}
	if d := os.Getenv("LAB_DURATION"); d != "" {
		cfg.Duration, _ = time.ParseDuration(d)
	}
	synctest.Test(t, func(t *testing.T) {
		rep, err := Run(context.Background(), cfg)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("ceiling %.3f", rep.Ceiling)
		for _, r := range rep.Results {
			rec := "never"
			if r.Recovered {
				rec = r.Recover.String()
			}
			t.Logf("%-20s succ %.3f after %.3f rec %s wasted %.2f goodput %.2f att/call %.2f p50 %v p99 %v fp50 %v fp99 %v outload %.2f", r.Contender, r.SuccessRate, r.SuccessAfter, rec, r.Wasted, r.Goodput, r.AttemptsPerCall, r.P50, r.P99, r.FailP50, r.FailP99, r.OutageLoad)
			var line []int
			for _, s := range r.Timeline {
				line = append(line, s.CallsSucceeded*100/max(s.Calls, 1))
			}
			t.Logf("   %v", line)
		}
	})
}

//go:build go1.25

// synctest needs the Go 1.23 timer channels; go.mod says go 1.22.
//go:debug asynctimerchan=0

package lab

import (
	"context"
	"testing"
	"testing/synctest"
	"time"
)

// The lab runs on the time package's clock, so inside a synctest bubble a
// run over bufconn is on virtual time: the offered calls are exact, and the
// assertions below hold whatever the jitter draws.

func tinyConfig() Config {
	return Config{
		Scenario:    ScenarioUnavailable,
		Duration:    3 * time.Second,
		OutageStart: time.Second,
		OutageEnd:   2 * time.Second,
		Clients:     3,
		Capacity:    40,
		Rate:        20,
		CallTimeout: time.Second,
	}
}

func runTiny(t *testing.T, cfg Config) map[string]Result {
	t.Helper()
	var rep *Report
	synctest.Test(t, func(t *testing.T) {
		var err error
		rep, err = Run(context.Background(), cfg)
		if err != nil {
			t.Fatalf("Run: %v", err)
		}
	})
	byName := map[string]Result{}
	for _, r := range rep.Results {
		byName[r.Contender] = r
	}
	if len(byName) != len(rep.Config.Contenders) {
		t.Fatalf("got results for %d contenders, want %d", len(byName), len(rep.Config.Contenders))
	}
	return byName
}

func TestRunAccounting(t *testing.T) {
	cfg := tinyConfig()
	res := runTiny(t, cfg)
	// 3 clients, one call every 150 ms each, for 3 s: 60 calls, 20 of them
	// in the outage second.
	const wantCalls = 60
	for name, r := range res {
		t.Run(name, func(t *testing.T) {
			if r.Calls != wantCalls {
				t.Errorf("Calls = %d, want %d", r.Calls, wantCalls)
			}
			load := 0
			for _, n := range r.Load {
				load += n
			}
			// Over bufconn every attempt reaches the server: the client's
			// count and the server's arrivals must agree.
			if load != r.Attempts {
				t.Errorf("server arrivals %d != attempts %d", load, r.Attempts)
			}
			if r.Attempts < r.Calls || r.Attempts > 5*r.Calls {
				t.Errorf("Attempts = %d, want within [%d, %d]", r.Attempts, r.Calls, 5*r.Calls)
			}
			// Calls outside the outage meet a server with spare capacity.
			if r.Successes < 40 || r.Successes > r.Calls {
				t.Errorf("Successes = %d, want within [40, %d]", r.Successes, r.Calls)
			}
			if r.P50 > r.P99 || r.P99 > r.P999 {
				t.Errorf("percentiles not ordered: %v %v %v", r.P50, r.P99, r.P999)
			}
		})
	}
}

func TestRunBudgetCutsTheStorm(t *testing.T) {
	res := runTiny(t, tinyConfig())
	s, nb := res["stagger"], res["stagger-nobudget"]
	// Each client's budget starts at 9 tokens, retries cost 5 and every
	// success adds 1; a client makes at most 7 calls, all successful, before
	// the outage, so it has at most 16 tokens: 3 retries in the outage,
	// where the unlimited contenders retry every outage call.
	if s.AttemptsPerCall >= nb.AttemptsPerCall {
		t.Errorf("stagger attempts/call %.3f, want below stagger-nobudget's %.3f", s.AttemptsPerCall, nb.AttemptsPerCall)
	}
	if s.OutageAttempts >= nb.OutageAttempts {
		t.Errorf("stagger outage attempts %d, want below stagger-nobudget's %d", s.OutageAttempts, nb.OutageAttempts)
	}
	if max := 20 + 3*3; s.OutageAttempts > max {
		t.Errorf("stagger outage attempts %d, want at most %d (20 calls, 3 retries per client)", s.OutageAttempts, max)
	}
	// Unlimited retrying with 5 attempts: a call that starts in the outage
	// more than the whole backoff (about 0.9 s at most) before its end fails
	// all 5 attempts, so the outage sees far more than one attempt per call.
	for _, name := range []string{"stagger-nobudget", "grpc-middleware", "failsafe-go", "grpc-go", "naive"} {
		if r := res[name]; r.OutageAttempts < 40 {
			t.Errorf("%s outage attempts %d, want at least 40 (retries of 20 failing calls)", name, r.OutageAttempts)
		}
	}
}

func TestRunHedgingCutsTheTail(t *testing.T) {
	cfg := Config{Scenario: ScenarioSlowReplica, Duration: 2 * time.Second, OutageStart: time.Second,
		OutageEnd: 2 * time.Second, Clients: 3, Capacity: 400, CallTimeout: time.Second}
	res := runTiny(t, cfg)
	plain, hedged := res["stagger-nohedge"], res["stagger-hedge"]
	for name, r := range res {
		if r.Calls != 400 || r.Successes != r.Calls {
			t.Errorf("%s: %d of %d calls succeeded, want 400 of 400", name, r.Successes, r.Calls)
		}
	}
	// On virtual time an attempt takes exactly 20 ms or 200 ms; with 400 calls
	// about 20 first attempts are slow, so the unhedged p99 is a slow one.
	if plain.AttemptsPerCall != 1 || plain.P99 != SlowFactor*SlowBase {
		t.Errorf("no hedging: %.3f attempts/call, p99 %v; want 1 and %v", plain.AttemptsPerCall, plain.P99, SlowFactor*SlowBase)
	}
	// A hedge leaves after 30 ms and is fast 19 times in 20: 50 ms.
	if want := SlowHedgeDelay + SlowBase; hedged.P99 != want {
		t.Errorf("hedging: p99 %v, want %v", hedged.P99, want)
	}
	if hedged.AttemptsPerCall <= 1 || hedged.AttemptsPerCall > 1.2 {
		t.Errorf("hedging: %.3f attempts/call, want in (1, 1.2]: a hedge only after a slow first attempt", hedged.AttemptsPerCall)
	}
	if hedged.P50 != SlowBase || plain.P50 != SlowBase {
		t.Errorf("p50 %v (hedging) and %v (none), want %v", hedged.P50, plain.P50, SlowBase)
	}
}

//go:build go1.25

package lab

import (
	"context"
	"math/rand/v2"
	"strings"
	"testing"
	"testing/synctest"
	"time"
)

func TestMigrateValidate(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  MigrateConfig
		want string // in the error; "" means valid
	}{
		{"defaults", MigrateConfig{}, ""},
		{"outage defaults", MigrateConfig{Scenario: ScenarioMigrateOutage}, ""},
		{"burst defaults", MigrateConfig{Scenario: ScenarioMigrateBurst}, ""},
		{"the load ends with the burst", MigrateConfig{Scenario: ScenarioMigrateBurst, Duration: 2 * time.Second}, ""},
		{"a scenario of Run's", MigrateConfig{Scenario: ScenarioUnavailable}, `lab: unavailable: Scenario: must be one of migrate-refused, migrate-outage, migrate-burst, got "unavailable"`},
		{"rate", MigrateConfig{Rate: -1}, "lab: migrate-refused: Rate: must be in (0, 10000] calls per second, got -1"},
		{"outage past the load", MigrateConfig{Scenario: ScenarioMigrateOutage, Duration: 4 * time.Second}, "lab: migrate-outage: TriggerStart/TriggerEnd: must satisfy 0 <= start < end <= Duration, got [2s, 5s) of 4s"},
		{"refused ignores the trigger", MigrateConfig{TriggerStart: 5 * time.Second, TriggerEnd: time.Second}, ""},
		{"failure rate", MigrateConfig{FailureRate: 1.5}, "lab: migrate-refused: FailureRate: must be in [0, 1], got 1.5"},
		{"a contender of Run's", MigrateConfig{Contenders: []string{"naive"}}, `Contenders: must be among stagger, grpc-middleware, no-retry, got "naive"`},
		{"a contender twice", MigrateConfig{Contenders: []string{"no-retry", "no-retry"}}, `Contenders: must not repeat a name, got "no-retry"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.cfg.Defaults().Validate()
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("Validate() = %v, want nil", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("Validate() = %v, want an error containing %q", err, tc.want)
			}
		})
	}
}

// migratePeer is what a client without jitter does with one call, worked
// out from the backend's script alone: it begins attempts at the offsets
// of pauses (0, then each pause after the last), and fails attempt n when
// failing(n, offset) says so; it gives up at its deadline (0: none) or
// after its last attempt. It returns whether the call succeeded, how long
// it took and its attempts.
func migratePeer(pauses []time.Duration, deadline time.Duration, failing func(n int, at time.Duration) bool) (bool, time.Duration, int) {
	at := time.Duration(0)
	for n := 1; n <= len(pauses)+1; n++ {
		if n > 1 {
			at += pauses[n-2]
		}
		if deadline > 0 && at >= deadline {
			return false, deadline, n - 1
		}
		if !failing(n, at) {
			return true, at, n
		}
	}
	return false, at, len(pauses) + 1
}

// TestMigrateVirtual runs each migration scenario with its defaults on
// virtual time, where a client without jitter is exact: go-grpc-middleware
// and no-retry must do, call by call, what the backend's script says, and
// stagger must stay within its bounds and never do worse than no-retry.
func TestMigrateVirtual(t *testing.T) {
	// go-grpc-middleware's BackoffExponential(100ms) with WithMax(5).
	mwPauses := []time.Duration{100 * time.Millisecond, 200 * time.Millisecond, 400 * time.Millisecond, 800 * time.Millisecond}
	for _, s := range MigrateScenarios() {
		t.Run(string(s), func(t *testing.T) {
			var rep *MigrateReport
			synctest.Test(t, func(t *testing.T) {
				var err error
				if rep, err = RunMigrate(context.Background(), MigrateConfig{Scenario: s}); err != nil {
					t.Fatalf("RunMigrate: %v", err)
				}
			})
			var text strings.Builder
			if err := WriteMigrate(&text, rep); err != nil {
				t.Fatalf("WriteMigrate: %v", err)
			}
			t.Logf("on virtual time:\n%s", text.String())
			cfg := rep.Config
			// The calls' starts and, in the refused scenario, how many
			// leading attempts of each fail, drawn as the lab draws them.
			var starts []time.Duration
			var leading []int
			rng := rand.New(rand.NewChaCha8(slowSeed(0)))
			interval := time.Duration(float64(time.Second) / cfg.Rate)
			for at := time.Duration(0); at < cfg.Duration; at += interval {
				starts = append(starts, at)
				if s == ScenarioMigrateRefused {
					leading = append(leading, int(leadingFailures(rng, cfg.FailureRate)))
				}
			}
			expect := func(pauses []time.Duration) (ok int, longest time.Duration, attempts int) {
				for i, start := range starts {
					served, took, n := migratePeer(pauses, cfg.deadline(), func(n int, at time.Duration) bool {
						if s == ScenarioMigrateRefused {
							return n <= leading[i]
						}
						at += start
						return at >= cfg.TriggerStart && at < cfg.TriggerEnd
					})
					if served {
						ok++
					}
					longest, attempts = max(longest, took), attempts+n
				}
				return ok, longest, attempts
			}
			byName := map[string]MigrateResult{}
			for _, r := range rep.Results {
				byName[r.Contender] = r
				if r.Calls != len(starts) || r.Successes > r.Calls || r.Cut != 0 {
					t.Errorf("%s: %d calls, %d successes, %d cut; want %d calls, none cut", r.Contender, r.Calls, r.Successes, r.Cut, len(starts))
				}
				if r.AttemptsPerCall < 1 || r.AttemptsPerCall > MigrateAttempts {
					t.Errorf("%s: %.2f attempts per call, want within [1, %d]", r.Contender, r.AttemptsPerCall, MigrateAttempts)
				}
				if r.P50 > r.P99 || r.FailP50 > r.FailP99 || r.P99 > r.Longest || r.FailP99 > r.Longest {
					t.Errorf("%s: percentiles out of order: ok %v/%v, failed %v/%v, longest %v", r.Contender, r.P50, r.P99, r.FailP50, r.FailP99, r.Longest)
				}
			}
			for _, peer := range []struct {
				name   string
				pauses []time.Duration
			}{{"grpc-middleware", mwPauses}, {"no-retry", nil}} {
				r := byName[peer.name]
				ok, longest, attempts := expect(peer.pauses)
				if r.Successes != ok || r.Longest != longest || r.Attempts != attempts {
					t.Errorf("%s: %d served, longest %v, %d attempts; want %d, %v, %d (the script, call by call)",
						peer.name, r.Successes, r.Longest, r.Attempts, ok, longest, attempts)
				}
			}
			stg, none := byName["stagger"], byName["no-retry"]
			if stg.Successes < none.Successes {
				t.Errorf("stagger served %d calls, fewer than no-retry's %d", stg.Successes, none.Successes)
			}
			// Without a deadline a wait ends at defer.maxWait, 10 s; the
			// pauses before it add at most 1.2 × 1.5 s.
			if bound := 10*time.Second + 1800*time.Millisecond; stg.Longest > bound {
				t.Errorf("stagger's longest call took %v, past its bound %v", stg.Longest, bound)
			}
		})
	}
}

// TestMigrateIssueFigures pins the figures of the peers the migrating team
// compared on virtual time (go-grpc-middleware's have no jitter): 3 s of
// UNAVAILABLE under a 1 s deadline serves 114 of 160 calls (71 %), the 14
// made in the outage's last 0.7 s among them; after a 2 s burst of
// refusals go-grpc-middleware's longest call is its four pauses, 1.5 s.
func TestMigrateIssueFigures(t *testing.T) {
	for _, tc := range []struct {
		s                    Scenario
		calls, ok, triggerOK int
		longest              time.Duration
	}{
		{ScenarioMigrateOutage, 160, 114, 14, time.Second},
		{ScenarioMigrateBurst, 160, 150, 30, 1500 * time.Millisecond},
	} {
		t.Run(string(tc.s), func(t *testing.T) {
			var rep *MigrateReport
			synctest.Test(t, func(t *testing.T) {
				var err error
				rep, err = RunMigrate(context.Background(), MigrateConfig{Scenario: tc.s, Contenders: []string{"grpc-middleware"}})
				if err != nil {
					t.Fatalf("RunMigrate: %v", err)
				}
			})
			r := rep.Results[0]
			if r.Calls != tc.calls || r.Successes != tc.ok || r.TriggerServed != tc.triggerOK || r.Longest != tc.longest {
				t.Errorf("%d calls, %d served (%d made in the trigger), longest %v; want %d, %d (%d), %v",
					r.Calls, r.Successes, r.TriggerServed, r.Longest, tc.calls, tc.ok, tc.triggerOK, tc.longest)
			}
		})
	}
}

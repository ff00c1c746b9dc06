//go:build go1.25

package lab

import (
	"slices"
	"testing"
	"time"
)

// tinyChain is ScenarioChain small: 20 calls/s from 2 clients for 3 s, C
// down from 1 s to 2 s (stagger's Gate calls it an outage only after a
// second of health), 3 attempts on every hop, 10 ms pauses doubling.
func tinyChain() Config {
	return Config{Scenario: ScenarioChain, Duration: 3 * time.Second, OutageStart: time.Second,
		OutageEnd: 2 * time.Second, Clients: 2, Rate: 20}
}

// TestRunChain runs the chain on virtual time (synctest): the attempts an
// outage call costs at each server follow from the retry layers' logic
// alone, whatever the jitter draws, so they are exact.
func TestRunChain(t *testing.T) {
	cfg := tinyChain()
	if d := cfg.Defaults(); d.MaxAttempts != 3 || d.Backoff.Initial != 10*time.Millisecond || d.Backoff.Max != 100*time.Millisecond || d.CallTimeout != 2*time.Second {
		t.Fatalf("chain defaults: %d attempts, backoff %+v, deadline %v; want 3, 10ms to 100ms, 2s", d.MaxAttempts, d.Backoff, d.CallTimeout)
	}
	res := runTiny(t, cfg)
	if got, want := namesOf(ChainContenders()), []string{"stagger", "stagger-nobudget", "stagger-no-server", "grpc-go", "grpc-middleware", "mixed", "grpc-middleware-top", "no-retry"}; !slices.Equal(got, want) {
		t.Fatalf("ChainContenders() = %v, want %v", got, want)
	}
	for _, tc := range []struct {
		name string
		// at A, B and C per outage call
		top, middle, bottom float64
	}{
		// B gives up after 3 attempts at C and answers "do not retry",
		// which A's stagger (or grpc-go's built-in retry) obeys and passes
		// up: the users' layer stops too.
		{"stagger-nobudget", 1, 1, 3},
		{"mixed", 1, 1, 3},
		// Nothing coordinates: 3 × 3 × 3.
		{"stagger-no-server", 3, 9, 27},
		{"grpc-go", 3, 9, 27},
		{"grpc-middleware", 3, 9, 27},
		// go-grpc-middleware ignores "do not retry" and retries A 3 times;
		// A's stagger makes one attempt at B for a retried request, which
		// carries stagger-upstream-retry, so B makes one at C: 3 + 1 + 1.
		{"grpc-middleware-top", 3, 3, 5},
		// No retries anywhere: one attempt per hop.
		{"no-retry", 1, 1, 1},
	} {
		r := res[tc.name]
		t.Logf("%-17s %d outage calls: %.2f at A, %.2f at B, %.2f at C per call; success after %.3f, overall %.3f",
			tc.name, r.OutageCalls, r.TopAttemptsPerCall, r.MiddleAttemptsPerCall, r.BottomAttemptsPerCall, r.SuccessAfter, r.SuccessRate)
		// 60 calls, 20 of them made in the outage; the calls that make 27
		// attempts at C take about 0.4 s, so at least those of its first
		// half return within it.
		if r.Calls != 60 || r.OutageCalls < 10 || r.OutageCalls > 20 {
			t.Errorf("%s: %d calls, %d made and returned in the outage; want 60, and 10 to 20", tc.name, r.Calls, r.OutageCalls)
		}
		if r.TopAttemptsPerCall != tc.top || r.MiddleAttemptsPerCall != tc.middle || r.BottomAttemptsPerCall != tc.bottom {
			t.Errorf("%s: per outage call %v at A, %v at B, %v at C; want %v, %v, %v", tc.name,
				r.TopAttemptsPerCall, r.MiddleAttemptsPerCall, r.BottomAttemptsPerCall, tc.top, tc.middle, tc.bottom)
		}
		// C is up again: every call made then succeeds at once.
		if r.SuccessAfter < 0.99 {
			t.Errorf("%s: success after the outage %v, want at least 0.99", tc.name, r.SuccessAfter)
		}
		// The outage attempts are C's: at least the outage calls'.
		if min := int(tc.bottom) * r.OutageCalls; r.OutageAttempts < min {
			t.Errorf("%s: %d attempts reached C in its outage, want at least %d", tc.name, r.OutageAttempts, min)
		}
	}
	// The goals: the no-amplification limit (3) with the server side, with
	// stagger or grpc-go's built-in retry at the top; the storm without.
	for _, name := range []string{"stagger-nobudget", "mixed"} {
		if b := res[name].BottomAttemptsPerCall; b > 3.1 {
			t.Errorf("%s: %.2f attempts at C per outage call, want at most 3.1", name, b)
		}
	}
	// stagger as a user has it, with its default budget on every hop: B's
	// Gate holds the retries through C's outage (the calls' deadlines
	// outlast it) and lets them go once C serves, so that nearly every
	// call succeeds, at no more load on C in the outage than twice the
	// client that does not retry (the budgets' first tokens).
	s := res["stagger"]
	t.Logf("stagger (default budget): %d outage calls, %.2f at C per call, success %.3f, %d attempts at C in the outage (no-retry %d)",
		s.OutageCalls, s.BottomAttemptsPerCall, s.SuccessRate, s.OutageAttempts, res["no-retry"].OutageAttempts)
	if s.SuccessRate < 0.95 || s.SuccessAfter < 0.99 {
		t.Errorf("stagger: success %.3f, after the outage %.3f; want at least 0.95 and 0.99", s.SuccessRate, s.SuccessAfter)
	}
	for name, r := range res {
		if r.SuccessRate > s.SuccessRate {
			t.Errorf("%s: success %.3f, above stagger's %.3f", name, r.SuccessRate, s.SuccessRate)
		}
	}
	if max := 2 * res["no-retry"].OutageAttempts; s.OutageAttempts > max {
		t.Errorf("stagger: %d attempts reached C in its outage, want at most %d (twice no-retry's)", s.OutageAttempts, max)
	}
	for _, name := range []string{"stagger-no-server", "grpc-go", "grpc-middleware"} {
		if b := res[name].BottomAttemptsPerCall; b < 20 {
			t.Errorf("%s: %.2f attempts at C per outage call, want at least 20", name, b)
		}
	}
}

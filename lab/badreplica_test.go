package lab

import (
	"context"
	"testing"
	"time"
)

// In ScenarioBadReplica, stagger with the stagger_elsewhere policy never
// sends a call back to the bad replica and nearly every call succeeds, as the bad
// replica's own records show; stagger over round_robin does send calls
// back to it (so the figure is not vacuous). Real time over loopback TCP:
// the replicas are real sockets.
func TestBadReplicaElsewhere(t *testing.T) {
	cfg := Config{Scenario: ScenarioBadReplica, Duration: 2 * time.Second, Rate: 200, Contenders: []string{"stagger", "stagger-elsewhere"}}
	rep, err := Run(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	res := map[string]Result{}
	for _, r := range rep.Results {
		res[r.Contender] = r
		t.Logf("%-18s calls %d success %.4f met bad %d bad repeats %d attempts/call %.3f p99 %v",
			r.Contender, r.Calls, r.SuccessRate, r.BadCalls, r.BadRepeats, r.AttemptsPerCall, r.P99)
	}
	e := res["stagger-elsewhere"]
	if e.Calls == 0 || e.BadCalls == 0 {
		t.Fatalf("stagger-elsewhere: %d calls, %d met the bad replica: the scenario did not run", e.Calls, e.BadCalls)
	}
	// No call goes back to the bad replica: the rule itself, exact. Every
	// call succeeding is the consequence on a quiet machine; on a loaded
	// one a few calls that left the bad replica for a good one can still
	// run out of their deadline there (CI beside a 10-minute soak: 3 of
	// 400, p99 1.85 s), so the success asked for is 99 %. (The repeats
	// cost round_robin 1 to 7 points: 93 % in that run, 95.8 to 99 % on
	// a quiet one.)
	if e.SuccessRate < 0.99 || e.BadRepeats != 0 {
		t.Errorf("stagger-elsewhere: success %.4f, %d calls met the bad replica more than once; want at least 0.99 and 0", e.SuccessRate, e.BadRepeats)
	}
	if rr := res["stagger"]; rr.BadRepeats == 0 {
		t.Errorf("stagger over round_robin: no call of %d met the bad replica twice", rr.Calls)
	}
}

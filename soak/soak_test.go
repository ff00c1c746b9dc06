package soak

import (
	"os"
	"strconv"
	"testing"
	"time"
)

// TestSoak runs the soak for SOAK_TIME with SOAK_SEED (default: drawn from
// the clock, and printed to replay); SOAK_PROFILE, an absolute directory,
// gets heap profiles at half time and at the end. Without SOAK_TIME it is
// skipped: `make soak` and CI's soak step run it alone, since beside other
// packages' tests it would take their cores (and theirs its).
func TestSoak(t *testing.T) {
	s := os.Getenv("SOAK_TIME")
	if s == "" {
		t.Skip("SOAK_TIME is not set: run make soak (SOAK_TIME=10m by default)")
	}
	d, err := time.ParseDuration(s)
	if err != nil || d <= 0 {
		t.Fatalf("SOAK_TIME=%q: want a duration such as 10m", s)
	}
	seed := uint64(time.Now().UnixNano() % 1e6)
	if s := os.Getenv("SOAK_SEED"); s != "" {
		if seed, err = strconv.ParseUint(s, 10, 64); err != nil {
			t.Fatalf("SOAK_SEED=%q: want a number", s)
		}
	}
	res, err := Run(Config{Duration: d, Seed: seed, Dir: t.TempDir(), Log: os.Stderr, ProfileDir: os.Getenv("SOAK_PROFILE")})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%d calls, %d OK, %d writes applied; Redis store %v; faults %v; %s", res.Calls, res.OK, res.Applied, res.Redis, res.Faults, res.Elapsed.Round(time.Second))
	for _, g := range res.Gates {
		t.Logf("Gate of %s", g)
	}
	for _, d := range res.Down {
		t.Logf("down: %s", d)
	}
	t.Logf("pods: %s", res.Pods)
	for _, b := range res.NotClosed {
		t.Logf("breaker not closed when the load stopped (the tail's probes closed it): %s", b)
	}
	// The summary goes to stderr as well: a test's log is shown only on
	// failure or with -v.
	os.Stderr.WriteString(res.Summary() + "\n")
	if res.Broken != "" {
		t.Fatalf("%s\ninvariant broken: %s (replay: SOAK_SEED=%d SOAK_TIME=%s)\nhistory before it:\n%s", res.Summary(), res.Broken, seed, d, res.History)
	}
}

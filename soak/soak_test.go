package soak

import (
	"os"
	"strconv"
	"testing"
	"time"
)

// TestSoak runs the soak for SOAK_TIME (default defaultTestTime, what `go
// test` of every package runs) with SOAK_SEED (default: drawn from the
// clock, and printed to replay).
func TestSoak(t *testing.T) {
	d := defaultTestTime
	if s := os.Getenv("SOAK_TIME"); s != "" {
		var err error
		if d, err = time.ParseDuration(s); err != nil || d <= 0 {
			t.Fatalf("SOAK_TIME=%q: want a duration such as 10m", s)
		}
	}
	seed := uint64(time.Now().UnixNano() % 1e6)
	if s := os.Getenv("SOAK_SEED"); s != "" {
		var err error
		if seed, err = strconv.ParseUint(s, 10, 64); err != nil {
			t.Fatalf("SOAK_SEED=%q: want a number", s)
		}
	}
	res, err := Run(Config{Duration: d, Seed: seed, Dir: t.TempDir(), Log: os.Stderr})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%d calls, %d OK, %d writes applied; Redis store %v; faults %v; %s", res.Calls, res.OK, res.Applied, res.Redis, res.Faults, res.Elapsed.Round(time.Second))
	// The summary goes to stderr as well: a test's log is shown only on
	// failure or with -v.
	os.Stderr.WriteString(res.Summary() + "\n")
	if res.Broken != "" {
		t.Fatalf("%s\ninvariant broken: %s (replay: SOAK_SEED=%d SOAK_TIME=%s)\nhistory before it:\n%s", res.Summary(), res.Broken, seed, d, res.History)
	}
}

// defaultTestTime is the soak that `go test ./soak/...` runs without
// SOAK_TIME: short, so that the newest lane of `make test` meets it.
const defaultTestTime = 20 * time.Second

package main

import (
	"bytes"
	"encoding/csv"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/stagger-go/stagger/sim"
)

// runSimArgs runs "stagger sim args..." and returns its exit code and output.
func runSimArgs(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errOut bytes.Buffer
	code = runSim(args, &out, &errOut)
	return code, out.String(), errOut.String()
}

func TestSimRegistered(t *testing.T) {
	c, ok := commands["sim"]
	if !ok || c.run == nil || c.summary == "" {
		t.Fatalf(`commands["sim"] = %+v, %v; want a registered command`, c, ok)
	}
}

func TestSimUsageErrors(t *testing.T) {
	defer goleak.VerifyNone(t)
	for _, tc := range []struct {
		name string
		args []string
		want string // in stderr
	}{
		{"no model", nil, "usage: stagger sim MODEL"},
		{"unknown model", []string{"storm"}, `unknown model "storm"`},
		{"bad format", []string{"occ", "-format", "xml"}, "must be table, csv or json"},
		{"bad clients", []string{"occ", "-clients", "10,x"}, `"x" is not an integer`},
		{"zero clients", []string{"occ", "-clients", "0", "-runs", "1"}, "clients must be in [1, 10000], got 0"},
		{"zero runs", []string{"occ", "-runs", "0"}, "-runs must be in [1, 100000], got 0"},
		{"extra argument", []string{"occ", "-runs", "1", "extra"}, `unexpected argument "extra"`},
		{"unknown flag", []string{"failrate", "-budget", "x"}, "flag provided but not defined: -budget"},
		{"p above 1", []string{"failrate", "-p", "0.5,2"}, "p must be in [0, 1], got 2"},
		{"bad p", []string{"failrate", "-p", "half"}, `"half" is not a number`},
		{"unknown contender", []string{"failrate", "-contenders", "retry-3,magic"}, `unknown contender "magic"`},
		{"zero duration", []string{"failrate", "-duration", "0s"}, "-duration must be > 0"},
		{"outage window", []string{"outage", "-outage-start", "6s", "-outage-end", "3s"}, "outage window must satisfy"},
		{"outage capacity", []string{"outage", "-capacity", "0"}, "-capacity must be > 0"},
		{"outage call timeout", []string{"outage", "-call-timeout", "-1s"}, "outage call timeout must be in [0, 1h] (0: none), got -1s"},
		{"failrate call timeout", []string{"failrate", "-call-timeout", "-1s"}, "failrate call timeout must be in [0, 1h] (0: none), got -1s"},
		{"partial fail keys above 1", []string{"partial", "-fail-keys", "0.2,1.5"}, "sim: partial fail keys must be in [0, 1], got 1.5"},
		{"partial bad fail keys", []string{"partial", "-fail-keys", "a fifth"}, `"a fifth" is not a number`},
		{"partial zero duration", []string{"partial", "-duration", "0s"}, "-duration must be > 0"},
		{"partial call timeout", []string{"partial", "-call-timeout", "-1s"}, "partial call timeout must be in [0, 1h] (0: none), got -1s"},
		{"partial unknown contender", []string{"partial", "-contenders", "magic"}, `unknown contender "magic"`},
		{"fleet zero processes", []string{"fleet", "-processes", "0"}, "-processes must be > 0"},
		{"fleet load", []string{"fleet", "-load", "11"}, "sim: fleet: Load: must be in (0, 10]"},
		{"fleet outage", []string{"fleet", "-outage", "150ms"}, "sim: fleet: Outage: must be a whole number of 100ms"},
		{"fleet csv", []string{"fleet", "-format", "csv"}, "the fleet prints table or json"},
		{"fleet unknown contender", []string{"fleet", "-contenders", "default"}, `unknown contender "default" (known: stagger, retry-3, no-retry)`},
		{"blip window past its duration", []string{"blip", "-duration", "3s"}, "outage window must satisfy 0 <= start < end <= duration 3s, got [2s, 3.5s)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, _, stderr := runSimArgs(t, tc.args...)
			if code != 2 {
				t.Errorf("exit %d, want 2 (stderr %q)", code, stderr)
			}
			if !strings.Contains(stderr, tc.want) {
				t.Errorf("stderr %q does not contain %q", stderr, tc.want)
			}
		})
	}
}

func TestSimHelp(t *testing.T) {
	for _, args := range [][]string{{"-h"}, {"occ", "-h"}, {"outage", "-help"}, {"blip", "-h"}, {"partial", "-h"}, {"fleet", "-h"}} {
		if code, _, stderr := runSimArgs(t, args...); code != 0 {
			t.Errorf("%v: exit %d, want 0 (stderr %q)", args, code, stderr)
		}
	}
}

func TestSimDeterministicOutput(t *testing.T) {
	defer goleak.VerifyNone(t)
	for _, tc := range []struct {
		name string
		args []string
	}{
		{"occ table", []string{"occ", "-clients", "3,12", "-runs", "4"}},
		{"occ csv", []string{"occ", "-clients", "3,12", "-runs", "4", "-format", "csv"}},
		{"failrate table", []string{"failrate", "-p", "0.3,1", "-clients", "5,50", "-rate", "200", "-duration", "2s"}},
		{"failrate json", []string{"failrate", "-p", "0.3", "-rate", "200", "-duration", "2s", "-format", "json"}},
		{"outage table", []string{"outage", "-capacity", "200", "-load", "150", "-clients", "10", "-duration", "3s", "-outage-start", "1s", "-outage-end", "2s"}},
		{"outage with deadlines", []string{"outage", "-capacity", "200", "-load", "150", "-clients", "10", "-duration", "3s", "-outage-start", "1s", "-outage-end", "2s", "-call-timeout", "500ms"}},
		{"failrate with deadlines", []string{"failrate", "-p", "0.3", "-rate", "200", "-duration", "2s", "-call-timeout", "150ms"}},
		{"blip", []string{"blip"}},
		{"partial table", []string{"partial", "-fail-keys", "0.2,0.5", "-clients", "5,50", "-rate", "200", "-duration", "2s"}},
		{"partial json", []string{"partial", "-rate", "200", "-duration", "2s", "-format", "json"}},
		{"partial with deadlines", []string{"partial", "-rate", "200", "-duration", "2s", "-call-timeout", "150ms", "-format", "csv"}},
		{"fleet table", []string{"fleet", "-clients", "5", "-capacity", "200", "-concurrency", "10", "-warmup", "1s", "-outage", "2s", "-after", "3s"}},
		{"fleet json", []string{"fleet", "-processes", "5", "-capacity", "200", "-concurrency", "10", "-load", "0.8", "-warmup", "1s", "-outage", "2s", "-after", "3s", "-format", "json"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, a, stderr := runSimArgs(t, append(tc.args, "-seed", "1")...)
			if code != 0 {
				t.Fatalf("exit %d: %s", code, stderr)
			}
			_, b, _ := runSimArgs(t, append(tc.args, "-seed", "1")...)
			if a != b {
				t.Fatalf("same seed, different output:\n%s\n---\n%s", a, b)
			}
			_, c, _ := runSimArgs(t, append(tc.args, "-seed", "2")...)
			if a == c {
				t.Fatalf("seeds 1 and 2 gave the same output:\n%s", a)
			}
		})
	}
}

func TestSimCSVShape(t *testing.T) {
	for _, tc := range []struct {
		name   string
		args   []string
		header string
		rows   int
	}{
		{"occ", []string{"occ", "-clients", "2,4", "-runs", "2", "-format", "csv"}, "clients,strategy,mean_time_ms,mean_calls", 10},
		{"failrate one client count", []string{"failrate", "-p", "0,1", "-rate", "100", "-duration", "1s", "-format", "csv"}, "p,strategy,amplification,success_rate", 2 * len(sim.Contenders())},
		{"failrate several client counts", []string{"failrate", "-p", "0.5", "-clients", "1,10", "-rate", "100", "-duration", "1s", "-format", "csv", "-contenders", "no-retry,default"}, "p,clients,strategy,amplification,success_rate", 4},
		{"outage", []string{"outage", "-duration", "2s", "-outage-start", "0.5s", "-outage-end", "1s", "-load", "100", "-format", "csv"}, "strategy,attempts_per_call,success_rate,outage_load,peak_after,drain_ms", len(sim.Contenders())},
		{"blip", []string{"blip", "-format", "csv"}, "strategy,attempts_per_call,success_rate,outage_load,peak_after,drain_ms", len(sim.Contenders())},
		{"partial one client count", []string{"partial", "-fail-keys", "0,0.2,1", "-rate", "100", "-duration", "1s", "-format", "csv"}, "fail_keys,strategy,amplification,success_rate,healthy_success_rate", 3 * len(sim.Contenders())},
		{"partial several client counts", []string{"partial", "-clients", "1,10", "-rate", "100", "-duration", "1s", "-format", "csv", "-contenders", "no-retry,default"}, "fail_keys,clients,strategy,amplification,success_rate,healthy_success_rate", 4},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, out, stderr := runSimArgs(t, tc.args...)
			if code != 0 {
				t.Fatalf("exit %d: %s", code, stderr)
			}
			recs, err := csv.NewReader(strings.NewReader(out)).ReadAll()
			if err != nil {
				t.Fatalf("output is not CSV: %v\n%s", err, out)
			}
			if got := strings.Join(recs[0], ","); got != tc.header {
				t.Errorf("header %q, want %q", got, tc.header)
			}
			if len(recs)-1 != tc.rows {
				t.Errorf("%d rows, want %d:\n%s", len(recs)-1, tc.rows, out)
			}
		})
	}
}

func TestSimFailRateP0(t *testing.T) {
	code, out, stderr := runSimArgs(t, "failrate", "-p", "0", "-rate", "100", "-duration", "2s", "-format", "json")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	var rows []failRateJSON
	if err := json.Unmarshal([]byte(out), &rows); err != nil {
		t.Fatalf("output is not JSON: %v\n%s", err, out)
	}
	if len(rows) != len(sim.Contenders()) {
		t.Fatalf("%d rows, want %d", len(rows), len(sim.Contenders()))
	}
	for _, r := range rows {
		if r.Amplification != 1 || r.SuccessRate != 1 || r.Calls == 0 {
			t.Errorf("p=0 %s: %+v, want amplification 1 and success 1", r.Strategy, r)
		}
	}
}

// TestSimPartialJSON: partial's rows carry failrate's fields, fail_keys in
// place of p, and the healthy calls; without a budget a strategy serves
// every healthy call and no other, so success is the healthy fraction.
func TestSimPartialJSON(t *testing.T) {
	defer goleak.VerifyNone(t)
	code, out, stderr := runSimArgs(t, "partial", "-rate", "200", "-duration", "2s", "-format", "json")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	var fields []map[string]any
	if err := json.Unmarshal([]byte(out), &fields); err != nil {
		t.Fatalf("output is not JSON: %v\n%s", err, out)
	}
	if len(fields) != len(sim.Contenders()) {
		t.Fatalf("%d rows, want one per contender (%d)", len(fields), len(sim.Contenders()))
	}
	for _, k := range []string{"fail_keys", "clients", "strategy", "calls", "attempts", "successes", "amplification", "success_rate", "healthy_calls", "healthy_success_rate"} {
		if _, ok := fields[0][k]; !ok {
			t.Errorf("row %v lacks %q", fields[0], k)
		}
	}
	var rows []partialJSON
	if err := json.Unmarshal([]byte(out), &rows); err != nil {
		t.Fatal(err)
	}
	for _, r := range rows {
		if r.FailKeys != 0.2 || r.Clients != 100 || r.Calls < 300 || r.Calls > 500 {
			t.Errorf("%s: fail keys %v, %d clients, %d calls; want 0.2, 100 and about 400", r.Strategy, r.FailKeys, r.Clients, r.Calls)
		}
		if f := float64(r.HealthyCalls) / float64(r.Calls); math.Abs(f-0.8) > 0.06 {
			t.Errorf("%s: healthy fraction %v, want about 0.8", r.Strategy, f)
		}
		if r.Strategy != "no-retry" && r.Strategy != "retry-3" {
			continue
		}
		if r.Successes != r.HealthyCalls || r.SuccessRate != float64(r.HealthyCalls)/float64(r.Calls) || r.HealthySuccessRate != 1 {
			t.Errorf("%s: %+v; want every healthy call and no other served", r.Strategy, r)
		}
	}
}

func TestSimPolicyFile(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "retry.json")
	const cfg = `{
  "methodConfig": [{
    "name": [{}],
    "retryPolicy": {"maxAttempts": 2, "initialBackoff": "0.05s", "maxBackoff": "1s",
      "backoffMultiplier": 2, "retryableStatusCodes": ["UNAVAILABLE"]}
  }],
  "retryThrottling": {"maxTokens": 10, "tokenRatio": 0.1}
}`
	if err := os.WriteFile(file, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	code, out, stderr := runSimArgs(t, "failrate", "-p", "1", "-rate", "100", "-duration", "2s", "-format", "csv", "-contenders", "no-retry", "-policy", file)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	recs, err := csv.NewReader(strings.NewReader(out)).ReadAll()
	if err != nil || len(recs) != 3 {
		t.Fatalf("want a header and 2 rows, got %v (%v):\n%s", len(recs), err, out)
	}
	if name := recs[2][1]; name != "file:retry.json+throttle" {
		t.Errorf("file contender named %q, want file:retry.json+throttle", name)
	}
	// maxAttempts 2 and a throttle at p = 1: above 1, at most 2.
	if amp, err := strconv.ParseFloat(recs[2][2], 64); err != nil || amp <= 1 || amp > 2 {
		t.Errorf("file contender amplification %s, want in (1, 2]", recs[2][2])
	}

	code, _, stderr = runSimArgs(t, "failrate", "-policy", filepath.Join(dir, "missing.json"))
	if code != 1 || !strings.Contains(stderr, "missing.json") {
		t.Errorf("missing file: exit %d, stderr %q; want 1 and the file named", code, stderr)
	}
}

// TestSimBlip checks the blip model's settings, its ceiling, and that a
// deadline changes the outage model's figures while none keeps them.
func TestSimBlip(t *testing.T) {
	code, out, stderr := runSimArgs(t, "blip")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	for _, want := range []string{"capacity 500/s, load 50 calls/s from 50 clients, outage [2s, 3.5s) of 8s, call deadline 2s\n",
		"\nceiling 100.00%: ", "\nno-retry ", "\ndefault "} {
		if !strings.Contains(out, want) {
			t.Errorf("blip table lacks %q:\n%s", want, out)
		}
	}
	code, out, stderr = runSimArgs(t, "blip", "-format", "json")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	var rows []outageJSON
	if err := json.Unmarshal([]byte(out), &rows); err != nil || len(rows) != len(sim.Contenders()) {
		t.Fatalf("json: %v, %d rows:\n%s", err, len(rows), out)
	}
	for _, r := range rows {
		if r.Ceiling != 1 || r.SuccessRate <= 0.7 || r.SuccessRate > 1 {
			t.Errorf("%s: ceiling %v, success %v; want 1 and a success above 0.7", r.Strategy, r.Ceiling, r.SuccessRate)
		}
	}
}

func TestOutageCeiling(t *testing.T) {
	// The outage model's defaults have no deadline: every call can be
	// served in the end.
	if c := outageCeiling(&sim.OutageConfig{Capacity: 1000, Load: 800, Duration: 10 * time.Second,
		OutageStart: 2 * time.Second, OutageEnd: 5 * time.Second}); c != 1 {
		t.Errorf("no deadline: ceiling %v, want 1", c)
	}
	// 800 calls/s for 10 s, 2400 in the outage [2 s, 5 s), 1 s deadlines,
	// capacity 1000/s: the 5600 others succeed at once. From 5 s, 200
	// attempts/s spare serve the outage calls due from 5 s on, those made in
	// [4 s, 5 s): a slot every 5 ms, the one ending at 5 s + 5k ms serving
	// the call made at 4 s + 5k ms, for k = 1..199; none is due at 6 s.
	cfg := sim.OutageConfig{Capacity: 1000, Load: 800, Duration: 10 * time.Second,
		OutageStart: 2 * time.Second, OutageEnd: 5 * time.Second, CallTimeout: time.Second}
	if c, want := outageCeiling(&cfg), (5600.0+199)/8000; math.Abs(c-want) > 1e-12 {
		t.Errorf("1 s deadline: ceiling %v, want %v", c, want)
	}
}

// TestSimFleetJSON: the fleet's JSON has the lab's figures per contender,
// the no-retry baseline among them.
func TestSimFleetJSON(t *testing.T) {
	code, out, stderr := runSimArgs(t, "fleet", "-processes", "4", "-capacity", "200", "-concurrency", "10",
		"-warmup", "1s", "-outage", "2s", "-after", "3s", "-format", "json")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	var rows []map[string]any
	if err := json.Unmarshal([]byte(out), &rows); err != nil {
		t.Fatalf("%v in %s", err, out)
	}
	var names []string
	for _, r := range rows {
		names = append(names, r["contender"].(string))
		for _, k := range []string{"outage_served_rate", "held_p90_s", "outage_failed_early", "peak_after", "refused_after", "ok_p50_s", "ok_p99_s", "fail_p50_s", "fail_p99_s"} {
			if _, ok := r[k]; !ok {
				t.Errorf("%s: no %q in %v", names[len(names)-1], k, r)
			}
		}
		if p := r["processes"].(float64); p != 4 {
			t.Errorf("processes = %v, want 4", p)
		}
	}
	if strings.Join(names, ",") != "stagger,retry-3,no-retry" {
		t.Errorf("contenders %v, want stagger, retry-3, no-retry", names)
	}
}

package main

import (
	"bytes"
	"context"
	"encoding/csv"
	"encoding/json"
	"encoding/xml"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"go.uber.org/goleak"

	"github.com/stagger-go/stagger/lab"
)

func runLabArgs(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errOut bytes.Buffer
	code = runLab(args, &out, &errOut)
	return code, out.String(), errOut.String()
}

func TestLabRegistered(t *testing.T) {
	c, ok := commands["lab"]
	if !ok || c.run == nil || c.summary == "" {
		t.Fatalf(`commands["lab"] = %+v, %v; want a registered command`, c, ok)
	}
}

func TestLabErrors(t *testing.T) {
	defer goleak.VerifyNone(t)
	for _, tc := range []struct {
		name string
		args []string
		code int
		want string // in stderr
	}{
		{"unknown scenario", []string{"-scenario", "flood"}, 2, `Scenario: must be one of`},
		{"unknown contender", []string{"-contenders", "envoy"}, 2, `Contenders: must be among`},
		{"zero clients", []string{"-clients", "0"}, 2, "-clients must not be 0"},
		{"too many attempts", []string{"-attempts", "7"}, 2, "MaxAttempts: must be in [1, 5]"},
		{"outage past the end", []string{"-duration", "1s"}, 2, "OutageStart/OutageEnd"},
		{"leftover argument", []string{"now"}, 2, `unexpected argument "now"`},
		{"bad format", []string{"-format", "xml"}, 2, "must be table, csv or json"},
		{"retry contender in the hedging scenario", []string{"-scenario", "slow-replica", "-contenders", "naive"}, 2, `Contenders: must be among stagger-nohedge`},
		// Flags not given leave blip its own outage, [2s, 3.5s).
		{"blip's own outage", []string{"-scenario", "blip", "-duration", "3s"}, 2, "got [2s, 3.5s) of 3s"},
		{"one bound given, the other blip's", []string{"-scenario", "blip", "-outage-start", "3.6s"}, 2, "got [3.6s, 3.5s) of 8s"},
		{"one bound given, the other unavailable's", []string{"-outage-start", "4.5s"}, 2, "got [4.5s, 4s) of 8s"},
		// The overload's own outage, [2s, 6s), and duration, 10s.
		{"overload's own outage", []string{"-scenario", "overload", "-duration", "5s"}, 2, "got [2s, 6s) of 5s"},
		{"overload's own duration", []string{"-scenario", "overload", "-outage-end", "11s"}, 2, "got [2s, 11s) of 10s"},
		// The chain's own outage, [1s, 3s), and duration, 4s.
		{"chain's own outage", []string{"-scenario", "chain", "-duration", "2s"}, 2, "got [1s, 3s) of 2s"},
		{"chain's own duration", []string{"-scenario", "chain", "-outage-end", "5s"}, 2, "got [1s, 5s) of 4s"},
		{"unavailable's contender in the chain", []string{"-scenario", "chain", "-contenders", "naive"}, 2, `Contenders: must be among stagger, stagger-nobudget, stagger-no-server`},
		// The fleet has flags of its own and runs alone.
		{"fleet with another scenario", []string{"-scenario", "fleet,unavailable"}, 2, "-scenario fleet runs alone"},
		{"fleet's load", []string{"-scenario", "fleet", "-load", "-1"}, 2, "lab: fleet: Load: must be in (0, 10]"},
		{"fleet's contender", []string{"-scenario=fleet", "-contenders", "naive"}, 2, `lab: fleet: Contenders: must be among stagger, grpc-go-throttle`},
		{"fleet's flag elsewhere", []string{"-scenario", "unavailable", "-load", "0.4"}, 2, "flag provided but not defined: -load"},
		{"fleet's format", []string{"-scenario", "fleet", "-format", "csv"}, 2, "the fleet prints table or json"},
		// The migration scenarios have flags of their own and run apart.
		{"migration with another scenario", []string{"-scenario", "migrate-burst,unavailable"}, 2, "-scenario unavailable: the migration scenarios run apart"},
		{"migration's rate", []string{"-scenario=migrate-refused", "-rate", "-1"}, 2, "lab: migrate-refused: Rate: must be in (0, 10000]"},
		{"migration's contender", []string{"-scenario", "migrate-outage", "-contenders", "naive"}, 2, "Contenders: must be among stagger, grpc-middleware, no-retry"},
		{"one bound given, the other the outage's", []string{"-scenario", "migrate-outage", "-outage-start", "6s"}, 2, "got [6s, 5s) of 8s"},
		{"migration's flag elsewhere", []string{"-scenario", "unavailable", "-deadline", "1s"}, 2, "flag provided but not defined: -deadline"},
		{"migration's format", []string{"-scenario", "migrate-burst", "-format", "csv"}, 2, "the migration scenarios print table or json"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, _, stderr := runLabArgs(t, tc.args...)
			if code != tc.code || !strings.Contains(stderr, tc.want) {
				t.Fatalf("exit %d, stderr %q; want exit %d and %q", code, stderr, tc.code, tc.want)
			}
		})
	}
}

// tinyLab is a short real-time run: the assertions are on the output's
// shape, which does not depend on timing.
var tinyLab = []string{"-duration", "600ms", "-outage-start", "200ms", "-outage-end", "400ms",
	"-clients", "2", "-capacity", "50", "-call-timeout", "300ms", "-contenders", "stagger,naive"}

func TestLabCSV(t *testing.T) {
	defer goleak.VerifyNone(t)
	code, stdout, stderr := runLabArgs(t, append(tinyLab, "-format", "csv")...)
	if code != 0 {
		t.Fatalf("exit %d, stderr %q", code, stderr)
	}
	rows, err := csv.NewReader(strings.NewReader(stdout)).ReadAll()
	if err != nil {
		t.Fatalf("output is not CSV: %v\n%s", err, stdout)
	}
	want := "scenario,contender,calls,attempts_per_call,success_rate,outage_load,peak_after,p50_ms,p99_ms,p999_ms,goodput," +
		"bottom_attempts_per_call,middle_attempts_per_call,success_after,first_p50_ms,first_p99_ms,first_p999_ms," +
		"recover_s,wasted,fail_p50_ms,fail_p99_ms,peak_in_flight,mean_in_flight"
	if len(rows) != 3 || strings.Join(rows[0], ",") != want {
		t.Fatalf("got %d rows, header %v; want 3 rows under %s", len(rows), rows[0], want)
	}
	for i, name := range []string{"stagger", "naive"} {
		if rows[i+1][0] != "unavailable" || rows[i+1][1] != name || rows[i+1][2] != "24" {
			t.Errorf("row %d = %v, want unavailable,%s,24 (40 calls/s, 80%% of capacity, for 0.6 s)", i+1, rows[i+1], name)
		}
		// Every scenario with a trigger has a goodput, a success after
		// it and a wasted share; the chain's and the streams' figures are
		// theirs alone.
		if row := rows[i+1]; row[10] == "" || row[13] == "" || row[18] == "" {
			t.Errorf("row %d: goodput %q, success after %q, wasted %q; want all three", i+1, row[10], row[13], row[18])
		}
		if c := strings.Join(append(rows[i+1][11:13], rows[i+1][14:17]...), ""); c != "" {
			t.Errorf("row %d: chain and stream figures %v, want none outside their scenarios", i+1, rows[i+1][11:17])
		}
	}
}

func TestLabTableAndJSON(t *testing.T) {
	defer goleak.VerifyNone(t)
	code, stdout, stderr := runLabArgs(t, append(tinyLab, "-full")...)
	if code != 0 {
		t.Fatalf("exit %d, stderr %q", code, stderr)
	}
	for _, want := range []string{"scenario unavailable: capacity 50 attempts/s (10 workers of 200ms (20ms per rejection), queue 50)", "\nreference 87.5%: ",
		"CONTENDER", "ATTEMPTS/CALL", "SUCCESS AFTER", "RECOVER (s)", "GOODPUT", "WASTED", "FAIL P50 (ms)", "FAIL P99 (ms)",
		"PEAK IN FLIGHT", "PEAK WAITING", "PEAK GOROUTINES", "stagger │", "naive   │", "▔ = outage"} {
		if !strings.Contains(stdout, want) {
			t.Errorf("table lacks %q:\n%s", want, stdout)
		}
	}
	code, stdout, stderr = runLabArgs(t, tinyLab...)
	if code != 0 {
		t.Fatalf("exit %d, stderr %q", code, stderr)
	}
	for _, want := range []string{"CONTENDER", "ATT/CALL", "SUCCESS", "RECOVER (s)", "FAIL P50", "LOAD", "HELD", "stagger │"} {
		if !strings.Contains(stdout, want) {
			t.Errorf("default table lacks %q:\n%s", want, stdout)
		}
	}
	var out bytes.Buffer
	if err := labMain(context.Background(), append(tinyLab, "-format", "json"), &out, &out); err != nil {
		t.Fatalf("labMain json: %v", err)
	}
	var got []labJSON
	if err := json.Unmarshal(out.Bytes(), &got); err != nil || len(got) != 2 {
		t.Fatalf("json: %v, %d records:\n%s", err, len(got), out.String())
	}
	if got[0].Calls != 24 || got[0].Attempts < got[0].Calls || len(got[0].LoadPer100ms) == 0 {
		t.Errorf("json record %+v: want 24 calls, attempts >= calls, a load series", got[0])
	}
	// The timeline: one record per second, at least the run's 0.6 s, with
	// the server's capacity and the calls adding up.
	tl := got[0].Timeline
	calls := 0
	for _, s := range tl {
		calls += s.Calls
	}
	if len(tl) == 0 || tl[0].Capacity == nil || *tl[0].Capacity != 50 || calls != 24 {
		t.Errorf("json timeline %+v: want seconds with capacity 50, 24 calls in all", tl)
	}
}

// labJSONRecords runs the lab with args in JSON and decodes its n records.
func labJSONRecords(t *testing.T, args []string, n int) []map[string]any {
	t.Helper()
	var out bytes.Buffer
	if err := labMain(context.Background(), append(args, "-format", "json"), &out, &out); err != nil {
		t.Fatalf("labMain json: %v", err)
	}
	var recs []map[string]any
	if err := json.Unmarshal(out.Bytes(), &recs); err != nil || len(recs) != n {
		t.Fatalf("json: %v, %d records, want %d:\n%s", err, len(recs), n, out.String())
	}
	return recs
}

// TestLabJSONFields checks the JSON records' keys: those users script
// against stay, and the new ones are there.
func TestLabJSONFields(t *testing.T) {
	defer goleak.VerifyNone(t)
	recs := labJSONRecords(t, tinyLab, 2)
	for _, key := range []string{"scenario", "contender", "calls", "attempts", "successes", "attempts_per_call",
		"success_rate", "outage_load", "peak_after", "p50_ms", "p99_ms", "p999_ms", "load_per_100ms", "wall_ms", "versions",
		"ceiling", "peak_in_flight", "peak_attempts_in_flight", "peak_waiting", "peak_goroutines",
		"goodput", "wasted", "fail_p50_ms", "fail_p99_ms", "recover_s", "success_after", "calls_after", "mean_in_flight", "timeline"} {
		if _, ok := recs[0][key]; !ok {
			t.Errorf("json record lacks %q: %v", key, recs[0])
		}
	}
	for _, key := range labChainKeys {
		if _, ok := recs[0][key]; ok {
			t.Errorf("json record of unavailable has %q: %v", key, recs[0])
		}
	}
	if recs[0]["contender"] != "stagger" || recs[1]["contender"] != "naive" || recs[0]["scenario"] != "unavailable" {
		t.Errorf("records name %v/%v and %v, want unavailable/stagger and naive", recs[0]["scenario"], recs[0]["contender"], recs[1]["contender"])
	}
	// 40 calls/s for 0.6 s (one every 25 ms), 8 in the outage
	// [0.2 s, 0.4 s), deadlines of 0.3 s, capacity 50/s. The 16 others
	// succeed at once, each bin keeping 1 attempt spare: the slot ending at
	// 0.5 s serves the call made at 0.2 s, the one ending at 0.6 s the call
	// made at 0.3 s (those between are due before 0.6 s). From 0.6 s no
	// call is made, the whole capacity is spare, a slot every 20 ms: the
	// calls made at 0.325, 0.35 and 0.375 s are served by 0.62, 0.64 and
	// 0.66 s. 16 + 5 of 24.
	if c := recs[0]["ceiling"]; c != 21.0/24 {
		t.Errorf("ceiling %v, want %v", c, 21.0/24)
	}
}

// TestLabBlip runs blip small: its rate is 1 call/s per client unless -rate
// says otherwise.
func TestLabBlip(t *testing.T) {
	defer goleak.VerifyNone(t)
	var out bytes.Buffer
	args := []string{"-scenario", "blip", "-duration", "600ms", "-outage-start", "200ms", "-outage-end", "400ms",
		"-clients", "2", "-capacity", "50", "-call-timeout", "300ms", "-contenders", "stagger", "-format", "json"}
	if err := labMain(context.Background(), args, &out, &out); err != nil {
		t.Fatalf("labMain: %v", err)
	}
	var got []labJSON
	if err := json.Unmarshal(out.Bytes(), &got); err != nil || len(got) != 1 {
		t.Fatalf("json: %v, %d records:\n%s", err, len(got), out.String())
	}
	// 2 clients, one call a second each, the second client half a second
	// after the first: calls at 0 and 0.5 s, none in the outage.
	if r := got[0]; r.Scenario != "blip" || r.Calls != 2 || r.Ceiling != 1 {
		t.Errorf("record %+v: want blip, 2 calls, ceiling 1", r)
	}
}

// tinyOverload is the overload scenario short, in real time: 10 workers of
// 100 ms (capacity 100/s), 5 of them in [200 ms, 400 ms), 80 calls/s.
var tinyOverload = []string{"-scenario", "overload", "-duration", "600ms", "-outage-start", "200ms", "-outage-end", "400ms",
	"-clients", "2", "-capacity", "100", "-call-timeout", "300ms", "-contenders", "stagger,naive"}

// TestLabOverload checks that the overload's records carry a goodput, in
// every format; its value depends on real time, so only its range is
// checked: the 5 workers can serve 10 attempts in the 200 ms, plus the 5
// the idled workers began before.
func TestLabOverload(t *testing.T) {
	defer goleak.VerifyNone(t)
	recs := labJSONRecords(t, tinyOverload, 2)
	for _, r := range recs {
		g, ok := r["goodput"].(float64)
		if r["scenario"] != "overload" || !ok || g < 0 || g > 1.5 || r["calls"] != 48.0 {
			t.Errorf("record %v: want overload, 48 calls (80/s for 0.6 s), goodput within [0, 1.5]", r)
		}
	}
	code, stdout, stderr := runLabArgs(t, append(tinyOverload, "-full")...)
	if code != 0 {
		t.Fatalf("exit %d, stderr %q", code, stderr)
	}
	for _, want := range []string{"scenario overload: 10 workers, 100ms per attempt (10ms per rejection), queue 50; capacity 100 attempts/s, 50 with 5 workers in the overload [200ms, 400ms)",
		"GOODPUT: calls that succeeded from the trigger's start ÷ what the server could serve", "GOODPUT", "OVERLOAD ATTEMPTS ÷ CAP", "▔ = overload (half the workers)"} {
		if !strings.Contains(stdout, want) {
			t.Errorf("table lacks %q:\n%s", want, stdout)
		}
	}
	code, stdout, stderr = runLabArgs(t, append(tinyOverload, "-format", "csv")...)
	if code != 0 {
		t.Fatalf("exit %d, stderr %q", code, stderr)
	}
	rows, err := csv.NewReader(strings.NewReader(stdout)).ReadAll()
	if err != nil || len(rows) != 3 || rows[0][10] != "goodput" || rows[1][10] == "" || rows[2][10] == "" {
		t.Errorf("csv (%v): want a goodput in every row:\n%s", err, stdout)
	}
}

// labChainKeys are the keys only the chain scenario's JSON records have.
var labChainKeys = []string{"outage_calls", "bottom_attempts_per_call", "middle_attempts_per_call", "top_attempts_per_call"}

// tinyChain is the chain scenario short, in real time: 20 calls/s, C down
// in [100 ms, 600 ms) of 800 ms; 3 attempts on every hop, the scenario's
// own default.
var tinyChain = []string{"-scenario", "chain", "-duration", "800ms", "-outage-start", "100ms", "-outage-end", "600ms",
	"-clients", "2", "-rate", "20", "-contenders", "stagger,mixed,grpc-go"}

// TestLabChain checks the chain's records, in every format. Users script
// against the JSON: every record carries bottom_attempts_per_call. The
// figures depend on real time, so only their shape is checked (the lab's
// own tests check the values, on virtual time).
func TestLabChain(t *testing.T) {
	defer goleak.VerifyNone(t)
	recs := labJSONRecords(t, tinyChain, 3)
	for i, name := range []string{"stagger", "mixed", "grpc-go"} {
		r := recs[i]
		if r["scenario"] != "chain" || r["contender"] != name || r["calls"] != 16.0 {
			t.Errorf("record %d: %v/%v, %v calls; want chain/%s, 16 calls (20/s for 0.8 s)", i, r["scenario"], r["contender"], r["calls"], name)
		}
		for _, key := range labChainKeys {
			if _, ok := r[key].(float64); !ok {
				t.Errorf("record %d (%s) lacks %q: %v", i, name, key, r)
			}
		}
	}
	code, stdout, stderr := runLabArgs(t, append(tinyChain, "-full")...)
	if code != 0 {
		t.Fatalf("exit %d, stderr %q", code, stderr)
	}
	for _, want := range []string{"scenario chain: users → A → B → C, 3 attempts on every hop, C answers UNAVAILABLE in [100ms, 600ms) of 800ms",
		"(27 at C without coordination, 3 without amplification)", "AT C/CALL", "SUCCESS AFTER", "attempts C received per 100 ms", "▔ = C's outage"} {
		if !strings.Contains(stdout, want) {
			t.Errorf("table lacks %q:\n%s", want, stdout)
		}
	}
	if strings.Contains(stdout, "ceiling") {
		t.Errorf("table of the chain shows a ceiling (no server of it limits its attempts):\n%s", stdout)
	}
	code, stdout, stderr = runLabArgs(t, append(tinyChain, "-format", "csv")...)
	if code != 0 {
		t.Fatalf("exit %d, stderr %q", code, stderr)
	}
	rows, err := csv.NewReader(strings.NewReader(stdout)).ReadAll()
	if err != nil || len(rows) != 4 || rows[0][11] != "bottom_attempts_per_call" || rows[0][13] != "success_after" {
		t.Fatalf("csv (%v): want 4 rows under a header with the chain's columns:\n%s", err, stdout)
	}
	for _, row := range rows[1:] {
		if row[11] == "" || row[12] == "" || row[13] == "" {
			t.Errorf("csv row %v: want the chain's figures", row)
		}
	}
}

// TestLabSlowReplicaStream runs the streaming slow replica small, in real
// time: its table shows the time to the first message and the extra
// attempts, and its JSON records carry the time to the first message (the
// other scenarios' do not).
func TestLabSlowReplicaStream(t *testing.T) {
	defer goleak.VerifyNone(t)
	args := []string{"-scenario", "slow-replica-stream", "-duration", "600ms", "-outage-start", "200ms", "-outage-end", "400ms", "-clients", "2", "-capacity", "50",
		"-call-timeout", "1s", "-contenders", "stagger-nohedge,stagger-hedge"}
	code, stdout, stderr := runLabArgs(t, append(args, "-full")...)
	if code != 0 {
		t.Fatalf("exit %d, stderr %q", code, stderr)
	}
	for _, want := range []string{"scenario slow-replica-stream: ", "server streams/s (5 messages each)", "EXTRA ATTEMPTS",
		"FIRST P50 (ms)", "FIRST P99 (ms)", "stagger-hedge ", "the stream hedged until it commits"} {
		if !strings.Contains(stdout, want) {
			t.Errorf("table lacks %q:\n%s", want, stdout)
		}
	}
	recs := labJSONRecords(t, args, 2)
	for _, rec := range recs {
		// 25 streams/s (50% of capacity) for 0.6 s.
		if rec["calls"] != 15.0 {
			t.Errorf("record %v: want 15 calls", rec)
		}
		for _, key := range []string{"first_p50_ms", "first_p99_ms", "first_p999_ms"} {
			if v, ok := rec[key].(float64); !ok || v <= 0 {
				t.Errorf("record of %v: %s = %v, want a time", rec["contender"], key, rec[key])
			}
		}
	}
	if _, ok := labJSONRecords(t, tinyLab, 2)[0]["first_p99_ms"]; ok {
		t.Error("json record of unavailable has first_p99_ms")
	}
}

// TestLabBadReplica runs the bad replica small, in real time: its table
// names the replicas' figures, and its JSON records carry bad_repeats (0
// for stagger-elsewhere); the other scenarios' records do not.
func TestLabBadReplica(t *testing.T) {
	defer goleak.VerifyNone(t)
	args := []string{"-scenario", "bad-replica", "-duration", "1s", "-rate", "100", "-contenders", "stagger,stagger-elsewhere"}
	code, stdout, stderr := runLabArgs(t, append(args, "-full")...)
	if code != 0 {
		t.Fatalf("exit %d, stderr %q", code, stderr)
	}
	for _, want := range []string{"scenario bad-replica: three replicas", "MET BAD", "BAD REPEATS", "stagger_elsewhere over round_robin"} {
		if !strings.Contains(stdout, want) {
			t.Errorf("table lacks %q:\n%s", want, stdout)
		}
	}
	for _, rec := range labJSONRecords(t, args, 2) {
		if _, ok := rec["bad_repeats"].(float64); !ok {
			t.Errorf("record of %v: bad_repeats = %v, want a count", rec["contender"], rec["bad_repeats"])
		}
		if rec["contender"] == "stagger-elsewhere" && (rec["bad_repeats"] != 0.0 || rec["success_rate"] != 1.0) {
			t.Errorf("stagger-elsewhere: bad_repeats %v, success %v; want 0 and 1", rec["bad_repeats"], rec["success_rate"])
		}
	}
	if _, ok := labJSONRecords(t, tinyLab, 2)[0]["bad_repeats"]; ok {
		t.Error("json record of unavailable has bad_repeats")
	}
}

// TestLabSlowReplica3 runs slow-replica-3 small, in real time: its table
// names the hedge repeats, and its JSON records carry hedge_repeats (0 for
// stagger-elsewhere); the other scenarios' records do not.
func TestLabSlowReplica3(t *testing.T) {
	defer goleak.VerifyNone(t)
	args := []string{"-scenario", "slow-replica-3", "-duration", "1s", "-rate", "100", "-contenders", "stagger,stagger-elsewhere"}
	code, stdout, stderr := runLabArgs(t, append(args, "-full")...)
	if code != 0 {
		t.Fatalf("exit %d, stderr %q", code, stderr)
	}
	for _, want := range []string{"scenario slow-replica-3: three replicas", "HEDGE REPEATS", "P99.9 (ms)", "stagger_elsewhere over round_robin"} {
		if !strings.Contains(stdout, want) {
			t.Errorf("table lacks %q:\n%s", want, stdout)
		}
	}
	for _, rec := range labJSONRecords(t, args, 2) {
		if _, ok := rec["hedge_repeats"].(float64); !ok {
			t.Errorf("record of %v: hedge_repeats = %v, want a count", rec["contender"], rec["hedge_repeats"])
		}
		if rec["contender"] == "stagger-elsewhere" && (rec["hedge_repeats"] != 0.0 || rec["success_rate"] != 1.0) {
			t.Errorf("stagger-elsewhere: hedge_repeats %v, success %v; want 0 and 1", rec["hedge_repeats"], rec["success_rate"])
		}
	}
	if _, ok := labJSONRecords(t, tinyLab, 2)[0]["hedge_repeats"]; ok {
		t.Error("json record of unavailable has hedge_repeats")
	}
}

// TestLabMetastablePlot runs metastable short, in real time, with -plot:
// it writes DIR/metastable.svg, an SVG document whose texts name every
// contender's two series, the server's capacity and the trigger.
func TestLabMetastablePlot(t *testing.T) {
	defer goleak.VerifyNone(t)
	dir := t.TempDir()
	args := []string{"-scenario", "metastable", "-duration", "1200ms", "-outage-start", "200ms", "-outage-end", "400ms",
		"-clients", "2", "-capacity", "100", "-workers", "4", "-contenders", "stagger,grpc-middleware,no-retry", "-plot", dir}
	code, stdout, stderr := runLabArgs(t, append(args, "-full")...)
	if code != 0 {
		t.Fatalf("exit %d, stderr %q", code, stderr)
	}
	for _, want := range []string{"scenario metastable: capacity 100 attempts/s (4 workers of 40ms (4ms per rejection), queue 40), UNAVAILABLE in [200ms, 400ms) of 1.2s",
		"per-attempt timeout 200ms (grpc-go has none)", "no-retry ", "▔ = outage (the trigger)"} {
		if !strings.Contains(stdout, want) {
			t.Errorf("table lacks %q:\n%s", want, stdout)
		}
	}
	doc, err := os.ReadFile(filepath.Join(dir, "metastable.svg"))
	if err != nil {
		t.Fatalf("-plot: %v", err)
	}
	var texts []string
	d := xml.NewDecoder(bytes.NewReader(doc))
	inText, root := false, ""
	for {
		tok, err := d.Token()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("metastable.svg is not XML: %v", err)
		}
		switch tok := tok.(type) {
		case xml.StartElement:
			if root == "" {
				root = tok.Name.Local
			}
			inText = tok.Name.Local == "text"
		case xml.EndElement:
			inText = false
		case xml.CharData:
			if inText {
				texts = append(texts, string(tok))
			}
		}
	}
	if root != "svg" {
		t.Fatalf("metastable.svg's root element is %q, want svg", root)
	}
	all := strings.Join(texts, "\n")
	for _, want := range []string{"scenario metastable", "server capacity", "outage (UNAVAILABLE)",
		"stagger attempts", "stagger successes", "grpc-middleware attempts", "grpc-middleware successes",
		"no-retry attempts", "no-retry successes"} {
		if !strings.Contains(all, want) {
			t.Errorf("metastable.svg lacks the series %q; its texts:\n%s", want, all)
		}
	}
}

// TestLabTableFits: the default table of every scenario fits 100 columns,
// prose and picture included, and ends its table with a verdict; -full
// keeps every column. Synthetic reports with wide figures (a run of each
// scenario would take minutes).
func TestLabTableFits(t *testing.T) {
	for _, name := range labScenarioNames() {
		cfg := lab.Config{Scenario: lab.Scenario(name)}.Defaults()
		rep := &lab.Report{Config: cfg, Ceiling: 0.9, Wall: 42 * time.Second}
		for _, c := range []string{"stagger", "stagger-throttling", "grpc-middleware", "no-retry", "failsafe-go"} {
			load := make([]int, int(cfg.Duration/lab.Bin)+10)
			for i := range load {
				load[i] = 100 + i%900
			}
			rep.Results = append(rep.Results, lab.Result{Contender: c, AttemptsPerCall: 2.345, SuccessRate: 0.998, SuccessAfter: 1,
				Goodput: 1.23, Wasted: 0.5, P50: 1234 * time.Millisecond, P99: 12345 * time.Millisecond, P999: 12345 * time.Millisecond,
				FailP50: 12345 * time.Millisecond, FailP99: 12345 * time.Millisecond, FirstP99: 12345 * time.Millisecond,
				OutageLoad: 12.34, PeakAfter: 12.34, PeakInFlight: 12345, MeanInFlight: 1234.5, PeakWaiting: 12345, PeakGoroutines: 12345,
				BottomAttemptsPerCall: 27, MiddleAttemptsPerCall: 9, TopAttemptsPerCall: 3, OutageCalls: 12345,
				CriticalSuccess: 0.999, SheddableSuccess: 0.5, BadCalls: 12345, BadRepeats: 12345, HedgeRepeats: 12345, Load: load})
		}
		var compact, full bytes.Buffer
		if err := writeLabTable(&compact, rep, false); err != nil {
			t.Fatal(err)
		}
		if err := writeLabTable(&full, rep, true); err != nil {
			t.Fatal(err)
		}
		for i, line := range strings.Split(compact.String(), "\n") {
			if n := utf8.RuneCountInString(line); n > 100 {
				t.Errorf("%s: line %d is %d columns:\n%s", name, i+1, n, line)
			}
		}
		if !strings.Contains(compact.String(), "verdict: stagger") {
			t.Errorf("%s: no verdict:\n%s", name, compact.String())
		}
		if full.Len() <= compact.Len() {
			t.Errorf("%s: -full is no fuller than the default", name)
		}
	}
}

func TestLabMigrate(t *testing.T) {
	defer goleak.VerifyNone(t)
	// A short real-time run: 12 calls, the first 6 in the burst, which
	// no-retry fails at once and grpc-middleware retries for up to 1.5 s.
	args := []string{"-scenario", "migrate-burst", "-duration", "600ms", "-outage-end", "300ms", "-contenders", "grpc-middleware,no-retry"}
	code, stdout, stderr := runLabArgs(t, args...)
	if code != 0 {
		t.Fatalf("exit %d, stderr %q", code, stderr)
	}
	for _, want := range []string{"migrate-burst: one client per contender, 20 calls/s for 600ms over bufconn, no deadline",
		"BURST CALLS SERVED", "ITS LAST ENDED AFTER BURST", "WithMax(5), BackoffExponential(100ms)", "failures by reason"} {
		if !strings.Contains(stdout, want) {
			t.Errorf("output lacks %q:\n%s", want, stdout)
		}
	}
	code, stdout, stderr = runLabArgs(t, append(args, "-format", "json", "-contenders", "no-retry")...)
	if code != 0 {
		t.Fatalf("json: exit %d, stderr %q", code, stderr)
	}
	var reps []lab.MigrateReport
	if err := json.Unmarshal([]byte(stdout), &reps); err != nil {
		t.Fatalf("output is not JSON: %v\n%s", err, stdout)
	}
	if len(reps) != 1 || len(reps[0].Results) != 1 {
		t.Fatalf("got %d reports; want one with one result:\n%s", len(reps), stdout)
	}
	if r := reps[0].Results[0]; r.Contender != "no-retry" || r.Calls != 12 || r.TriggerCalls != 6 || r.TriggerServed != 0 {
		t.Errorf("no-retry: %d calls, %d in the burst, %d of them served; want 12, 6, 0", r.Calls, r.TriggerCalls, r.TriggerServed)
	}
}

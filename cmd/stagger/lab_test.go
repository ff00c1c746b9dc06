package main

import (
	"bytes"
	"context"
	"encoding/csv"
	"encoding/json"
	"strings"
	"testing"

	"go.uber.org/goleak"
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
	want := "scenario,contender,calls,attempts_per_call,success_rate,outage_load,peak_after,p50_ms,p99_ms,p999_ms"
	if len(rows) != 3 || strings.Join(rows[0], ",") != want {
		t.Fatalf("got %d rows, header %v; want 3 rows under %s", len(rows), rows[0], want)
	}
	for i, name := range []string{"stagger", "naive"} {
		if rows[i+1][0] != "unavailable" || rows[i+1][1] != name || rows[i+1][2] != "24" {
			t.Errorf("row %d = %v, want unavailable,%s,24 (40 calls/s, 80%% of capacity, for 0.6 s)", i+1, rows[i+1], name)
		}
	}
}

func TestLabTableAndJSON(t *testing.T) {
	defer goleak.VerifyNone(t)
	code, stdout, stderr := runLabArgs(t, tinyLab...)
	if code != 0 {
		t.Fatalf("exit %d, stderr %q", code, stderr)
	}
	for _, want := range []string{"scenario unavailable: capacity 50 attempts/s", "CONTENDER", "ATTEMPTS/CALL", "stagger │", "naive   │", "▔ = outage"} {
		if !strings.Contains(stdout, want) {
			t.Errorf("table lacks %q:\n%s", want, stdout)
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
}

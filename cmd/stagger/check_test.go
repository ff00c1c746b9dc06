package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stagger-go/stagger/interceptor"
	"github.com/stagger-go/stagger/policy"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/types/descriptorpb"
	"google.golang.org/protobuf/types/known/durationpb"

	// Links the test service's descriptors, whose idempotency_level
	// options `check` reads from the protobuf registry.
	testingv1 "github.com/stagger-go/stagger/proto/stagger/testing/v1"
)

const checkExamples = "../../examples/policies/"

func checkRun(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errOut bytes.Buffer
	code = run(append([]string{"check"}, args...), &out, &errOut)
	return code, out.String(), errOut.String()
}

func TestCheckGoodExamples(t *testing.T) {
	tests := []struct {
		file      string
		wantLines []string
	}{
		{"retry.json", []string{
			"retry.json: valid",
			"methodConfig[0]: /shop.v1.Cart/, /shop.v1.Pay/Get",
			"  retry: maxAttempts 4 (3 retries) on RESOURCE_EXHAUSTED, UNAVAILABLE",
			"  backoff: initial 100ms, max 5s, multiplier 2, jitter FULL",
			"        1   0s    50ms   99ms  100ms",
			"        3   0s   200ms  396ms  400ms",
			"  worst case: 700ms (pauses only;",
			"methodConfig[1]: {} (default)",
			"        2  320ms   400ms  478.4ms  480ms",
			"  worst-case load amplification: 1.10x",
		}},
		{"a6-throttle.json", []string{
			"        4  320ms   400ms  478.4ms  480ms",
			"  worst case: 900ms",
			"budget: throttle (retryThrottling, gRFC A6): maxTokens 100, tokenRatio 0.1",
			"about 50 retries go out",
			`loadBalancingConfig: policy "round_robin" is grpc-go's to apply; stagger does not apply it`,
		}},
		{"hedging.yaml", []string{
			"  hedging: maxAttempts 3, a hedge every 50ms, non-fatal codes: DEADLINE_EXCEEDED, UNAVAILABLE",
			"pays for 20 retries",
		}},
		{"decorrelated.yaml", []string{
			"        1  100ms      200ms      298ms  300ms",
			"        2  100ms",
			"900ms",
			"  worst case: 5.2s (pauses plus every attempt but the last cut off by perAttemptRecvTimeout",
			"  perAttemptRecvTimeout: 500ms: an attempt with no response header or message by then is cut off and retried when a retry can go (attempts left",
			"decorrelated jitter bunches at maxBackoff (1s)",
		}},
	}
	for _, tt := range tests {
		t.Run(tt.file, func(t *testing.T) {
			code, out, errOut := checkRun(t, checkExamples+tt.file)
			if code != 0 {
				t.Fatalf("exit %d, stderr:\n%s", code, errOut)
			}
			for _, l := range tt.wantLines {
				if !strings.Contains(out, l) {
					t.Errorf("output lacks %q:\n%s", l, out)
				}
			}
		})
	}
}

func TestCheckBadExamples(t *testing.T) {
	tests := []struct {
		file string
		want []string // stderr, one error per line
	}{
		{"bad-names.json", []string{
			`FILE:3:45: methodConfig[0].name[1].method: a method needs a service, got "Get"`,
			`FILE:4:15: methodConfig[1].name[0]: duplicate name, already given in methodConfig[0], got /shop.v1.Cart/`,
		}},
		{"bad-retry.yaml", []string{
			`FILE:4:7: methodConfig[0].retryPolicy.maxAttempts: must be at least 2 (it counts the first attempt: 2 means 1 retry), got 1`,
			`FILE:5:7: methodConfig[0].retryPolicy.initialBackoff: must be > 0, got "0s"`,
			`FILE:6:7: methodConfig[0].retryPolicy.maxBackoff: must be a duration such as "0.1s" (proto3 JSON) or "100ms" (Go), got 5`,
			`FILE:9:7: methodConfig[0].retryPolicy.jitter: must be one of PROPORTIONAL, FULL, EQUAL, DECORRELATED, NONE, got "FUL"`,
			`FILE:8:7: methodConfig[0].retryPolicy.retryableStatusCodes: must not be empty (unless perAttemptRecvTimeout is set), got []`,
		}},
		{"bad-retry-and-hedging.json", []string{
			`FILE:2:20: methodConfig[0]: a method has retryPolicy or hedgingPolicy, not both (gRFC A6), got both`,
		}},
		{"bad-budget.json", []string{
			`FILE:4:3: retryBudget: at most one budget per file: retryThrottling or retryBudget, not both, got both`,
			`FILE:3:23: retryThrottling.maxTokens: must be in (0, 1000], got 1001`,
			`FILE:3:42: retryThrottling.tokenRatio: must be at least 0.001 (gRFC A6 keeps 3 decimals), got 0.0001`,
		}},
	}
	for _, tt := range tests {
		t.Run(tt.file, func(t *testing.T) {
			code, out, errOut := checkRun(t, checkExamples+tt.file)
			if code != 1 {
				t.Fatalf("exit %d, want 1", code)
			}
			want := strings.ReplaceAll(strings.Join(tt.want, "\n"), "FILE:", checkExamples+tt.file+":")
			if got := strings.TrimRight(errOut, "\n"); got != want {
				t.Errorf("stderr:\n%s\nwant:\n%s", got, want)
			}
			if !strings.Contains(out, "invalid") {
				t.Errorf("stdout %q does not say invalid", out)
			}
		})
	}
}

// TestCheckEveryExample keeps the examples folder honest: each file is
// either good (exit 0) or named bad-* (exit 1).
func TestCheckEveryExample(t *testing.T) {
	files, err := filepath.Glob(checkExamples + "*")
	if err != nil || len(files) < 6 {
		t.Fatalf("examples: %v, %v", files, err)
	}
	for _, f := range files {
		want := 0
		if strings.HasPrefix(filepath.Base(f), "bad-") {
			want = 1
		}
		if code, _, errOut := checkRun(t, f); code != want {
			t.Errorf("%s: exit %d, want %d: %s", f, code, want, errOut)
		}
	}
}

func TestCheckJSON(t *testing.T) {
	code, out, _ := checkRun(t, checkExamples+"retry.json", "-format", "json")
	if code != 0 {
		t.Fatalf("exit %d", code)
	}
	var rep checkReport
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("not JSON: %v\n%s", err, out)
	}
	if !rep.Valid || len(rep.Methods) != 2 || rep.Methods[0].MaxAttempts != 4 || len(rep.Methods[0].Pauses) != 3 ||
		rep.Methods[0].Pauses[2].Max != "400ms" || rep.Budget == nil || rep.Budget.Amplification != 1.1 {
		t.Errorf("report = %+v", rep)
	}
	code, out, _ = checkRun(t, "-format", "json", checkExamples+"bad-retry-and-hedging.json")
	if code != 1 || !strings.Contains(out, `"valid": false`) || !strings.Contains(out, "not both") {
		t.Errorf("bad file as JSON: exit %d\n%s", code, out)
	}
}

func TestCheckWarnings(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "p.json")
	doc := `{"methodConfg":[],"methodConfig":[
		{"name":[{"service":"a.S","method":"Get"}],"hedgingPolicy":{"maxAttempts":3,"hedgingDelay":"0.1s"}},
		{"name":[{"service":"b.S"}],"retryPolicy":{"maxAttempts":9,"initialBackoff":"1s","maxBackoff":"2s","backoffMultiplier":2,"retryableStatusCodes":[14],"perAttemptRecvTimeout":"1s"}}]}`
	if err := os.WriteFile(file, []byte(doc), 0o600); err != nil {
		t.Fatal(err)
	}
	code, out, _ := checkRun(t, file)
	if code != 0 {
		t.Fatalf("exit %d", code)
	}
	for _, want := range []string{
		`methodConfg: unknown key, ignored (did you mean "methodConfig"?)`,
		"methodConfig[1].retryPolicy.maxAttempts: 9 is above the cap, so 5 is used",
		"methodConfig[0].hedgingPolicy: needs an idempotent method, and /a.S/Get is not marked idempotent",
		"methodConfig[1].retryPolicy.perAttemptRecvTimeout: needs an idempotent method, and /b.S/ is not marked idempotent",
		"methodConfig[0].hedgingPolicy: the load-balancing policy is pick_first, so every hedge goes to the same backend",
		"budget: default, token bucket (retryBudget.tokenBucket) (the file declares none: stagger.DialOptions installs budget.DefaultBackends()",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	// -strict turns the unknown key into an error; flags may follow the file.
	code, _, errOut := checkRun(t, file, "-strict")
	if code != 1 || !strings.Contains(errOut, `methodConfg: must be a known key (Strict; did you mean "methodConfig"?), got "methodConfg"`) {
		t.Errorf("-strict: exit %d, stderr %q", code, errOut)
	}
	code, out, _ = checkRun(t, "-max-attempts-cap", "9", file)
	if code != 0 || !strings.Contains(out, "maxAttempts 9 (8 retries)") {
		t.Errorf("-max-attempts-cap 9: exit %d\n%s", code, out)
	}
}

func TestCheckUsage(t *testing.T) {
	tests := []struct {
		name string
		args []string
		code int
	}{
		{"no file", nil, 2},
		{"two files", []string{"a.json", "b.json"}, 2},
		{"bad format", []string{"-format", "xml", checkExamples + "retry.json"}, 2},
		{"unknown flag", []string{"-nope", "a.json"}, 2},
		{"missing file", []string{filepath.Join(t.TempDir(), "missing.json")}, 1},
		{"help", []string{"-h"}, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if code, _, _ := checkRun(t, tt.args...); code != tt.code {
				t.Errorf("exit %d, want %d", code, tt.code)
			}
		})
	}
}

func TestCheckIdempotencyFromProtoRegistry(t *testing.T) {
	file := filepath.Join(t.TempDir(), "p.yaml")
	doc := "loadBalancingConfig: [{round_robin: {}}]\nmethodConfig:\n" +
		"  - name: [{service: stagger.testing.v1.TestService, method: Get}, {service: stagger.testing.v1.TestService, method: Put}]\n" +
		"    hedgingPolicy: {maxAttempts: 2}\n" +
		"  - name: [{service: stagger.testing.v1.TestService, method: Write}]\n" +
		"    hedgingPolicy: {maxAttempts: 2}\n"
	if err := os.WriteFile(file, []byte(doc), 0o600); err != nil {
		t.Fatal(err)
	}
	code, out, _ := checkRun(t, file)
	if code != 0 {
		t.Fatalf("exit %d", code)
	}
	if strings.Contains(out, "methodConfig[0].hedgingPolicy: needs an idempotent method") {
		t.Errorf("Get (NO_SIDE_EFFECTS) and Put (IDEMPOTENT) are idempotent by their proto options:\n%s", out)
	}
	if !strings.Contains(out, "methodConfig[1].hedgingPolicy: needs an idempotent method, and /stagger.testing.v1.TestService/Write is not marked") {
		t.Errorf("Write has no idempotency option, want a warning:\n%s", out)
	}
	if strings.Contains(out, "pick_first") {
		t.Errorf("round_robin is configured, want no pick_first warning:\n%s", out)
	}
}

// Hedging is spread over backends only by stagger_elsewhere: check says so
// for round_robin and pick_first, and is quiet with the policy.
func TestCheckHedgingBackendSpread(t *testing.T) {
	hedged := `"methodConfig": [{"name": [{"service": "stagger.testing.v1.TestService", "method": "Get"}], "hedgingPolicy": {"maxAttempts": 3}}]`
	for _, tc := range []struct {
		lb, want string
	}{
		{"", "methodConfig[0].hedgingPolicy: the load-balancing policy is pick_first, so every hedge goes to the same backend; use stagger_elsewhere"},
		{`"loadBalancingConfig": [{"round_robin": {}}],`, "methodConfig[0].hedgingPolicy: the load-balancing policy round_robin may send two hedges of one call to the same backend; stagger_elsewhere over it sends them to distinct ones"},
		{`"loadBalancingConfig": [{"stagger_elsewhere": {"childPolicy": [{"round_robin": {}}]}}],`, ""},
	} {
		file := filepath.Join(t.TempDir(), "p.json")
		if err := os.WriteFile(file, []byte("{"+tc.lb+hedged+"}"), 0o600); err != nil {
			t.Fatal(err)
		}
		code, out, errOut := checkRun(t, file)
		if code != 0 {
			t.Fatalf("%s: exit %d: %s", tc.lb, code, errOut)
		}
		if tc.want != "" && !strings.Contains(out, tc.want) {
			t.Errorf("%s: output lacks %q:\n%s", tc.lb, tc.want, out)
		}
		if tc.want == "" && strings.Contains(out, "same backend") {
			t.Errorf("%s: want no warning about backends:\n%s", tc.lb, out)
		}
	}
}

func TestCheckExplainsAmbiguity(t *testing.T) {
	file := filepath.Join(t.TempDir(), "p.yaml")
	retry := "    retryPolicy: {maxAttempts: 3, initialBackoff: 0.1s, maxBackoff: 1s, backoffMultiplier: 2, retryableStatusCodes: [UNAVAILABLE]}\n"
	doc := "methodConfig:\n" +
		"  - name: [{service: stagger.testing.v1.TestService, method: Put}]\n" + retry +
		"  - name: [{service: stagger.testing.v1.TestService, method: Write}]\n" + retry
	if err := os.WriteFile(file, []byte(doc), 0o600); err != nil {
		t.Fatal(err)
	}
	code, out, _ := checkRun(t, file)
	if code != 0 {
		t.Fatalf("exit %d", code)
	}
	put, write, ok := strings.Cut(out, "methodConfig[1]")
	if !ok {
		t.Fatalf("no methodConfig[1] in:\n%s", out)
	}
	if !strings.Contains(put, "after a reset (no status from the server): retried: the method is idempotent") {
		t.Errorf("Put (IDEMPOTENT) is retried after a reset:\n%s", put)
	}
	if !strings.Contains(write, "after a reset (no status from the server): not retried (reason ambiguous)") {
		t.Errorf("Write (not marked) is not retried after a reset:\n%s", write)
	}
}

func TestCheckExplainsDeferral(t *testing.T) {
	for _, tt := range []struct {
		budget, want string
	}{
		{`"retryBudget": {"tokenBucket": {}}`, "refused retries: a retry the budget refuses waits instead of failing (at most 1024 calls at once"},
		{`"retryBudget": {"tokenBucket": {}, "defer": {"maxWaiting": 7}}`, "(at most 7 calls at once"},
		{`"retryBudget": {"tokenBucket": {}, "defer": {"maxWaiting": 7}}`, "(at most 7 calls at once per backend, all its methods together, and 4096 across"},
		{`"retryBudget": {"tokenBucket": {}}`, "per backend: each backend (a target: the replicas behind one share it) has its own tokens, and each of its methods its own Gate over them"},
		{`"retryBudget": {"tokenBucket": {}}`, "a key nobody called for 5m0s is forgotten within a minute more"},
		{`"retryBudget": {"ratio": {}, "defer": false}`, "refused retries: a retry the budget refuses ends its call at once (reason budget)\n"},
		{`"retryThrottling": {"maxTokens": 10, "tokenRatio": 0.1}`, `as gRFC A6 says; "defer": true makes refused retries wait`},
	} {
		file := filepath.Join(t.TempDir(), "p.json")
		// A method, so that the file configures something.
		if err := os.WriteFile(file, []byte(`{"methodConfig": [{"name": [{}], "timeout": "1s"}], `+tt.budget+`}`), 0o600); err != nil {
			t.Fatal(err)
		}
		code, out, _ := checkRun(t, file)
		if code != 0 || !strings.Contains(out, tt.want) {
			t.Errorf("%s: exit %d, output:\n%s\nwant it to contain %q", tt.budget, code, out, tt.want)
		}
	}
}

func TestCheckExplainsBreaker(t *testing.T) {
	file := filepath.Join(t.TempDir(), "p.json")
	doc := `{"circuitBreaker": {"breakDuration": "2s", "scope": "TARGET"}, "adaptiveThrottling": {"k": 3},
	  "methodConfig": [{"name": [{"service": "a.A"}], "circuitBreaker": false}, {"name": [{"service": "b.B"}]}]}`
	if err := os.WriteFile(file, []byte(doc), 0o600); err != nil {
		t.Fatal(err)
	}
	code, out, _ := checkRun(t, file)
	for _, want := range []string{
		"breaker: circuitBreaker: failureRatio 0.5, minimumThroughput 20, consecutiveFailures 5, samplingWindow 10s, breakDuration 2s, probeEvery 10, maxBreakDuration 2s, scope TARGET; adaptiveThrottling: k 3, window 10s",
		"one breaker per target (every method of a connection target together)",
		"first attempts fail at once with UNAVAILABLE naming the breaker",
		"(requests - 3 x accepts) / (requests + 1)",
		// a.A keeps throttling only; b.B says nothing of its own.
		"  breaker: adaptiveThrottling: k 3, window 10s: first attempts",
	} {
		if code != 0 || !strings.Contains(out, want) {
			t.Errorf("exit %d, output:\n%s\nwant it to contain %q", code, out, want)
		}
	}
	if strings.Count(out, "  breaker: ") != 1 {
		t.Errorf("only methodConfig[0] differs from the file's breaker:\n%s", out)
	}
	code, _, errOut := checkRun(t, writeTemp(t, `{"circuitBreaker": {"failureRatio": 2, "samplingWindow": "0s"}}`))
	if code == 0 || !strings.Contains(errOut, "circuitBreaker.failureRatio: must be in (0, 1], got 2") || !strings.Contains(errOut, "circuitBreaker.samplingWindow: must be in [100ms, 24h], got 0s") {
		t.Errorf("exit %d, stderr:\n%s", code, errOut)
	}
}

func writeTemp(t *testing.T, doc string) string {
	t.Helper()
	file := filepath.Join(t.TempDir(), "p.json")
	if err := os.WriteFile(file, []byte(doc), 0o600); err != nil {
		t.Fatal(err)
	}
	return file
}

func TestCheckExplainsChains(t *testing.T) {
	code, out, _ := checkRun(t, writeTemp(t, `{"methodConfig": [
	  {"name": [{"service": "a.A"}], "retryPolicy": {"maxAttempts": 4, "initialBackoff": "0.1s", "maxBackoff": "1s", "backoffMultiplier": 2, "retryableStatusCodes": ["UNAVAILABLE"]}},
	  {"name": [{"service": "b.B"}], "idempotent": true, "hedgingPolicy": {"maxAttempts": 3, "hedgingDelay": "0.05s"}}]}`))
	for _, want := range []string{
		"  in a call chain: if the callers of this service retry too, attempts multiply down the chain: a dependency that is down sees up to 16 per user call at 2 layers, 64 at 3;",
		"so the dependency sees this layer's 4 only",
		"hedges multiply down the chain: a dependency that is down sees up to 9 per user call at 2 layers, 27 at 3;",
		"server.WithRetryAtOneLayer",
	} {
		if code != 0 || !strings.Contains(out, want) {
			t.Errorf("exit %d, output:\n%s\nwant it to contain %q", code, out, want)
		}
	}
	// At the bounded cap the figures are written out, not "1e+06".
	code, out, _ = checkRun(t, "-max-attempts-cap", "1000", writeTemp(t, `{"methodConfig": [
	  {"name": [{"service": "a.A"}], "retryPolicy": {"maxAttempts": 1000, "initialBackoff": "0.1s", "maxBackoff": "1s", "backoffMultiplier": 2, "retryableStatusCodes": ["UNAVAILABLE"]}}]}`))
	if want := "sees up to 1,000,000 per user call at 2 layers, 1,000,000,000 at 3;"; code != 0 || !strings.Contains(out, want) {
		t.Errorf("exit %d, output:\n%s\nwant it to contain %q", code, out, want)
	}
}

// TestCheckPauseTableBounded: the table and the worst case come from a
// bounded amount of work whatever maxAttempts is (the table once enumerated
// every retry, and decorrelated jitter took 15 s at 1000 attempts), and the
// worst case equals the sum of every retry's longest pause.
func TestCheckPauseTableBounded(t *testing.T) {
	uMax := math.Nextafter(1, 0)
	for _, j := range []policy.Jitter{policy.JitterProportional, policy.JitterFull, policy.JitterEqual, policy.JitterNone, policy.JitterDecorrelated} {
		for _, b := range []policy.Backoff{
			{Initial: time.Millisecond, Max: time.Hour, Multiplier: 1.01},
			{Initial: 100 * time.Millisecond, Max: 5 * time.Second, Multiplier: 2},
			{Initial: time.Second, Max: math.MaxInt64, Multiplier: 1.5},
			{Initial: time.Second, Max: time.Hour, Multiplier: 0.5},
			{Initial: time.Second, Max: time.Millisecond, Multiplier: 1},
		} {
			b.Jitter = j
			for _, retries := range []int{1, 4, 999, policy.MaxAttemptsCapLimit - 1} {
				rows, worst := pauseTable(b, retries)
				if len(rows) > pauseRowsShown+2 {
					t.Errorf("%+v, %d retries: %d rows, want at most %d", b, retries, len(rows), pauseRowsShown+2)
				}
				if n := rows[len(rows)-1].last; n != retries {
					t.Errorf("%+v, %d retries: the table ends at retry %d", b, retries, n)
				}
				// The sum, the slow way.
				var want time.Duration
				prev := b.Initial
				for r := 1; r <= retries; r++ {
					prev = b.Delay(r, prev, uMax)
					want = satAdd(want, prev)
				}
				if diff := math.Abs(float64(worst - want)); diff > 1e-9*float64(want)+float64(retries) {
					t.Errorf("%+v, %d retries: worst case %v, want %v", b, retries, worst, want)
				}
			}
		}
	}
	// Bounded work: a table for the largest cap allocates no more than one
	// just past the rows shown one by one.
	for _, j := range []policy.Jitter{policy.JitterProportional, policy.JitterDecorrelated} {
		b := policy.Backoff{Initial: time.Millisecond, Max: time.Hour, Multiplier: 1.01, Jitter: j}
		small := testing.AllocsPerRun(3, func() { pauseTable(b, pauseRowsShown+1) })
		large := testing.AllocsPerRun(3, func() { pauseTable(b, policy.MaxAttemptsCapLimit-1) })
		if large > small {
			t.Errorf("jitter %v: %v allocations for %d retries, %v for %d: the work grows with the retries", j, large, policy.MaxAttemptsCapLimit-1, small, pauseRowsShown+1)
		}
	}
}

func BenchmarkPauseTable(b *testing.B) {
	for _, retries := range []int{4, policy.MaxAttemptsCapLimit - 1} {
		for _, j := range []policy.Jitter{policy.JitterProportional, policy.JitterDecorrelated} {
			bo := policy.Backoff{Initial: time.Millisecond, Max: time.Hour, Multiplier: 1.01, Jitter: j}
			b.Run(fmt.Sprintf("%v/retries=%d", j, retries), func(b *testing.B) {
				b.ReportAllocs()
				for i := 0; i < b.N; i++ {
					pauseTable(bo, retries)
				}
			})
		}
	}
}

// TestCheckSaturates: figures past the largest Duration say so instead of
// wrapping around ("-4ns" for a hedging delay of 10,000 years).
func TestCheckSaturates(t *testing.T) {
	code, out, errOut := checkRun(t, "-max-attempts-cap", "1000", writeTemp(t, `{"methodConfig": [
	  {"name": [{"service": "a.A"}], "idempotent": true, "hedgingPolicy": {"maxAttempts": 1000, "hedgingDelay": "315576000000s"}},
	  {"name": [{"service": "b.B"}], "idempotent": true, "retryPolicy": {"maxAttempts": 1000, "initialBackoff": "300000000s", "maxBackoff": "315576000000s", "backoffMultiplier": 2,
	    "retryableStatusCodes": ["UNAVAILABLE"], "perAttemptRecvTimeout": "300000000s"}}]}`))
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	if got := strings.Count(out, "worst case: more than 292 years"); got != 2 {
		t.Errorf("want 2 saturated worst cases, got %d:\n%s", got, out)
	}
	if strings.Contains(out, "-") && strings.Contains(out, "worst case: -") {
		t.Errorf("negative worst case:\n%s", out)
	}
}

// TestCheckCodeNames: every code prints by the name a policy file gives it
// (gRFC A6), which the parser reads back as the same code: OK, not O_K.
func TestCheckCodeNames(t *testing.T) {
	var names []string
	for c := codes.Code(0); c <= 16; c++ {
		names = append(names, `"`+policy.CodeName(c)+`"`)
	}
	code, out, errOut := checkRun(t, writeTemp(t, `{"methodConfig": [{"name": [{"service": "a.A"}], "retryPolicy": {"maxAttempts": 2, "initialBackoff": "1s", "maxBackoff": "1s", "backoffMultiplier": 1,
	  "retryableStatusCodes": [`+strings.Join(names, ",")+`]}}]}`))
	want := "on OK, CANCELLED, UNKNOWN, INVALID_ARGUMENT, DEADLINE_EXCEEDED, NOT_FOUND, ALREADY_EXISTS, PERMISSION_DENIED, RESOURCE_EXHAUSTED, FAILED_PRECONDITION, ABORTED, OUT_OF_RANGE, UNIMPLEMENTED, INTERNAL, UNAVAILABLE, DATA_LOSS, UNAUTHENTICATED\n"
	if code != 0 || !strings.Contains(out, want) {
		t.Errorf("exit %d, stderr %s, output:\n%s\nwant %q", code, errOut, out, want)
	}
}

// TestCheckMaxAttemptsCapBounded: a cap above MaxAttemptsCapLimit is
// refused at once, not used to size anything (2e9 ran out of memory).
func TestCheckMaxAttemptsCapBounded(t *testing.T) {
	for _, n := range []string{"2000000000", "1001"} {
		code, _, errOut := checkRun(t, "-max-attempts-cap", n, checkExamples+"retry.json")
		want := "stagger check: -max-attempts-cap: policy: WithMaxAttemptsCap: must be at most 1000 (MaxAttemptsCapLimit), got " + n
		if code != 2 || !strings.Contains(errOut, want) {
			t.Errorf("-max-attempts-cap %s: exit %d, stderr %q, want exit 2 and %q", n, code, errOut, want)
		}
	}
	if code, _, errOut := checkRun(t, "-max-attempts-cap", "1000", checkExamples+"retry.json"); code != 0 {
		t.Errorf("-max-attempts-cap 1000: exit %d: %s", code, errOut)
	}
}

// writeDescriptorSet writes the test service's descriptor set, imports
// included, as `buf build -o FILE` does, and returns its path.
func writeDescriptorSet(t *testing.T) string {
	t.Helper()
	set := &descriptorpb.FileDescriptorSet{File: []*descriptorpb.FileDescriptorProto{
		protodesc.ToFileDescriptorProto(durationpb.File_google_protobuf_duration_proto),
		protodesc.ToFileDescriptorProto(testingv1.File_stagger_testing_v1_test_proto),
	}}
	data, err := proto.Marshal(set)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "protos.binpb")
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestCheckDescriptorSet: -descriptor-set checks names against the protos
// it holds and reads idempotency from them; without it, check says names
// were not checked and still flags a service named without its package.
func TestCheckDescriptorSet(t *testing.T) {
	set := writeDescriptorSet(t)
	file := writeTemp(t, `{"loadBalancingConfig": [{"round_robin": {}}], "methodConfig": [
	  {"name": [{"service": "TestService"}], "timeout": "1s"},
	  {"name": [{"service": "stagger.testing.v1.TestService", "method": "get"}], "timeout": "1s"},
	  {"name": [{"service": "stagger.testing.v1.TestService", "method": "Get"}], "hedgingPolicy": {"maxAttempts": 2}}]}`)
	code, _, errOut := checkRun(t, "-descriptor-set", set, file)
	// A name the protos given do not declare is an error: the user gave
	// them to check the names.
	for _, want := range []string{
		file + `:2:15: methodConfig[0].name[0].service: "TestService" is not a service of the protos given (` + set + `); did you mean "stagger.testing.v1.TestService"? (a service is named with its proto package)`,
		file + `:3:60: methodConfig[1].name[0].method: "get" is not a method of stagger.testing.v1.TestService in the protos given (` + set + `); did you mean "Get"?`,
	} {
		if code != 1 || !strings.Contains(errOut, want) {
			t.Errorf("exit %d (want 1), stderr lacks %q:\n%s", code, want, errOut)
		}
	}
	fixed := writeTemp(t, strings.NewReplacer(`"TestService"`, `"stagger.testing.v1.TestService"`, `"get"`, `"Put"`).Replace(readFile(t, file)))
	code, out, errOut := checkRun(t, "-descriptor-set", set, fixed)
	if want := "service and method names checked against the 1 services of " + set; code != 0 || !strings.Contains(out, want) {
		t.Errorf("names fixed: exit %d, output lacks %q:\n%s%s", code, want, out, errOut)
	}
	if strings.Contains(out, "needs an idempotent method") {
		t.Errorf("Get is NO_SIDE_EFFECTS in the descriptor set:\n%s", out)
	}
	code, out, _ = checkRun(t, file)
	for _, want := range []string{
		"service and method names not checked against proto files (give the protos: -proto FILE.proto (with -proto-path DIR for its imports), or -descriptor-set FILE (written by `buf build -o FILE` or `protoc --include_imports --descriptor_set_out=FILE`))",
		`methodConfig[0].name[0].service: "TestService" has no package, but gRPC names a service with its proto package ("pkg.v1.TestService")`,
	} {
		if code != 0 || !strings.Contains(out, want) {
			t.Errorf("without -descriptor-set: exit %d, output lacks %q:\n%s", code, want, out)
		}
	}
	if strings.Contains(out, `"get" is not a method`) {
		t.Errorf("without -descriptor-set, names are not checked:\n%s", out)
	}
	for _, bad := range []string{file, filepath.Join(t.TempDir(), "missing.binpb")} {
		if code, _, errOut := checkRun(t, "-descriptor-set", bad, file); code != 2 || !strings.Contains(errOut, "stagger check: -descriptor-set: ") {
			t.Errorf("-descriptor-set %s: exit %d, stderr %q", bad, code, errOut)
		}
	}
}

// TestCheckWarningsBesideErrors: an invalid file's warnings are shown with
// its errors (they were dropped), since a warning often explains an error.
func TestCheckWarningsBesideErrors(t *testing.T) {
	file := writeTemp(t, `{"methodConfig": [{"name": [{"service": "a.A"}], "retryPolicy": {"maxAtempts": 3, "initialBackoff": "1s", "maxBackoff": "1s", "backoffMultiplier": 2, "retryableStatusCodes": ["UNAVAILABLE"]}}]}`)
	code, out, errOut := checkRun(t, file)
	if code != 1 {
		t.Fatalf("exit %d", code)
	}
	// The error names the misspelt key: its warning would say it twice.
	if strings.Contains(out, "maxAtempts") {
		t.Errorf("stdout repeats the misspelt key the error names:\n%s", out)
	}
	if want := `methodConfig[0].retryPolicy.maxAttempts: is required (the key "maxAtempts" is unknown: did you mean "maxAttempts"?), got nothing`; !strings.Contains(errOut, want) {
		t.Errorf("stderr lacks %q:\n%s", want, errOut)
	}
	code, out, _ = checkRun(t, "-format", "json", file)
	var rep checkReport
	if err := json.Unmarshal([]byte(out), &rep); err != nil || code != 1 || rep.Valid || len(rep.Warnings) != 0 || len(rep.Errors) != 1 {
		t.Errorf("JSON: exit %d, %v, %+v", code, err, rep)
	}
}

// TestCheckConfiguresNothing: a file that configures no method is valid to
// gRPC, and policy.WatchFile swaps it in, but check fails it (exit 1, the
// error on stderr), naming the key likely meant, once: most often it is a
// typo, and a CI step relies on the exit code (it exited 0). A file that
// says "disabled": true is the switch: check passes it and says so, with
// STAGGER_DISABLE set or not; so does a file with only a breaker, which
// configures every call.
func TestCheckConfiguresNothing(t *testing.T) {
	const retry = `"retryPolicy": {"maxAttempts": 3, "initialBackoff": "0.1s", "maxBackoff": "1s", "backoffMultiplier": 2, "retryableStatusCodes": ["UNAVAILABLE"]}`
	const none = `configures no method: there is no methodConfig entry with a name (and no circuitBreaker or adaptiveThrottling), so every call would run as without a file`
	const off = `; a file meant to turn stagger off says "disabled": true`
	tests := []struct {
		name, doc string
		code      int
		want      string
	}{
		{"misspelt methodConfig", `{"methodConfigs": [{"name": [{"service": "stagger.testing.v1.TestService"}], ` + retry + `}]}`, 1,
			none + ` (the top-level key "methodConfigs" is unknown: did you mean "methodConfig"?)` + off},
		{"empty", `{}`, 1, none + off},
		{"budget only", `{"retryBudget": {"ratio": {"percent": 10}}}`, 1, none + off},
		{"no entry", `{"methodConfig": []}`, 1, none + off},
		{"switch off, said false", `{"disabled": false}`, 1, none + off},
		{"switched off", `{"disabled": true, "methodConfig": []}`, 0, `"disabled": true turns stagger off`},
		{"switch only", `{"disabled": true}`, 0, `"disabled": true turns stagger off`},
		{"breaker only", `{"circuitBreaker": {"failureRatio": 0.5}}`, 0, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			file := writeTemp(t, tt.doc)
			code, out, errOut := checkRun(t, file)
			where := out
			if tt.code != 0 {
				where, tt.want = errOut, file+": "+tt.want+"\n"
			}
			if code != tt.code || !strings.Contains(where, tt.want) {
				t.Fatalf("exit %d, stdout:\n%s\nstderr:\n%s\nwant %d and\n%s", code, out, errOut, tt.code, tt.want)
			}
			if tt.code == 0 && strings.Contains(out+errOut, "configures no method") {
				t.Errorf("the file is said to configure nothing:\n%s%s", out, errOut)
			}
			if n := strings.Count(out+errOut, "methodConfigs"); tt.name == "misspelt methodConfig" && n != 1 {
				t.Errorf("the misspelt key is reported %d times, want once:\n%s%s", n, out, errOut)
			}
			code, out, _ = checkRun(t, "-format", "json", file)
			var rep checkReport
			if err := json.Unmarshal([]byte(out), &rep); err != nil || code != tt.code || rep.Valid != (tt.code == 0) {
				t.Errorf("JSON: exit %d, %v, %+v", code, err, rep)
			}
		})
	}
	t.Run("switch only, stagger off in the process", func(t *testing.T) {
		defer interceptor.SetDisabled(interceptor.Disabled())
		interceptor.SetDisabled(true)
		if code, out, errOut := checkRun(t, writeTemp(t, `{"disabled": true}`)); code != 0 {
			t.Errorf("exit %d:\n%s%s", code, out, errOut)
		}
	})
}

// TestCheckStrictNames: a service the protos given do not declare is the
// same error with -strict as without.
func TestCheckStrictNames(t *testing.T) {
	file := writeTemp(t, `{"methodConfig": [{"name": [{"service": "stagger.testng.v1.TestService"}], "timeout": "1s"}]}`)
	set := writeDescriptorSet(t)
	for _, strict := range [][]string{{"-strict"}, nil} {
		code, _, errOut := checkRun(t, append(strict, "-descriptor-set", set, file)...)
		if want := file + `:1:30: methodConfig[0].name[0].service: "stagger.testng.v1.TestService" is not a service of the protos given (` + set + `); did you mean "stagger.testing.v1.TestService"?` + "\n"; code != 1 || errOut != want {
			t.Errorf("%v -descriptor-set: exit %d, stderr:\n%s\nwant 1 and\n%s", strict, code, errOut, want)
		}
	}
	if code, out, _ := checkRun(t, file); code != 0 {
		t.Errorf("without -strict: exit %d, want 0 (a warning)\n%s", code, out)
	}
}

// TestCheckNewcomersMistakes: the mistakes a new user makes first each get
// a message that names the place (file:line:col, or the field's path) and
// the fix. Each once went unsaid or pointed nowhere.
func TestCheckNewcomersMistakes(t *testing.T) {
	const retry = `"maxAttempts": 3, "initialBackoff": "0.1s", "maxBackoff": "1s", "backoffMultiplier": 2, "retryableStatusCodes": ["UNAVAILABLE"]`
	set := writeDescriptorSet(t)
	tests := []struct {
		name, file, doc string
		args            []string
		code            int
		want            string // on stdout for a valid file (a warning), on stderr for an invalid one
	}{
		{"service without its package", "p.json", `{"methodConfig": [{"name": [{"service": "TestService"}], "retryPolicy": {` + retry + `}}]}`, nil, 0,
			`methodConfig[0].name[0].service: "TestService" has no package, but gRPC names a service with its proto package ("pkg.v1.TestService"): unless the .proto file declares no package, this entry matches no call (-descriptor-set FILE checks names)`},
		{"service without its package, checked", "p.json", `{"methodConfig": [{"name": [{"service": "TestService"}], "retryPolicy": {` + retry + `}}]}`, []string{"-descriptor-set", set}, 1,
			`FILE:1:30: methodConfig[0].name[0].service: "TestService" is not a service of the protos given (` + set + `); did you mean "stagger.testing.v1.TestService"? (a service is named with its proto package)`},
		{"misspelt key", "p.json", `{"methodConfig": [{"name": [{"service": "stagger.testing.v1.TestService"}], "retryPolicy": {` + strings.Replace(retry, "maxAttempts", "maxAtempts", 1) + `}}]}`, nil, 1,
			`FILE:1:92: methodConfig[0].retryPolicy.maxAttempts: is required (the key "maxAtempts" is unknown: did you mean "maxAttempts"?), got nothing`},
		{"JSON syntax", "p.json", "{\n  \"methodConfig\": [{\n    \"name\": [{\"service\": \"stagger.testing.v1.TestService\"}],\n    \"retryPolicy\": {" + retry + ",}\n  }]\n}", nil, 1,
			`FILE:4:149: invalid JSON: invalid character '}' looking for beginning of object key string (JSON allows no comma before '}': remove the one at line 4, column 148)`},
		{"YAML syntax", "p.yaml", "methodConfig:\n  - name: [{service: stagger.testing.v1.TestService}]\n    retryPolicy:\n      maxAttempts: 3\n     initialBackoff: 0.1s\n      maxBackoff: 1s\n", nil, 1,
			`FILE:5: invalid YAML: did not find expected key (is the line indented like the keys or items it belongs with?)`},
		{"invalid values", "p.yaml", "methodConfig:\n  - name: [{service: stagger.testing.v1.TestService}]\n    retryPolicy: {maxAttempts: 1, initialBackoff: 0.1s, maxBackoff: 1s, backoffMultiplier: 0, retryableStatusCodes: [UNAVAILABLE]}\n", nil, 1,
			"FILE:3:19: methodConfig[0].retryPolicy.maxAttempts: must be at least 2 (it counts the first attempt: 2 means 1 retry), got 1\n" +
				"FILE:3:73: methodConfig[0].retryPolicy.backoffMultiplier: must be > 0 (1 keeps every pause at initialBackoff, 2 doubles them), got 0"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			file := filepath.Join(t.TempDir(), tt.file)
			if err := os.WriteFile(file, []byte(tt.doc), 0o600); err != nil {
				t.Fatal(err)
			}
			code, out, errOut := checkRun(t, append(tt.args, file)...)
			want := strings.ReplaceAll(tt.want, "FILE:", file+":")
			got := out
			if tt.code != 0 {
				got = errOut
			}
			if code != tt.code || !strings.Contains(got, want) {
				t.Errorf("exit %d (want %d), stdout:\n%s\nstderr:\n%s\nwant:\n%s", code, tt.code, out, errOut, want)
			}
			// A valid file's warning is announced on the first line, not
			// only after the whole explanation.
			if first, _, _ := strings.Cut(out, "\n"); tt.code == 0 && first != file+": valid, 1 warning(s) (listed at the end)" {
				t.Errorf("first line %q, want it to announce the warning", first)
			}
		})
	}
}

// TestCheckHedgeOnPerTryTimeout: check explains the key beside
// perAttemptRecvTimeout, in text and JSON.
func TestCheckHedgeOnPerTryTimeout(t *testing.T) {
	file := filepath.Join(t.TempDir(), "p.json")
	doc := `{"methodConfig":[{"name":[{"service":"a.S"}],"idempotent":true,"retryPolicy":{"maxAttempts":3,"initialBackoff":"0.1s","maxBackoff":"1s","backoffMultiplier":2,"retryableStatusCodes":["UNAVAILABLE"],"perAttemptRecvTimeout":"0.5s","hedge_on_per_try_timeout":true}}]}`
	if err := os.WriteFile(file, []byte(doc), 0o600); err != nil {
		t.Fatal(err)
	}
	code, out, _ := checkRun(t, file)
	if code != 0 || !strings.Contains(out, "  perAttemptRecvTimeout: 500ms: an attempt with no response header or message by then is cut off and retried when a retry can go (attempts left") ||
		!strings.Contains(out, "  hedgeOnPerTryTimeout: an attempt whose retry goes is not cut off but keeps running beside it; the first success wins") {
		t.Errorf("text: exit %d\n%s", code, out)
	}
	code, out, _ = checkRun(t, "-format", "json", file)
	if code != 0 || !strings.Contains(out, `"hedgeOnPerTryTimeout": true`) {
		t.Errorf("json: exit %d\n%s", code, out)
	}
}

// TestCheckShowsCriticality: each entry's criticality, the file's or the
// default, in the text and in JSON.
func TestCheckShowsCriticality(t *testing.T) {
	file := filepath.Join(t.TempDir(), "p.json")
	doc := `{"methodConfig": [{"name": [{"service": "a.S"}], "criticality": "sheddable_plus"}, {"name": [{"service": "b.S"}], "timeout": "1s"}]}`
	if err := os.WriteFile(file, []byte(doc), 0o600); err != nil {
		t.Fatal(err)
	}
	code, out, _ := checkRun(t, file)
	if code != 0 {
		t.Fatalf("exit %d:\n%s", code, out)
	}
	first, second, ok := strings.Cut(out, "methodConfig[1]")
	if !ok || !strings.Contains(first, "  criticality: SHEDDABLE_PLUS, for calls that neither a call option nor the request being served names one for") ||
		!strings.Contains(second, "  criticality: CRITICAL (the default)") {
		t.Errorf("criticality lines missing:\n%s", out)
	}
	code, out, _ = checkRun(t, "-format", "json", file)
	if code != 0 {
		t.Fatalf("json: exit %d", code)
	}
	var got struct {
		Methods []struct {
			Criticality    string `json:"criticality"`
			CriticalitySet bool   `json:"criticalitySet"`
		} `json:"methods"`
	}
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatal(err)
	}
	if len(got.Methods) != 2 || got.Methods[0].Criticality != "SHEDDABLE_PLUS" || !got.Methods[0].CriticalitySet ||
		got.Methods[1].Criticality != "CRITICAL" || got.Methods[1].CriticalitySet {
		t.Errorf("json methods %+v\n%s", got.Methods, out)
	}
}

// TestCheckWraps: -width wraps every line of the text, continuation lines
// indented, and nothing is lost; a pipe (the default) gets one line per item.
func TestCheckWraps(t *testing.T) {
	for _, file := range []string{"retry.json", "hedging.yaml", "decorrelated.yaml", "breaker.json", "a6-throttle.json"} {
		_, flat, _ := checkRun(t, checkExamples+file)
		code, out, _ := checkRun(t, "-width", "80", checkExamples+file)
		if code != 0 {
			t.Fatalf("%s: exit %d", file, code)
		}
		for _, l := range strings.Split(out, "\n") {
			if len(l) > 80 && strings.Contains(strings.TrimSpace(l), " ") {
				t.Errorf("%s: a line of %d columns: %q", file, len(l), l)
			}
		}
		if strings.Join(strings.Fields(out), " ") != strings.Join(strings.Fields(flat), " ") {
			t.Errorf("%s: wrapping changed the words:\n%s", file, out)
		}
	}
	if got := wrapText("  a bb "+strings.Repeat("c", 12)+" d", 8); got != "  a bb\n      cccccccccccc\n      d" {
		t.Errorf("wrapText = %q", got)
	}
}

// TestCheckCountsRetries: one retry is "1 retry".
func TestCheckCountsRetries(t *testing.T) {
	file := filepath.Join(t.TempDir(), "p.json")
	if err := os.WriteFile(file, []byte(`{"methodConfig": [{"name": [{"service": "a.S"}], "retryPolicy": {"maxAttempts": 2,
	  "initialBackoff": "0.1s", "maxBackoff": "1s", "backoffMultiplier": 2, "retryableStatusCodes": ["UNAVAILABLE"]}}],
	  "retryBudget": {"tokenBucket": {"capacity": 10, "initial": 5, "retryCost": 5}}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	_, out, errOut := checkRun(t, file)
	for _, want := range []string{"maxAttempts 2 (1 retry)", "pays for 1 retry,"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s%s", want, out, errOut)
		}
	}
}

// With stagger turned off for the process (interceptor.DisableEnv, or
// SetDisabled), check says so first, in text and JSON.
func TestCheckSaysDisabled(t *testing.T) {
	defer interceptor.SetDisabled(interceptor.Disabled())
	interceptor.SetDisabled(true)
	code, out, _ := checkRun(t, "-width", "0", checkExamples+"retry.json")
	if code != 0 || !strings.HasPrefix(out, "stagger is off: "+interceptor.DisableEnv) {
		t.Fatalf("exit %d, output begins %.120q; want it to say stagger is off", code, out)
	}
	_, out, _ = checkRun(t, "-format", "json", checkExamples+"retry.json")
	var rep struct{ Disabled string }
	if err := json.Unmarshal([]byte(out), &rep); err != nil || !strings.Contains(rep.Disabled, interceptor.DisableEnv) {
		t.Fatalf("json disabled %q (%v); want it to name %s", rep.Disabled, err, interceptor.DisableEnv)
	}
	interceptor.SetDisabled(false)
	if _, out, _ := checkRun(t, checkExamples+"retry.json"); strings.Contains(out, "stagger is off") {
		t.Fatalf("switch off, check says stagger is off:\n%s", out)
	}
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}

// testProto is the repository's test service, a real .proto file with an
// import (google/protobuf/duration.proto, which -proto resolves without a
// -proto-path) and idempotency_level options.
const testProto = "../../proto/stagger/testing/v1/test.proto"

// TestCheckProtoSources: -proto compiles .proto sources (imports under
// -proto-path) and checks names against them, as -descriptor-set does: a
// name they do not declare is an error naming the policy file, the field,
// the name and the closest real names; idempotency_level is read from them.
func TestCheckProtoSources(t *testing.T) {
	file := writeTemp(t, `{"methodConfig": [
	  {"name": [{"service": "stagger.testing.v1.TestServce"}], "timeout": "1s"},
	  {"name": [{"service": "stagger.testing.v1.TestService", "method": "get"}], "timeout": "1s"},
	  {"name": [{"service": "shop.v1.Cart"}], "timeout": "1s"}]}`)
	code, out, errOut := checkRun(t, "-proto", testProto, "-proto-path", "../../proto", file)
	for _, want := range []string{
		file + `:2:15: methodConfig[0].name[0].service: "stagger.testing.v1.TestServce" is not a service of the protos given (` + testProto + `); did you mean "stagger.testing.v1.TestService"?`,
		file + `:3:60: methodConfig[1].name[0].method: "get" is not a method of stagger.testing.v1.TestService in the protos given (` + testProto + `); did you mean "Get"?`,
		file + `:4:15: methodConfig[2].name[0].service: "shop.v1.Cart" is not a service of the protos given (` + testProto + ")\n",
	} {
		if code != 1 || !strings.Contains(errOut, want) {
			t.Errorf("exit %d (want 1), stderr lacks %q:\n%s", code, want, errOut)
		}
	}
	if !strings.Contains(out, "invalid, 3 error(s)") {
		t.Errorf("stdout:\n%s", out)
	}

	// Named right, the file is valid; Get's NO_SIDE_EFFECTS lets it hedge,
	// Write (no option) may not. Without -proto-path the file, outside the
	// current directory, is found in its own, which changes no name.
	good := writeTemp(t, `{"methodConfig": [
	  {"name": [{"service": "stagger.testing.v1.TestService", "method": "Get"}], "hedgingPolicy": {"maxAttempts": 2}},
	  {"name": [{"service": "stagger.testing.v1.TestService", "method": "Write"}], "hedgingPolicy": {"maxAttempts": 2}}]}`)
	for _, args := range [][]string{{"-proto", testProto, "-proto-path", "../../proto"}, {"-proto", testProto}} {
		code, out, errOut = checkRun(t, append(args, good)...)
		if want := "service and method names checked against the 1 services of " + testProto; code != 0 || !strings.Contains(out, want) {
			t.Errorf("%v: exit %d, output lacks %q:\n%s%s", args, code, want, out, errOut)
		}
		if !strings.Contains(out, "methodConfig[1].hedgingPolicy: needs an idempotent method, and /stagger.testing.v1.TestService/Write is not marked idempotent") ||
			strings.Contains(out, "methodConfig[0].hedgingPolicy: needs an idempotent method") {
			t.Errorf("%v: idempotency not read from the .proto:\n%s", args, out)
		}
	}

	// Bad command lines and bad protos: exit 2, the cause named.
	dir := t.TempDir()
	broken := filepath.Join(dir, "broken.proto")
	if err := os.WriteFile(broken, []byte("syntax = \"proto3\";\npackage x.v1;\nservice S {\n  rpc M(Nope) returns (Nope);\n}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	edition := filepath.Join(dir, "edition.proto")
	if err := os.WriteFile(edition, []byte("edition = \"2023\";\npackage x.v1;\nmessage R {}\nservice S { rpc M(R) returns (R); }\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"-proto", broken, "-proto-path", dir}, "stagger check: -proto: broken.proto:4:9: method x.v1.S.M: unknown request type Nope"},
		{[]string{"-proto", filepath.Join(dir, "missing.proto"), "-proto-path", dir}, "stagger check: -proto: stat " + filepath.Join(dir, "missing.proto")},
		{[]string{"-proto", testProto, "-proto-path", dir}, "stagger check: -proto: " + testProto + " is not under any -proto-path (" + dir + ")"},
		{[]string{"-proto-path", dir}, "stagger check: -proto-path without -proto"},
		{[]string{"-proto", edition}, "edition.proto:1:11: editions are not yet supported; use syntax proto2 or proto3 instead\n(this command compiles proto2 and proto3 sources; for a file with an edition, give a descriptor set: -descriptor-set FILE"},
	} {
		code, _, errOut := checkRun(t, append(tc.args, good)...)
		if code != 2 || !strings.Contains(errOut, tc.want) {
			t.Errorf("%v: exit %d (want 2), stderr lacks %q:\n%s", tc.args, code, tc.want, errOut)
		}
	}
}

// TestCheckStrictNeedsNames: -strict refuses a file whose names could not
// be checked (no descriptor set and no .proto), saying how to give them; a
// newcomer's file with a misspelt service passed as valid.
func TestCheckStrictNeedsNames(t *testing.T) {
	broken := filepath.Join(t.TempDir(), "broken.json")
	doc := `{"methodConfig": [{"name": [{"service": "stagger.testing.v1.TestServce"}], "retryPolicy": {"maxAttempts": 3, "initialBackoff": "0.1s", "maxBackoff": "1s", "backoffMultiplier": 2, "retryableStatusCodes": ["UNAVAILABLE"]}}]}`
	if err := os.WriteFile(broken, []byte(doc), 0o600); err != nil {
		t.Fatal(err)
	}
	code, out, errOut := checkRun(t, "-strict", broken)
	want := broken + ": -strict: service and method names could not be checked: give the protos: -proto FILE.proto (with -proto-path DIR for its imports), or -descriptor-set FILE (written by `buf build -o FILE` or `protoc --include_imports --descriptor_set_out=FILE`)"
	if code != 1 || !strings.Contains(errOut, want) || !strings.Contains(out, "invalid, 1 error(s)") {
		t.Errorf("-strict without protos: exit %d (want 1), stdout:\n%s\nstderr:\n%s\nwant:\n%s", code, out, errOut, want)
	}
	// With the protos, the misspelt service is named.
	for _, args := range [][]string{{"-descriptor-set", writeDescriptorSet(t)}, {"-proto", testProto}} {
		code, _, errOut := checkRun(t, append(append([]string{"-strict"}, args...), broken)...)
		if want := `"stagger.testing.v1.TestServce"`; code != 1 || !strings.Contains(errOut, want) || !strings.Contains(errOut, `did you mean "stagger.testing.v1.TestService"?`) {
			t.Errorf("-strict %v: exit %d (want 1), stderr:\n%s", args, code, errOut)
		}
	}
	// Spelt right and checked, -strict passes; a file that names no
	// service (a breaker only) has no name to check.
	fixed := writeTemp(t, strings.Replace(doc, "TestServce", "TestService", 1))
	if code, out, errOut := checkRun(t, "-strict", "-proto", testProto, fixed); code != 0 {
		t.Errorf("-strict -proto, names right: exit %d:\n%s%s", code, out, errOut)
	}
	if code, out, errOut := checkRun(t, "-strict", writeTemp(t, `{"circuitBreaker": {"failureRatio": 0.5}}`)); code != 0 {
		t.Errorf("-strict, breaker only: exit %d:\n%s%s", code, out, errOut)
	}
}

// The Gate in a few lines (issue 88): check's text states it as its
// estimate and two rules, and names the rules JSON details, in at most 10
// lines after the refused retries' line (unwrapped); it printed 13 long
// paragraphs.
func TestCheckPrintsTheGateShort(t *testing.T) {
	_, out, _ := checkRun(t, "-width", "0", checkExamples+"retry.json")
	i := strings.Index(out, "  refused retries: ")
	if i < 0 {
		t.Fatalf("no refused retries' line:\n%s", out)
	}
	var gate []string
	for _, l := range strings.Split(out[i:], "\n")[1:] {
		if !strings.HasPrefix(l, "    ") {
			break
		}
		gate = append(gate, l)
	}
	if len(gate) == 0 || len(gate) > 10 || !strings.HasPrefix(gate[0], "    the estimate: ") {
		t.Errorf("the Gate in %d lines, want the estimate first and 10 at most:\n%s", len(gate), strings.Join(gate, "\n"))
	}
}

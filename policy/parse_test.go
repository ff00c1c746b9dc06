package policy

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/stagger-go/stagger/budget"
	"github.com/stagger-go/stagger/criticality"
	"google.golang.org/grpc/codes"
)

func parseMust(t *testing.T, doc string, opts ...ParseOption) *Config {
	t.Helper()
	c, err := ParseConfig([]byte(doc), opts...)
	if err != nil {
		t.Fatalf("ParseConfig: %v", err)
	}
	return c
}

// parseErrLines returns the messages of the FieldErrors joined in err.
func parseErrLines(t *testing.T, err error) []string {
	t.Helper()
	if err == nil {
		t.Fatal("ParseConfig succeeded, want an error")
	}
	var lines []string
	var walk func(error)
	walk = func(e error) {
		if j, ok := e.(interface{ Unwrap() []error }); ok {
			for _, x := range j.Unwrap() {
				walk(x)
			}
			return
		}
		var fe *FieldError
		if !errors.As(e, &fe) {
			t.Errorf("error %v (%T) is not a *FieldError", e, e)
		}
		lines = append(lines, e.Error())
	}
	walk(err)
	return lines
}

func TestParseFullExample(t *testing.T) {
	c := parseMust(t, `{
  "methodConfig": [{
    "name": [{"service": "shop.v1.Cart"}, {"service": "shop.v1.Pay", "method": "Get"}],
    "timeout": "6s", "waitForReady": true, "maxRequestMessageBytes": 1024,
    "retryPolicy": {
      "maxAttempts": 4, "initialBackoff": "0.1s", "maxBackoff": "5s",
      "backoffMultiplier": 2, "retryableStatusCodes": ["UNAVAILABLE", "RESOURCE_EXHAUSTED"],
      "jitter": "FULL",
      "perAttemptRecvTimeout": "1s"
    }
  }, {
    "name": [{"service": "shop.v1.Search", "method": "Query"}],
    "idempotent": true,
    "hedgingPolicy": {"maxAttempts": 3, "hedgingDelay": "0.05s", "nonFatalStatusCodes": ["UNAVAILABLE"]}
  }, {
    "name": [{}],
    "retryPolicy": {"maxAttempts": 2, "initialBackoff": "1s", "maxBackoff": "1s", "backoffMultiplier": 1, "retryableStatusCodes": [14]}
  }],
  "retryBudget": {"ratio": {"percent": 10, "window": "10s"}}
}`, WithProtoFiles(nil))
	cart := c.Method("/shop.v1.Cart/Add")
	want := Policy{MaxAttempts: 4, Backoff: Backoff{Initial: 100 * time.Millisecond, Max: 5 * time.Second, Multiplier: 2, Jitter: JitterFull},
		RetryableCodes: NewCodeSet(codes.Unavailable, codes.ResourceExhausted), PerAttemptRecvTimeout: time.Second}
	if cart == nil || cart.Retry == nil || !reflect.DeepEqual(*cart.Retry, want) {
		t.Fatalf("Cart/Add retry = %+v, want %+v", cart, want)
	}
	if cart.Timeout != 6*time.Second || cart.WaitForReady == nil || !*cart.WaitForReady || *cart.MaxRequestMessageBytes != 1024 || cart.MaxResponseMessageBytes != nil {
		t.Errorf("Cart/Add call settings = %+v", cart)
	}
	if c.Method("/shop.v1.Pay/Get") != cart {
		t.Error("Pay/Get should share the first entry")
	}
	search := c.Method("/shop.v1.Search/Query")
	if search.Hedging == nil || *search.Hedging != (Hedging{MaxAttempts: 3, Delay: 50 * time.Millisecond, NonFatalCodes: NewCodeSet(codes.Unavailable)}) || search.Idempotent == nil || !*search.Idempotent {
		t.Errorf("Search/Query = %+v %+v", search, search.Hedging)
	}
	def := c.Method("/shop.v1.Pay/Put")
	if def == nil || def.Retry == nil || def.Retry.MaxAttempts != 2 {
		t.Errorf("Pay/Put should take the default entry, got %+v", def)
	}
	if c.Method("/shop.v1.Search/Other") != def {
		t.Error("Search/Other should take the default entry: only Search/Query is named")
	}
	if got := c.BudgetSettings(); got.Kind != budget.KindRatio || got.Ratio.Percent != 10 || got.Ratio.Window != 10*time.Second {
		t.Errorf("BudgetSettings = %+v", got)
	}
	if bs, err := c.NewBudgets(); err != nil || bs == nil {
		t.Errorf("NewBudgets() = %v, %v", bs, err)
	} else if a := bs.Get("dns:///a:443", "/a.S/M"); a == nil || a != bs.Get("dns:///a:443", "/a.S/M") || a == bs.Get("dns:///b:443", "/a.S/M") {
		t.Error("a backend's budget should be made once, and each backend its own")
	} else if again, _ := c.NewBudgets(); again == bs || again.Get("dns:///a:443", "/a.S/M") == a {
		t.Error("each NewBudgets should be new and share nothing")
	}
	if len(c.Warnings()) != 0 {
		t.Errorf("Warnings = %v, want none", c.Warnings())
	}
}

func TestParseMethodMatching(t *testing.T) {
	c := parseMust(t, `{"methodConfig":[
		{"name":[{"service":"a.S","method":"M"}],"timeout":"1s"},
		{"name":[{"service":"a.S"}],"timeout":"2s"}]}`)
	tests := []struct {
		method string
		want   time.Duration // 0: no entry
	}{
		{"/a.S/M", time.Second},
		{"/a.S/N", 2 * time.Second},
		{"/b.S/M", 0},
		{"", 0},
		{"/", 0},
		{"garbage", 0},
	}
	for _, tt := range tests {
		m := c.Method(tt.method)
		switch {
		case tt.want == 0 && m != nil:
			t.Errorf("Method(%q) = %+v, want nil", tt.method, m)
		case tt.want != 0 && (m == nil || m.Timeout != tt.want):
			t.Errorf("Method(%q) = %+v, want timeout %v", tt.method, m, tt.want)
		}
	}
	var nilCfg *Config
	if bs, err := nilCfg.NewBudgets(); nilCfg.Method("/a.S/M") != nil || bs != nil || err != nil || nilCfg.BreakerSettingsFor(nil) != nil {
		t.Error("a nil Config should match nothing")
	}
}

func TestParseErrorsAllAtOnce(t *testing.T) {
	_, err := ParseConfig([]byte(`{"methodConfig":[
		{"name":[{"service":"a.S"}],"retryPolicy":{"maxAttempts":1,"initialBackoff":"1s","maxBackoff":"1s","backoffMultiplier":1,"retryableStatusCodes":[14]}},
		{"name":[{"service":"b.S"}],"retryPolicy":{"maxAttempts":3,"initialBackoff":"0s","maxBackoff":"1s","backoffMultiplier":2,"retryableStatusCodes":["UNAVAILABLE","NOPE"],"jitter":"FUL"}},
		{"name":[{"method":"M"}]},
		{"name":[{"service":"a.S"}]}],
		"retryThrottling":{"maxTokens":1001,"tokenRatio":0.1}}`))
	got := parseErrLines(t, err)
	want := []string{
		`policy: methodConfig[0].retryPolicy.maxAttempts: must be at least 2 (it counts the first attempt: 2 means 1 retry), got 1`,
		`policy: methodConfig[1].retryPolicy.initialBackoff: must be > 0, got "0s"`,
		`policy: methodConfig[1].retryPolicy.jitter: must be one of PROPORTIONAL, FULL, EQUAL, DECORRELATED, NONE, got "FUL"`,
		`policy: methodConfig[1].retryPolicy.retryableStatusCodes[1]: must be a status code: an upper-case name such as UNAVAILABLE, or an integer 0-16, got "NOPE"`,
		`policy: methodConfig[2].name[0].method: a method needs a service, got "M"`,
		`policy: methodConfig[3].name[0]: duplicate name, already given in methodConfig[0], got /a.S/`,
		`policy: retryThrottling.maxTokens: must be in (0, 1000], got 1001`,
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("errors:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

func TestParseErrors(t *testing.T) {
	tests := []struct {
		name, doc, want string
	}{
		{"retry and hedging", `{"methodConfig":[{"name":[{"service":"a.S"}],"retryPolicy":{"maxAttempts":2,"initialBackoff":"1s","maxBackoff":"1s","backoffMultiplier":1,"retryableStatusCodes":[14]},"hedgingPolicy":{"maxAttempts":2}}]}`,
			`policy: methodConfig[0]: a method has retryPolicy or hedgingPolicy, not both (gRFC A6), got both`},
		{"two budgets", `{"retryThrottling":{"maxTokens":10,"tokenRatio":1},"retryBudget":{"ratio":{}}}`,
			`policy: retryBudget: at most one budget per file: retryThrottling or retryBudget, not both, got both`},
		{"throttling without methodConfig", `{"retryThrottling":{"maxTokens":0,"tokenRatio":1}}`,
			`policy: retryThrottling.maxTokens: must be in (0, 1000], got 0`},
		{"tokenRatio too fine", `{"retryThrottling":{"maxTokens":10,"tokenRatio":0.0009}}`,
			`policy: retryThrottling.tokenRatio: must be at least 0.001 (gRFC A6 keeps 3 decimals), got 0.0009`},
		{"wrong kind", `{"methodConfig":{"name":1}}`,
			`policy: methodConfig: must be an array, got an object`},
		{"missing fields", `{"methodConfig":[{"name":[{"service":"a.S"}],"retryPolicy":{}}]}`,
			"policy: methodConfig[0].retryPolicy.maxAttempts: is required, got nothing\n" +
				"policy: methodConfig[0].retryPolicy.initialBackoff: is required, got nothing\n" +
				"policy: methodConfig[0].retryPolicy.maxBackoff: is required, got nothing\n" +
				"policy: methodConfig[0].retryPolicy.backoffMultiplier: is required, got nothing\n" +
				"policy: methodConfig[0].retryPolicy.retryableStatusCodes: is required (unless perAttemptRecvTimeout is set), got nothing"},
		{"budget rule from the budget package", `{"retryBudget":{"ratio":{"window":"1ms"}}}`,
			`policy: retryBudget.ratio.window: must be in [10ms, 1h], got "1ms"`},
		{"token bucket cost above capacity", `{"retryBudget":{"tokenBucket":{"capacity":4}}}`,
			`policy: retryBudget.tokenBucket.retryCost: must be in (0, capacity 4] and at least 0.001, got 5`},
		{"defer of the wrong kind", `{"retryBudget":{"ratio":{},"defer":"yes"}}`,
			`policy: retryBudget.defer: must be true, false or an object {"maxWaiting": n, "maxWait": "10s"}, got "yes"`},
		{"defer bounds", `{"retryThrottling":{"maxTokens":10,"tokenRatio":1,"defer":{"maxWaiting":0,"maxWait":"2h"}}}`,
			"policy: retryThrottling.defer.maxWaiting: must be in [1, 1e6], got 0\n" +
				`policy: retryThrottling.defer.maxWait: must be in [1ms, 1h], got "2h"`},
		{"yaml", "methodConfig:\n  - name: [{service: a.S}]\n    hedgingPolicy: {maxAttempts: 0}\n",
			`policy: methodConfig[0].hedgingPolicy.maxAttempts: must be at least 2 (it counts the first attempt: 2 means 1 retry), got 0`},
		{"hedging negative delay", `{"methodConfig":[{"name":[{"service":"a.S"}],"hedgingPolicy":{"maxAttempts":2,"hedgingDelay":"-1s"}}]}`,
			`policy: methodConfig[0].hedgingPolicy.hedgingDelay: must be >= 0, got "-1s"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := ParseConfig([]byte(tt.doc))
			if got := strings.Join(parseErrLines(t, err), "\n"); got != tt.want {
				t.Errorf("errors:\n%s\nwant:\n%s", got, tt.want)
			}
		})
	}
}

func TestParseSyntaxErrors(t *testing.T) {
	for _, doc := range []string{``, "  \n", `{`, `{"a":}`, `{} []`, "a: [", "- 1\n- 2\n", `"str"`, `12`} {
		c, err := ParseConfig([]byte(doc))
		if err == nil || c != nil {
			t.Errorf("ParseConfig(%q) = %v, %v; want an error", doc, c, err)
			continue
		}
		if !strings.HasPrefix(err.Error(), "policy: ") {
			t.Errorf("ParseConfig(%q) error %q does not start with the package name", doc, err)
		}
	}
}

func TestParseWarnings(t *testing.T) {
	c := parseMust(t, `{"methodConfg":[],"loadBalancingConfig":[{"round_robin":{}}],
		"methodConfig":[{"name":[{"service":"a.S"}],"retryPolicy":{"maxAttempts":9,"initialBackoff":"1s","maxBackoff":"1s","backoffMultiplier":1,"retryableStatusCodes":[14],"maxAtempts":3}},
		{"retryPolicy":null}],
		"retryThrottling":{"maxTokens":10,"tokenRatio":0.1234}}`, WithProtoFiles(nil))
	var got []string
	for _, w := range c.Warnings() {
		got = append(got, w.String())
	}
	want := []string{
		`methodConfg: unknown key, ignored (did you mean "methodConfig"?)`,
		`loadBalancingConfig: policy "round_robin" is grpc-go's to apply; stagger does not apply it`,
		`methodConfig[0].retryPolicy.maxAtempts: unknown key, ignored (did you mean "maxAttempts"?)`,
		`methodConfig[0].retryPolicy.maxAttempts: 9 is above the cap, so 5 is used (gRFC A6; raise the cap with WithMaxAttemptsCap)`,
		`methodConfig[1]: entry has no name, so it applies to no method (grpc-go skips it too)`,
		`retryThrottling.tokenRatio: 0.1234 kept to 3 decimals as gRFC A6 says: 0.123 (grpc-go uses every digit)`,
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("warnings:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if c.Method("/a.S/M").Retry.MaxAttempts != 5 {
		t.Error("maxAttempts should be capped at 5")
	}
	if c.BudgetSettings().Throttle.TokenRatio != 0.123 {
		t.Errorf("tokenRatio = %v, want 0.123", c.BudgetSettings().Throttle.TokenRatio)
	}
	if c.LoadBalancingPolicy() != "round_robin" {
		t.Errorf("LoadBalancingPolicy = %q", c.LoadBalancingPolicy())
	}
}

func TestParseOptions(t *testing.T) {
	doc := `{"methodConfig":[{"name":[{"service":"a.S"}],"retryPolicy":{"maxAttempts":9,"initialBackoff":"1s","maxBackoff":"1s","backoffMultiplier":1,"retryableStatusCodes":[14],"maxAtempts":3}}]}`
	_, err := ParseConfig([]byte(doc), Strict(), WithProtoFiles(nil))
	if got := strings.Join(parseErrLines(t, err), "\n"); got != `policy: methodConfig[0].retryPolicy.maxAtempts: must be a known key (Strict; did you mean "maxAttempts"?), got "maxAtempts"` {
		t.Errorf("Strict: %s", got)
	}
	c := parseMust(t, doc, WithMaxAttemptsCap(7))
	if got := c.Method("/a.S/M").Retry.MaxAttempts; got != 7 {
		t.Errorf("WithMaxAttemptsCap(7): maxAttempts = %d, want 7", got)
	}
	c = parseMust(t, doc, WithMaxAttemptsCap(10))
	if got := c.Method("/a.S/M").Retry.MaxAttempts; got != 9 {
		t.Errorf("WithMaxAttemptsCap(10): maxAttempts = %d, want 9", got)
	}
}

func TestParseExtensions(t *testing.T) {
	yamlDoc := `
method_config:
  - name:
      - service: a.S
    retry_policy:
      max_attempts: 3
      initial_backoff: 100ms
      max_backoff: 1.5s
      backoff_multiplier: 1.5
      retryable_status_codes: [unavailable, 8, ABORTED]
      jitter: decorrelated
retryBudget:
  tokenBucket: {capacity: 100, retryCost: 2}
`
	c := parseMust(t, yamlDoc)
	want := Policy{MaxAttempts: 3, Backoff: Backoff{Initial: 100 * time.Millisecond, Max: 1500 * time.Millisecond, Multiplier: 1.5, Jitter: JitterDecorrelated},
		RetryableCodes: NewCodeSet(codes.Unavailable, codes.ResourceExhausted, codes.Aborted)}
	if got := c.Method("/a.S/x").Retry; got == nil || !reflect.DeepEqual(*got, want) {
		t.Errorf("retry = %+v, want %+v", got, want)
	}
	if s := c.BudgetSettings(); s.Kind != budget.KindTokenBucket || s.TokenBucket.Capacity != 100 || s.TokenBucket.RetryCost != 2 {
		t.Errorf("budget = %+v", s)
	}
	// A YAML anchor and alias read as the values they stand for.
	c = parseMust(t, "x-retry: &r {maxAttempts: 2, initialBackoff: 1s, maxBackoff: 1s, backoffMultiplier: 1, retryableStatusCodes: [14]}\nmethodConfig:\n  - {name: [{service: a.S}], retryPolicy: *r}\n  - {name: [{service: b.S}], retryPolicy: *r}\n")
	if c.Method("/b.S/M").Retry.MaxAttempts != 2 {
		t.Error("alias not followed")
	}
}

func TestLoadFile(t *testing.T) {
	dir := t.TempDir()
	yml := filepath.Join(dir, "p.yaml")
	// Starts with '{' but is YAML (unquoted keys): the extension decides.
	if err := os.WriteFile(yml, []byte("{methodConfig: [{name: [{service: a.S}], timeout: 1s}]}"), 0o600); err != nil {
		t.Fatal(err)
	}
	c, err := LoadFile(yml)
	if err != nil {
		t.Fatal(err)
	}
	if c.Method("/a.S/M").Timeout != time.Second {
		t.Error("YAML file not read as YAML")
	}
	if _, err := LoadFile(filepath.Join(dir, "missing.json")); err == nil || !strings.HasPrefix(err.Error(), "policy: ") {
		t.Errorf("missing file: %v", err)
	}
}

func TestParseYAMLBomb(t *testing.T) {
	doc := "a: &a [x, x, x, x, x, x, x, x, x, x]\nb: &b [*a, *a, *a, *a, *a, *a, *a, *a, *a, *a]\nc: &c [*b, *b, *b, *b, *b, *b, *b, *b, *b, *b]\nd: &d [*c, *c, *c, *c, *c, *c, *c, *c, *c, *c]\ne: &e [*d, *d, *d, *d, *d, *d, *d, *d, *d, *d]\nf: &f [*e, *e, *e, *e, *e, *e, *e, *e, *e, *e]\ng: &g [*f, *f, *f, *f, *f, *f, *f, *f, *f, *f]\n"
	if _, err := ParseConfig([]byte(doc)); err == nil {
		t.Error("an alias bomb should be refused")
	}
}

func TestParseDeepNesting(t *testing.T) {
	doc := `{"x":` + strings.Repeat("[", 20000) + strings.Repeat("]", 20000) + `}`
	if _, err := ParseConfig([]byte(doc)); err == nil {
		t.Error("nesting deeper than encoding/json allows should be refused")
	}
}

func BenchmarkConfigMethod(b *testing.B) {
	c, err := ParseConfig([]byte(`{"methodConfig":[
		{"name":[{"service":"shop.v1.Cart","method":"Add"}],"timeout":"1s"},
		{"name":[{"service":"shop.v1.Pay"}],"timeout":"2s"},
		{"name":[{}],"timeout":"3s"}]}`))
	if err != nil {
		b.Fatal(err)
	}
	for _, bc := range []struct{ name, method string }{
		{"exact", "/shop.v1.Cart/Add"},
		{"service", "/shop.v1.Pay/Get"},
		{"default", "/shop.v1.Search/Query"},
	} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			for i := 0; i < b.N; i++ {
				if c.Method(bc.method) == nil {
					b.Fatal("no match")
				}
			}
		})
	}
}

func TestConfigMethodDoesNotAllocate(t *testing.T) {
	c := parseMust(t, `{"methodConfig":[{"name":[{"service":"a.S"}],"timeout":"1s"},{"name":[{}],"timeout":"2s"}]}`)
	for _, m := range []string{"/a.S/M", "/b.S/M", "x"} {
		if n := testing.AllocsPerRun(100, func() { c.Method(m) }); n != 0 {
			t.Errorf("Method(%q) allocates %v times", m, n)
		}
	}
}

func TestParseDefer(t *testing.T) {
	for _, tt := range []struct {
		doc  string
		want budget.DeferSettings
	}{
		{`{"retryBudget":{"ratio":{}}}`, budget.DeferSettings{}},
		{`{"retryBudget":{"ratio":{},"defer":false}}`, budget.DeferSettings{Mode: budget.DeferOff}},
		{`{"retryThrottling":{"maxTokens":10,"tokenRatio":1,"defer":true}}`, budget.DeferSettings{Mode: budget.DeferOn}},
		{`{"retryBudget":{"tokenBucket":{},"defer":{"maxWaiting":64,"maxWait":"5s"}}}`, budget.DeferSettings{Mode: budget.DeferOn, MaxWaiting: 64, MaxWait: 5 * time.Second}},
		{"retryBudget:\n  tokenBucket: {}\n  defer: {max_wait: 250ms}\n", budget.DeferSettings{Mode: budget.DeferOn, MaxWait: 250 * time.Millisecond}},
	} {
		c, err := ParseConfig([]byte(tt.doc))
		if err != nil {
			t.Fatalf("%s: %v", tt.doc, err)
		}
		if got := c.BudgetSettings().Defer; got != tt.want {
			t.Errorf("%s: Defer = %+v, want %+v", tt.doc, got, tt.want)
		}
	}
}

// TestParseHedgeOnPerTryTimeout: the key in lowerCamel and as the proto
// field name; off when absent; a warning when it cannot act.
func TestParseHedgeOnPerTryTimeout(t *testing.T) {
	const base = `{"methodConfig":[{"name":[{"service":"a.S"}],"retryPolicy":{"maxAttempts":3,"initialBackoff":"1s","maxBackoff":"1s","backoffMultiplier":1,"retryableStatusCodes":[14]%s}}]}`
	tests := []struct {
		name, extra string
		want        bool
		warning     string
	}{
		{"absent: off", `,"perAttemptRecvTimeout":"1s"`, false, ""},
		{"lowerCamel", `,"perAttemptRecvTimeout":"1s","hedgeOnPerTryTimeout":true`, true, ""},
		{"proto field name", `,"per_attempt_recv_timeout":"1s","hedge_on_per_try_timeout":true`, true, ""},
		{"false", `,"perAttemptRecvTimeout":"1s","hedgeOnPerTryTimeout":false`, false, ""},
		{"without a timer", `,"hedgeOnPerTryTimeout":true`, true, "methodConfig[0].retryPolicy.hedgeOnPerTryTimeout: has no effect without perAttemptRecvTimeout"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := parseMust(t, fmt.Sprintf(base, tt.extra), WithProtoFiles(nil))
			m := c.Method("/a.S/M")
			if m == nil || m.Retry == nil || m.Retry.HedgeOnPerTryTimeout != tt.want {
				t.Fatalf("retry policy = %+v, want HedgeOnPerTryTimeout %v", m, tt.want)
			}
			var ws []string
			for _, w := range c.Warnings() {
				ws = append(ws, w.String())
			}
			if got := strings.Join(ws, "\n"); !strings.Contains(got, tt.warning) || tt.warning == "" && got != "" {
				t.Errorf("warnings %q, want %q", got, tt.warning)
			}
		})
	}
	_, err := ParseConfig([]byte(fmt.Sprintf(base, `,"perAttemptRecvTimeout":"1s","hedgeOnPerTryTimeout":"yes"`)))
	if err == nil || !strings.Contains(err.Error(), "retryPolicy.hedgeOnPerTryTimeout: must be true or false") {
		t.Errorf("a string: err = %v, want must be true or false", err)
	}
}

// TestParseCriticality: a methodConfig entry's criticality, by name in any
// case (YAML too), Unset when absent; anything else an error naming the
// field; a misspelt key a warning that names it.
func TestParseCriticality(t *testing.T) {
	tests := []struct {
		name, doc string
		want      criticality.Level
	}{
		{"absent", `{"methodConfig":[{"name":[{"service":"a.S"}]}]}`, criticality.Unset},
		{"upper case", `{"methodConfig":[{"name":[{"service":"a.S"}],"criticality":"SHEDDABLE_PLUS"}]}`, criticality.SheddablePlus},
		{"lower case", `{"methodConfig":[{"name":[{"service":"a.S"}],"criticality":"critical_plus"}]}`, criticality.CriticalPlus},
		{"YAML", "methodConfig:\n  - name: [{service: a.S}]\n    criticality: SHEDDABLE\n", criticality.Sheddable},
		{"null", `{"methodConfig":[{"name":[{"service":"a.S"}],"criticality":null}]}`, criticality.Unset},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := parseMust(t, tt.doc, WithProtoFiles(nil))
			if got := c.Method("/a.S/M").Criticality; got != tt.want {
				t.Errorf("Criticality = %v, want %v", got, tt.want)
			}
			if ws := c.Warnings(); len(ws) != 0 {
				t.Errorf("warnings %v", ws)
			}
		})
	}
	for _, tt := range []struct{ name, value, want string }{
		{"unknown name", `"BEST_EFFORT"`, `policy: methodConfig[1].criticality: must be one of CRITICAL_PLUS, CRITICAL, SHEDDABLE_PLUS, SHEDDABLE, got "BEST_EFFORT"`},
		{"empty", `""`, `policy: methodConfig[1].criticality: must be one of CRITICAL_PLUS, CRITICAL, SHEDDABLE_PLUS, SHEDDABLE, got ""`},
		{"UNSET", `"UNSET"`, `policy: methodConfig[1].criticality: must be one of CRITICAL_PLUS, CRITICAL, SHEDDABLE_PLUS, SHEDDABLE, got "UNSET"`},
		{"a number", `3`, `policy: methodConfig[1].criticality: must be a string, got 3`},
		{"an object", `{"level":"CRITICAL"}`, `policy: methodConfig[1].criticality: must be a string, got an object`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := ParseConfig([]byte(`{"methodConfig":[{"name":[{"service":"a.S"}]},{"name":[{"service":"b.S"}],"criticality":` + tt.value + `}]}`))
			if got := strings.Join(parseErrLines(t, err), "\n"); got != tt.want {
				t.Errorf("errors:\n%s\nwant:\n%s", got, tt.want)
			}
		})
	}
	c := parseMust(t, `{"methodConfig":[{"name":[{"service":"a.S"}],"critcality":"SHEDDABLE"}]}`, WithProtoFiles(nil))
	if ws := c.Warnings(); len(ws) != 1 || !strings.Contains(ws[0].String(), `did you mean "criticality"`) {
		t.Errorf("misspelt key: warnings %v, want one suggesting criticality", ws)
	}
}

// TestParseDeferAlone: "defer" with no budget kind is stagger's default
// budget (budget.DefaultSettings: 100 tokens starting at 9) with that
// setting; an empty tokenBucket is the kind's own defaults (the AWS SDKs'
// 500 tokens starting full), whatever "defer" says; neither is an error
// naming what a retryBudget holds.
func TestParseDeferAlone(t *testing.T) {
	def := budget.DefaultSettings()
	off := def
	off.Defer = budget.DeferSettings{Mode: budget.DeferOff}
	on := def
	on.Defer = budget.DeferSettings{Mode: budget.DeferOn, MaxWaiting: 8}
	aws := budget.Settings{Kind: budget.KindTokenBucket, Defer: budget.DeferSettings{Mode: budget.DeferOff}}
	for _, tt := range []struct {
		doc  string
		want budget.Settings
	}{
		{`{"retryBudget":{"defer":false}}`, off},
		{"retryBudget:\n  defer: {maxWaiting: 8}\n", on},
		{`{"retryBudget":{"tokenBucket":{},"defer":false}}`, aws},
	} {
		c, err := ParseConfig([]byte(tt.doc))
		if err != nil {
			t.Fatalf("%s: %v", tt.doc, err)
		}
		if got := c.BudgetSettings(); got != tt.want {
			t.Errorf("%s: settings %+v, want %+v", tt.doc, got, tt.want)
		}
	}
	bs, err := parseMust(t, `{"retryBudget":{"defer":false}}`).NewBudgets()
	if err != nil {
		t.Fatal(err)
	}
	if st := bs.Get("t", "/m").State(); st.Level != 9 || st.Capacity != 100 {
		t.Errorf(`"defer": false alone: budget %+v, want the default's 9 of 100`, st)
	}
	if _, err := ParseConfig([]byte(`{"retryBudget":{}}`)); err == nil || !strings.Contains(err.Error(), "must hold tokenBucket, ratio or defer") {
		t.Errorf("an empty retryBudget: %v, want an error naming what it may hold", err)
	}
}

package staggerotel

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/stagger-go/stagger"
	"github.com/stagger-go/stagger/breaker"
	"github.com/stagger-go/stagger/budget"
	"github.com/stagger-go/stagger/criticality"
	"github.com/stagger-go/stagger/interceptor"
	"github.com/stagger-go/stagger/policy"
	testingv1 "github.com/stagger-go/stagger/proto/stagger/testing/v1"
	"github.com/stagger-go/stagger/testserver"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/metric/noop"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/types/known/durationpb"
)

const (
	getMethod = "stagger.testing.v1.TestService/Get"
	target    = testserver.BufnetTarget
)

// retryConfig retries every method of the test service: 3 attempts, pauses
// of 10ms then 20ms, no jitter.
const retryConfig = `{"methodConfig": [{
	"name": [{"service": "stagger.testing.v1.TestService"}],
	"retryPolicy": {"maxAttempts": 3, "initialBackoff": "0.01s", "maxBackoff": "1s",
		"backoffMultiplier": 2, "jitter": "NONE", "retryableStatusCodes": ["UNAVAILABLE"]}
}]}`

// hedgeConfig hedges every method of the test service: 3 attempts, 10ms
// apart.
const hedgeConfig = `{"methodConfig": [{
	"name": [{"service": "stagger.testing.v1.TestService"}],
	"hedgingPolicy": {"maxAttempts": 3, "hedgingDelay": "0.01s", "nonFatalStatusCodes": ["UNAVAILABLE"]}
}]}`

func parseConfig(t testing.TB, file string) *policy.Config {
	t.Helper()
	cfg, err := policy.ParseConfig([]byte(file))
	if err != nil {
		t.Fatalf("ParseConfig: %v", err)
	}
	return cfg
}

// env is a test server and a client of it recording into reader.
type env struct {
	srv    *testserver.Server
	client testingv1.TestServiceClient
	reader *sdkmetric.ManualReader
}

// newEnv dials the test server through stagger.DialOptions(cfg) with the
// recording option built from o (its MeterProvider, when nil, is an SDK one
// on a fresh ManualReader), and no budget (unlimited), so that the
// process's default budget plays no part.
func newEnv(t testing.TB, file string, o Options) *env {
	t.Helper()
	e := &env{srv: testserver.New()}
	t.Cleanup(e.srv.Close)
	if o.MeterProvider == nil {
		e.reader = sdkmetric.NewManualReader()
		o.MeterProvider = sdkmetric.NewMeterProvider(sdkmetric.WithReader(e.reader))
	}
	opt, err := Option(o)
	if err != nil {
		t.Fatalf("Option: %v", err)
	}
	dial := stagger.DialOptions(parseConfig(t, file), interceptor.WithBudget(nil), opt)
	cc := e.srv.ClientConn(t, dial...)
	e.client = testingv1.NewTestServiceClient(cc)
	return e
}

func (e *env) get(t testing.TB, ctx context.Context, sc *testingv1.Script) {
	t.Helper()
	if _, err := e.client.Get(ctx, &testingv1.GetRequest{Script: sc}); err != nil {
		t.Fatalf("Get: %v", err)
	}
}

// collect returns the metrics reader holds, by name.
func collect(t testing.TB, reader sdkmetric.Reader) map[string]metricdata.Metrics {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		t.Fatalf("Collect: %v", err)
	}
	out := map[string]metricdata.Metrics{}
	for _, sm := range rm.ScopeMetrics {
		if sm.Scope.Name != ScopeName {
			t.Errorf("scope %q, want %q", sm.Scope.Name, ScopeName)
		}
		for _, m := range sm.Metrics {
			out[m.Name] = m
		}
	}
	return out
}

// attrMap returns set as a map of strings.
func attrMap(set attribute.Set) map[string]string {
	out := map[string]string{}
	for _, kv := range set.ToSlice() {
		out[string(kv.Key)] = kv.Value.String()
	}
	return out
}

func keysOf(set attribute.Set) []string {
	var keys []string
	for _, kv := range set.ToSlice() {
		keys = append(keys, string(kv.Key))
	}
	sort.Strings(keys)
	return keys
}

// histogram returns the one data point of the histogram name.
func histogram[N int64 | float64](t *testing.T, ms map[string]metricdata.Metrics, name string) metricdata.HistogramDataPoint[N] {
	t.Helper()
	m, ok := ms[name]
	if !ok {
		t.Fatalf("%s not recorded", name)
	}
	h, ok := m.Data.(metricdata.Histogram[N])
	if !ok {
		t.Fatalf("%s is a %T", name, m.Data)
	}
	if len(h.DataPoints) != 1 {
		t.Fatalf("%s has %d data points, want 1", name, len(h.DataPoints))
	}
	return h.DataPoints[0]
}

// sum returns the counter name's data points by their attributes.
func sum(t *testing.T, ms map[string]metricdata.Metrics, name string) []metricdata.DataPoint[int64] {
	t.Helper()
	m, ok := ms[name]
	if !ok {
		t.Fatalf("%s not recorded", name)
	}
	s, ok := m.Data.(metricdata.Sum[int64])
	if !ok {
		t.Fatalf("%s is a %T", name, m.Data)
	}
	if !s.IsMonotonic {
		t.Errorf("%s is not monotonic", name)
	}
	return s.DataPoints
}

// wantCallAttrs checks the attributes of a histogram recorded for Get.
func wantCallAttrs(t *testing.T, name string, set attribute.Set) {
	t.Helper()
	got := attrMap(set)
	want := map[string]string{AttrMethod: getMethod, AttrTarget: Other}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("%s attributes %v, want %v", name, got, want)
	}
}

// instrumentSpy is a MeterProvider that keeps the options each histogram
// was created with, and creates it on the SDK's.
type instrumentSpy struct {
	metric.MeterProvider
	mu    sync.Mutex
	hists map[string]metric.Float64HistogramConfig
}

type spyMeter struct {
	metric.Meter
	spy *instrumentSpy
}

func (s *instrumentSpy) Meter(name string, opts ...metric.MeterOption) metric.Meter {
	return spyMeter{s.MeterProvider.Meter(name, opts...), s}
}

func (m spyMeter) Int64Histogram(name string, opts ...metric.Int64HistogramOption) (metric.Int64Histogram, error) {
	c := metric.NewInt64HistogramConfig(opts...)
	m.spy.keep(name, c.Unit(), c.Description(), c.ExplicitBucketBoundaries())
	return m.Meter.Int64Histogram(name, opts...)
}

func (m spyMeter) Float64Histogram(name string, opts ...metric.Float64HistogramOption) (metric.Float64Histogram, error) {
	c := metric.NewFloat64HistogramConfig(opts...)
	m.spy.keep(name, c.Unit(), c.Description(), c.ExplicitBucketBoundaries())
	return m.Meter.Float64Histogram(name, opts...)
}

func (s *instrumentSpy) keep(name, unit, desc string, bounds []float64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.hists[name] = metric.NewFloat64HistogramConfig(metric.WithUnit(unit), metric.WithDescription(desc), metric.WithExplicitBucketBoundaries(bounds...))
}

// a66Buckets are gRFC A66's latency buckets, in seconds.
var a66Buckets = []float64{0, 0.00001, 0.00005, 0.0001, 0.0003, 0.0006, 0.0008, 0.001, 0.002, 0.003, 0.004, 0.005, 0.006, 0.008, 0.01, 0.013, 0.016, 0.02, 0.025, 0.03, 0.04, 0.05, 0.065, 0.08, 0.1, 0.13, 0.16, 0.2, 0.25, 0.3, 0.4, 0.5, 0.65, 0.8, 1, 2, 5, 10, 20, 50, 100}

// TestA96Instruments checks gRFC A96's four instruments as the gRFC
// defines them: name, unit, explicit bucket boundaries and attributes, both
// as created and as the SDK exports them after a retried and a hedged call.
func TestA96Instruments(t *testing.T) {
	callAttrs := []string{"grpc.method", "grpc.target"}
	table := []struct {
		name     string
		unit     string
		buckets  []float64
		attrs    []string
		recorded bool
	}{
		{"grpc.client.call.retries", "{retry}", []float64{1, 2, 3, 4, 5}, callAttrs, true},
		{"grpc.client.call.transparent_retries", "{transparent_retry}", []float64{1, 2, 3, 4, 5, 10}, callAttrs, false},
		{"grpc.client.call.hedges", "{hedge}", []float64{1, 2, 3, 4, 5}, callAttrs, true},
		{"grpc.client.call.retry_delay", "s", a66Buckets, callAttrs, true},
	}

	reader := sdkmetric.NewManualReader()
	spy := &instrumentSpy{MeterProvider: sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader)), hists: map[string]metric.Float64HistogramConfig{}}
	retry := newEnv(t, retryConfig, Options{MeterProvider: spy})
	retry.get(t, context.Background(), &testingv1.Script{Key: "retry", FailAttempts: 2})
	hedge := newEnv(t, hedgeConfig, Options{MeterProvider: spy})
	hedge.get(t, context.Background(), &testingv1.Script{Key: "hedge", AttemptDelays: durations(time.Second, time.Second)})
	ms := collect(t, reader)

	for _, tc := range table {
		t.Run(tc.name, func(t *testing.T) {
			spy.mu.Lock()
			c, ok := spy.hists[tc.name]
			spy.mu.Unlock()
			if !ok {
				t.Fatalf("no histogram %s created", tc.name)
			}
			if c.Unit() != tc.unit {
				t.Errorf("unit %q, want %q", c.Unit(), tc.unit)
			}
			if c.Description() == "" {
				t.Errorf("no description")
			}
			if !slices.Equal(c.ExplicitBucketBoundaries(), tc.buckets) {
				t.Errorf("buckets %v, want %v", c.ExplicitBucketBoundaries(), tc.buckets)
			}
			m, ok := ms[tc.name]
			if !tc.recorded {
				if ok {
					t.Errorf("%s recorded: %+v", tc.name, m)
				}
				return
			}
			if !ok {
				t.Fatalf("%s not recorded", tc.name)
			}
			if m.Unit != tc.unit {
				t.Errorf("exported unit %q, want %q", m.Unit, tc.unit)
			}
			var bounds [][]float64
			var keys [][]string
			switch d := m.Data.(type) {
			case metricdata.Histogram[int64]:
				for _, dp := range d.DataPoints {
					bounds, keys = append(bounds, dp.Bounds), append(keys, keysOf(dp.Attributes))
				}
			case metricdata.Histogram[float64]:
				for _, dp := range d.DataPoints {
					bounds, keys = append(bounds, dp.Bounds), append(keys, keysOf(dp.Attributes))
				}
			default:
				t.Fatalf("exported as %T, want a histogram", m.Data)
			}
			if len(bounds) == 0 {
				t.Fatalf("no data points")
			}
			for i := range bounds {
				if !slices.Equal(bounds[i], tc.buckets) {
					t.Errorf("exported buckets %v, want %v", bounds[i], tc.buckets)
				}
				if !slices.Equal(keys[i], tc.attrs) {
					t.Errorf("exported attributes %v, want %v", keys[i], tc.attrs)
				}
			}
		})
	}
}

func durations(ds ...time.Duration) []*durationpb.Duration {
	out := make([]*durationpb.Duration, len(ds))
	for i, d := range ds {
		out[i] = durationpb.New(d)
	}
	return out
}

func TestRetriedCall(t *testing.T) {
	e := newEnv(t, retryConfig, Options{})
	start := time.Now()
	e.get(t, context.Background(), &testingv1.Script{Key: "k", FailAttempts: 2})
	took := time.Since(start)
	ms := collect(t, e.reader)

	r := histogram[int64](t, ms, MetricRetries)
	wantCallAttrs(t, MetricRetries, r.Attributes)
	if r.Count != 1 || r.Sum != 2 {
		t.Errorf("retries count %d sum %d, want 1 and 2", r.Count, r.Sum)
	}
	d := histogram[float64](t, ms, MetricRetryDelay)
	wantCallAttrs(t, MetricRetryDelay, d.Attributes)
	// The pauses are 10ms and 20ms; scheduling can only add to them.
	if d.Count != 1 || d.Sum < 0.030 || d.Sum > took.Seconds() || d.Sum >= 1 {
		t.Errorf("retry_delay count %d sum %gs, want 1 and [0.03s, %gs]", d.Count, d.Sum, took.Seconds())
	}
	for _, name := range []string{MetricHedges, MetricTransparentRetries, MetricCallDeferred} {
		if _, ok := ms[name]; ok {
			t.Errorf("%s recorded", name)
		}
	}
	ends := sum(t, ms, MetricCallEnds)
	if len(ends) != 1 || ends[0].Value != 1 {
		t.Fatalf("ends %+v, want one call", ends)
	}
	want := map[string]string{AttrMethod: getMethod, AttrTarget: Other, AttrReason: "success", AttrStatus: "OK", AttrCriticality: "CRITICAL"}
	if got := attrMap(ends[0].Attributes); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("ends attributes %v, want %v", got, want)
	}
}

func TestFirstAttemptSuccess(t *testing.T) {
	e := newEnv(t, retryConfig, Options{})
	e.get(t, context.Background(), &testingv1.Script{Key: "k"})
	e.get(t, context.Background(), &testingv1.Script{})
	ms := collect(t, e.reader)
	for _, name := range []string{MetricRetries, MetricRetryDelay, MetricHedges, MetricTransparentRetries, MetricCallDeferred} {
		if m, ok := ms[name]; ok {
			t.Errorf("%s recorded: %+v", name, m)
		}
	}
	ends := sum(t, ms, MetricCallEnds)
	if len(ends) != 1 || ends[0].Value != 2 {
		t.Fatalf("ends %+v, want 2 calls under one set of attributes", ends)
	}
	if got := attrMap(ends[0].Attributes); got[AttrReason] != "success" || got[AttrStatus] != "OK" {
		t.Errorf("ends attributes %v, want reason success, status OK", got)
	}
}

func TestGiveUp(t *testing.T) {
	e := newEnv(t, retryConfig, Options{})
	_, err := e.client.Get(context.Background(), &testingv1.GetRequest{Script: &testingv1.Script{Key: "k", FailAttempts: 5}})
	if err == nil {
		t.Fatal("Get succeeded, want Unavailable")
	}
	ms := collect(t, e.reader)
	if r := histogram[int64](t, ms, MetricRetries); r.Count != 1 || r.Sum != 2 {
		t.Errorf("retries count %d sum %d, want 1 and 2", r.Count, r.Sum)
	}
	ends := sum(t, ms, MetricCallEnds)
	if len(ends) != 1 {
		t.Fatalf("ends %+v, want one", ends)
	}
	if got := attrMap(ends[0].Attributes); got[AttrReason] != policy.ReasonAttempts.String() || got[AttrStatus] != "UNAVAILABLE" {
		t.Errorf("ends attributes %v, want reason %q, status UNAVAILABLE", got, policy.ReasonAttempts)
	}
}

func TestHedgedCall(t *testing.T) {
	e := newEnv(t, hedgeConfig, Options{})
	// Attempts 1 and 2 take a second; attempt 3, sent 20ms in, wins.
	e.get(t, context.Background(), &testingv1.Script{Key: "k", AttemptDelays: durations(time.Second, time.Second)})
	ms := collect(t, e.reader)
	h := histogram[int64](t, ms, MetricHedges)
	wantCallAttrs(t, MetricHedges, h.Attributes)
	if h.Count != 1 || h.Sum != 2 {
		t.Errorf("hedges count %d sum %d, want 1 and 2", h.Count, h.Sum)
	}
	if _, ok := ms[MetricRetries]; ok {
		t.Errorf("%s recorded for a hedged call", MetricRetries)
	}
	// A hedged call's attempts overlap: its retry delay is 0.
	if d := histogram[float64](t, ms, MetricRetryDelay); d.Count != 1 || d.Sum != 0 {
		t.Errorf("retry_delay count %d sum %g, want 1 and 0", d.Count, d.Sum)
	}
}

func TestBudgetGauges(t *testing.T) {
	off := budget.DeferSettings{Mode: budget.DeferOff}
	tb, err := budget.New(budget.Settings{Kind: budget.KindTokenBucket, TokenBucket: budget.TokenBucketSettings{Capacity: 50, Initial: 20}, Defer: off})
	if err != nil {
		t.Fatal(err)
	}
	ratio, err := budget.New(budget.Settings{Kind: budget.KindRatio, Defer: off})
	if err != nil {
		t.Fatal(err)
	}
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	// The repeated bucket and the nil budget are dropped.
	if _, err := Option(Options{MeterProvider: mp, Budgets: []budget.Budget{tb, ratio, tb, nil}}); err != nil {
		t.Fatal(err)
	}
	check := func(wantLevel float64) {
		t.Helper()
		ms := collect(t, reader)
		for name, want := range map[string]map[string]float64{
			MetricBudgetLevel:    {"token-bucket": wantLevel, "ratio": ratio.State().Level},
			MetricBudgetCapacity: {"token-bucket": 50, "ratio": ratio.State().Capacity},
		} {
			m, ok := ms[name]
			if !ok {
				t.Fatalf("%s not recorded", name)
			}
			if m.Unit != "{retry}" {
				t.Errorf("%s unit %q", name, m.Unit)
			}
			g, ok := m.Data.(metricdata.Gauge[float64])
			if !ok {
				t.Fatalf("%s is a %T", name, m.Data)
			}
			got := map[string]float64{}
			for _, dp := range g.DataPoints {
				if keys := keysOf(dp.Attributes); !slices.Equal(keys, []string{AttrBudgetKind}) {
					t.Errorf("%s attributes %v", name, keys)
				}
				got[attrMap(dp.Attributes)[AttrBudgetKind]] = dp.Value
			}
			if fmt.Sprint(got) != fmt.Sprint(want) {
				t.Errorf("%s = %v, want %v", name, got, want)
			}
		}
	}
	check(20)
	if !tb.Allow(budget.Request{Number: 2}) {
		t.Fatal("the bucket refused a retry")
	}
	check(15) // a retry costs 5 tokens
}

func TestBackendsGauges(t *testing.T) {
	reader := sdkmetric.NewManualReader()
	bs, err := budget.NewBackends(budget.DefaultSettings())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Option(Options{MeterProvider: sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader)), Backends: []*budget.Backends{bs}, PerTarget: true}); err != nil {
		t.Fatal(err)
	}
	// Two methods of one target share its tokens: one point per target.
	const target = "dns:///gauges.test:443"
	bs.Get(target, "/a.S/M")
	bs.Get(target, "/a.S/N")
	bs.Get("dns:///other.test:443", "/a.S/M")
	st := bs.Get(target, "/a.S/M").State()
	ms := collect(t, reader)
	g := ms[MetricBudgetCapacity].Data.(metricdata.Gauge[float64])
	n := 0
	for _, p := range g.DataPoints {
		a := attrMap(p.Attributes)
		if a[AttrTarget] != target {
			continue
		}
		n++
		if p.Value != st.Capacity || a[AttrBudgetKind] != st.Kind {
			t.Errorf("capacity %+v, want budget.DefaultBackends()'s %s %g", p, st.Kind, st.Capacity)
		}
	}
	if n != 1 || len(g.DataPoints) != 2 {
		t.Errorf("%d points for %s, want 1 (the target's tokens), and 2 in all: %+v", n, target, g.DataPoints)
	}
}

// A backend the set forgot (idle) is no longer reported; one in use is.
func TestBackendsGaugesForget(t *testing.T) {
	reader := sdkmetric.NewManualReader()
	var mu sync.Mutex
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	clock := func() time.Time {
		mu.Lock()
		defer mu.Unlock()
		return now
	}
	advance := func(d time.Duration) {
		mu.Lock()
		now = now.Add(d)
		mu.Unlock()
	}
	bs, err := budget.NewBackends(budget.DefaultSettings(), budget.WithClock(clock))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Option(Options{MeterProvider: sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader)), Backends: []*budget.Backends{bs}, PerTarget: true}); err != nil {
		t.Fatal(err)
	}
	const idle, busy = "dns:///idle.test:443", "dns:///busy.test:443"
	bs.Get(idle, "/a.S/M")
	bs.Get(busy, "/a.S/M")
	targets := func() map[string]bool {
		t.Helper()
		out := map[string]bool{}
		for _, p := range collect(t, reader)[MetricBudgetLevel].Data.(metricdata.Gauge[float64]).DataPoints {
			out[attrMap(p.Attributes)[AttrTarget]] = true
		}
		return out
	}
	if got := targets(); !got[idle] || !got[busy] {
		t.Fatalf("targets reported %v, want both", got)
	}
	for range 12 { // an hour, the busy target called and the gauges read every 5 minutes
		advance(5 * time.Minute)
		bs.Get(busy, "/a.S/M")
		targets()
	}
	if got := targets(); got[idle] || !got[busy] {
		t.Fatalf("after an idle hour, targets reported %v, want %s alone", got, busy)
	}
}

// Two sets of tokens for one target (two DialOptions calls' States, or a
// State's and the default's) are what the process holds for it: their
// points add up, where an SDK would keep one of two points under the same
// attributes; a Backends named twice counts once.
func TestBackendsGaugesAddUpPerTarget(t *testing.T) {
	reader := sdkmetric.NewManualReader()
	var sets []*budget.Backends
	for range 2 {
		bs, err := budget.NewBackends(budget.DefaultSettings())
		if err != nil {
			t.Fatal(err)
		}
		sets = append(sets, bs)
	}
	const target = "dns:///sum.test:443"
	one := sets[0].Get(target, "/a.S/M")
	sets[1].Get(target, "/a.S/M")
	if !one.Allow(budget.Request{Number: 2}) {
		t.Fatal("a fresh default budget refused a retry")
	}
	if _, err := Option(Options{MeterProvider: sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader)), Backends: []*budget.Backends{sets[0], sets[1], sets[0]}, PerTarget: true}); err != nil {
		t.Fatal(err)
	}
	st0, st1 := sets[0].Get(target, "/a.S/M").State(), sets[1].Get(target, "/a.S/M").State()
	ms := collect(t, reader)
	for name, want := range map[string]float64{MetricBudgetLevel: st0.Level + st1.Level, MetricBudgetCapacity: st0.Capacity + st1.Capacity} {
		g := ms[name].Data.(metricdata.Gauge[float64])
		if len(g.DataPoints) != 1 || g.DataPoints[0].Value != want {
			t.Errorf("%s: %+v, want one point, %g", name, g.DataPoints, want)
		}
	}
}

// A policy file's budgets live in the interceptors' State: the gauges read
// the ones it holds at each collection, per target, and follow a reload
// that changes the file's budget.
func TestStatesGauges(t *testing.T) {
	reader := sdkmetric.NewManualReader()
	st := interceptor.NewState()
	rec, err := Option(Options{MeterProvider: sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader)), States: []*interceptor.State{st}, PerTarget: true})
	if err != nil {
		t.Fatal(err)
	}
	file := func(maxTokens int) *policy.Config {
		return parseConfig(t, fmt.Sprintf(`{"methodConfig": [{"name": [{"service": "stagger.testing.v1.TestService"}],
			"retryPolicy": {"maxAttempts": 2, "initialBackoff": "0.001s", "maxBackoff": "0.001s", "backoffMultiplier": 1, "retryableStatusCodes": ["UNAVAILABLE"]}}],
			"retryThrottling": {"maxTokens": %d, "tokenRatio": 0.1}}`, maxTokens))
	}
	src := policy.NewSource(file(10))
	srv := testserver.New()
	defer srv.Close()
	cc := srv.ClientConn(t, stagger.DialOptionsFromSource(src, interceptor.WithState(st), rec)...)
	client := testingv1.NewTestServiceClient(cc)
	capacity := func() map[string]float64 {
		out := map[string]float64{}
		ms := collect(t, reader)
		g, ok := ms[MetricBudgetCapacity].Data.(metricdata.Gauge[float64])
		if !ok {
			return out
		}
		for _, p := range g.DataPoints {
			a := attrMap(p.Attributes)
			if a[AttrBudgetKind] != "throttle" {
				t.Errorf("point %+v, want the file's throttle alone", p)
			}
			out[a[AttrTarget]] = p.Value
		}
		return out
	}
	if got := capacity(); len(got) != 0 {
		t.Errorf("before any call: %v, want no budget yet", got)
	}
	for i, maxTokens := range []int{10, 20} {
		if i > 0 {
			if err := src.Update(file(maxTokens)); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := client.Get(context.Background(), &testingv1.GetRequest{}); err != nil {
			t.Fatal(err)
		}
		if got := capacity(); len(got) != 1 || got[cc.Target()] != float64(maxTokens) {
			t.Errorf("capacity by target %v, want %s: %d", got, cc.Target(), maxTokens)
		}
	}
}

func TestSpanEvents(t *testing.T) {
	for _, noTraces := range []bool{false, true} {
		t.Run(fmt.Sprint("NoTraces=", noTraces), func(t *testing.T) {
			sr := tracetest.NewSpanRecorder()
			tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(sr))
			defer func() { _ = tp.Shutdown(context.Background()) }()
			e := newEnv(t, retryConfig, Options{NoTraces: noTraces})
			ctx, span := tp.Tracer("test").Start(context.Background(), "caller")
			e.get(t, ctx, &testingv1.Script{Key: "ok", FailAttempts: 2})
			_, _ = e.client.Get(ctx, &testingv1.GetRequest{Script: &testingv1.Script{Key: "fail", FailAttempts: 5}})
			span.End()
			ended := sr.Ended()
			if len(ended) != 1 {
				t.Fatalf("%d spans ended, want 1", len(ended))
			}
			var got []string
			for _, ev := range ended[0].Events() {
				a := map[string]any{}
				for _, kv := range ev.Attributes {
					a[string(kv.Key)] = kv.Value.AsInterface()
				}
				got = append(got, fmt.Sprintf("%s attempt=%v status=%v pause=%v reason=%v",
					ev.Name, a[AttrAttempt], a[AttrStatus], a[AttrPause], a[AttrReason]))
			}
			want := []string{
				"stagger.retry attempt=1 status=UNAVAILABLE pause=0.01 reason=<nil>",
				"stagger.retry attempt=2 status=UNAVAILABLE pause=0.02 reason=<nil>",
				"stagger.retry attempt=1 status=UNAVAILABLE pause=0.01 reason=<nil>",
				"stagger.retry attempt=2 status=UNAVAILABLE pause=0.02 reason=<nil>",
				"stagger.give_up attempt=3 status=UNAVAILABLE pause=0 reason=" + policy.ReasonAttempts.String(),
			}
			if noTraces {
				want = nil
			}
			if !slices.Equal(got, want) {
				t.Errorf("span events:\n%q\nwant\n%q", got, want)
			}
		})
	}
}

func TestNilMeterProviderUsesGlobal(t *testing.T) {
	reader := sdkmetric.NewManualReader()
	otel.SetMeterProvider(sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader)))
	t.Cleanup(func() { otel.SetMeterProvider(noop.NewMeterProvider()) })
	srv := testserver.New()
	t.Cleanup(srv.Close)
	opt, err := Option(Options{})
	if err != nil {
		t.Fatalf("Option: %v", err)
	}
	cc := srv.ClientConn(t, stagger.DialOptions(parseConfig(t, retryConfig), interceptor.WithBudget(nil), opt)...)
	if _, err := testingv1.NewTestServiceClient(cc).Get(context.Background(), &testingv1.GetRequest{Script: &testingv1.Script{Key: "global", FailAttempts: 1}}); err != nil {
		t.Fatalf("Get: %v", err)
	}
	ms := collect(t, reader)
	if r := histogram[int64](t, ms, MetricRetries); r.Count != 1 || r.Sum != 1 {
		t.Errorf("retries count %d sum %d, want 1 and 1", r.Count, r.Sum)
	}
	if ends := sum(t, ms, MetricCallEnds); len(ends) != 1 || ends[0].Value != 1 {
		t.Errorf("ends %+v, want one call", ends)
	}
}

// A breaker's key names its target: the transitions carry it only with
// PerTarget.
func TestBreakerTransitions(t *testing.T) {
	for _, perTarget := range []bool{false, true} {
		t.Run(fmt.Sprint("PerTarget=", perTarget), func(t *testing.T) {
			reader := sdkmetric.NewManualReader()
			r, err := newRecorder(Options{MeterProvider: sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader)), Budgets: []budget.Budget{}, PerTarget: perTarget})
			if err != nil {
				t.Fatal(err)
			}
			for _, key := range []string{"dns:///svc", "dns:///other"} {
				ch := breaker.Change{Key: key, From: breaker.StateClosed, To: breaker.StateOpen}
				r.hook(context.Background(), interceptor.Event{Kind: interceptor.EventBreaker, Method: ch.Key, Breaker: ch})
			}
			ms := collect(t, reader)
			got := map[string]int64{}
			for _, dp := range sum(t, ms, MetricBreakerTransitions) {
				got[fmt.Sprint(attrMap(dp.Attributes))] = dp.Value
			}
			from, to := breaker.StateClosed.String(), breaker.StateOpen.String()
			want := map[string]int64{fmt.Sprint(map[string]string{AttrBreakerFrom: from, AttrBreakerTo: to}): 2}
			if perTarget {
				want = map[string]int64{
					fmt.Sprint(map[string]string{AttrBreaker: "dns:///svc", AttrBreakerFrom: from, AttrBreakerTo: to}):   1,
					fmt.Sprint(map[string]string{AttrBreaker: "dns:///other", AttrBreakerFrom: from, AttrBreakerTo: to}): 1,
				}
			}
			if fmt.Sprint(got) != fmt.Sprint(want) {
				t.Errorf("transitions %v, want %v", got, want)
			}
			if _, ok := ms[MetricBudgetLevel]; ok {
				t.Errorf("budget gauges recorded with no budgets")
			}
		})
	}
}

// TestOptionError checks that an instrument that cannot be created is named.
func TestOptionError(t *testing.T) {
	_, err := Option(Options{MeterProvider: failingProvider{noop.NewMeterProvider()}})
	if err == nil || !errors.Is(err, errNoInstrument) {
		t.Fatalf("Option: %v, want errNoInstrument", err)
	}
	if want := "staggerotel: instrument " + MetricRetryDelay + ": "; len(err.Error()) < len(want) || err.Error()[:len(want)] != want {
		t.Errorf("error %q does not name %s", err, MetricRetryDelay)
	}
}

var errNoInstrument = errors.New("no instrument")

type failingProvider struct{ metric.MeterProvider }

type failingMeter struct{ metric.Meter }

func (p failingProvider) Meter(name string, opts ...metric.MeterOption) metric.Meter {
	return failingMeter{p.MeterProvider.Meter(name, opts...)}
}

func (failingMeter) Float64Histogram(string, ...metric.Float64HistogramOption) (metric.Float64Histogram, error) {
	return nil, errNoInstrument
}

// TestEndAllocs checks that a call's end costs no allocation once its
// method and target have been seen: a first-attempt success, and a retried
// call too; with the defaults and with PerTarget.
func TestEndAllocs(t *testing.T) {
	for _, perTarget := range []bool{false, true} {
		t.Run(fmt.Sprint("PerTarget=", perTarget), func(t *testing.T) {
			reader := sdkmetric.NewManualReader()
			r, err := newRecorder(Options{MeterProvider: sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader)), PerTarget: perTarget})
			if err != nil {
				t.Fatal(err)
			}
			ctx := context.Background()
			for _, tc := range []struct {
				name string
				e    interceptor.Event
			}{
				{"success", interceptor.Event{Kind: interceptor.EventEnd, Method: "/" + getMethod, StaticMethod: true, Attempt: 1, Reason: policy.ReasonSuccess, Code: codes.OK, Target: target, CanonicalTarget: target}},
				{"retried", interceptor.Event{Kind: interceptor.EventEnd, Method: "/" + getMethod, StaticMethod: true, Attempt: 3, Retries: 2, Delay: 30 * time.Millisecond, Reason: policy.ReasonSuccess, Code: codes.OK, Target: target, CanonicalTarget: target}},
				{"gave up", interceptor.Event{Kind: interceptor.EventEnd, Method: "/" + getMethod, StaticMethod: true, Attempt: 3, Retries: 2, Delay: 30 * time.Millisecond, Reason: policy.ReasonAttempts, Code: codes.Unavailable, Target: target, CanonicalTarget: target}},
			} {
				t.Run(tc.name, func(t *testing.T) {
					r.hook(ctx, tc.e) // warm-up: builds the attribute sets
					if n := testing.AllocsPerRun(1000, func() { r.hook(ctx, tc.e) }); n != 0 {
						t.Errorf("%v allocations per call end, want 0", n)
					}
				})
			}
			ms := collect(t, reader)
			if ends := sum(t, ms, MetricCallEnds); len(ends) != 2 {
				t.Errorf("ends has %d data points, want 2 (success and gave up)", len(ends))
			}
		})
	}
}

// TestDeferred checks that a call that waited for the budget records the
// wait, and that retry_delay, which includes it, is recorded too.
func TestDeferred(t *testing.T) {
	reader := sdkmetric.NewManualReader()
	r, err := newRecorder(Options{MeterProvider: sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader)), Budgets: []budget.Budget{}})
	if err != nil {
		t.Fatal(err)
	}
	r.hook(context.Background(), interceptor.Event{Kind: interceptor.EventEnd, Method: "/" + getMethod, StaticMethod: true, Target: target,
		Attempt: 2, Retries: 1, Delay: 300 * time.Millisecond, Deferred: 250 * time.Millisecond, Reason: policy.ReasonSuccess, Criticality: criticality.SheddablePlus})
	ms := collect(t, reader)
	d := histogram[float64](t, ms, MetricCallDeferred)
	want := map[string]string{AttrMethod: getMethod, AttrTarget: Other, AttrCriticality: "SHEDDABLE_PLUS"}
	if got := attrMap(d.Attributes); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("deferred attributes %v, want %v", got, want)
	}
	if d.Count != 1 || d.Sum != 0.25 || !slices.Equal(d.Bounds, deferredBuckets) {
		t.Errorf("deferred count %d sum %g bounds %v, want 1, 0.25 and %v", d.Count, d.Sum, d.Bounds, deferredBuckets)
	}
	if d := histogram[float64](t, ms, MetricRetryDelay); d.Count != 1 || d.Sum != 0.3 {
		t.Errorf("retry_delay count %d sum %g, want 1 and 0.3", d.Count, d.Sum)
	}
}

// A hedge's span event is named for it and has no reason (ReasonNone's
// name, "retry", used to be there).
func TestSpanEventHedgeHasNoReason(t *testing.T) {
	sr := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(sr))
	defer func() { _ = tp.Shutdown(context.Background()) }()
	e := newEnv(t, hedgeConfig, Options{})
	ctx, span := tp.Tracer("test").Start(context.Background(), "caller")
	e.get(t, ctx, &testingv1.Script{Key: "hedge", AttemptDelays: durations(time.Second)})
	span.End()
	var hedges int
	for _, ev := range sr.Ended()[0].Events() {
		if ev.Name != SpanEventHedge {
			continue
		}
		hedges++
		for _, kv := range ev.Attributes {
			if kv.Key == AttrReason {
				t.Errorf("hedge event has %s = %v, want none", AttrReason, kv.Value.AsInterface())
			}
		}
	}
	if hedges == 0 {
		t.Error("no hedge span event")
	}
}

// TestCriticalityAttribute: stagger's end counter carries the call's
// criticality (CRITICAL for a call that names none), one series per
// level; gRFC A96's histograms do not.
func TestCriticalityAttribute(t *testing.T) {
	e := newEnv(t, retryConfig, Options{})
	e.get(t, context.Background(), &testingv1.Script{Key: "a", FailAttempts: 1})
	e.get(t, criticality.NewContext(context.Background(), criticality.Sheddable), &testingv1.Script{Key: "b", FailAttempts: 1})
	if _, err := e.client.Get(context.Background(), &testingv1.GetRequest{Script: &testingv1.Script{Key: "c"}}, interceptor.WithCriticality(criticality.Sheddable)); err != nil {
		t.Fatal(err)
	}
	ms := collect(t, e.reader)
	got := map[string]int64{}
	for _, dp := range sum(t, ms, MetricCallEnds) {
		got[attrMap(dp.Attributes)[AttrCriticality]] += dp.Value
	}
	if want := map[string]int64{"CRITICAL": 1, "SHEDDABLE": 2}; fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("ends by criticality %v, want %v", got, want)
	}
	r := ms[MetricRetries].Data.(metricdata.Histogram[int64])
	if len(r.DataPoints) != 1 || r.DataPoints[0].Count != 2 {
		t.Fatalf("retries data points %+v, want one (the A96 attributes alone) counting 2 calls", r.DataPoints)
	}
	wantCallAttrs(t, MetricRetries, r.DataPoints[0].Attributes)
}

// TestTimerRefused: an attempt whose per-attempt timer fired and whose
// retry the budget refused (interceptor.EventTimerRanOn) is counted, by
// method and reason.
func TestTimerRefused(t *testing.T) {
	reader := sdkmetric.NewManualReader()
	r, err := newRecorder(Options{MeterProvider: sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader)), Budgets: []budget.Budget{}})
	if err != nil {
		t.Fatal(err)
	}
	for range 2 {
		r.hook(context.Background(), interceptor.Event{Kind: interceptor.EventTimerRanOn, Method: "/" + getMethod, StaticMethod: true, Attempt: 1, Code: codes.DeadlineExceeded, Reason: policy.ReasonBudget})
	}
	r.hook(context.Background(), interceptor.Event{Kind: interceptor.EventTimerRanOn, Method: "/" + getMethod, StaticMethod: true, Attempt: 1, Code: codes.DeadlineExceeded, Reason: policy.ReasonBreaker})
	got := map[string]int64{}
	for _, dp := range sum(t, collect(t, reader), MetricTimerRefused) {
		a := attrMap(dp.Attributes)
		if a[AttrMethod] != getMethod || len(a) != 2 {
			t.Errorf("attributes %v, want %s=%s and %s", a, AttrMethod, getMethod, AttrReason)
		}
		got[a[AttrReason]] = dp.Value
	}
	if want := map[string]int64{"budget": 2, "breaker": 1}; fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("%s = %v, want %v", MetricTimerRefused, got, want)
	}
}

// TestTargetAttributeFilter: with PerTarget, a target the filter accepts is
// recorded as its canonical self, one it rejects as "other", on the call
// metrics and the budget gauges alike (the gauges filter the budgets' key,
// the canonical target, as the interceptors key them; a front end's
// target, its key as named, likewise).
func TestTargetAttributeFilter(t *testing.T) {
	reader := sdkmetric.NewManualReader()
	bs, err := budget.NewBackends(budget.DefaultSettings())
	if err != nil {
		t.Fatal(err)
	}
	const orders = "dns:///orders.test:443"
	r, err := newRecorder(Options{MeterProvider: sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader)), Backends: []*budget.Backends{bs},
		PerTarget: true, TargetAttributeFilter: func(target string) bool { return target == orders }})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ dialled, canonical string }{{"orders.test:443", orders}, {"10.0.0.1:8080", "dns:///10.0.0.1:8080"}} {
		bs.Get(tc.canonical, "/"+getMethod)
		r.hook(context.Background(), interceptor.Event{Kind: interceptor.EventEnd, Method: "/" + getMethod, StaticMethod: true,
			Target: tc.dialled, CanonicalTarget: tc.canonical, Attempt: 1, Reason: policy.ReasonSuccess})
	}
	bs.Get("10.0.0.2:8080", "/"+getMethod)
	ms := collect(t, reader)
	ends := map[string]int64{}
	for _, dp := range sum(t, ms, MetricCallEnds) {
		ends[attrMap(dp.Attributes)[AttrTarget]] += dp.Value
	}
	if want := map[string]int64{orders: 1, Other: 1}; fmt.Sprint(ends) != fmt.Sprint(want) {
		t.Errorf("ends by target %v, want %v", ends, want)
	}
	st := bs.Get(orders, "/"+getMethod).State()
	capacity := map[string]float64{}
	for _, dp := range ms[MetricBudgetCapacity].Data.(metricdata.Gauge[float64]).DataPoints {
		capacity[attrMap(dp.Attributes)[AttrTarget]] = dp.Value
	}
	if want := map[string]float64{orders: st.Capacity, Other: 2 * st.Capacity}; fmt.Sprint(capacity) != fmt.Sprint(want) {
		t.Errorf("capacity by target %v, want %v", capacity, want)
	}
}

// TestStatusNames: grpc.status is spelt as gRFC A66 spells it; a code
// outside the 17 is "other".
func TestStatusNames(t *testing.T) {
	for c, want := range map[codes.Code]string{codes.OK: "OK", codes.Canceled: "CANCELLED", codes.Unavailable: "UNAVAILABLE",
		codes.DeadlineExceeded: "DEADLINE_EXCEEDED", codes.Unauthenticated: "UNAUTHENTICATED", codes.Code(17): Other, codes.Code(1<<31 - 1): Other} {
		if got := statusName(c); got != want {
			t.Errorf("statusName(%d) = %q, want %q", c, got, want)
		}
	}
}

// A server that answers each call with another status code outside the
// 17 (grpc-go passes any grpc-status up to 2^31-1) mints no series: 2,000
// calls, 2,000 codes, one stagger.client.call.ends series, status
// "other"; and the per-method cache behind it keeps one entry for them.
func TestHostileCodesMintNoSeries(t *testing.T) {
	e := newEnv(t, retryConfig, Options{})
	const calls = 2000
	for i := range calls {
		sc := &testingv1.Script{Key: fmt.Sprintf("k%d", i), FailAttempts: 1, Code: int32(17 + i*1000003%(1<<31-17))}
		if _, err := e.client.Get(context.Background(), &testingv1.GetRequest{Script: sc}); err == nil {
			t.Fatal("Get succeeded, want the server's code")
		}
	}
	ends := sum(t, collect(t, e.reader), MetricCallEnds)
	if len(ends) != 1 || ends[0].Value != calls || attrMap(ends[0].Attributes)[AttrStatus] != Other {
		t.Fatalf("stagger.client.call.ends has %d series (%+v); want one, of %d calls, status %q", len(ends), ends, calls, Other)
	}
	a := &callAttrs{method: "m", target: "t"}
	for i := range calls {
		a.end(endKey{policy.ReasonNotRetryable, codes.Code(17 + i), criticality.Critical})
	}
	n := 0
	a.ends.Range(func(any, any) bool { n++; return true })
	if n != 1 {
		t.Errorf("the ends cache holds %d entries after %d codes outside the 17, want 1", n, calls)
	}
}

package staggerotel

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/stagger-go/stagger/budget"
	"github.com/stagger-go/stagger/criticality"
	"github.com/stagger-go/stagger/interceptor"
	"github.com/stagger-go/stagger/policy"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc/codes"
)

// ScopeName is the instrumentation scope of the meter that records.
const ScopeName = "github.com/stagger-go/stagger/otel"

// The instruments' names (see the package documentation).
const (
	// gRFC A96.
	MetricRetries            = "grpc.client.call.retries"
	MetricTransparentRetries = "grpc.client.call.transparent_retries"
	MetricHedges             = "grpc.client.call.hedges"
	MetricRetryDelay         = "grpc.client.call.retry_delay"
	// stagger's own.
	MetricCallEnds           = "stagger.client.call.ends"
	MetricCallDeferred       = "stagger.client.call.deferred"
	MetricBudgetLevel        = "stagger.client.budget.level"
	MetricBudgetCapacity     = "stagger.client.budget.capacity"
	MetricBreakerTransitions = "stagger.client.breaker.transitions"
	// MetricTimerRefused counts the attempts whose per-attempt timer fired
	// and whose retry the budget or the breaker refused, so that the
	// attempt ran on past the timeout (interceptor.EventTimerRanOn), by
	// method and reason.
	MetricTimerRefused = "stagger.client.timer.refused"
)

// The attributes' keys.
const (
	AttrMethod      = "grpc.method"
	AttrTarget      = "grpc.target"
	AttrStatus      = "grpc.status"
	AttrReason      = "stagger.reason"
	AttrCriticality = "stagger.criticality"
	AttrBudgetKind  = "stagger.budget.kind"
	AttrBreaker     = "stagger.breaker"
	AttrBreakerFrom = "stagger.breaker.from"
	AttrBreakerTo   = "stagger.breaker.to"
	AttrAttempt     = "stagger.attempt"
	AttrPause       = "stagger.pause_s"
	// The reload metrics' (Options.Sources).
	AttrConfigPath   = "stagger.config.path"
	AttrConfigHash   = "stagger.config.hash"
	AttrReloadResult = "stagger.reload.result"
)

// Other is the value recorded for grpc.method of a generic method (a call
// without grpc.StaticMethodCallOption, which generated code passes) and
// for grpc.target unless Options.PerTarget records the target (or when
// Options.TargetAttributeFilter rejects it), as gRFC A66 and grpc-go's
// OpenTelemetry plugin record them.
const Other = "other"

// The reload metrics' names (Options.Sources).
const (
	// MetricConfigReloads counts a Source's reloads by result
	// ("success", "failure").
	MetricConfigReloads = "stagger.client.config.reloads"
	// MetricConfigGeneration is the generation of the config in use
	// (policy.Source.Loaded), with its hash.
	MetricConfigGeneration = "stagger.client.config.generation"
	// MetricConfigReloadFailed is 1 while the latest content of a Source's
	// file was refused (the last good config stays in use), else 0.
	MetricConfigReloadFailed = "stagger.client.config.reload_failed"
)

// The span events' names.
const (
	SpanEventRetry    = "stagger.retry"
	SpanEventGiveUp   = "stagger.give_up"
	SpanEventHedge    = "stagger.hedge"
	SpanEventDeferred = "stagger.deferred"
)

// The bucket boundaries: gRFC A96's for the counts, gRFC A66's latency
// buckets for the durations.
var (
	retryBuckets            = []float64{1, 2, 3, 4, 5}
	transparentRetryBuckets = []float64{1, 2, 3, 4, 5, 10}
	hedgeBuckets            = []float64{1, 2, 3, 4, 5}
	latencyBuckets          = []float64{0, 0.00001, 0.00005, 0.0001, 0.0003, 0.0006, 0.0008, 0.001, 0.002, 0.003, 0.004, 0.005, 0.006, 0.008, 0.01, 0.013, 0.016, 0.02, 0.025, 0.03, 0.04, 0.05, 0.065, 0.08, 0.1, 0.13, 0.16, 0.2, 0.25, 0.3, 0.4, 0.5, 0.65, 0.8, 1, 2, 5, 10, 20, 50, 100}
	// deferredBuckets are coarser: the histogram has a series per
	// criticality, and a Gate's waits run from tens of milliseconds to the
	// 10 s bound (the cardinality budget in the package documentation).
	deferredBuckets = []float64{0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10}
)

// cacheMax bounds each of the recorder's caches (attribute sets per method
// and target; targets as dialled to targets as recorded): a process that
// dials pod addresses as they come and go must not grow them without end.
// Past it a cache starts afresh, and rebuilds what calls still use.
const cacheMax = 1024

// Options configure Option.
type Options struct {
	// MeterProvider records the metrics; nil: otel.GetMeterProvider().
	MeterProvider metric.MeterProvider
	// Budgets are observed as gauges (level, capacity) with attribute
	// stagger.budget.kind; two of the same kind add up.
	Budgets []budget.Budget
	// Backends are observed as the same gauges: each target's tokens (its
	// methods' Gates share them) read once, and added up per kind with
	// every other target's, or, with PerTarget, per target (attribute
	// grpc.target). Two budgets of one kind for one target (two States',
	// or a State's and the default's) add up: the gauge is what the
	// process holds. A target the Backends forgot is no longer read.
	Backends []*budget.Backends
	// States are the interceptors' States (interceptor.State): the budgets
	// a policy file declares live there, built by the interceptors from
	// the file's settings. Each collection observes those a State holds
	// then, as Backends, so the gauges follow a reloaded file. Give the
	// same State to the interceptors with interceptor.WithState:
	//
	//	st := interceptor.NewState()
	//	rec, err := staggerotel.Option(staggerotel.Options{States: []*interceptor.State{st}})
	//	opts := stagger.DialOptions(cfg, interceptor.WithState(st), rec)
	//
	// When Budgets, Backends and States are all nil:
	// budget.DefaultBackends(), stagger.DialOptions' default.
	States []*interceptor.State
	// NoTraces turns off the span events.
	NoTraces bool
	// PerTarget records each target as itself: grpc.target is the call's
	// canonical target (grpc.ClientConn.CanonicalTarget, as gRFC A66 and
	// grpc-go's plugin record it) on the call metrics, and the budget
	// gauges have a point per target. Off (the default), grpc.target is
	// "other" and the gauges add up every target's budgets per kind, so
	// that the series a process exports do not grow with the number of
	// targets it dials (pod addresses that come and go). Turn it on for a
	// client of a few targets named for their services, or with a
	// TargetAttributeFilter that accepts only those.
	PerTarget bool
	// TargetAttributeFilter, with PerTarget, decides which canonical
	// targets are recorded as themselves; a target it rejects is recorded
	// as "other" (gRFC A66's target filter). nil: every target. It is
	// called once per target (until the recorder's caches start afresh),
	// not per call, from the goroutine that ends a call.
	TargetAttributeFilter func(target string) bool
	// Sources are policy Sources whose reloads are recorded (the reload
	// metrics in the package documentation), read when the metrics are
	// collected: successes and failures, the generation and hash of the
	// config in use, and whether the latest file was refused.
	Sources []*policy.Source
}

// Option returns the interceptor option that records, or an error (instrument
// creation failed; the error names the instrument). Give it to
// stagger.DialOptions, or to interceptor.UnaryClientInterceptor and
// interceptor.StreamClientInterceptor: both report to the same instruments.
//
// The budget gauges' callback is registered with the meter for as long as the
// MeterProvider lives: call Option once per MeterProvider, not per
// connection, and share the returned option.
func Option(o Options) (interceptor.Option, error) {
	r, err := newRecorder(o)
	if err != nil {
		return interceptor.Option{}, err
	}
	return interceptor.WithCallHook(r.hook), nil
}

// recorder holds the instruments and the cached attribute sets.
type recorder struct {
	retries, transparentRetries, hedges metric.Int64Histogram
	retryDelay, deferred                metric.Float64Histogram
	ends, transitions, timerRefused     metric.Int64Counter
	traces                              bool
	perTarget                           bool
	targets                             *targetNames

	// calls maps a callKey to its *callAttrs.
	calls boundedMap
}

// targetNames names targets as grpc.target records them.
type targetNames struct {
	perTarget bool
	filter    func(string) bool
	// byDialled maps a target as dialled (Event.Target, the budgets' key)
	// to the grpc.target recorded for it (PerTarget only).
	byDialled boundedMap
}

func newTargetNames(o Options) *targetNames {
	return &targetNames{perTarget: o.PerTarget, filter: o.TargetAttributeFilter}
}

// name returns the grpc.target recorded for a target dialled as dialled,
// whose canonical form canonical returns: "" without PerTarget.
func (n *targetNames) name(dialled string, canonical func() string) string {
	if !n.perTarget {
		return ""
	}
	if v, ok := n.byDialled.load(dialled); ok {
		return v.(string)
	}
	return n.byDialled.loadOrStore(dialled, n.accept(canonical())).(string)
}

// accept returns the grpc.target recorded for a canonical target under
// PerTarget.
func (n *targetNames) accept(target string) string {
	if target == "" || n.filter != nil && !n.filter(target) {
		return Other
	}
	return target
}

// gauge returns the budget gauges' key for a target as dialled: with
// PerTarget, the target as the call metrics record it (learnt from the
// calls' ends, else the filter applied to it as dialled); without, ("",
// false): every target's budgets add up per kind.
func (n *targetNames) gauge(dialled string) (string, bool) {
	if !n.perTarget {
		return "", false
	}
	if v, ok := n.byDialled.load(dialled); ok {
		return v.(string), true
	}
	return n.accept(dialled), true
}

// boundedMap is a sync.Map of at most cacheMax keys: past that it starts
// afresh.
type boundedMap struct {
	m sync.Map
	n atomic.Int64
}

func (b *boundedMap) load(k any) (any, bool) { return b.m.Load(k) }

// loadOrStore stores v under k unless k has a value, and returns k's value.
func (b *boundedMap) loadOrStore(k, v any) any {
	if b.n.Add(1) > cacheMax {
		b.m.Clear()
		b.n.Store(1)
	}
	v, _ = b.m.LoadOrStore(k, v)
	return v
}

// callKey names a method of a connection as recorded: grpc.method (the
// method without its leading slash, or "other") and the target as
// recorded ("" when PerTarget is off).
type callKey struct{ method, target string }

// endKey is a call's outcome and criticality.
type endKey struct {
	reason policy.Reason
	code   codes.Code
	crit   criticality.Level
}

// callAttrs are the options recording for one callKey, built once, so that
// recording allocates nothing: gRFC A96's histograms' (grpc.method,
// grpc.target); stagger's deferred histogram's, with the criticality, and
// its end counter's, with the reason, status and criticality, per outcome.
type callAttrs struct {
	method, target string
	record         []metric.RecordOption
	// deferred and success are per criticality (Level.Index).
	deferred [criticality.NumLevels][]metric.RecordOption
	success  [criticality.NumLevels][]metric.AddOption
	// ends maps an endKey to its []metric.AddOption (success excepted).
	ends sync.Map
}

func newRecorder(o Options) (*recorder, error) {
	mp := o.MeterProvider
	if mp == nil {
		mp = otel.GetMeterProvider()
	}
	m := mp.Meter(ScopeName)
	r := &recorder{traces: !o.NoTraces, perTarget: o.PerTarget, targets: newTargetNames(o)}
	var err error
	hist := func(name, unit, desc string, buckets []float64) metric.Int64Histogram {
		if err != nil {
			return nil
		}
		var h metric.Int64Histogram
		h, err = m.Int64Histogram(name, metric.WithUnit(unit), metric.WithDescription(desc), metric.WithExplicitBucketBoundaries(buckets...))
		if err != nil {
			err = fmt.Errorf("staggerotel: instrument %s: %w", name, err)
		}
		return h
	}
	fhist := func(name, unit, desc string, buckets []float64) metric.Float64Histogram {
		if err != nil {
			return nil
		}
		var h metric.Float64Histogram
		h, err = m.Float64Histogram(name, metric.WithUnit(unit), metric.WithDescription(desc), metric.WithExplicitBucketBoundaries(buckets...))
		if err != nil {
			err = fmt.Errorf("staggerotel: instrument %s: %w", name, err)
		}
		return h
	}
	counter := func(name, unit, desc string) metric.Int64Counter {
		if err != nil {
			return nil
		}
		var c metric.Int64Counter
		c, err = m.Int64Counter(name, metric.WithUnit(unit), metric.WithDescription(desc))
		if err != nil {
			err = fmt.Errorf("staggerotel: instrument %s: %w", name, err)
		}
		return c
	}
	r.retries = hist(MetricRetries, "{retry}",
		"Number of retries during the client call. If there were no retries, 0 is not reported.", retryBuckets)
	if err == nil {
		// Shared with TransparentRetries, which records it.
		r.transparentRetries, err = transparentRetriesHistogram(m)
	}
	r.hedges = hist(MetricHedges, "{hedge}",
		"Number of hedges during the client call. If there were no hedges, 0 is not reported.", hedgeBuckets)
	r.retryDelay = fhist(MetricRetryDelay, "s",
		"Total time of delay while there is no active attempt during the client call; recorded for calls that retried or hedged.", latencyBuckets)
	r.ends = counter(MetricCallEnds, "{call}", "Calls that stagger ran, by why they ended and their final status.")
	r.deferred = fhist(MetricCallDeferred, "s", "Time a call waited for the retry budget to admit a retry; recorded for calls that waited.", deferredBuckets)
	r.transitions = counter(MetricBreakerTransitions, "{transition}", "Circuit breaker state changes.")
	r.timerRefused = counter(MetricTimerRefused, "{attempt}", "Attempts whose per-attempt timeout fired and ran on because the retry budget or the circuit breaker refused the retry.")
	if err != nil {
		return nil, err
	}
	level, err := m.Float64ObservableGauge(MetricBudgetLevel, metric.WithUnit("{retry}"),
		metric.WithDescription("The retry budget's current level (tokens, or the retries it could allow now)."))
	if err != nil {
		return nil, fmt.Errorf("staggerotel: instrument %s: %w", MetricBudgetLevel, err)
	}
	capacity, err := m.Float64ObservableGauge(MetricBudgetCapacity, metric.WithUnit("{retry}"),
		metric.WithDescription("The largest level the retry budget can reach."))
	if err != nil {
		return nil, fmt.Errorf("staggerotel: instrument %s: %w", MetricBudgetCapacity, err)
	}
	budgets, backends, states := o.Budgets, o.Backends, o.States
	if budgets == nil && backends == nil && states == nil {
		backends = []*budget.Backends{budget.DefaultBackends()}
	}
	budgets = uniqueBudgets(budgets)
	if len(budgets) > 0 || len(backends) > 0 || len(states) > 0 {
		_, err = m.RegisterCallback(func(_ context.Context, obs metric.Observer) error {
			for k, v := range budgetSums(budgets, backends, states, r.targets.gauge) {
				attrs := []attribute.KeyValue{attribute.String(AttrBudgetKind, k.kind)}
				if k.backend {
					attrs = append(attrs, attribute.String(AttrTarget, k.target))
				}
				opt := metric.WithAttributes(attrs...)
				obs.ObserveFloat64(level, v.level, opt)
				obs.ObserveFloat64(capacity, v.capacity, opt)
			}
			return nil
		}, level, capacity)
		if err != nil {
			return nil, fmt.Errorf("staggerotel: callback of %s and %s: %w", MetricBudgetLevel, MetricBudgetCapacity, err)
		}
	}
	if err := registerReloads(m, o.Sources); err != nil {
		return nil, err
	}
	return r, nil
}

// recordedTarget returns the grpc.target recorded for e's call ("" without
// PerTarget), and remembers it for the budget gauges (which know the
// target as dialled).
func (r *recorder) recordedTarget(e *interceptor.Event) string {
	return r.targets.name(e.Target, func() string {
		if e.CanonicalTarget != "" {
			return e.CanonicalTarget
		}
		return e.Target // an event built by hand
	})
}

// recordedMethod returns the grpc.method recorded for e's call: the method
// without its leading slash for a method generated code registered
// (Event.StaticMethod), else "other".
func recordedMethod(e *interceptor.Event) string {
	if !e.StaticMethod {
		return Other
	}
	return strings.TrimPrefix(e.Method, "/")
}

// statusNames are the codes' names as gRFC A66 spells them (grpc.status).
var statusNames = [...]string{"OK", "CANCELLED", "UNKNOWN", "INVALID_ARGUMENT", "DEADLINE_EXCEEDED", "NOT_FOUND",
	"ALREADY_EXISTS", "PERMISSION_DENIED", "RESOURCE_EXHAUSTED", "FAILED_PRECONDITION", "ABORTED", "OUT_OF_RANGE",
	"UNIMPLEMENTED", "INTERNAL", "UNAVAILABLE", "DATA_LOSS", "UNAUTHENTICATED"}

// statusName returns c's name as gRFC A66 and grpc-go's plugin record it
// ("UNAVAILABLE"; "CODE(17)" for a code outside the 17).
func statusName(c codes.Code) string {
	if int(c) < len(statusNames) {
		return statusNames[c]
	}
	return "CODE(" + strconv.FormatUint(uint64(c), 10) + ")"
}

// gaugeKey is one point of the budget gauges: a kind, and for a backend's
// budget its target.
type gaugeKey struct {
	kind, target string
	backend      bool
}

// gaugeSum is the level and capacity of the budgets under one gaugeKey.
type gaugeSum struct{ level, capacity float64 }

// budgetSums reads every budget once and adds up those under one key: two
// budgets of one kind for one target (two States, each holding a file's
// budget for it, or a State and budget.DefaultBackends()) are two sets of
// tokens the process spends on that target, and an SDK keeps one of two
// observations under the same attributes, so each would hide the other.
// A Backends named twice counts once; a target's methods' Gates share its
// tokens and count once.
//
// target maps a budget's target as dialled to its key: ("", false) adds
// up every target's budgets of a kind with the process-wide Budgets'.
func budgetSums(budgets []budget.Budget, backends []*budget.Backends, states []*interceptor.State, target func(string) (string, bool)) map[gaugeKey]gaugeSum {
	sums := map[gaugeKey]gaugeSum{}
	add := func(k gaugeKey, st budget.State) {
		v := sums[k]
		sums[k] = gaugeSum{v.level + st.Level, v.capacity + st.Capacity}
	}
	for _, b := range budgets {
		st := b.State()
		add(gaugeKey{kind: st.Kind}, st)
	}
	all := backends
	for _, st := range states {
		all = append(all[:len(all):len(all)], st.Budgets()...)
	}
	seen := map[*budget.Backends]bool{}
	for _, bs := range all {
		if bs == nil || seen[bs] {
			continue
		}
		seen[bs] = true
		last := ""
		for i, st := range bs.States() {
			if i > 0 && st.Target == last {
				continue // the target's other methods' Gates: the same tokens
			}
			last = st.Target
			t, per := target(st.Target)
			add(gaugeKey{st.Kind, t, per}, st.State)
		}
	}
	return sums
}

// uniqueBudgets returns bs without nil budgets and repeats.
func uniqueBudgets(bs []budget.Budget) []budget.Budget {
	out := make([]budget.Budget, 0, len(bs))
next:
	for _, b := range bs {
		if b == nil {
			continue
		}
		for _, seen := range out {
			if sameBudget(seen, b) {
				continue next
			}
		}
		out = append(out, b)
	}
	return out
}

// sameBudget compares two budgets, false for incomparable dynamic types.
func sameBudget(a, b budget.Budget) (same bool) {
	defer func() {
		if recover() != nil {
			same = false
		}
	}()
	return a == b
}

// attrs returns the cached options of e's call.
func (r *recorder) attrs(e *interceptor.Event) *callAttrs {
	k := callKey{recordedMethod(e), r.recordedTarget(e)}
	if v, ok := r.calls.load(k); ok {
		return v.(*callAttrs)
	}
	target := k.target
	if !r.perTarget {
		target = Other
	}
	set := attribute.NewSet(attribute.String(AttrMethod, k.method), attribute.String(AttrTarget, target))
	a := &callAttrs{
		method: k.method,
		target: target,
		record: []metric.RecordOption{metric.WithAttributeSet(set)},
	}
	for i, l := range criticality.Levels() {
		a.deferred[i] = []metric.RecordOption{metric.WithAttributeSet(attribute.NewSet(
			attribute.String(AttrMethod, k.method),
			attribute.String(AttrTarget, target),
			attribute.String(AttrCriticality, l.String()),
		))}
		a.success[i] = a.endOptions(endKey{policy.ReasonSuccess, codes.OK, l})
	}
	return r.calls.loadOrStore(k, a).(*callAttrs)
}

func (a *callAttrs) endOptions(k endKey) []metric.AddOption {
	set := attribute.NewSet(
		attribute.String(AttrMethod, a.method),
		attribute.String(AttrTarget, a.target),
		attribute.String(AttrReason, k.reason.String()),
		attribute.String(AttrStatus, statusName(k.code)),
		attribute.String(AttrCriticality, k.crit.String()),
	)
	return []metric.AddOption{metric.WithAttributeSet(set)}
}

// end returns the end counter's options for the outcome k (k.crit one of
// the four levels).
func (a *callAttrs) end(k endKey) []metric.AddOption {
	if k.reason == policy.ReasonSuccess && k.code == codes.OK {
		return a.success[k.crit.Index()]
	}
	if v, ok := a.ends.Load(k); ok {
		return v.([]metric.AddOption)
	}
	v, _ := a.ends.LoadOrStore(k, a.endOptions(k))
	return v.([]metric.AddOption)
}

// hook is the call hook.
func (r *recorder) hook(ctx context.Context, e interceptor.Event) {
	switch e.Kind {
	case interceptor.EventEnd:
		r.recordEnd(ctx, &e)
	case interceptor.EventBreaker:
		// Rare (a state change), so the attributes are built per event.
		// The breaker's key names its target: only with PerTarget.
		from, to := attribute.String(AttrBreakerFrom, e.Breaker.From.String()), attribute.String(AttrBreakerTo, e.Breaker.To.String())
		if r.perTarget {
			r.transitions.Add(ctx, 1, metric.WithAttributes(attribute.String(AttrBreaker, e.Breaker.Key), from, to))
		} else {
			r.transitions.Add(ctx, 1, metric.WithAttributes(from, to))
		}
	case interceptor.EventTimerRanOn:
		// Rare (a refusal), so the attributes are built per event.
		r.timerRefused.Add(ctx, 1, metric.WithAttributes(
			attribute.String(AttrMethod, recordedMethod(&e)),
			attribute.String(AttrReason, e.Reason.String()),
		))
	case interceptor.EventRetry:
		r.spanEvent(ctx, SpanEventRetry, &e)
	case interceptor.EventGiveUp:
		r.spanEvent(ctx, SpanEventGiveUp, &e)
	case interceptor.EventHedge:
		r.spanEvent(ctx, SpanEventHedge, &e)
	case interceptor.EventDeferred:
		r.spanEvent(ctx, SpanEventDeferred, &e)
	}
}

func (r *recorder) recordEnd(ctx context.Context, e *interceptor.Event) {
	a := r.attrs(e)
	// Effective: an event built by hand may leave it Unset.
	crit := e.Criticality.Effective()
	r.ends.Add(ctx, 1, a.end(endKey{e.Reason, e.Code, crit})...)
	if e.Retries > 0 {
		r.retries.Record(ctx, int64(e.Retries), a.record...)
	}
	if e.Hedges > 0 {
		r.hedges.Record(ctx, int64(e.Hedges), a.record...)
	}
	if e.Retries+e.Hedges > 0 {
		r.retryDelay.Record(ctx, seconds(e.Delay), a.record...)
	}
	if e.Deferred > 0 {
		r.deferred.Record(ctx, seconds(e.Deferred), a.deferred[crit.Index()]...)
	}
}

func (r *recorder) spanEvent(ctx context.Context, name string, e *interceptor.Event) {
	if !r.traces {
		return
	}
	span := trace.SpanFromContext(ctx)
	if !span.IsRecording() {
		return
	}
	attrs := [4]attribute.KeyValue{
		attribute.Int(AttrAttempt, e.Attempt),
		attribute.String(AttrStatus, statusName(e.Code)),
		attribute.Float64(AttrPause, seconds(e.Pause)),
	}
	n := 3
	if e.Reason != policy.ReasonNone {
		// ReasonNone's name is "retry": a retry's or a hedge's event is
		// named for what it is, and has no reason.
		attrs[3], n = attribute.String(AttrReason, e.Reason.String()), 4
	}
	span.AddEvent(name, trace.WithAttributes(attrs[:n]...))
}

func seconds(d time.Duration) float64 { return d.Seconds() }

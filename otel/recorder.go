package staggerotel

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/stagger-go/stagger/criticality"
	"github.com/stagger-go/stagger/interceptor"
	"github.com/stagger-go/stagger/policy"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc/codes"
)

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
	// ends maps an endKey to its []metric.AddOption (success excepted):
	// codes past the 17 are one (codeOther), so it holds at most the
	// reasons times 18 codes times 4 levels.
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
	if err := registerBudgetGauges(m, o, r.targets); err != nil {
		return nil, err
	}
	if err := registerSwitch(m, o.States); err != nil {
		return nil, err
	}
	if err := registerReloads(m, o.Sources); err != nil {
		return nil, err
	}
	return r, nil
}

// statusNames are the codes' names as gRFC A66 spells them (grpc.status).
var statusNames = [...]string{"OK", "CANCELLED", "UNKNOWN", "INVALID_ARGUMENT", "DEADLINE_EXCEEDED", "NOT_FOUND",
	"ALREADY_EXISTS", "PERMISSION_DENIED", "RESOURCE_EXHAUSTED", "FAILED_PRECONDITION", "ABORTED", "OUT_OF_RANGE",
	"UNIMPLEMENTED", "INTERNAL", "UNAVAILABLE", "DATA_LOSS", "UNAUTHENTICATED"}

// codeOther stands for every code outside the 17: a server may send any
// grpc-status up to 2^31-1, and each would be a series of its own.
const codeOther = codes.Code(len(statusNames))

// statusName returns c's name as gRFC A66 spells it ("UNAVAILABLE"), Other
// for a code outside the 17.
func statusName(c codes.Code) string {
	if c < codeOther {
		return statusNames[c]
	}
	return Other
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
// the four levels; a code outside the 17 is codeOther).
func (a *callAttrs) end(k endKey) []metric.AddOption {
	k.code = min(k.code, codeOther)
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

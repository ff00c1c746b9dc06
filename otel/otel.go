package staggerotel

import (
	"github.com/stagger-go/stagger/budget"
	"github.com/stagger-go/stagger/interceptor"
	"github.com/stagger-go/stagger/policy"
	"go.opentelemetry.io/otel/metric"
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
	// MetricGateWaiting is the calls whose retry waits in a Gate now,
	// and MetricGateHealth the Gates at each health (AttrGateHealth):
	// what is held shows while it is held, not at the calls' ends.
	MetricGateWaiting = "stagger.client.gate.waiting"
	MetricGateHealth  = "stagger.client.gate.health"
	// MetricTimerRefused counts the attempts whose per-attempt timer fired
	// and whose retry the budget or the breaker refused, so that the
	// attempt ran on past the timeout (interceptor.EventTimerRanOn), by
	// method and reason.
	MetricTimerRefused = "stagger.client.timer.refused"
	// MetricSwitch is 1 while stagger is switched off, else 0, with
	// AttrSwitch: SwitchProcess (interceptor.SetDisabled, the
	// STAGGER_DISABLE environment variable) or SwitchFile (a policy file's
	// "disabled", as Options.States' interceptors follow it).
	MetricSwitch = "stagger.client.switch"
	// MetricCallbackPanics counts the panics of user code (hooks, loggers,
	// predicates, ...) stagger recovered in the process
	// (interceptor.RecoveredPanics).
	MetricCallbackPanics = "stagger.client.callback.panics"
)

// The attributes' keys.
const (
	AttrMethod      = "grpc.method"
	AttrTarget      = "grpc.target"
	AttrStatus      = "grpc.status"
	AttrReason      = "stagger.reason"
	AttrCriticality = "stagger.criticality"
	AttrBudgetKind  = "stagger.budget.kind"
	AttrGateHealth  = "stagger.gate.health"
	AttrBreaker     = "stagger.breaker"
	AttrBreakerFrom = "stagger.breaker.from"
	AttrBreakerTo   = "stagger.breaker.to"
	AttrAttempt     = "stagger.attempt"
	AttrPause       = "stagger.pause_s"
	// The reload metrics' (Options.Sources).
	AttrConfigPath   = "stagger.config.path"
	AttrConfigHash   = "stagger.config.hash"
	AttrReloadResult = "stagger.reload.result"
	// The switch gauge's (MetricSwitch).
	AttrSwitch = "stagger.switch"
)

// The values of AttrSwitch: what turned the switch.
const (
	SwitchProcess = "process"
	SwitchFile    = "file"
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
	// ("success", "warned", "failure").
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
	// stagger.budget.kind; two of the same kind add up. A Gate among them
	// (budget.Deferring) is observed by the Gate gauges too (waiting,
	// health), as are the Backends' and States' Gates.
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
	// not per call, from the goroutine that ends a call, and for each
	// target's budget gauges at each collection, from the collecting
	// goroutine: it must be safe for concurrent use.
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

// Package staggerotel records stagger's retries, hedges, budget waits,
// budgets and circuit breakers in OpenTelemetry: gRFC A96's retry metrics,
// a few of stagger's own, and span events on the caller's span.
//
//	metrics, err := staggerotel.Option(staggerotel.Options{MeterProvider: mp})
//	conn, err := grpc.NewClient(target, append(stagger.DialOptions(cfg, metrics),
//		grpc.WithTransportCredentials(insecure.NewCredentials()))...)
//
// Option builds on interceptor.WithCallHook: it hears every event of every
// call stagger runs, with the caller's context, and one EventEnd when the
// call ends (a unary call when it returns, a stream when it ends).
//
// # gRFC A96 metrics
//
// Recorded once per call, at its end, with the attributes grpc.method and
// grpc.target as gRFC A66 defines them and grpc-go's OpenTelemetry plugin
// records them (see "Attributes" below), so that stagger's series join the
// plugin's:
//
//   - grpc.client.call.retries, histogram, {retry}, buckets 1, 2, 3, 4, 5:
//     the retries of a call that retried (attempts after the first).
//     As A96 says, a value of 0 is not recorded: a call that did not retry
//     records nothing.
//   - grpc.client.call.hedges, histogram, {hedge}, buckets 1, 2, 3, 4, 5: the
//     hedges of a hedged call (attempts after the first); 0 is not recorded.
//   - grpc.client.call.retry_delay, histogram, s, gRFC A66's latency buckets
//     (0 to 100 s): the time the call spent between attempts with none
//     running (backoff pauses, pushback, budget waits). It is recorded only
//     for a call that retried or hedged, so that the calls that succeed at
//     once do not bury the distribution under zeros; a hedged call records
//     0, as its attempts overlap.
//   - grpc.client.call.transparent_retries, histogram, {transparent_retry},
//     buckets 1, 2, 3, 4, 5, 10: the transparent retries of a call that had
//     any; 0 is not recorded. Option only creates it (so that the name is
//     reserved and described): transparent retries (an attempt that never
//     left the client or never reached the server's application) are made
//     by grpc-go under each attempt stagger sends, where an interceptor
//     cannot see them. TransparentRetries records it (see below).
//
// # Transparent retries (opt-in)
//
// TransparentRetries returns dial options that record
// grpc.client.call.transparent_retries; put them before
// stagger.DialOptions, so that their interceptors run outside stagger's and
// count the whole call:
//
//	tr, err := staggerotel.TransparentRetries(staggerotel.Options{MeterProvider: mp})
//	conn, err := grpc.NewClient(target, append(append(tr, stagger.DialOptions(cfg, metrics)...),
//		grpc.WithTransportCredentials(insecure.NewCredentials()))...)
//
// (put after, they would count and record each of stagger's attempts as a
// call). Their interceptors give each call a counter in its context; their
// grpc stats.Handler adds one to it at each attempt grpc-go begins as a
// transparent retry (stats.Begin.IsTransparentRetryAttempt, grpc-go v1.42
// and later); the count is recorded, if above 0, when the call ends: a unary
// call when it returns, a stream when RecvMsg returns an error (io.EOF
// included) or when it could not be created. A stream the application
// abandons before that records nothing. For a stream stagger retries,
// grpc-go retries transparently only before its first message is sent:
// stagger turns grpc-go's replay buffer off (see package interceptor), so a
// stream refused after its first message fails its attempt, and stagger
// decides.
//
// It is opt-in because of its cost on every call: a stats handler makes
// grpc-go build a stats event for each step of each attempt (begin,
// headers, each message, trailers, end), and the counter, its context and
// the two more interceptors take a few more allocations. Over bufconn, a unary call that succeeds at
// once through stagger.DialOptions and Option (BenchmarkCall) went from
// 163 to 181 allocations (10.2 to 11.7 KB) per call with them.
//
// # stagger's metrics
//
//   - stagger.client.call.ends, counter, {call}: every call stagger ran, when
//     it ends, with grpc.method, grpc.target, stagger.reason (why it ended:
//     "success", "no policy" for a method no policy covers, "disabled" for
//     any call, whatever its status, made while stagger is switched off
//     (policy.ReasonDisabled: interceptor.SetDisabled, a policy file's
//     "disabled"; a call with interceptor.Disable is handed to grpc
//     untouched and not counted), or why it gave up,
//     policy.Reason's String), grpc.status (its final status code
//     as gRFC A66 spells it: "OK", "UNAVAILABLE", "DEADLINE_EXCEEDED", ...)
//     and stagger.criticality (the call's criticality, Event.Criticality:
//     "SHEDDABLE", "SHEDDABLE_PLUS", "CRITICAL" (also for a call that
//     names none) or "CRITICAL_PLUS"; see interceptor.WithCriticality).
//   - stagger.client.call.deferred, histogram, s, buckets 0.01, 0.025,
//     0.05, 0.1, 0.25, 0.5, 1, 2.5, 5 and 10 s: the time a call waited for
//     the budget to admit its retries (budget.Deferrer), recorded at its
//     end for a call that waited, with grpc.method, grpc.target and
//     stagger.criticality.
//   - stagger.client.budget.level and stagger.client.budget.capacity,
//     asynchronous gauges, {retry}, with stagger.budget.kind: each budget of
//     Options.Budgets, Options.Backends and the budgets that
//     Options.States' interceptor States hold then (a policy file's;
//     budget.DefaultBackends() when all three are nil), read by State()
//     when the metrics are collected. Budgets of one kind add up (the
//     tokens the process holds): by default across every target; with
//     Options.PerTarget, per target (attribute grpc.target), each read
//     once. A target the Backends forgot (idle for 5 minutes) is no longer
//     read: its points are gone from the next collection.
//   - stagger.client.gate.waiting, asynchronous gauge, {call}: the calls
//     whose retry waits in a Gate now (held: the budget refused the retry
//     and the call waits for a later admission; see budget.Gate), read
//     from the same budgets when the metrics are collected, so a held call
//     shows while it is held, not only at its end.
//     stagger.client.gate.health, asynchronous gauge, {gate}: the Gates
//     (one per method of a backend) at each health, attribute
//     stagger.gate.health ("quiet", "failing", "outage", "recovering":
//     budget.State.Health, budget.Healths), each reported, 0 included, so
//     that an outage that ends reads 0 rather than no data. Both add up
//     every target's Gates by default, and are per target (grpc.target)
//     with Options.PerTarget, as the budget gauges are; a budget without
//     a Gate has no point.
//   - stagger.client.switch, asynchronous gauge, 1 while stagger is
//     switched off (every call sent once: no retry, hedge or wait), else 0,
//     with stagger.switch saying by what: "process", the process's switch
//     (interceptor.Disabled: SetDisabled, the STAGGER_DISABLE environment
//     variable), and, with Options.States, "file", a policy file's
//     "disabled" (interceptor.State.Disabled: 1 when the file one of the
//     States' interceptors follow turns stagger off, as of the latest call
//     that followed a new file). Read when the metrics are collected: the
//     dashboard shows the switch while it is on, whether calls run or not.
//   - stagger.client.callback.panics, asynchronous counter, {panic}, no
//     attribute: the panics of user code (hooks, loggers, predicates,
//     resume functions, OnFinish, a breaker set's onChange) stagger
//     recovered in the process (interceptor.RecoveredPanics).
//   - stagger.client.breaker.transitions, counter, {transition}: a circuit
//     breaker's state changes, with stagger.breaker.from and
//     stagger.breaker.to ("closed", "open", "half-open") and, with
//     Options.PerTarget, stagger.breaker (the breaker's key: the target,
//     and the method under a per-method scope).
//   - stagger.client.timer.refused, counter, {attempt}: an attempt whose
//     per-attempt timeout fired and ran on past it, because the budget or
//     the breaker refused its retry (interceptor.EventTimerRanOn), with
//     grpc.method and stagger.reason ("budget", "breaker"): a timeout the
//     user set that did not cut.
//
// gRFC A96's histograms keep A96's attributes alone: stagger.criticality is
// on stagger's own metrics only.
//
// # Attributes
//
// grpc.method is the full method name without its leading slash
// ("stagger.testing.v1.TestService/Get") for a call that generated code
// made (it passes grpc.StaticMethodCallOption; interceptor.Event's
// StaticMethod), and "other" for a generic one (ClientConn.Invoke or
// NewStream without that option), as grpc-go's plugin records them: a
// proxy that forwards whatever methods it is asked cannot grow the series.
//
// grpc.target is "other" unless Options.PerTarget is set; then it is the
// connection's canonical target (grpc.ClientConn.CanonicalTarget:
// "dns:///10.0.0.5:8080" for a grpc.NewClient of "10.0.0.5:8080";
// interceptor.Event's CanonicalTarget), or "other" for a target that
// Options.TargetAttributeFilter rejects (gRFC A66's target filter). Per
// target is off by default because targets multiply: a client that dials
// pod addresses as they come and go would add series for every pod it
// ever called. Turn it on for a client of a few targets named for their
// services, or with a filter that accepts only those.
//
// grpc.status is the code's name as gRFC A66 spells it ("UNAVAILABLE",
// "CANCELLED"), on the metrics and the span events alike; a code outside
// the 17, which a server may send (any up to 2^31-1), is "other", so that
// no server can mint series. The ways a method's calls end are so at most
// 24 reasons times 18 statuses times 4 criticalities, and the cache of
// their attribute sets holds at most that many per method and target.
//
// # Cardinality budget
//
// Counted as Prometheus exports them, a histogram's buckets (+Inf
// included), _sum and _count each one series:
//
//   - per grpc.method and grpc.target value, at most 69 series from gRFC
//     A96's histograms (retries 8, hedges 8, retry_delay 44 and, with
//     TransparentRetries, transparent_retries 9), 13 per criticality that
//     waited from stagger.client.call.deferred (52 for all four), and one
//     per way its calls ended (reason, status and criticality) on
//     stagger.client.call.ends: at most 148 for calls that end in at most
//     27 ways; 2 per budget kind for the budget gauges of a target (with
//     PerTarget) or of the process; and 5 for the Gate gauges (waiting,
//     and one per health) of a target or of the process, when its budgets
//     defer.
//   - With the defaults, no series names a target: a process exports the
//     same number of series whatever the number of targets it dials. For
//     M methods (plus "other" for generic calls) that is at most M+1 times
//     the figure above, and the budget gauges, breaker transitions (6 at
//     most), timer refusals (2 per method), the switch gauge (2: its
//     process and file points) and the panics counter (1) besides. The
//     budget: at most 600 series in all for two methods, whatever the
//     number of targets.
//   - With PerTarget, at most 155 series per (target, method), the
//     target's gauges counted with each of its methods. The gauges of a
//     target the Backends forgot end at the next collection; its call
//     metrics end only with the MeterProvider (or at each export with a
//     delta-temporality exporter): an OpenTelemetry SDK keeps a synchronous
//     instrument's cumulative series for as long as it lives, so with
//     pod addresses they add up over every pod ever called. That is why
//     PerTarget is off by default.
//
// TestFleetCardinalityDefaults and TestFleetCardinalityPerTarget measure
// both over 2,000 pods dialled one after another (TestGateGaugesSeries the
// Gate gauges over 3,000 targets), and the live heap with
// the default metrics against the same run without them (within 2 times);
// BENCHMARKS.md ("Issue 64: series per process") has their figures.
//
// # Reload metrics
//
// With Options.Sources, each policy.Source is read when the metrics are
// collected, with attribute stagger.config.path (its file; none for a
// Source made by policy.NewSource):
//
//   - stagger.client.config.reloads, asynchronous counter, {reload}, with
//     stagger.reload.result: "success", a reload that swapped a new config
//     in (policy.Source.Loaded's generations after the first, less the
//     warned ones); "warned", a reload that swapped in a file that names
//     no method the process called or the known proto files declare (a
//     misspelt service) or turns off the retries of a method that had them
//     (policy.Source.Warned's count; SourceEvent.Warnings says why); and
//     "failure", a file that could not be read or parsed
//     (policy.Source.Refused's count: one per refusal, a file still
//     missing being one).
//   - stagger.client.config.generation, asynchronous gauge, {config}: the
//     generation of the config in use, with stagger.config.hash, the
//     SHA-256 of the file content it came from (none after
//     policy.Source.Update): which config is in force, on every process.
//   - stagger.client.config.reload_failed, asynchronous gauge: 1 while the
//     latest content of the file was refused and an older config stays in
//     use, else 0 (a file that went missing and came back as it was, 0).
//
// Recording a call's end costs no allocation once its method and target
// have been seen: the attribute sets are built once per method and target
// (and per reason, code and criticality) and kept, in caches bounded at
// 1,024 entries each (past that a cache starts afresh).
//
// # Span events
//
// Unless Options.NoTraces, each retry, give-up, hedge and budget deferral
// adds an event to the caller's span (trace.SpanFromContext of the call's
// context) when that span is recording: "stagger.retry", "stagger.give_up",
// "stagger.hedge" and "stagger.deferred", with the attributes
// stagger.attempt (the attempt that ended, or the hedge sent), grpc.status
// (that attempt's code), stagger.pause_s (the pause before the next
// attempt, in seconds) and, for a give-up, stagger.reason (a retry, a
// hedge and a deferral have none).
//
// # With grpc-go's OpenTelemetry plugin
//
// grpc-go's plugin (google.golang.org/grpc/stats/opentelemetry) records
// A66's per-call and per-attempt metrics; gRFC A96 has it record the same
// A96 names for grpc-go's own retries (grpc-go v1.85 does not yet).
// stagger.DialOptions turns grpc-go's retries off (grpc.WithDisableRetry),
// so grpc-go's A96 retry and hedge metrics, once it has them and they are
// enabled in its plugin, would stay at zero while stagger retries. Do not
// enable the same A96 names in both, or they are exported twice under one
// name (from two instrumentation scopes): leave them off in grpc-go's
// plugin (its optional metrics are off unless listed in its
// MetricsOptions), or drop them from grpc-go's scope with a view of the
// MeterProvider. grpc.client.call.transparent_retries is the one A96 metric
// that an interceptor cannot see: to take it from grpc-go, do not use
// TransparentRetries, and drop that name from this package's scope
// (ScopeName) with a view.
//
// Where the plugin goes in the interceptor chain decides what it counts.
// Installed before stagger.DialOptions (its dial option first), it wraps
// stagger: A66's per-call metrics see one call, however many attempts
// stagger made, and its per-attempt metrics see each attempt stagger sends,
// since grpc-go's attempt is below every interceptor. Installed after, its
// call metrics would count every attempt as a call.
//
// The plugin's series and this package's join on grpc.target, grpc.method
// and grpc.status (TestJoinsGRPCPlugin reads both from one reader) when
// PerTarget is set. grpc-go v1.85's plugin records every target, with no
// filter on the client side: for a client of pod addresses, drop
// grpc.target from its instruments with a view, as this package leaves it
// "other" by default:
//
//	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(exporter), sdkmetric.WithView(sdkmetric.NewView(
//		sdkmetric.Instrument{Scope: instrumentation.Scope{Name: "grpc-go"}},
//		sdkmetric.Stream{AttributeFilter: attribute.NewDenyKeysFilter("grpc.target")})))
package staggerotel

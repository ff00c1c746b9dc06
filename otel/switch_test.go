package staggerotel

import (
	"context"
	"testing"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/stagger-go/stagger"
	"github.com/stagger-go/stagger/interceptor"
	"github.com/stagger-go/stagger/policy"
	testingv1 "github.com/stagger-go/stagger/proto/stagger/testing/v1"
	"github.com/stagger-go/stagger/testserver"
)

// The switch shows on a metric: with it on, every call's end is counted
// with stagger.reason "disabled", a success (grpc.status OK) as a failure,
// and not as "success" or "no policy".
func TestSwitchShowsOnCallEnds(t *testing.T) {
	defer interceptor.SetDisabled(interceptor.Disabled())
	interceptor.SetDisabled(true)
	e := newEnv(t, retryConfig, Options{})
	e.get(t, context.Background(), &testingv1.Script{})
	_, _ = e.client.Get(context.Background(), &testingv1.GetRequest{Script: &testingv1.Script{Key: "failing", FailAttempts: 1}})
	byStatus := map[string]string{}
	for _, dp := range sum(t, collect(t, e.reader), MetricCallEnds) {
		a := attrMap(dp.Attributes)
		byStatus[a["grpc.status"]] = a[AttrReason]
	}
	if byStatus["OK"] != "disabled" || byStatus["UNAVAILABLE"] != "disabled" {
		t.Fatalf("call.ends' reason by status %v, want disabled for OK and UNAVAILABLE", byStatus)
	}
}

// The switch shows on its gauge while it is on, by what turned it: the
// process's (SetDisabled) at once, a policy file's "disabled" once a call
// followed the reloaded file (the State's interceptors turn it then), and
// 0 again when either is turned back.
func TestSwitchGauge(t *testing.T) {
	defer interceptor.SetDisabled(interceptor.Disabled())
	interceptor.SetDisabled(false)
	reader := sdkmetric.NewManualReader()
	st := interceptor.NewState()
	rec, err := Option(Options{MeterProvider: sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader)), States: []*interceptor.State{st}})
	if err != nil {
		t.Fatal(err)
	}
	src := policy.NewSource(parseConfig(t, retryConfig))
	srv := testserver.New()
	defer srv.Close()
	client := testingv1.NewTestServiceClient(srv.ClientConn(t, stagger.DialOptionsFromSource(src, interceptor.WithState(st), interceptor.WithBudget(nil), rec)...))
	call := func() {
		t.Helper()
		if _, err := client.Get(context.Background(), &testingv1.GetRequest{Script: &testingv1.Script{}}); err != nil {
			t.Fatal(err)
		}
	}
	gauge := func() map[string]int64 {
		t.Helper()
		out := map[string]int64{}
		g, ok := collect(t, reader)[MetricSwitch].Data.(metricdata.Gauge[int64])
		if !ok {
			t.Fatalf("no %s gauge", MetricSwitch)
		}
		for _, p := range g.DataPoints {
			a := attrMap(p.Attributes)
			if len(a) != 1 {
				t.Errorf("point %v, want %s alone", a, AttrSwitch)
			}
			out[a[AttrSwitch]] = p.Value
		}
		return out
	}
	want := func(step string, process, file int64) {
		t.Helper()
		if got := gauge(); len(got) != 2 || got[SwitchProcess] != process || got[SwitchFile] != file {
			t.Errorf("%s: %s %v, want process %d, file %d", step, MetricSwitch, got, process, file)
		}
	}
	call()
	want("on", 0, 0)
	interceptor.SetDisabled(true)
	call()
	want("SetDisabled(true)", 1, 0)
	interceptor.SetDisabled(false)
	want("SetDisabled(false)", 0, 0)
	if err := src.Update(parseConfig(t, `{"disabled": true, `+retryConfig[1:])); err != nil {
		t.Fatal(err)
	}
	call()
	want(`a file with "disabled": true`, 0, 1)
	if err := src.Update(parseConfig(t, retryConfig)); err != nil {
		t.Fatal(err)
	}
	call()
	want("the file without it", 0, 0)
}

// stagger.client.callback.panics reads interceptor.RecoveredPanics: a hook
// that panics on a call's end adds one per call.
func TestCallbackPanicsCounter(t *testing.T) {
	srv := testserver.New()
	defer srv.Close()
	reader := sdkmetric.NewManualReader()
	opt, err := Option(Options{MeterProvider: sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))})
	if err != nil {
		t.Fatal(err)
	}
	cc := srv.ClientConn(t, stagger.DialOptions(nil, opt, interceptor.WithCallHook(func(_ context.Context, e interceptor.Event) {
		if e.Kind == interceptor.EventEnd {
			panic("hook")
		}
	}))...)
	client := testingv1.NewTestServiceClient(cc)
	count := func() int64 {
		s, ok := collect(t, reader)[MetricCallbackPanics].Data.(metricdata.Sum[int64])
		if !ok || len(s.DataPoints) != 1 || !s.IsMonotonic {
			t.Fatalf("%s: %+v, want one monotonic point", MetricCallbackPanics, s)
		}
		return s.DataPoints[0].Value
	}
	before := count()
	for range 3 {
		if _, err := client.Get(context.Background(), &testingv1.GetRequest{Script: &testingv1.Script{}}); err != nil {
			t.Fatal(err)
		}
	}
	if got := count() - before; got != 3 {
		t.Errorf("%s grew by %d over 3 calls whose end hook panicked, want 3", MetricCallbackPanics, got)
	}
}

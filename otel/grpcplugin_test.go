package staggerotel

import (
	"context"
	"fmt"
	"testing"

	"github.com/stagger-go/stagger"
	"github.com/stagger-go/stagger/interceptor"
	testingv1 "github.com/stagger-go/stagger/proto/stagger/testing/v1"
	"github.com/stagger-go/stagger/testserver"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/sdk/instrumentation"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/stats/opentelemetry"
)

// TestJoinsGRPCPlugin reads stagger's series and grpc-go's OpenTelemetry
// plugin's from one exporter, for the same calls of a client dialled as a
// user would (grpc.NewClient of "127.0.0.1:port", the plugin's dial option
// before stagger.DialOptions, as docs/recipes.md sets them up): each call
// grpc-go's grpc.client.call.duration counts under (grpc.target,
// grpc.method, grpc.status), stagger's stagger.client.call.ends counts
// under the same values; generic calls are "other" in both, the target is
// the canonical "dns:///127.0.0.1:port" in both.
func TestJoinsGRPCPlugin(t *testing.T) {
	srv := testserver.New()
	defer srv.Close()
	addr, err := srv.StartTCP()
	if err != nil {
		t.Fatal(err)
	}
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	defer func() { _ = mp.Shutdown(context.Background()) }()
	rec, err := Option(Options{MeterProvider: mp, PerTarget: true})
	if err != nil {
		t.Fatal(err)
	}
	dial := []grpc.DialOption{opentelemetry.DialOption(opentelemetry.Options{MetricsOptions: opentelemetry.MetricsOptions{MeterProvider: mp}})}
	dial = append(dial, stagger.DialOptions(parseConfig(t, retryConfig), interceptor.WithBudget(nil), rec)...)
	cc, err := grpc.NewClient(addr, append(dial, grpc.WithTransportCredentials(insecure.NewCredentials()))...)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cc.Close() }()

	ctx := context.Background()
	client := testingv1.NewTestServiceClient(cc)
	get := func(sc *testingv1.Script) error {
		_, err := client.Get(ctx, &testingv1.GetRequest{Script: sc})
		return err
	}
	generic := func(sc *testingv1.Script) error {
		return cc.Invoke(ctx, testingv1.TestService_Get_FullMethodName, &testingv1.GetRequest{Script: sc}, new(testingv1.GetResponse))
	}
	for _, c := range []struct {
		call func(*testingv1.Script) error
		sc   *testingv1.Script
		ok   bool
	}{
		{get, &testingv1.Script{}, true},
		{get, &testingv1.Script{Key: "retried", FailAttempts: 1}, true},
		{get, &testingv1.Script{Key: "gave up", FailAttempts: 5}, false},
		{get, &testingv1.Script{Key: "not found", FailAttempts: 1, Code: 5}, false},
		{generic, &testingv1.Script{}, true},
		{generic, &testingv1.Script{Key: "generic gave up", FailAttempts: 5}, false},
	} {
		if err := c.call(c.sc); (err == nil) != c.ok {
			t.Fatalf("%v: error %v", c.sc, err)
		}
	}
	if _, err := client.Put(ctx, &testingv1.PutRequest{Script: &testingv1.Script{}}); err != nil {
		t.Fatal(err)
	}

	var rm metricdata.ResourceMetrics
	if err := reader.Collect(ctx, &rm); err != nil {
		t.Fatal(err)
	}
	key := func(ss series) string {
		tgt, _ := value(ss.attrs, AttrTarget)
		m, _ := value(ss.attrs, AttrMethod)
		st, _ := value(ss.attrs, AttrStatus)
		return fmt.Sprintf("%s %s %s", tgt, m, st)
	}
	grpcGo, ours := map[string]uint64{}, map[string]int64{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			switch m.Name {
			case "grpc.client.call.duration":
				for _, dp := range m.Data.(metricdata.Histogram[float64]).DataPoints {
					grpcGo[key(series{attrs: dp.Attributes})] += dp.Count
				}
			case MetricCallEnds:
				for _, dp := range m.Data.(metricdata.Sum[int64]).DataPoints {
					ours[key(series{attrs: dp.Attributes})] += dp.Value
				}
			}
		}
	}
	target := "dns:///" + addr
	want := map[string]int64{
		target + " " + getMethod + " OK":                  2,
		target + " " + getMethod + " UNAVAILABLE":         1,
		target + " " + getMethod + " NOT_FOUND":           1,
		target + " " + Other + " OK":                      1,
		target + " " + Other + " UNAVAILABLE":             1,
		target + " stagger.testing.v1.TestService/Put OK": 1,
	}
	if fmt.Sprint(ours) != fmt.Sprint(want) {
		t.Errorf("stagger's ends by target, method and status:\n%v\nwant\n%v", ours, want)
	}
	if fmt.Sprint(grpcGo) != fmt.Sprint(want) {
		t.Errorf("grpc-go's call durations by target, method and status:\n%v\nwant\n%v", grpcGo, want)
	}
}

// TestGRPCPluginTargetView checks the view the package documentation gives
// for a client of pod addresses: grpc-go's plugin records every target, and
// the view drops grpc.target from its instruments alone.
func TestGRPCPluginTargetView(t *testing.T) {
	srv := testserver.New()
	defer srv.Close()
	addr, err := srv.StartTCP()
	if err != nil {
		t.Fatal(err)
	}
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader), sdkmetric.WithView(sdkmetric.NewView(
		sdkmetric.Instrument{Scope: instrumentation.Scope{Name: "grpc-go"}},
		sdkmetric.Stream{AttributeFilter: attribute.NewDenyKeysFilter("grpc.target")})))
	defer func() { _ = mp.Shutdown(context.Background()) }()
	rec, err := Option(Options{MeterProvider: mp})
	if err != nil {
		t.Fatal(err)
	}
	dial := []grpc.DialOption{opentelemetry.DialOption(opentelemetry.Options{MetricsOptions: opentelemetry.MetricsOptions{MeterProvider: mp}})}
	dial = append(dial, stagger.DialOptions(parseConfig(t, retryConfig), interceptor.WithBudget(nil), rec)...)
	cc, err := grpc.NewClient(addr, append(dial, grpc.WithTransportCredentials(insecure.NewCredentials()))...)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cc.Close() }()
	if _, err := testingv1.NewTestServiceClient(cc).Get(context.Background(), &testingv1.GetRequest{Script: &testingv1.Script{}}); err != nil {
		t.Fatal(err)
	}
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	var grpcGo, ours int
	for _, sm := range rm.ScopeMetrics {
		for _, s := range seriesOf(metricdata.ResourceMetrics{ScopeMetrics: []metricdata.ScopeMetrics{sm}}) {
			_, has := value(s.attrs, AttrTarget)
			switch sm.Scope.Name {
			case "grpc-go":
				grpcGo++
				if has {
					t.Errorf("grpc-go's %s keeps %s", s.metric, AttrTarget)
				}
			case ScopeName:
				if s.metric == MetricCallEnds {
					ours++
					if v, _ := value(s.attrs, AttrTarget); v != Other {
						t.Errorf("stagger's %s has %s=%q, want %q", s.metric, AttrTarget, v, Other)
					}
				}
			}
		}
	}
	if grpcGo == 0 || ours == 0 {
		t.Errorf("%d series of grpc-go's, %d of stagger's ends: want both", grpcGo, ours)
	}
}

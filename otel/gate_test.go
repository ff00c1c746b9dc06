package staggerotel

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stagger-go/stagger"
	"github.com/stagger-go/stagger/budget"
	"github.com/stagger-go/stagger/interceptor"
	testingv1 "github.com/stagger-go/stagger/proto/stagger/testing/v1"
	"github.com/stagger-go/stagger/testserver"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
)

// gatePoints returns the Gate gauges' points: the calls waiting, and the
// Gates per health, by grpc.target ("" without the attribute).
func gatePoints(t *testing.T, reader sdkmetric.Reader) (waiting map[string]int64, health map[string]map[string]int64) {
	t.Helper()
	ms := collect(t, reader)
	waiting, health = map[string]int64{}, map[string]map[string]int64{}
	if m, ok := ms[MetricGateWaiting]; ok {
		if m.Unit != "{call}" {
			t.Errorf("%s unit %q, want {call}", MetricGateWaiting, m.Unit)
		}
		for _, dp := range m.Data.(metricdata.Gauge[int64]).DataPoints {
			waiting[attrMap(dp.Attributes)[AttrTarget]] = dp.Value
		}
	}
	if m, ok := ms[MetricGateHealth]; ok {
		for _, dp := range m.Data.(metricdata.Gauge[int64]).DataPoints {
			a := attrMap(dp.Attributes)
			if health[a[AttrTarget]] == nil {
				health[a[AttrTarget]] = map[string]int64{}
			}
			health[a[AttrTarget]][a[AttrGateHealth]] = dp.Value
		}
	}
	return waiting, health
}

// TestGateGaugesDuringOutage: the calls a Gate holds show on the waiting
// gauge while they are held, with the Gate's health, per target with
// PerTarget and added up over every target without; once the server is
// back and the calls have ended, the gauge reads 0 and the Gate is out of
// its outage. Real gRPC over bufconn, in a synctest bubble: the outage
// lasts seconds of the bubble's clock.
func TestGateGaugesDuringOutage(t *testing.T) {
	for _, perTarget := range []bool{false, true} {
		t.Run(fmt.Sprint("PerTarget=", perTarget), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) { checkGateGauges(t, perTarget) })
		})
	}
}

func checkGateGauges(t *testing.T, perTarget bool) {
	srv := testserver.New()
	defer srv.Close()
	bs, err := budget.NewBackends(budget.DefaultSettings())
	if err != nil {
		t.Fatal(err)
	}
	reader := sdkmetric.NewManualReader()
	rec, err := Option(Options{MeterProvider: sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader)), Backends: []*budget.Backends{bs}, PerTarget: perTarget})
	if err != nil {
		t.Fatal(err)
	}
	cc := srv.ClientConn(t, stagger.DialOptions(parseConfig(t, retryConfig), interceptor.WithDefaultBudgets(bs), rec)...)
	client := testingv1.NewTestServiceClient(cc)
	key := ""
	if perTarget {
		key = cc.CanonicalTarget()
	}
	// A success, then a calm second: failures from now on make an outage
	// (budget.Gate, the outage rule).
	if _, err := client.Get(context.Background(), &testingv1.GetRequest{}); err != nil {
		t.Fatal(err)
	}
	waiting, health := gatePoints(t, reader)
	if waiting[key] != 0 || health[key]["quiet"] != 1 || len(health[key]) != len(budget.Healths()) {
		t.Fatalf("before the outage: waiting %v, health %v; want 0 and one quiet Gate, every health reported", waiting, health)
	}
	time.Sleep(time.Second)

	srv.SetOutage(true)
	const calls = 8
	var wg sync.WaitGroup
	for range calls {
		wg.Go(func() {
			if _, err := client.Get(context.Background(), &testingv1.GetRequest{}); err != nil {
				t.Errorf("a call held through the outage: %v, want served once the server is back", err)
			}
		})
	}
	time.Sleep(2 * time.Second)
	synctest.Wait()
	waiting, health = gatePoints(t, reader)
	held := bs.States()[0].Waiting
	t.Logf("2 s into the outage: waiting %v, health %v", waiting, health)
	if held == 0 || waiting[key] != int64(held) || health[key]["outage"] != 1 {
		t.Errorf("2 s into the outage: waiting %v, health %v; want %d held (the Gate's count) at %q, its Gate in outage", waiting, health, held, key)
	}
	if len(waiting) != 1 {
		t.Errorf("waiting has points %v, want one, at %q", waiting, key)
	}

	srv.SetOutage(false)
	wg.Wait()
	waiting, health = gatePoints(t, reader)
	if waiting[key] != 0 || health[key]["outage"] != 0 || health[key]["quiet"]+health[key]["recovering"] != 1 {
		t.Errorf("after the outage: waiting %v, health %v; want 0, the Gate out of its outage", waiting, health)
	}
}

// TestGateGaugesSeries counts the Gate gauges' series for a process that
// knows thousands of targets, two methods each: without PerTarget, one
// waiting point and one per health, whatever the number of targets; with
// it, as many per target the Backends hold (at most their bound), and a
// target the filter rejects adds to "other"'s.
func TestGateGaugesSeries(t *testing.T) {
	const targets = 3000
	for _, tc := range []struct {
		name string
		o    Options
		// want is the series for the targets held (the filter keeps the
		// last ten pods, which are held, and "other").
		want func(held int) int
	}{
		{"defaults", Options{}, func(int) int { return 1 + len(budget.Healths()) }},
		{"PerTarget", Options{PerTarget: true}, func(held int) int { return held * (1 + len(budget.Healths())) }},
		{"PerTarget filtered", Options{PerTarget: true, TargetAttributeFilter: func(target string) bool { return target >= "dns:///pod-2990" }},
			func(int) int { return 11 * (1 + len(budget.Healths())) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			bs, err := budget.NewBackends(budget.DefaultSettings())
			if err != nil {
				t.Fatal(err)
			}
			reader := sdkmetric.NewManualReader()
			o := tc.o
			o.MeterProvider = sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader), sdkmetric.WithCardinalityLimit(0))
			o.Backends = []*budget.Backends{bs}
			if _, err := Option(o); err != nil {
				t.Fatal(err)
			}
			for i := range targets {
				for _, m := range []string{"/" + getMethod, "/" + putMethod} {
					bs.Get(fmt.Sprintf("dns:///pod-%04d", i), m)
				}
			}
			var rm metricdata.ResourceMetrics
			if err := reader.Collect(context.Background(), &rm); err != nil {
				t.Fatal(err)
			}
			n, gates := 0, int64(0)
			for _, s := range seriesOf(rm) {
				switch s.metric {
				case MetricGateWaiting:
					n += s.n
				case MetricGateHealth:
					n += s.n
				}
			}
			for _, sm := range rm.ScopeMetrics {
				for _, m := range sm.Metrics {
					if m.Name == MetricGateHealth {
						for _, dp := range m.Data.(metricdata.Gauge[int64]).DataPoints {
							gates += dp.Value
						}
					}
				}
			}
			held := map[string]bool{}
			for _, st := range bs.States() {
				held[st.Target] = true
			}
			if want := tc.want(len(held)); n != want || gates != int64(2*len(held)) {
				t.Errorf("%d targets dialled, %d held: %d Gate series, want %d; %d Gates by health, want %d", targets, len(held), n, want, gates, 2*len(held))
			}
			t.Logf("%d targets dialled, %d held: %d Gate series", targets, len(held), n)
		})
	}
}

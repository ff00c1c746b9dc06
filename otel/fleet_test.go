package staggerotel

import (
	"context"
	"fmt"
	"net"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/stagger-go/stagger"
	"github.com/stagger-go/stagger/budget"
	"github.com/stagger-go/stagger/interceptor"
	testingv1 "github.com/stagger-go/stagger/proto/stagger/testing/v1"
	"github.com/stagger-go/stagger/testserver"
	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// The fleet tests rerun the SRE's run of issue 64: one client process dials
// short-lived pods, each its own target, one after another (a new pod every
// 1.5 s of a fake clock, so that, with budget.Backends forgetting a target
// idle for 5 minutes, about 200 are known at once), and calls two methods
// on each with metrics on. The series are counted as Prometheus exports
// them (seriesOf): the cardinality budget of the package documentation.
const (
	fleetPods   = 2000
	fleetEvery  = 1500 * time.Millisecond // between two pods, on the fake clock
	fleetIdle   = 5 * time.Minute         // budget.Backends forgets a target idle that long
	fleetReport = 250                     // pods between two collections
	fleetBatch  = 10                      // pods called at once
)

// fleetConfig retries Get and Put: 3 attempts, pauses of a millisecond.
const fleetConfig = `{"methodConfig": [{
	"name": [{"service": "stagger.testing.v1.TestService", "method": "Get"}, {"service": "stagger.testing.v1.TestService", "method": "Put"}],
	"retryPolicy": {"maxAttempts": 3, "initialBackoff": "0.001s", "maxBackoff": "0.001s",
		"backoffMultiplier": 1, "jitter": "NONE", "retryableStatusCodes": ["UNAVAILABLE"]}
}]}`

// fakeClock is the Backends' clock.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

// fleet is one run: a test server, the per-target budgets on a fake clock,
// and, unless o is nil, the metrics on a ManualReader.
type fleet struct {
	srv    *testserver.Server
	clock  *fakeClock
	bs     *budget.Backends
	reader *sdkmetric.ManualReader
	mp     *sdkmetric.MeterProvider
	dial   []grpc.DialOption
}

func newFleet(t *testing.T, o *Options) *fleet {
	t.Helper()
	f := &fleet{srv: testserver.New(), clock: &fakeClock{now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}}
	t.Cleanup(f.close)
	// A bucket that never refuses, so that no retry waits on the fake
	// clock: the run is about what the metrics keep, not about budgets.
	var err error
	f.bs, err = budget.NewBackends(budget.Settings{Kind: budget.KindTokenBucket,
		TokenBucket: budget.TokenBucketSettings{Capacity: 1e6}, Defer: budget.DeferSettings{Mode: budget.DeferOff}},
		budget.WithClock(f.clock.Now))
	if err != nil {
		t.Fatal(err)
	}
	opts := []interceptor.Option{interceptor.WithDefaultBudgets(f.bs)}
	if o != nil {
		f.reader = sdkmetric.NewManualReader()
		// No cardinality limit: the run counts every series, where an SDK
		// at its limit would fold the excess into one overflow series.
		f.mp = sdkmetric.NewMeterProvider(sdkmetric.WithReader(f.reader), sdkmetric.WithCardinalityLimit(0))
		mp := f.mp
		t.Cleanup(func() { _ = mp.Shutdown(context.Background()) })
		oo := *o
		oo.MeterProvider, oo.Backends = f.mp, []*budget.Backends{f.bs}
		rec, err := Option(oo)
		if err != nil {
			t.Fatal(err)
		}
		opts = append(opts, rec)
	}
	// Loopback TCP: every pod's target names the one server. (Over
	// bufconn, the server's side of a closed connection kept its 1 MiB
	// pipe buffers alive for the run, a heap that would hide the metrics'.)
	addr, err := f.srv.StartTCP()
	if err != nil {
		t.Fatal(err)
	}
	f.dial = append(stagger.DialOptions(parseConfig(t, fleetConfig), opts...),
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "tcp", addr)
		}),
		grpc.WithTransportCredentials(insecure.NewCredentials()))
	return f
}

// close closes the server and lets go of everything the run holds (the
// server records every attempt by its key), so that a run after it
// measures its own heap.
func (f *fleet) close() {
	if f.srv != nil {
		f.srv.Close()
	}
	*f = fleet{}
}

// podTarget is pod i's target: each pod its own address.
func podTarget(i int) string { return fmt.Sprintf("passthrough:///pod-%04d.test:8080", i) }

// pod dials pod i, makes its calls and closes the connection: Get, which
// succeeds after a retry; Put, given up (UNAVAILABLE after 3 attempts); a
// generic call of Get (no grpc.StaticMethodCallOption). (A call that
// succeeds at once would add no series: its end counts under the retried
// Get's attributes.)
func (f *fleet) pod(i int) error {
	cc, err := grpc.NewClient(podTarget(i), f.dial...)
	if err != nil {
		return err
	}
	defer func() { _ = cc.Close() }()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	client := testingv1.NewTestServiceClient(cc)
	key := fmt.Sprint("pod-", i)
	if _, err := client.Get(ctx, &testingv1.GetRequest{Script: &testingv1.Script{Key: key + "/get", FailAttempts: 1}}); err != nil {
		return err
	}
	if _, err := client.Put(ctx, &testingv1.PutRequest{Script: &testingv1.Script{Key: key + "/put", FailAttempts: 3}}); err == nil {
		return fmt.Errorf("pod %d: Put succeeded, want UNAVAILABLE after 3 attempts", i)
	}
	return cc.Invoke(ctx, testingv1.TestService_Get_FullMethodName, &testingv1.GetRequest{Script: &testingv1.Script{}}, new(testingv1.GetResponse))
}

// run dials pods [from, to), fleetBatch at once, advancing the clock by
// fleetEvery a pod, and calls each(i) after pod i when i+1 is a multiple of
// fleetReport.
func (f *fleet) run(t *testing.T, from, to int, each func(i int)) {
	t.Helper()
	for i := from; i < to; i += fleetBatch {
		var wg sync.WaitGroup
		for j := i; j < min(i+fleetBatch, to); j++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if err := f.pod(j); err != nil {
					t.Error(err)
				}
			}()
		}
		wg.Wait()
		if t.Failed() {
			t.FailNow()
		}
		for j := i; j < min(i+fleetBatch, to); j++ {
			f.clock.advance(fleetEvery)
			if each != nil && (j+1)%fleetReport == 0 {
				each(j)
			}
		}
	}
}

func (f *fleet) collect(t *testing.T) metricdata.ResourceMetrics {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := f.reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	return rm
}

// series is one data point as Prometheus counts it: a histogram's buckets
// (+Inf included), _sum and _count each one series.
type series struct {
	metric string
	attrs  attribute.Set
	n      int
}

// seriesOf lists rm's data points with their Prometheus series counts.
func seriesOf(rm metricdata.ResourceMetrics) []series {
	var out []series
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			switch d := m.Data.(type) {
			case metricdata.Histogram[int64]:
				for _, dp := range d.DataPoints {
					out = append(out, series{m.Name, dp.Attributes, len(dp.Bounds) + 3})
				}
			case metricdata.Histogram[float64]:
				for _, dp := range d.DataPoints {
					out = append(out, series{m.Name, dp.Attributes, len(dp.Bounds) + 3})
				}
			case metricdata.Sum[int64]:
				for _, dp := range d.DataPoints {
					out = append(out, series{m.Name, dp.Attributes, 1})
				}
			case metricdata.Sum[float64]:
				for _, dp := range d.DataPoints {
					out = append(out, series{m.Name, dp.Attributes, 1})
				}
			case metricdata.Gauge[int64]:
				for _, dp := range d.DataPoints {
					out = append(out, series{m.Name, dp.Attributes, 1})
				}
			case metricdata.Gauge[float64]:
				for _, dp := range d.DataPoints {
					out = append(out, series{m.Name, dp.Attributes, 1})
				}
			default:
				panic(fmt.Sprintf("%s: %T", m.Name, m.Data))
			}
		}
	}
	return out
}

func total(ss []series) int {
	n := 0
	for _, s := range ss {
		n += s.n
	}
	return n
}

func value(set attribute.Set, key string) (string, bool) {
	v, ok := set.Value(attribute.Key(key))
	if !ok {
		return "", false
	}
	return v.AsString(), true
}

// heapAfterGC returns the live heap.
func heapAfterGC() uint64 {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

// TestFleetCardinalityDefaults: with the default Options, a process that
// dialled 2,000 pods and calls two methods exports at most 600 series, the
// same number after the last pod as after the first collection: no series
// names a pod. The live heap with the metrics stays within twice the heap
// of the same run without them.
func TestFleetCardinalityDefaults(t *testing.T) {
	if testing.Short() {
		t.Skip("2,000 pods")
	}
	var heapWithout, heapWith uint64
	{
		f := newFleet(t, nil)
		f.run(t, 0, fleetPods, func(int) {
			heapWithout = max(heapWithout, heapAfterGC())
		})
		f.close()
	}
	f := newFleet(t, &Options{})
	var first int
	f.run(t, 0, fleetPods, func(i int) {
		// Before the collection, as in the run without: what the
		// process holds between two scrapes.
		heapWith = max(heapWith, heapAfterGC())
		ss := seriesOf(f.collect(t))
		n := total(ss)
		if first == 0 {
			first = n
		}
		if n > 600 || n != first {
			t.Errorf("after %d pods: %d series, want at most 600 and as many as after %d pods (%d)", i+1, n, fleetReport, first)
		}
		for _, s := range ss {
			if v, ok := value(s.attrs, AttrTarget); ok && v != Other {
				t.Fatalf("%s has %s=%q, want %q with the defaults", s.metric, AttrTarget, v, Other)
			}
			if v, ok := value(s.attrs, AttrMethod); ok && v != Other && v != getMethod && v != putMethod {
				t.Fatalf("%s has %s=%q", s.metric, AttrMethod, v)
			}
		}
	})
	t.Logf("%d pods, two methods and generic calls, defaults: %d series; live heap %.2f MiB with metrics, %.2f MiB without (%.2fx)",
		fleetPods, first, mib(heapWith), mib(heapWithout), float64(heapWith)/float64(heapWithout))
	if heapWith > 2*heapWithout {
		t.Errorf("live heap %.2f MiB with metrics, more than twice %.2f MiB without", mib(heapWith), mib(heapWithout))
	}
	runtime.KeepAlive(f)
}

// TestFleetCardinalityPerTarget: with Options.PerTarget, each (target,
// method) of the 2,000 pods has at most 150 series (its gauges counted with
// each of its methods), and the budget gauges report exactly the targets
// the Backends still hold: a forgotten target's gauges are gone from the
// next collection. (Its call metrics stay: an SDK keeps a cumulative
// synchronous instrument's series for as long as it lives; the log says
// how many.)
func TestFleetCardinalityPerTarget(t *testing.T) {
	if testing.Short() {
		t.Skip("2,000 pods")
	}
	f := newFleet(t, &Options{PerTarget: true})
	type pair struct{ target, method string }
	var worst, n, gauged int
	f.run(t, 0, fleetPods, func(i int) {
		ss := seriesOf(f.collect(t))
		n = total(ss)
		perPair := map[pair]int{}
		perTarget := map[string]int{}
		gauges := map[string]bool{}
		for _, s := range ss {
			target, ok := value(s.attrs, AttrTarget)
			if !ok {
				continue
			}
			if method, ok := value(s.attrs, AttrMethod); ok {
				perPair[pair{target, method}] += s.n
			} else {
				perTarget[target] += s.n
			}
			if s.metric == MetricBudgetLevel {
				gauges[target] = true
			}
		}
		for p, c := range perPair {
			c += perTarget[p.target]
			worst = max(worst, c)
			if c > 150 {
				t.Errorf("after %d pods: %d series for %s %s, want at most 150", i+1, c, p.target, p.method)
			}
		}
		held := map[string]bool{}
		for _, st := range f.bs.States() {
			held[st.Target] = true
		}
		if fmt.Sprint(gauges) != fmt.Sprint(held) {
			t.Errorf("after %d pods: gauges for %d targets, the Backends hold %d", i+1, len(gauges), len(held))
		}
		if len(held) > 250 {
			t.Errorf("after %d pods: the Backends hold %d targets, want those of the last 5 minutes (about 200)", i+1, len(held))
		}
		gauged = len(gauges)
		if oldest := podTarget(i + 1 - int(fleetIdle/fleetEvery) - 30); i > 300 && gauges[oldest] {
			t.Errorf("after %d pods: %s, idle for more than 5 minutes, still has gauges", i+1, oldest)
		}
	})
	t.Logf("%d pods, PerTarget: at most %d series per (target, method); gauges for the %d targets held; %d series in all (the call metrics of every pod ever called); live heap %.2f MiB",
		fleetPods, worst, gauged, n, mib(heapAfterGC()))
}

const putMethod = "stagger.testing.v1.TestService/Put"

func mib(b uint64) float64 { return float64(b) / (1 << 20) }

package staggerotel

import (
	"context"
	"fmt"
	"testing"

	"github.com/stagger-go/stagger"
	"github.com/stagger-go/stagger/budget"
	"github.com/stagger-go/stagger/interceptor"
	"github.com/stagger-go/stagger/policy"
	testingv1 "github.com/stagger-go/stagger/proto/stagger/testing/v1"
	"github.com/stagger-go/stagger/testserver"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	"google.golang.org/grpc"
)

// BenchmarkCall measures a unary call over bufconn that succeeds at once,
// through stagger.DialOptions with a retry policy, without and with the
// option (an SDK MeterProvider on a ManualReader, span events on), and
// with the option and TransparentRetries' dial options.
func BenchmarkCall(b *testing.B) {
	cfg := parseConfig(b, retryConfig)
	run := func(b *testing.B, first []grpc.DialOption, opts ...interceptor.Option) {
		srv := testserver.New()
		defer srv.Close()
		cc, err := srv.Dial(append(first, stagger.DialOptions(cfg, append([]interceptor.Option{interceptor.WithBudget(nil)}, opts...)...)...)...)
		if err != nil {
			b.Fatal(err)
		}
		defer func() { _ = cc.Close() }()
		client := testingv1.NewTestServiceClient(cc)
		ctx := context.Background()
		req := &testingv1.GetRequest{Script: &testingv1.Script{}}
		if _, err := client.Get(ctx, req); err != nil { // warm-up
			b.Fatal(err)
		}
		b.ReportAllocs()
		b.ResetTimer()
		for b.Loop() {
			if _, err := client.Get(ctx, req); err != nil {
				b.Fatal(err)
			}
		}
	}
	b.Run("without", func(b *testing.B) { run(b, nil) })
	with := func(b *testing.B, transparent bool) {
		mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewManualReader()))
		defer func() { _ = mp.Shutdown(context.Background()) }()
		opt, err := Option(Options{MeterProvider: mp})
		if err != nil {
			b.Fatal(err)
		}
		var first []grpc.DialOption
		if transparent {
			if first, err = TransparentRetries(Options{MeterProvider: mp}); err != nil {
				b.Fatal(err)
			}
		}
		run(b, first, opt)
	}
	b.Run("with", func(b *testing.B) { with(b, false) })
	b.Run("with+transparent", func(b *testing.B) { with(b, true) })
}

// BenchmarkHook measures the hook alone on a first-attempt success.
func BenchmarkHook(b *testing.B) {
	r, err := newRecorder(Options{MeterProvider: sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewManualReader()))})
	if err != nil {
		b.Fatal(err)
	}
	e := interceptor.Event{Kind: interceptor.EventEnd, Method: "/" + getMethod, Attempt: 1, Target: target, Reason: policy.ReasonSuccess}
	r.hook(context.Background(), e) // builds the attribute sets
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		r.hook(ctx, e)
	}
}

// BenchmarkCollectBudgets measures one collection of the budget gauges
// (and the Gate gauges, where they exist) for a Backends holding 1,024
// targets of two methods each, the Backends' bound, without and with
// PerTarget.
func BenchmarkCollectBudgets(b *testing.B) {
	for _, perTarget := range []bool{false, true} {
		b.Run(fmt.Sprint("PerTarget=", perTarget), func(b *testing.B) {
			bs, err := budget.NewBackends(budget.DefaultSettings())
			if err != nil {
				b.Fatal(err)
			}
			reader := sdkmetric.NewManualReader()
			if _, err := Option(Options{MeterProvider: sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader)), Backends: []*budget.Backends{bs}, PerTarget: perTarget}); err != nil {
				b.Fatal(err)
			}
			for i := range 1024 {
				for _, m := range []string{"/" + getMethod, "/stagger.testing.v1.TestService/Put"} {
					bs.Get(fmt.Sprintf("dns:///pod-%04d", i), m)
				}
			}
			ctx := context.Background()
			var rm metricdata.ResourceMetrics
			b.ReportAllocs()
			for b.Loop() {
				if err := reader.Collect(ctx, &rm); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

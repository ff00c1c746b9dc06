package staggerotel_test

import (
	"bufio"
	"context"
	"fmt"
	"log"
	"net/http/httptest"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/stagger-go/stagger"
	staggerotel "github.com/stagger-go/stagger/otel"
	"github.com/stagger-go/stagger/policy"
	testingv1 "github.com/stagger-go/stagger/proto/stagger/testing/v1"
	"github.com/stagger-go/stagger/testserver"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// ExampleOption exports stagger's metrics to Prometheus: a call that
// succeeds after one retry, then a scrape of /metrics. With the default
// Options, grpc.target is "other" and the budget gauges add up every
// target's budget (Options.PerTarget records each target).
func ExampleOption() {
	ctx := context.Background()
	reg := prometheus.NewRegistry()
	exporter, err := otelprom.New(otelprom.WithRegisterer(reg), otelprom.WithoutScopeInfo(), otelprom.WithoutTargetInfo())
	if err != nil {
		log.Fatal(err)
	}
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(exporter))
	defer func() { _ = mp.Shutdown(ctx) }()

	cfg, err := policy.ParseConfig([]byte(`{"methodConfig": [{
		"name": [{"service": "stagger.testing.v1.TestService"}],
		"retryPolicy": {"maxAttempts": 3, "initialBackoff": "0.01s", "maxBackoff": "1s",
			"backoffMultiplier": 2, "retryableStatusCodes": ["UNAVAILABLE"]}
	}]}`))
	if err != nil {
		log.Fatal(err)
	}
	// The server: here a test server on bufconn; yours is its target and
	// the dial options it needs (credentials).
	srv := testserver.New()
	defer srv.Close()
	target, dial := testserver.BufnetTarget, []grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials()), srv.DialOption()}

	metrics, err := staggerotel.Option(staggerotel.Options{MeterProvider: mp})
	if err != nil {
		log.Fatal(err)
	}
	conn, err := grpc.NewClient(target, append(stagger.DialOptions(cfg, metrics), dial...)...)
	if err != nil {
		log.Fatal(err)
	}
	defer func() { _ = conn.Close() }()

	// The first attempt fails with UNAVAILABLE; the retry succeeds.
	client := testingv1.NewTestServiceClient(conn)
	if _, err := client.Get(ctx, &testingv1.GetRequest{Script: &testingv1.Script{Key: "example", FailAttempts: 1}}); err != nil {
		log.Fatal(err)
	}

	web := httptest.NewServer(promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	defer web.Close()
	resp, err := web.Client().Get(web.URL + "/metrics")
	if err != nil {
		log.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if line := sc.Text(); strings.HasPrefix(line, "grpc_client_call_retries") || strings.HasPrefix(line, "stagger_client_call_ends") || strings.HasPrefix(line, "stagger_client_budget_capacity") {
			fmt.Println(line)
		}
	}
	// Output:
	// grpc_client_call_retries_bucket{grpc_method="stagger.testing.v1.TestService/Get",grpc_target="other",le="1"} 1
	// grpc_client_call_retries_bucket{grpc_method="stagger.testing.v1.TestService/Get",grpc_target="other",le="2"} 1
	// grpc_client_call_retries_bucket{grpc_method="stagger.testing.v1.TestService/Get",grpc_target="other",le="3"} 1
	// grpc_client_call_retries_bucket{grpc_method="stagger.testing.v1.TestService/Get",grpc_target="other",le="4"} 1
	// grpc_client_call_retries_bucket{grpc_method="stagger.testing.v1.TestService/Get",grpc_target="other",le="5"} 1
	// grpc_client_call_retries_bucket{grpc_method="stagger.testing.v1.TestService/Get",grpc_target="other",le="+Inf"} 1
	// grpc_client_call_retries_sum{grpc_method="stagger.testing.v1.TestService/Get",grpc_target="other"} 1
	// grpc_client_call_retries_count{grpc_method="stagger.testing.v1.TestService/Get",grpc_target="other"} 1
	// stagger_client_budget_capacity{stagger_budget_kind="token-bucket"} 100
	// stagger_client_call_ends_total{grpc_method="stagger.testing.v1.TestService/Get",grpc_status="OK",grpc_target="other",stagger_criticality="CRITICAL",stagger_reason="success"} 1
}

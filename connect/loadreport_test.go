package staggerconnect_test

import (
	"context"
	"math"
	"testing"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/encoding/protowire"

	staggerconnect "github.com/stagger-go/stagger/connect"
	"github.com/stagger-go/stagger/interceptor"
	testingv1 "github.com/stagger-go/stagger/proto/stagger/testing/v1"
)

// TestLoadReports: a Connect server that sends a load report (gRFC A51's
// OrcaLoadReport in the trailer endpoint-load-metrics-bin) on its answers
// is read through the Connect front end, in every protocol: the call's
// Report says the utilization of its last answer, a retried call's too.
func TestLoadReports(t *testing.T) {
	// An OrcaLoadReport with application_utilization (field 9) 0.3.
	b := protowire.AppendFixed64(protowire.AppendTag(nil, 9, protowire.Fixed64Type), math.Float64bits(0.3))
	report := connect.UnaryInterceptorFunc(func(next connect.UnaryFunc) connect.UnaryFunc {
		return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
			resp, err := next(ctx, req)
			if err == nil {
				resp.Trailer().Set("Endpoint-Load-Metrics-Bin", connect.EncodeBinaryHeader(b))
			}
			return resp, err
		}
	})
	forEachProtocol(t, func(t *testing.T, p protocol) {
		ts := newTestServer(t, p.h2c, nil, connect.WithInterceptors(report))
		client := ts.testClient(p, newClient(t, retryFile))
		for _, fails := range []int32{0, 1} {
			var rep interceptor.Report
			ctx := staggerconnect.WithCallOptions(context.Background(), interceptor.WithReport(&rep))
			if _, err := client.Get(ctx, connect.NewRequest(&testingv1.GetRequest{Script: &testingv1.Script{Key: "k" + string('0'+rune(fails)), FailAttempts: fails}})); err != nil {
				t.Fatal(err)
			}
			if !rep.Load.Reported || rep.Load.Utilization != 0.3 || rep.Attempts != int(fails)+1 {
				t.Errorf("%d failures first: Report %d attempts, Load %+v; want %d, utilization 0.3", fails, rep.Attempts, rep.Load, fails+1)
			}
		}
	})
}

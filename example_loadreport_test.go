package stagger_test

import (
	"context"
	"fmt"
	"log"
	"net"
	"sync/atomic"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/orca"
	"google.golang.org/grpc/test/bufconn"

	"github.com/stagger-go/stagger"
	"github.com/stagger-go/stagger/interceptor"
	"github.com/stagger-go/stagger/policy"
	testingv1 "github.com/stagger-go/stagger/proto/stagger/testing/v1"
)

// getService serves Get with its function.
type getService struct {
	testingv1.UnimplementedTestServiceServer
	get func(context.Context, *testingv1.GetRequest) (*testingv1.GetResponse, error)
}

func (s getService) Get(ctx context.Context, req *testingv1.GetRequest) (*testingv1.GetResponse, error) {
	return s.get(ctx, req)
}

// Example_loadReports is a server that sends a load report (gRFC A51,
// ORCA) on every answer with grpc-go's orca package alone, and a stagger
// client that reads it (docs/recipes.md).
func Example_loadReports() {
	const workers = 4
	var running atomic.Int64
	get := func(ctx context.Context, req *testingv1.GetRequest) (*testingv1.GetResponse, error) {
		busy := running.Add(1)
		defer running.Add(-1)
		if rec := orca.CallMetricsRecorderFromContext(ctx); rec != nil {
			rec.SetApplicationUtilization(float64(busy) / workers)
		}
		return &testingv1.GetResponse{}, nil
	}
	srv := grpc.NewServer(orca.CallMetricsServerOption(nil)) // first among the options: it writes the trailer
	testingv1.RegisterTestServiceServer(srv, getService{get: get})
	lis := bufconn.Listen(1 << 20)
	go func() { _ = srv.Serve(lis) }()
	defer srv.Stop()

	cfg, err := policy.ParseConfig([]byte(recipeFile))
	if err != nil {
		log.Fatal(err)
	}
	dial := func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }
	conn, err := grpc.NewClient("passthrough:///bufnet", append(stagger.DialOptions(cfg),
		grpc.WithTransportCredentials(insecure.NewCredentials()), grpc.WithContextDialer(dial))...)
	if err != nil {
		log.Fatal(err)
	}
	defer conn.Close()
	client := testingv1.NewTestServiceClient(conn)

	var r interceptor.Report
	_, err = client.Get(context.Background(), &testingv1.GetRequest{}, interceptor.WithReport(&r))
	fmt.Printf("err: %v, the backend reports %.0f%% utilization (reported: %v)\n", err, 100*r.Load.Utilization, r.Load.Reported)
	// Output:
	// err: <nil>, the backend reports 25% utilization (reported: true)
}

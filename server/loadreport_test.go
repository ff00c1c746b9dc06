package server_test

import (
	"context"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/orca"
	"google.golang.org/grpc/status"

	"github.com/stagger-go/stagger/budget"
	"github.com/stagger-go/stagger/internal/loadreport"
	testingv1 "github.com/stagger-go/stagger/proto/stagger/testing/v1"
	"github.com/stagger-go/stagger/server"
)

// TestConcurrencyLimitReportsLoad: over loopback TCP, a server with
// grpc-go's orca option and a concurrency limit of 2 reports on every
// call the calls running over the limit: an admitted call alone 0.5, a
// call shed while two run 1 (the refusal carries a report beside its
// pushback). Without the orca option no report is sent, and the limiter
// sheds as before.
func TestConcurrencyLimitReportsLoad(t *testing.T) {
	for _, withORCA := range []bool{true, false} {
		t.Run(map[bool]string{true: "orca", false: "no orca"}[withORCA], func(t *testing.T) {
			var running atomic.Int64
			release := make(chan struct{})
			h := &handlerService{get: func(ctx context.Context, req *testingv1.GetRequest) (*testingv1.GetResponse, error) {
				running.Add(1)
				defer running.Add(-1)
				if req.GetScript().GetKey() == "hold" {
					<-release
				}
				return &testingv1.GetResponse{}, nil
			}}
			side := newSide(t, server.WithConcurrencyLimit(2))
			var opts []grpc.ServerOption
			if withORCA {
				opts = append(opts, orca.CallMetricsServerOption(nil))
			}
			g := grpc.NewServer(append(opts, side.ServerOptions()...)...)
			testingv1.RegisterTestServiceServer(g, h)
			lis, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			go func() { _ = g.Serve(lis) }()
			defer g.Stop()
			cc, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()), grpc.WithDisableRetry())
			if err != nil {
				t.Fatal(err)
			}
			defer cc.Close()
			cl := testingv1.NewTestServiceClient(cc)
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			call := func(key string) (budget.Load, error) {
				var tr metadata.MD
				_, err := cl.Get(ctx, &testingv1.GetRequest{Script: &testingv1.Script{Key: key}}, grpc.Trailer(&tr))
				return loadreport.Read(tr), err
			}
			want := func(u float64) budget.Load {
				if !withORCA {
					return budget.Load{}
				}
				return budget.Load{Utilization: u, Reported: true}
			}

			if l, err := call("alone"); err != nil || l != want(0.5) {
				t.Errorf("a call alone: load %+v, err %v; want %+v", l, err, want(0.5))
			}
			held := make(chan error, 2)
			for range 2 {
				go func() { _, err := call("hold"); held <- err }()
			}
			for running.Load() < 2 {
				time.Sleep(time.Millisecond)
			}
			l, err := call("shed")
			if status.Code(err) != codes.ResourceExhausted || l != want(1) {
				t.Errorf("a shed call: load %+v, err %v; want %+v, RESOURCE_EXHAUSTED", l, err, want(1))
			}
			close(release)
			for range 2 {
				if err := <-held; err != nil {
					t.Error(err)
				}
			}
		})
	}
}

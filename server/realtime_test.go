package server_test

import (
	"context"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/stagger-go/stagger/criticality"
	testingv1 "github.com/stagger-go/stagger/proto/stagger/testing/v1"
	"github.com/stagger-go/stagger/server"
)

// TestRealTimeShedding: over loopback TCP on real time, many callers at
// once against a concurrency limit: handlers never run more than the limit
// at once, every refusal is RESOURCE_EXHAUSTED with a valid pushback and
// never ran its handler, and every call that ran succeeded. Repeated: the
// admissions race the ends of running calls.
func TestRealTimeShedding(t *testing.T) {
	const (
		limit   = 3
		callers = 24
		rounds  = 5
	)
	var running, peak, ran atomic.Int64
	h := &handlerService{get: func(ctx context.Context, req *testingv1.GetRequest) (*testingv1.GetResponse, error) {
		n := running.Add(1)
		defer running.Add(-1)
		for p := peak.Load(); n > p && !peak.CompareAndSwap(p, n); p = peak.Load() {
		}
		ran.Add(1)
		time.Sleep(time.Millisecond)
		return &testingv1.GetResponse{}, nil
	}}
	side := newSide(t, server.WithConcurrencyLimit(limit))
	cl := serveLoopback(t, side, h)
	var ok, shed atomic.Int64
	for r := 0; r < rounds; r++ {
		var wg sync.WaitGroup
		for i := 0; i < callers; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				var tl metadata.MD
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				defer cancel()
				_, err := cl.Get(ctx, &testingv1.GetRequest{}, grpc.Trailer(&tl))
				switch status.Code(err) {
				case codes.OK:
					ok.Add(1)
				case codes.ResourceExhausted:
					shed.Add(1)
					pb := tl.Get(server.PushbackKey)
					if ms, perr := strconv.Atoi(pb[0]); len(pb) != 1 || perr != nil || ms < 1 || ms > 30000 {
						t.Errorf("pushback %v", pb)
					}
				default:
					t.Errorf("call: %v", err)
				}
			}()
		}
		wg.Wait()
	}
	if p := peak.Load(); p > limit {
		t.Errorf("%d handlers ran at once, limit %d", p, limit)
	}
	if ran.Load() != ok.Load() || uint64(shed.Load()) != side.Shed() || ok.Load()+shed.Load() != callers*rounds {
		t.Errorf("ran %d, ok %d, shed %d (Shed() %d), of %d calls", ran.Load(), ok.Load(), shed.Load(), side.Shed(), callers*rounds)
	}
}

// TestRealTimeCriticalShedding: over loopback TCP on real time, 16
// SHEDDABLE callers hammer a server with a limit of 10 (a refused one
// calls again at once) while 2 CRITICAL callers loop: the SHEDDABLE fill
// at most 8 slots, so no CRITICAL call is ever shed, although refused
// SHEDDABLE calls race the CRITICAL ones' admissions at every moment.
func TestRealTimeCriticalShedding(t *testing.T) {
	h := &handlerService{get: func(ctx context.Context, req *testingv1.GetRequest) (*testingv1.GetResponse, error) {
		time.Sleep(time.Millisecond)
		return &testingv1.GetResponse{}, nil
	}}
	side := newSide(t, server.WithConcurrencyLimit(10))
	cl := serveLoopback(t, side, h)
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	var criticalOK atomic.Int64
	var wg sync.WaitGroup
	caller := func(level string) {
		defer wg.Done()
		out := metadata.AppendToOutgoingContext(ctx, criticality.Header, level)
		for ctx.Err() == nil {
			_, err := cl.Get(out, &testingv1.GetRequest{})
			switch code := status.Code(err); {
			case code == codes.OK && level == "CRITICAL":
				criticalOK.Add(1)
			case code == codes.OK, code == codes.DeadlineExceeded, code == codes.Canceled:
			case code == codes.ResourceExhausted && level == "SHEDDABLE":
			default:
				t.Errorf("%s call: %v", level, err)
			}
		}
	}
	for i := 0; i < 16; i++ {
		wg.Add(1)
		go caller("SHEDDABLE")
	}
	for i := 0; i < 2; i++ {
		wg.Add(1)
		go caller("CRITICAL")
	}
	wg.Wait()
	if n := side.ShedLevel(criticality.Critical); n != 0 {
		t.Errorf("%d CRITICAL calls shed (%d admitted), want 0", n, criticalOK.Load())
	}
	if side.ShedLevel(criticality.Sheddable) == 0 || criticalOK.Load() == 0 {
		t.Errorf("SHEDDABLE shed %d, CRITICAL admitted %d: the server was not saturated", side.ShedLevel(criticality.Sheddable), criticalOK.Load())
	}
}

// serveLoopback serves h behind side's interceptors over loopback TCP and
// returns a plain client of it (grpc's own retry off); both end with t.
func serveLoopback(t *testing.T, side *server.Interceptors, h testingv1.TestServiceServer) testingv1.TestServiceClient {
	t.Helper()
	g := grpc.NewServer(side.ServerOptions()...)
	testingv1.RegisterTestServiceServer(g, h)
	lis, err := netListen()
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = g.Serve(lis) }()
	t.Cleanup(g.Stop)
	cc, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()), grpc.WithDisableRetry())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cc.Close() })
	return testingv1.NewTestServiceClient(cc)
}

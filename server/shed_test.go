//go:build go1.25

// The one //go:debug line of the package's tests: synctest needs the Go
// 1.23 timer channels while go.mod says go 1.22.
//
//go:debug asynctimerchan=0

package server_test

import (
	"context"
	"strconv"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	testingv1 "github.com/stagger-go/stagger/proto/stagger/testing/v1"
	"github.com/stagger-go/stagger/server"
)

// slowService answers Get after d (on the bubble's clock), recording when
// each key's attempts arrived.
type slowService struct {
	d        time.Duration
	mu       sync.Mutex
	arrivals map[string][]time.Time
}

func newSlow(d time.Duration) *slowService {
	return &slowService{d: d, arrivals: map[string][]time.Time{}}
}

func (s *slowService) handlers() *handlerService {
	return &handlerService{get: func(ctx context.Context, req *testingv1.GetRequest) (*testingv1.GetResponse, error) {
		s.mu.Lock()
		s.arrivals[req.GetScript().GetKey()] = append(s.arrivals[req.GetScript().GetKey()], time.Now())
		s.mu.Unlock()
		time.Sleep(s.d)
		return &testingv1.GetResponse{}, nil
	}}
}

func (s *slowService) of(key string) []time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]time.Time(nil), s.arrivals[key]...)
}

func getKey(ctx context.Context, cl testingv1.TestServiceClient, key string, opts ...grpc.CallOption) error {
	_, err := cl.Get(ctx, &testingv1.GetRequest{Script: &testingv1.Script{Key: key}}, opts...)
	return err
}

// TestShedPushback: past the limit a call is refused at once with
// RESOURCE_EXHAUSTED, a pushback trailer of the service time (20ms) times
// [0.5, 1.5), and the same delay as a RetryInfo detail.
func TestShedPushback(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		slow := newSlow(20 * time.Millisecond)
		side := newSide(t, server.WithConcurrencyLimit(1))
		cl := serveHandlers(t, slow.handlers(), side.ServerOptions()...)
		for i := 0; i < 3; i++ { // the service time: 20ms exactly
			if err := getKey(context.Background(), cl, "prime"); err != nil {
				t.Fatal(err)
			}
		}
		done := make(chan error)
		go func() { done <- getKey(context.Background(), cl, "running") }()
		synctest.Wait()
		start := time.Now()
		var tl metadata.MD
		err := getKey(context.Background(), cl, "shed", grpc.Trailer(&tl))
		if took := time.Since(start); took != 0 {
			t.Errorf("refusal took %v, want at once", took)
		}
		st := status.Convert(err)
		if st.Code() != codes.ResourceExhausted || !strings.Contains(st.Message(), "limit 1") {
			t.Fatalf("status %v, want RESOURCE_EXHAUSTED naming the limit", st)
		}
		pbs := tl.Get(server.PushbackKey)
		if len(pbs) != 1 {
			t.Fatalf("pushback trailer %v, want one value", pbs)
		}
		ms, err := strconv.Atoi(pbs[0])
		if err != nil || ms < 10 || ms > 30 {
			t.Errorf("pushback %q ms, want 10-30 (20ms × [0.5, 1.5))", pbs[0])
		}
		var ri *errdetails.RetryInfo
		for _, d := range st.Details() {
			if r, ok := d.(*errdetails.RetryInfo); ok {
				ri = r
			}
		}
		if ri == nil || ri.GetRetryDelay().AsDuration() != time.Duration(ms)*time.Millisecond {
			t.Errorf("RetryInfo %v, want %dms", ri, ms)
		}
		if len(slow.of("shed")) != 0 {
			t.Error("the shed call's handler ran")
		}
		if err := <-done; err != nil {
			t.Errorf("running call: %v", err)
		}
		if side.Shed() != 1 {
			t.Errorf("Shed() = %d, want 1", side.Shed())
		}
		// The slot is free again.
		if err := getKey(context.Background(), cl, "after"); err != nil {
			t.Errorf("after: %v", err)
		}
	})
}

// TestShedClientsWaitThePushback: gRFC A6 clients (grpc-go's built-in
// retry, stagger) come back after the pushback (tens of ms), not after
// their backoff (1s), and succeed.
func TestShedClientsWaitThePushback(t *testing.T) {
	const slowBackoff = `{"methodConfig": [{
		"name": [{"service": "stagger.testing.v1.TestService"}],
		"retryPolicy": {"maxAttempts": 5, "initialBackoff": "1s", "maxBackoff": "1s",
			"backoffMultiplier": 1, "retryableStatusCodes": ["RESOURCE_EXHAUSTED"]}
	}]}`
	for _, tc := range []struct {
		name string
		opts func(t *testing.T) []grpc.DialOption
	}{
		{"grpc-go", func(*testing.T) []grpc.DialOption {
			return []grpc.DialOption{grpc.WithDefaultServiceConfig(slowBackoff)}
		}},
		{"stagger", func(t *testing.T) []grpc.DialOption { return staggerFile(t, slowBackoff) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				slow := newSlow(20 * time.Millisecond)
				side := newSide(t, server.WithConcurrencyLimit(1))
				g := grpc.NewServer(side.ServerOptions()...)
				testingv1.RegisterTestServiceServer(g, slow.handlers())
				lis := newListener(t)
				go func() { _ = g.Serve(lis) }()
				t.Cleanup(g.Stop)
				cl := testingv1.NewTestServiceClient(lis.dial(t, tc.opts(t)...))
				if err := getKey(context.Background(), cl, "prime"); err != nil {
					t.Fatal(err)
				}
				done := make(chan error)
				go func() { done <- getKey(context.Background(), cl, "running") }()
				synctest.Wait()
				start := time.Now()
				if err := getKey(context.Background(), cl, "shed"); err != nil {
					t.Fatalf("shed call: %v", err)
				}
				if took := time.Since(start); took >= time.Second {
					t.Errorf("the shed call took %v: the client waited its backoff, not the pushback", took)
				}
				if side.Shed() == 0 {
					t.Error("nothing was shed")
				}
				if err := <-done; err != nil {
					t.Error(err)
				}
			})
		})
	}
}

// TestShedExempt: the health check is never shed unless WithExempt says
// otherwise.
func TestShedExempt(t *testing.T) {
	for _, tc := range []struct {
		name     string
		opts     []server.Option
		wantCode codes.Code
	}{
		{"default", nil, codes.OK},
		{"none", []server.Option{server.WithExempt()}, codes.ResourceExhausted},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				side := newSide(t, append([]server.Option{server.WithConcurrencyLimit(1)}, tc.opts...)...)
				g := grpc.NewServer(side.ServerOptions()...)
				testingv1.RegisterTestServiceServer(g, newSlow(time.Second).handlers())
				healthpb.RegisterHealthServer(g, health.NewServer())
				lis := newListener(t)
				go func() { _ = g.Serve(lis) }()
				t.Cleanup(g.Stop)
				cc := lis.dial(t, grpc.WithDisableRetry())
				done := make(chan error)
				go func() { done <- getKey(context.Background(), testingv1.NewTestServiceClient(cc), "busy") }()
				synctest.Wait()
				_, err := healthpb.NewHealthClient(cc).Check(context.Background(), &healthpb.HealthCheckRequest{})
				if status.Code(err) != tc.wantCode {
					t.Errorf("health check: %v, want %v", err, tc.wantCode)
				}
				if err := <-done; err != nil {
					t.Error(err)
				}
			})
		})
	}
}

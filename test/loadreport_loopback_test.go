package test

import (
	"context"
	"net"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/orca"
	"google.golang.org/grpc/status"

	"github.com/stagger-go/stagger/budget"
	"github.com/stagger-go/stagger/interceptor"
	"github.com/stagger-go/stagger/policy"
	testingv1 "github.com/stagger-go/stagger/proto/stagger/testing/v1"
)

// orcaService is a plain grpc-go service, with no stagger code: its answers
// carry a load report through grpc-go's orca package ("report"), a trailer
// of the report's name that is no report ("malformed"), or nothing
// ("absent"). A Get whose key starts with "fail-once" fails its first
// attempt with UNAVAILABLE (a report on it too).
type orcaService struct {
	testingv1.UnimplementedTestServiceServer
	mode string
	mu   sync.Mutex
	seen map[string]int
}

func (s *orcaService) answer(ctx context.Context, u float64) {
	switch s.mode {
	case "report":
		orca.CallMetricsRecorderFromContext(ctx).SetApplicationUtilization(u)
	case "malformed":
		_ = grpc.SetTrailer(ctx, metadata.Pairs("endpoint-load-metrics-bin", "\xff\xff\xff"))
	}
}

func (s *orcaService) Get(ctx context.Context, req *testingv1.GetRequest) (*testingv1.GetResponse, error) {
	key := req.GetScript().GetKey()
	s.mu.Lock()
	s.seen[key]++
	n := s.seen[key]
	s.mu.Unlock()
	if n == 1 && len(key) >= 9 && key[:9] == "fail-once" {
		s.answer(ctx, 0.9)
		return nil, status.Error(codes.Unavailable, "first attempt fails")
	}
	s.answer(ctx, 0.25)
	return &testingv1.GetResponse{}, nil
}

func (s *orcaService) ListItems(_ *testingv1.ListItemsRequest, ss testingv1.TestService_ListItemsServer) error {
	s.answer(ss.Context(), 0.5)
	return ss.Send(&testingv1.ListItemsResponse{})
}

// loadRecorder is a budget that allows every retry and keeps the loads it
// is told.
type loadRecorder struct {
	mu    sync.Mutex
	loads []budget.Load
}

func (b *loadRecorder) Allow(budget.Request) bool { return true }
func (b *loadRecorder) State() budget.State       { return budget.State{Kind: "load-recorder"} }
func (b *loadRecorder) Record(a budget.Attempt) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.loads = append(b.loads, a.Load)
}

func (b *loadRecorder) take() []budget.Load {
	b.mu.Lock()
	defer b.mu.Unlock()
	out := b.loads
	b.loads = nil
	return out
}

// A plain grpc-go server that uses only its orca package sends per-call
// load reports stagger's client reads, over loopback TCP: on a first
// attempt's success (the fast path, no per-call option), on each attempt of
// a retried call, and at a stream's end; each reaches the budget
// (budget.Attempt.Load) and the call's Report. A malformed report and an
// absent one change nothing of the call: it succeeds, after the same
// attempts; the malformed one is marked, never an error.
func TestLoadReportsFromPlainGRPCServer(t *testing.T) {
	pol := policy.Policy{MaxAttempts: 3, Backoff: policy.Backoff{Initial: time.Millisecond, Max: time.Millisecond, Multiplier: 1, Jitter: policy.JitterNone},
		RetryableCodes: policy.NewCodeSet(codes.Unavailable)}
	want := map[string]struct{ ok, fail, stream budget.Load }{
		"report":    {budget.Load{Utilization: 0.25, Reported: true}, budget.Load{Utilization: 0.9, Reported: true}, budget.Load{Utilization: 0.5, Reported: true}},
		"malformed": {budget.Load{Malformed: true}, budget.Load{Malformed: true}, budget.Load{Malformed: true}},
		"absent":    {},
	}
	for _, mode := range []string{"report", "malformed", "absent"} {
		t.Run(mode, func(t *testing.T) {
			w := want[mode]
			lis, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			srv := grpc.NewServer(orca.CallMetricsServerOption(nil))
			testingv1.RegisterTestServiceServer(srv, &orcaService{mode: mode, seen: map[string]int{}})
			go func() { _ = srv.Serve(lis) }()
			defer srv.Stop()
			rec := &loadRecorder{}
			opts := []interceptor.Option{interceptor.WithPolicy(pol), interceptor.WithBudget(rec)}
			cc, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()), grpc.WithDisableRetry(),
				grpc.WithChainUnaryInterceptor(interceptor.UnaryClientInterceptor(opts...)),
				grpc.WithChainStreamInterceptor(interceptor.StreamClientInterceptor(opts...)))
			if err != nil {
				t.Fatal(err)
			}
			defer cc.Close()
			client := testingv1.NewTestServiceClient(cc)
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()

			// The fast path: the budget hears the first attempt's load.
			if _, err := client.Get(ctx, &testingv1.GetRequest{Script: &testingv1.Script{Key: "fast"}}); err != nil {
				t.Fatal(err)
			}
			if got := rec.take(); len(got) != 1 || got[0] != w.ok {
				t.Errorf("fast path: the budget heard %+v; want [%+v]", got, w.ok)
			}

			// A retried call: each attempt's load, the Report the latest.
			var r interceptor.Report
			if _, err := client.Get(ctx, &testingv1.GetRequest{Script: &testingv1.Script{Key: "fail-once"}}, interceptor.WithReport(&r)); err != nil {
				t.Fatalf("retried call: %v", err)
			}
			if got := rec.take(); len(got) != 2 || got[0] != w.fail || got[1] != w.ok {
				t.Errorf("retried call: the budget heard %+v; want [%+v %+v]", got, w.fail, w.ok)
			}
			if r.Attempts != 2 || r.Load != w.ok {
				t.Errorf("retried call: Report %d attempts, Load %+v; want 2, %+v", r.Attempts, r.Load, w.ok)
			}

			// A stream: its end's load.
			r = interceptor.Report{}
			st, err := client.ListItems(ctx, &testingv1.ListItemsRequest{}, interceptor.WithReport(&r))
			if err != nil {
				t.Fatal(err)
			}
			for err == nil {
				_, err = st.Recv()
			}
			if status.Code(err) != codes.OK && err.Error() != "EOF" {
				t.Fatalf("stream: %v", err)
			}
			if got := rec.take(); len(got) != 1 || got[0] != w.stream {
				t.Errorf("stream: the budget heard %+v; want [%+v]", got, w.stream)
			}
			if r.Load != w.stream {
				t.Errorf("stream: Report Load %+v; want %+v", r.Load, w.stream)
			}
		})
	}
}

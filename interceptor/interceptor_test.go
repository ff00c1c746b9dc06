package interceptor_test

import (
	"context"
	"errors"
	"testing"

	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/stagger-go/stagger/budget"
	"github.com/stagger-go/stagger/interceptor"
	"github.com/stagger-go/stagger/policy"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const method = "/stagger.testing.v1.TestService/Get"

var errUnavailable = status.Error(codes.Unavailable, "down")

// script is a fake invoker: attempt i (from 0) returns errs[i], nil past the
// end; it records each attempt's context and options.
type script struct {
	errs []error
	ctxs []context.Context
	opts [][]grpc.CallOption
}

func (s *script) invoke(ctx context.Context, _ string, _, _ any, _ *grpc.ClientConn, opts ...grpc.CallOption) error {
	n := len(s.ctxs)
	s.ctxs = append(s.ctxs, ctx)
	s.opts = append(s.opts, opts)
	if n < len(s.errs) {
		return s.errs[n]
	}
	return nil
}

// zeroPause retries UNAVAILABLE with full jitter drawn at 0: no pause.
func zeroPause(n int) interceptor.Option {
	return interceptor.WithPolicy(policy.Policy{MaxAttempts: n, Backoff: policy.Backoff{
		Initial: 1, Max: 1, Multiplier: 1, Jitter: policy.JitterFull}})
}

func zero() float64 { return 0 }

func TestUnaryRetriesAndCounts(t *testing.T) {
	tests := []struct {
		name         string
		errs         []error
		callOpts     []grpc.CallOption
		wantAttempts int
		wantErr      bool
		wantReason   policy.Reason
	}{
		{"success", nil, nil, 1, false, policy.ReasonSuccess},
		{"one retry", []error{errUnavailable}, nil, 2, false, policy.ReasonSuccess},
		{"attempts run out", []error{errUnavailable, errUnavailable, errUnavailable}, nil, 3, true, policy.ReasonAttempts},
		{"not retryable", []error{status.Error(codes.NotFound, "no")}, nil, 1, true, policy.ReasonNotRetryable},
		{"per call WithMaxAttempts", []error{errUnavailable, errUnavailable}, []grpc.CallOption{interceptor.WithMaxAttempts(2)}, 2, true, policy.ReasonAttempts},
		{"per call Disable", []error{errUnavailable}, []grpc.CallOption{interceptor.Disable()}, 1, true, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := &script{errs: tt.errs}
			var last interceptor.Event
			icpt := interceptor.UnaryClientInterceptor(zeroPause(3), interceptor.WithRandom(zero),
				interceptor.WithHook(func(e interceptor.Event) { last = e }))
			err := icpt(context.Background(), method, nil, nil, nil, s.invoke, tt.callOpts...)
			if (err != nil) != tt.wantErr {
				t.Fatalf("err = %v, want error %v", err, tt.wantErr)
			}
			if len(s.ctxs) != tt.wantAttempts {
				t.Fatalf("%d attempts, want %d", len(s.ctxs), tt.wantAttempts)
			}
			for i, opts := range s.opts {
				for _, o := range opts {
					if _, ok := o.(interceptor.Option); ok {
						t.Errorf("attempt %d: stagger's Option reached the invoker", i+1)
					}
				}
			}
			if err != nil && tt.wantReason != 0 {
				var e *interceptor.Error
				if !errors.As(err, &e) || e.Attempts != tt.wantAttempts || e.Reason != tt.wantReason {
					t.Errorf("error = %#v, want attempts %d reason %v", e, tt.wantAttempts, tt.wantReason)
				}
				if last.Kind != interceptor.EventGiveUp || last.Reason != tt.wantReason {
					t.Errorf("last event = %+v", last)
				}
			}
		})
	}
}

func TestAttemptContext(t *testing.T) {
	s := &script{errs: []error{errUnavailable, errUnavailable}}
	ctx := metadata.AppendToOutgoingContext(context.Background(), "x-user", "ada")
	icpt := interceptor.UnaryClientInterceptor(zeroPause(3), interceptor.WithRandom(zero))
	if err := icpt(ctx, method, nil, nil, nil, s.invoke); err != nil {
		t.Fatal(err)
	}
	for i, c := range s.ctxs {
		n, ok := interceptor.AttemptFromContext(c)
		if n != i+1 || ok != (i > 0) {
			t.Errorf("attempt %d: AttemptFromContext = %d, %v", i+1, n, ok)
		}
		md, _ := metadata.FromOutgoingContext(c)
		if got := md.Get("x-user"); len(got) != 1 {
			t.Errorf("attempt %d: x-user = %v", i+1, got)
		}
		prev := md.Get("grpc-previous-rpc-attempts")
		if (i == 0 && len(prev) != 0) || (i > 0 && (len(prev) != 1 || prev[0] != string(rune('0'+i)))) {
			t.Errorf("attempt %d: grpc-previous-rpc-attempts = %v", i+1, prev)
		}
	}
}

func TestErrorKeepsStatus(t *testing.T) {
	st := status.New(codes.Unavailable, "down")
	e := &interceptor.Error{Attempts: 3, Err: st.Err()}
	if got, ok := status.FromError(e); !ok || got.Code() != codes.Unavailable || got.Message() != "down" {
		t.Errorf("FromError = %v %v", got, ok)
	}
	if interceptor.Attempts(e) != 3 || interceptor.Attempts(errUnavailable) != 0 || interceptor.Attempts(nil) != 0 {
		t.Error("Attempts miscounts")
	}
}

// countingBudget refuses every retry and counts what it was told.
type countingBudget struct {
	records  []budget.Attempt
	requests []budget.Request
	allow    bool
}

func (b *countingBudget) Record(a budget.Attempt) { b.records = append(b.records, a) }
func (b *countingBudget) Allow(r budget.Request) bool {
	b.requests = append(b.requests, r)
	return b.allow
}
func (b *countingBudget) State() budget.State { return budget.State{Kind: "counting"} }

func TestBudgetRecordsEveryAttempt(t *testing.T) {
	for _, allow := range []bool{true, false} {
		b := &countingBudget{allow: allow}
		s := &script{errs: []error{errUnavailable}}
		icpt := interceptor.UnaryClientInterceptor(zeroPause(3), interceptor.WithRandom(zero), interceptor.WithBudget(b))
		err := icpt(context.Background(), method, nil, nil, nil, s.invoke)
		wantRecords := []budget.Attempt{{Number: 1, Outcome: budget.Failure}, {Number: 2, Outcome: budget.Success, Final: true}}
		if !allow {
			wantRecords = wantRecords[:1]
			if interceptor.Attempts(err) != 1 {
				t.Errorf("refused: err = %v", err)
			}
		}
		if len(b.records) != len(wantRecords) {
			t.Fatalf("allow %v: records %+v, want %+v", allow, b.records, wantRecords)
		}
		// The retry's request and its attempt name the call by one
		// number, so that a Gate knows its learning call.
		if len(b.requests) == 1 && (b.requests[0].Call == 0 || allow && b.records[1].Call != b.requests[0].Call) {
			t.Errorf("allow %v: the retry's request names call %d, its record %+v; want one nonzero number", allow, b.requests[0].Call, b.records)
		}
		for i := range b.records {
			b.records[i].Call = 0
		}
		for i := range wantRecords {
			if b.records[i] != wantRecords[i] {
				t.Errorf("allow %v: record %d = %+v, want %+v", allow, i, b.records[i], wantRecords[i])
			}
		}
		if len(b.requests) != 1 || b.requests[0].Number != 2 {
			t.Errorf("allow %v: requests %+v", allow, b.requests)
		}
	}
}

func TestSuccessPathAllocatesNothing(t *testing.T) {
	cfg, err := policy.ParseConfig([]byte(benchFile))
	if err != nil {
		t.Fatal(err)
	}
	icpt := interceptor.UnaryClientInterceptor(interceptor.WithConfig(cfg))
	ok := func(context.Context, string, any, any, *grpc.ClientConn, ...grpc.CallOption) error { return nil }
	ctx := context.Background()
	if n := testing.AllocsPerRun(1000, func() { _ = icpt(ctx, method, nil, nil, nil, ok) }); n != 0 {
		t.Errorf("success path: %v allocs per call, want 0", n)
	}
	// A context that carries values, but no criticality (a server
	// handler's, whose caller sent none), adds nothing either.
	valued := context.WithValue(context.WithValue(ctx, struct{ a int }{}, 1), struct{ b int }{}, 2)
	if n := testing.AllocsPerRun(1000, func() { _ = icpt(valued, method, nil, nil, nil, ok) }); n != 0 {
		t.Errorf("success path under a context without criticality: %v allocs per call, want 0", n)
	}
	// A call hook hears every call's end, still without an allocation.
	var ends int
	hooked := interceptor.UnaryClientInterceptor(interceptor.WithConfig(cfg), interceptor.WithCallHook(func(_ context.Context, e interceptor.Event) {
		if e.Kind == interceptor.EventEnd {
			ends++
		}
	}))
	if n := testing.AllocsPerRun(1000, func() { _ = hooked(ctx, method, nil, nil, nil, ok) }); n != 0 {
		t.Errorf("success path with a call hook: %v allocs per call, want 0", n)
	}
	if ends == 0 {
		t.Error("the call hook heard no end")
	}
}

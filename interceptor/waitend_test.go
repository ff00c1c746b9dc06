//go:build go1.25

package interceptor

import (
	"context"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/emptypb"

	"github.com/stagger-go/stagger/budget"
	"github.com/stagger-go/stagger/policy"
)

// endsWait is a Deferrer that refuses every retry and ends its wait after
// a while with an error that names the Gate's rule, as budget.Gate's do.
type endsWait struct{}

type ruleErr string

func (e ruleErr) Error() string    { return "wait ended: " + string(e) }
func (e ruleErr) WaitRule() string { return string(e) }

func (endsWait) Record(budget.Attempt)     {}
func (endsWait) Allow(budget.Request) bool { return false }
func (endsWait) State() budget.State       { return budget.State{Kind: "ends-wait"} }
func (endsWait) Wait(ctx context.Context, _ budget.Request, _ time.Duration) (budget.Admission, error) {
	time.Sleep(20 * time.Millisecond)
	return budget.AdmitNone, ruleErr("hopeless")
}

// A call whose deferred retry's wait ended says in its Report how long it
// waited and which rule of the wait contract ended it (issue 55).
func TestReportSaysWhatEndedTheWait(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		unavailable := func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, opts ...grpc.CallOption) error {
			return status.Error(codes.Unavailable, "down")
		}
		p := policy.Policy{MaxAttempts: 3, Backoff: policy.Backoff{Initial: 10 * time.Millisecond, Max: 10 * time.Millisecond, Multiplier: 1}, RetryableCodes: policy.NewCodeSet(codes.Unavailable)}
		var r Report
		err := UnaryClientInterceptor(WithPolicy(p), WithBudget(endsWait{}))(context.Background(), "/svc/M", nil, nil, nil, unavailable, WithReport(&r))
		if status.Code(err) != codes.Unavailable {
			t.Fatalf("err = %v, want UNAVAILABLE", err)
		}
		// The wait's first part is the retry's pause (10 ms times the
		// default jitter's U(0.8, 1.2)): only what is past it is the
		// Gate's (issue 65).
		if r.WaitEnd != "hopeless" || r.Delay != 20*time.Millisecond || r.Deferred < 8*time.Millisecond || r.Deferred > 12*time.Millisecond || r.Reason != policy.ReasonDeferred {
			t.Fatalf("Report = %+v, want 20ms paused, 8 to 12 of them deferred, ended by the hopeless rule, reason deferred", r)
		}
		if s := r.String(); !strings.Contains(s, "waiting in the Gate; wait ended: hopeless)") {
			t.Errorf("Report prints %q", s)
		}
	})
}

// A hedged call whose hedge, refused by the budget with no attempt in
// flight, waited in the Gate and was refused for good says so too.
func TestReportSaysWhatEndedTheHedgeWait(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		unavailable := func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, opts ...grpc.CallOption) error {
			return status.Error(codes.Unavailable, "down")
		}
		cfg, err := policy.ParseConfig([]byte(`{"methodConfig": [{"name": [{"service": "svc"}], "idempotent": true,
			"hedgingPolicy": {"maxAttempts": 3, "hedgingDelay": "0.05s", "nonFatalStatusCodes": ["UNAVAILABLE"]}}]}`))
		if err != nil {
			t.Fatal(err)
		}
		var r Report
		err = UnaryClientInterceptor(WithConfig(cfg), WithBudget(endsWait{}))(context.Background(), "/svc/M", nil, &emptypb.Empty{}, nil, unavailable, WithReport(&r))
		if status.Code(err) != codes.Unavailable {
			t.Fatalf("err = %v, want UNAVAILABLE", err)
		}
		if r.WaitEnd != "hopeless" || r.Deferred != 20*time.Millisecond || r.Reason != policy.ReasonDeferred {
			t.Fatalf("Report = %+v, want 20ms deferred, ended by the hopeless rule, reason deferred", r)
		}
	})
}

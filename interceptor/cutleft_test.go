//go:build go1.25

package interceptor

import (
	"context"
	"sync"
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

// countingAdmitter admits every retry, the per-attempt timer's unpaid
// (budget.Admitter), and counts the admissions it gave and the Records
// that bring one back.
type countingAdmitter struct {
	mu          sync.Mutex
	given, back int
}

func (b *countingAdmitter) Allow(budget.Request) bool { return true }
func (b *countingAdmitter) Admit(budget.Request) (budget.Admission, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.given++
	return budget.AdmitBudget, true
}
func (b *countingAdmitter) State() budget.State { return budget.State{Kind: "counting"} }
func (b *countingAdmitter) Record(a budget.Attempt) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if a.Admission != budget.AdmitNone {
		b.back++
	}
}

// TestCutRetryCallerLeavesSettles: the per-attempt timer cuts attempt 1 off
// and admits its retry (an admission the budget must hear of again); the
// caller leaves as the call announces that retry (its hook cancels),
// before it goes. The retry is never sent, and the call gives its
// admission back before it returns (the loop's end), as every admission
// is settled. Before, the call gave up as its pause ended and the budget
// never heard of the admission again. The timer admits no breaker probe
// (askAdmit asks a breaker that is not closed nothing): there is none to
// give back.
func TestCutRetryCallerLeavesSettles(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cc, b, ctx, retries, opts := cutRetryRig(t)
		var rep Report
		ui := UnaryClientInterceptor(opts...)
		err := ui(ctx, "/svc/M", &emptypb.Empty{}, new(emptypb.Empty), cc, func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, opts ...grpc.CallOption) error {
			return cc.Invoke(ctx, method, req, reply, opts...)
		}, WithReport(&rep))
		if status.Code(err) != codes.Canceled {
			t.Fatalf("err = %v, want CANCELED (the caller left)", err)
		}
		if *retries != 1 || rep.Attempts != 1 {
			t.Fatalf("%d retries announced, %d attempts sent; want the timer's retry announced and attempt 1 alone sent", *retries, rep.Attempts)
		}
		b.mu.Lock()
		defer b.mu.Unlock()
		if b.given != 1 || b.back != 1 {
			t.Errorf("the budget gave %d admissions and heard %d back by the call's end; want the timer's one, given back", b.given, b.back)
		}
	})
}

// cutRetryRig is what the cut-retry tests share: a server slower than
// every timer, a counting budget, and a hook that cancels the caller as
// the per-attempt timer's retry is announced (counted in *retries); opts
// are the interceptor's.
func cutRetryRig(t *testing.T) (*grpc.ClientConn, *countingAdmitter, context.Context, *int, []Option) {
	t.Helper()
	cc := bufconnServe(t, func(_ any, ss grpc.ServerStream) error {
		<-ss.Context().Done() // slower than every timer
		return ss.Context().Err()
	})
	b := &countingAdmitter{}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	retries := new(int)
	hook := func(_ context.Context, e Event) {
		if e.Kind == EventRetry && e.Code == codes.DeadlineExceeded {
			*retries++
			cancel()
		}
	}
	p := policy.Policy{MaxAttempts: 3, PerAttemptRecvTimeout: 100 * time.Millisecond,
		Backoff:        policy.Backoff{Initial: 10 * time.Millisecond, Max: 10 * time.Millisecond, Multiplier: 1},
		RetryableCodes: policy.NewCodeSet(codes.Unavailable)}
	return cc, b, ctx, retries, []Option{WithPolicy(p), WithBudget(b), WithCallHook(hook), WithIdempotentMethods(func(string) bool { return true })}
}

//go:build go1.25

package interceptor

import (
	"context"
	"io"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/emptypb"

	"github.com/stagger-go/stagger/breaker"
	"github.com/stagger-go/stagger/budget"
	"github.com/stagger-go/stagger/criticality"
	"github.com/stagger-go/stagger/policy"
)

// TestRetryProbeCallerLeavesGivesBack: behind a half-open breaker and no
// budget, a call's first attempt goes as the probe and ends CANCELED (a
// proxy's: the breaker hears Other, the slot is free again); its retry
// takes the probe (AllowRetry's yes) and the caller leaves in the pause,
// before the retry is sent. The call gives the probe back at its end
// (the unary loop's, the stream's), as a Gate gives back a guard's yes
// whose caller left: the next call's first attempt goes as the probe.
// Before, the slot stayed taken for a whole break with nothing in
// flight, and the next call failed fast (breaker open).
func TestRetryProbeCallerLeavesGivesBack(t *testing.T) {
	for _, kind := range []string{"unary", "stream"} {
		t.Run(kind, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				ctx, cancel := context.WithCancel(context.Background())
				defer cancel()
				retries := 0
				hook := func(_ context.Context, e Event) {
					if e.Kind == EventRetry {
						retries++
						cancel() // the caller leaves in the pause
					}
				}
				call, served, br := halfOpenProbeCall(t, kind, WithBudget(nil), WithCallHook(hook))
				var rep Report
				if err := call(ctx, &rep); status.Code(err) != codes.Canceled || rep.Reason != policy.ReasonCaller {
					t.Fatalf("the leaving call: %v (reason %v), want CANCELED (the caller left)", err, rep.Reason)
				}
				if retries != 1 || rep.Attempts != 1 || served.Load() != 1 {
					t.Fatalf("%d retries announced, %d attempts sent, %d served; want the retry announced and attempt 1 alone sent", retries, rep.Attempts, served.Load())
				}
				nextCallGoes(t, call, br)
			})
		})
	}
}

// refusingBudget refuses every retry, and is no Deferrer.
type refusingBudget struct{}

func (refusingBudget) Allow(budget.Request) bool { return false }
func (refusingBudget) Record(budget.Attempt)     {}
func (refusingBudget) State() budget.State       { return budget.State{Kind: "refusing"} }

// TestRetryProbeBudgetRefusedGivesBack: as above, but the budget (no
// Deferrer) refuses the retry the half-open breaker let go as its probe:
// the call ends (reason budget), and the breaker's yes goes back at once,
// so the next call's first attempt goes as the probe. Before, the slot
// stayed taken for a whole break with nothing in flight.
func TestRetryProbeBudgetRefusedGivesBack(t *testing.T) {
	for _, kind := range []string{"unary", "stream"} {
		t.Run(kind, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				call, served, br := halfOpenProbeCall(t, kind, WithBudget(refusingBudget{}))
				var rep Report
				if err := call(context.Background(), &rep); status.Code(err) != codes.Canceled || rep.Reason != policy.ReasonBudget {
					t.Fatalf("the refused call: %v (reason %v), want the proxy's CANCELED, reason budget", err, rep.Reason)
				}
				if rep.Attempts != 1 || served.Load() != 1 {
					t.Fatalf("%d attempts sent, %d served; want attempt 1 alone", rep.Attempts, served.Load())
				}
				nextCallGoes(t, call, br)
			})
		})
	}
}

// halfOpenProbeCall serves a method over bufconn whose first request ends
// CANCELED (a proxy's; the breaker hears Other) and the others OK, behind
// a breaker whose break is over: the next attempt to ask goes as its
// half-open probe. It returns a call of the method through a unary or a
// stream interceptor (kind) with opts, retrying CANCELED after 100ms, the
// requests served and the breaker.
func halfOpenProbeCall(t *testing.T, kind string, opts ...Option) (call func(context.Context, *Report) error, served *atomic.Int32, br *breaker.Breaker) {
	t.Helper()
	const method = "/stagger.testing.v1.TestService/ListItems"
	served = new(atomic.Int32)
	cc := bufconnServe(t, func(_ any, ss grpc.ServerStream) error {
		if served.Add(1) == 1 {
			return status.Error(codes.Canceled, "cancelled by a proxy")
		}
		if err := ss.RecvMsg(new(emptypb.Empty)); err != nil {
			return err
		}
		return ss.SendMsg(new(emptypb.Empty))
	})
	const brk = time.Second
	bs, err := breaker.NewSet(breaker.Settings{FailureRatio: 0.5, MinimumThroughput: 2, BreakDuration: brk, ProbeEvery: 1}, nil)
	if err != nil {
		t.Fatal(err)
	}
	br = bs.Get(cc.CanonicalTarget(), method)
	for range 2 {
		br.Record(budget.Failure, true, criticality.Unset, nil)
	}
	if err := br.Admit(criticality.Unset, nil); err == nil {
		t.Fatal("the breaker admits a first attempt after two failures, want it open")
	}
	time.Sleep(brk) // the break is over: the next to ask is the probe

	p := policy.Policy{MaxAttempts: 3,
		Backoff:        policy.Backoff{Initial: 100 * time.Millisecond, Max: 100 * time.Millisecond, Multiplier: 1},
		RetryableCodes: policy.NewCodeSet(codes.Canceled)}
	opts = append([]Option{WithPolicy(p), WithBreakers(bs), WithIdempotentMethods(func(string) bool { return true })}, opts...)
	return kindCall(kind, cc, method, opts...), served, br
}

// kindCall returns a call of method on cc through a unary or a stream
// interceptor (kind) with opts, reporting into rep; a stream sends one
// request and reads to the end.
func kindCall(kind string, cc *grpc.ClientConn, method string, opts ...Option) func(ctx context.Context, rep *Report) error {
	if kind == "unary" {
		ui := UnaryClientInterceptor(opts...)
		return func(ctx context.Context, rep *Report) error {
			return ui(ctx, method, &emptypb.Empty{}, new(emptypb.Empty), cc, func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, opts ...grpc.CallOption) error {
				return cc.Invoke(ctx, method, req, reply, opts...)
			}, WithReport(rep))
		}
	}
	si := StreamClientInterceptor(opts...)
	return func(ctx context.Context, rep *Report) error {
		cs, err := si(ctx, &grpc.StreamDesc{ServerStreams: true}, cc, method, func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, opts ...grpc.CallOption) (grpc.ClientStream, error) {
			return cc.NewStream(ctx, desc, method, opts...)
		}, WithReport(rep))
		if err != nil {
			return err
		}
		if err := cs.SendMsg(&emptypb.Empty{}); err != nil {
			return err
		}
		if err := cs.CloseSend(); err != nil {
			return err
		}
		for {
			if err := cs.RecvMsg(new(emptypb.Empty)); err == io.EOF {
				return nil
			} else if err != nil {
				return err
			}
		}
	}
}

// nextCallGoes: with nothing in flight, the next call's first attempt
// goes as br's half-open probe, is served and closes br.
func nextCallGoes(t *testing.T, call func(context.Context, *Report) error, br *breaker.Breaker) {
	t.Helper()
	synctest.Wait()
	var rep Report
	if err := call(context.Background(), &rep); err != nil {
		t.Errorf("the next call: %v (reason %v), want served: its first attempt goes as the probe the retry not sent gave back", err, rep.Reason)
	}
	if s := br.Snapshot(); s.State != breaker.StateClosed {
		t.Errorf("breaker %v after the next call, want closed", s.State)
	}
}

// TestStreamCutRetryCallerLeavesSettles is TestCutRetryCallerLeavesSettles
// for a retried stream: the per-attempt timer cuts attempt 1 off and
// admits its retry; the caller leaves as the stream announces it, in the
// pause. The retry is never sent, and the stream gives the admission back
// at its end (finishStream, giveBack). Before, the budget never heard of
// it again.
func TestStreamCutRetryCallerLeavesSettles(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cc, b, ctx, retries, opts := cutRetryRig(t)
		var rep Report
		si := StreamClientInterceptor(opts...)
		cs, err := si(ctx, &grpc.StreamDesc{ServerStreams: true}, cc, "/svc/M", func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, opts ...grpc.CallOption) (grpc.ClientStream, error) {
			return cc.NewStream(ctx, desc, method, opts...)
		}, WithReport(&rep))
		if err != nil {
			t.Fatal(err)
		}
		if err := cs.SendMsg(&emptypb.Empty{}); err != nil {
			t.Fatal(err)
		}
		if err := cs.CloseSend(); err != nil {
			t.Fatal(err)
		}
		if err := cs.RecvMsg(new(emptypb.Empty)); status.Code(err) != codes.Canceled {
			t.Fatalf("RecvMsg: %v, want CANCELED (the caller left)", err)
		}
		if *retries != 1 || rep.Attempts != 1 {
			t.Fatalf("%d retries announced, %d attempts sent; want the timer's retry announced and attempt 1 alone sent", *retries, rep.Attempts)
		}
		b.mu.Lock()
		defer b.mu.Unlock()
		if b.given != 1 || b.back != 1 {
			t.Errorf("the budget gave %d admissions and heard %d back by the stream's end; want the timer's one, given back", b.given, b.back)
		}
	})
}

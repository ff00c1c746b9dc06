//go:build go1.25

package interceptor

import (
	"context"
	"fmt"
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

// TestHedgeProbeBudgetRefusedGivesBack: a hedged call's first attempt goes
// while the breaker is closed; the breaker opens meanwhile, its break ends,
// and the attempt ends CANCELED (non-fatal; the breaker hears Other and
// turns half-open). The hedge that is now due takes the breaker's
// half-open probe (AllowRetry's yes); the budget refuses it with nothing
// in flight, so it waits in the Deferrer, whose wait ends refused: the
// call ends, the hedge never sent (or the caller leaves in the wait:
// leaves). The breaker's yes must go back, so the next call's first
// attempt goes as the probe. Before, the slot stayed taken for a whole
// break with nothing in flight, and the next call failed fast (breaker
// open).
func TestHedgeProbeBudgetRefusedGivesBack(t *testing.T) {
	for _, kind := range []string{"unary", "stream"} {
		for _, leaves := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/leaves=%v", kind, leaves), func(t *testing.T) {
				synctest.Test(t, func(t *testing.T) { hedgeProbeRefused(t, kind, leaves) })
			})
		}
	}
}

// waitsForCaller is a Deferrer that refuses every retry and lets none go
// from its wait: the wait ends when its caller leaves.
type waitsForCaller struct{ endsWait }

func (waitsForCaller) Wait(ctx context.Context, _ budget.Request, _ time.Duration) (budget.Admission, error) {
	<-ctx.Done()
	return budget.AdmitNone, ctx.Err()
}

// hedgeProbeRefused is TestHedgeProbeBudgetRefusedGivesBack for a unary
// call or a stream (kind), whose caller leaves in the wait or not.
func hedgeProbeRefused(t *testing.T, kind string, leaves bool) {
	const brk = time.Second
	bs, err := breaker.NewSet(breaker.Settings{FailureRatio: 0.5, MinimumThroughput: 2, BreakDuration: brk, ProbeEvery: 1}, nil)
	if err != nil {
		t.Fatal(err)
	}
	var br *breaker.Breaker
	served := new(atomic.Int32)
	cc := bufconnServe(t, func(_ any, ss grpc.ServerStream) error {
		if err := ss.RecvMsg(new(emptypb.Empty)); err != nil {
			return err
		}
		if served.Add(1) == 1 {
			// The breaker opens while attempt 1 runs, and its break
			// ends before attempt 1 does.
			for range 2 {
				br.Record(budget.Failure, true, criticality.Unset, nil)
			}
			if err := br.Admit(criticality.Unset, nil); err == nil {
				t.Error("the breaker admits a first attempt after two failures, want it open")
			}
			time.Sleep(brk)
			return status.Error(codes.Canceled, "cancelled by a proxy")
		}
		return ss.SendMsg(new(emptypb.Empty))
	})
	const method = "/svc/M"
	br = bs.Get(cc.CanonicalTarget(), method)
	cfg, err := policy.ParseConfig([]byte(`{"methodConfig": [{"name": [{"service": "svc"}], "idempotent": true,
		"hedgingPolicy": {"maxAttempts": 2, "hedgingDelay": "5s", "nonFatalStatusCodes": ["CANCELLED"]}}]}`))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	opts, want := []Option{WithConfig(cfg), WithBreakers(bs), WithBudget(endsWait{})}, policy.ReasonDeferred
	if leaves {
		leave := func(_ context.Context, e Event) {
			if e.Kind == EventDeferred {
				cancel()
			}
		}
		opts, want = []Option{WithConfig(cfg), WithBreakers(bs), WithBudget(waitsForCaller{}), WithCallHook(leave)}, policy.ReasonCaller
	}
	call := kindCall(kind, cc, method, opts...)
	var rep Report
	if err := call(ctx, &rep); status.Code(err) != codes.Canceled || rep.Reason != want {
		t.Fatalf("the refused call: %v (reason %v), want CANCELED, reason %v", err, rep.Reason, want)
	}
	if rep.Attempts != 1 || served.Load() != 1 {
		t.Fatalf("%d attempts sent, %d served; want attempt 1 alone", rep.Attempts, served.Load())
	}
	nextCallGoes(t, call, br)
}

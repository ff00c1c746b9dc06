//go:build go1.25

package test

import (
	"context"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/stagger-go/stagger/interceptor"
	"github.com/stagger-go/stagger/policy"
	testingv1 "github.com/stagger-go/stagger/proto/stagger/testing/v1"
	"github.com/stagger-go/stagger/testserver"
)

// ends collects the EventEnd a call hook receives, with the context value
// the hook found under ctxKey.
type ends struct {
	mu     sync.Mutex
	events []interceptor.Event
	values []any
}

type ctxKey struct{}

func (e *ends) hook(ctx context.Context, ev interceptor.Event) {
	if ev.Kind != interceptor.EventEnd {
		return
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	e.events = append(e.events, ev)
	e.values = append(e.values, ctx.Value(ctxKey{}))
}

func (e *ends) all() ([]interceptor.Event, []any) {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]interceptor.Event(nil), e.events...), append([]any(nil), e.values...)
}

// A call that heals after two retries ends once: 3 attempts, 2 retries, the
// two pauses (1s and 2s of retryFile, exact on the bubble's clock), reason
// success; the Report says the same, and the call hook gets the caller's
// context.
func TestEndEventAndReport(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var got ends
		b := newBench(t, []interceptor.Option{interceptor.WithConfig(parse(t, retryFile)), interceptor.WithCallHook(got.hook)})
		ctx := context.WithValue(context.Background(), ctxKey{}, "the caller's")
		var r interceptor.Report
		if err := b.get(ctx, &testingv1.Script{Key: "healed", FailAttempts: 2}, interceptor.WithReport(&r)); err != nil {
			t.Fatal(err)
		}
		want := interceptor.Report{Attempts: 3, Retries: 2, Delay: 3 * time.Second, Reason: policy.ReasonSuccess, Code: codes.OK, Target: testserver.BufnetTarget}
		if r != want {
			t.Errorf("report %+v, want %+v", r, want)
		}
		var plain interceptor.Report
		if err := b.get(ctx, &testingv1.Script{Key: "first"}, interceptor.WithReport(&plain)); err != nil {
			t.Fatal(err)
		}
		if want := (interceptor.Report{Attempts: 1, Reason: policy.ReasonSuccess, Code: codes.OK, Target: testserver.BufnetTarget}); plain != want {
			t.Errorf("report of a first-time success %+v, want %+v", plain, want)
		}
		var failed interceptor.Report
		_ = b.get(ctx, &testingv1.Script{Key: "failed", FailAttempts: 9}, interceptor.WithReport(&failed))
		if want := (interceptor.Report{Attempts: 4, Retries: 3, Delay: 7 * time.Second, Reason: policy.ReasonAttempts, Code: codes.Unavailable, Target: testserver.BufnetTarget}); failed != want {
			t.Errorf("report of a call out of attempts %+v, want %+v", failed, want)
		}
		evs, vals := got.all()
		if len(evs) != 3 {
			t.Fatalf("%d end events, want 3 (one per call): %+v", len(evs), evs)
		}
		e := evs[0]
		if e.Method != testingv1.TestService_Get_FullMethodName || e.Attempt != 3 || e.Retries != 2 || e.Hedges != 0 ||
			e.Delay != 3*time.Second || e.Reason != policy.ReasonSuccess || e.Code != codes.OK || e.Err != nil || e.Target == "" {
			t.Errorf("end event %+v", e)
		}
		for i, v := range vals {
			if v != "the caller's" {
				t.Errorf("end event %d: the hook's context holds %v, want the caller's", i, v)
			}
		}
	})
}

// A hedged call counts its hedges, not retries, and no delay.
func TestEndEventHedges(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var got ends
		b := newHedgeBench(t, interceptor.WithConfig(hedgeConfig(t, 3, 100*time.Millisecond, "")), interceptor.WithCallHook(got.hook))
		var r interceptor.Report
		// The first two attempts are slow: the third answers.
		_, err := b.client.Get(context.Background(), &testingv1.GetRequest{Script: &testingv1.Script{Key: "k", AttemptDelays: durations(time.Second, time.Second, 0)}}, interceptor.WithReport(&r))
		if err != nil {
			t.Fatal(err)
		}
		if want := (interceptor.Report{Attempts: 3, Hedges: 2, Reason: policy.ReasonSuccess, Code: codes.OK, Target: testserver.BufnetTarget}); r != want {
			t.Errorf("report %+v, want %+v", r, want)
		}
		if evs, _ := got.all(); len(evs) != 1 || evs[0].Hedges != 2 || evs[0].Retries != 0 {
			t.Errorf("end events %+v, want one with 2 hedges", evs)
		}
	})
}

// A stream ends once, when the application reads its end, with the
// attempts it took.
func TestEndEventStream(t *testing.T) {
	for _, k := range streamKinds {
		t.Run(k.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				var got ends
				_, c := newStreamBench(t, interceptor.WithConfig(parse(t, retryFile)), interceptor.WithCallHook(got.hook))
				var rep interceptor.Report
				r := k.run(context.Background(), c, &testingv1.Script{Key: "k", FailAttempts: 1}, 3, interceptor.WithReport(&rep))
				if r.err != nil {
					t.Fatal(r.err)
				}
				if want := (interceptor.Report{Attempts: 2, Retries: 1, Delay: time.Second, Reason: policy.ReasonSuccess, Code: codes.OK, Target: testserver.BufnetTarget}); rep != want {
					t.Errorf("report %+v, want %+v", rep, want)
				}
				if evs, _ := got.all(); len(evs) != 1 || evs[0].Retries != 1 {
					t.Errorf("end events %+v, want one with 1 retry", evs)
				}
			})
		})
	}
}

//go:build go1.25

package test

import (
	"context"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/stagger-go/stagger/budget"
	"github.com/stagger-go/stagger/interceptor"
	testingv1 "github.com/stagger-go/stagger/proto/stagger/testing/v1"
)

// admitCounter is a budget that admits the per-attempt timer's retries
// with an admission (budget.Admitter, as a Gate admits a straggler's by its
// heal rule) and counts what it hands out and what it is told back: every
// admission must come back in a Record (STYLE's rule that every admission
// is settled).
type admitCounter struct {
	mu      sync.Mutex
	admits  int
	settled []budget.Attempt
}

func (b *admitCounter) Allow(budget.Request) bool { return true }
func (b *admitCounter) Admit(budget.Request) (budget.Admission, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.admits++
	return budget.AdmitBudget, true
}
func (b *admitCounter) State() budget.State { return budget.State{Kind: "admit-counter"} }
func (b *admitCounter) Record(a budget.Attempt) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if a.Admission != budget.AdmitNone {
		b.settled = append(b.settled, a)
	}
}

// TestStreamTimerCutSettledWhenCallerLeaves: a stream's per-attempt timer
// (perAttemptFile: 1s, then a 100ms pause as grace) admits the retry and
// cuts the attempt off at 1.1s; the caller, not reading, cancels before
// the stream's reader takes the cut. The call ends CANCELED, its retry
// never goes, and the admission the timer took is settled with the budget
// (attempt 2, outcome other). Before, afterAttempt took the timer's cut only
// for a timed-out attempt, and the caller's end is not one: the admission
// was never given back.
func TestStreamTimerCutSettledWhenCallerLeaves(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := &admitCounter{}
		srv, c := newStreamBench(t, interceptor.WithConfig(parse(t, perAttemptFile)), interceptor.WithBudget(b))
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		st, err := c.ListItems(ctx, &testingv1.ListItemsRequest{Script: &testingv1.Script{Key: "k", ResponseCount: 1, AttemptDelays: delays(5*time.Second, 0)}}, interceptor.Idempotent())
		if err != nil {
			t.Fatal(err)
		}
		// Past the cut at 1.1s, the caller not reading: nothing takes the
		// cut until the caller's end.
		time.Sleep(1200 * time.Millisecond)
		synctest.Wait()
		b.mu.Lock()
		admits := b.admits
		b.mu.Unlock()
		if admits != 1 {
			t.Fatalf("by 1.2s the timer took %d admissions, want 1 (the cut at 1.1s)", admits)
		}
		cancel()
		if _, err := st.Recv(); status.Code(err) != codes.Canceled {
			t.Fatalf("Recv: %v, want CANCELED", err)
		}
		synctest.Wait()
		if n := len(srv.Attempts("k")); n != 1 {
			t.Errorf("server saw %d attempts, want 1: the cut attempt's retry must not go", n)
		}
		b.mu.Lock()
		defer b.mu.Unlock()
		if len(b.settled) != 1 || b.settled[0].Number != 2 || b.settled[0].Outcome != budget.Other {
			t.Errorf("the budget was told back %+v; want the timer's admission settled once (attempt 2, other)", b.settled)
		}
	})
}

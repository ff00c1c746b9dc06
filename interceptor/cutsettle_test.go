package interceptor

import (
	"context"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/stagger-go/stagger/budget"
	"github.com/stagger-go/stagger/policy"
)

// admissionBudget admits every retry, the timer's with an admission
// (budget.Admitter), and keeps the Records that carry one: each is one
// given back.
type admissionBudget struct{ back []budget.Attempt }

func (b *admissionBudget) Allow(budget.Request) bool { return true }
func (b *admissionBudget) Admit(budget.Request) (budget.Admission, bool) {
	return budget.AdmitBudget, true
}
func (b *admissionBudget) State() budget.State { return budget.State{Kind: "admission"} }
func (b *admissionBudget) Record(a budget.Attempt) {
	if a.Admission != budget.AdmitNone {
		b.back = append(b.back, a)
	}
}

// TestAfterAttemptTakesTheCut: the retry the per-attempt timer admitted as
// it cut attempt 1 off (call.cut) goes only when the attempt timed out;
// an attempt that answered, or whose caller left, as the timer cut it off
// gives the admission back once, in afterAttempt, whichever engine ran
// it. Before, only the unary loop gave it back (a stream's was kept).
func TestAfterAttemptTakesTheCut(t *testing.T) {
	left, cancel := context.WithCancel(context.Background())
	cancel()
	for _, tc := range []struct {
		name     string
		ctx      context.Context
		err      error
		timedOut bool
		retry    bool
	}{
		{"timed out: the retry goes with the admission", context.Background(), errAttemptTimeout, true, true},
		{"answered as it was cut off: given back", context.Background(), nil, false, false},
		{"the caller left as it was cut off: given back", left, status.Error(codes.Canceled, "context canceled"), false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := &admissionBudget{}
			c := timerCall(1, time.Hour)
			c.budget = b
			c.cut = timerCut{verdict: policy.Verdict{Retry: true, Pause: 10 * time.Millisecond}, admission: budget.AdmitBudget}
			retry, _ := c.afterAttempt(tc.ctx, tc.err, nil, false, tc.timedOut)
			if retry != tc.retry {
				t.Fatalf("retry = %v, want %v", retry, tc.retry)
			}
			if c.cut != (timerCut{}) {
				t.Errorf("call.cut = %+v after afterAttempt, want taken", c.cut)
			}
			wantBack, wantAdm := 1, budget.AdmitNone
			if tc.retry {
				wantBack, wantAdm = 0, budget.AdmitBudget
			}
			if len(b.back) != wantBack || c.admission != wantAdm {
				t.Errorf("given back %+v, call's admission %v; want %d given back, %v kept for the retry", b.back, c.admission, wantBack, wantAdm)
			}
			if len(b.back) == 1 && (b.back[0].Number != 2 || b.back[0].Outcome != budget.Other) {
				t.Errorf("given back as %+v, want attempt 2, outcome other", b.back[0])
			}
		})
	}
}

// TestUnaryEndBeforeDueSettledOnce: a unary attempt whose end, dated before
// the due time of the decision that cut it off, reached the loop after the
// timer's event is its own (TestUnaryTimerEndBeforeDueIsItsOwn); the
// admission that decision took is given back once, as the call takes the
// attempt's end (afterAttempt), as for a stream.
func TestUnaryEndBeforeDueSettledOnce(t *testing.T) {
	const d = time.Hour
	b := &admissionBudget{}
	c := timerCall(1, d)
	c.pol.Backoff.Initial, c.pol.Backoff.Max = 0, 0
	c.budget = b
	l := timerLoop(t, c, false)
	l.handle(unaryEvent{kind: evTimer, n: 1, at: l.timer.due})
	if l.timer.state != timerFired {
		t.Fatalf("after the timer's event: state %d, want cut off (%d)", l.timer.state, timerFired)
	}
	if cut := l.endTimer(l.timer.start.Add(d - time.Millisecond)); cut {
		t.Fatal("endTimer: cut off, want the attempt's own end")
	}
	if len(b.back) != 0 {
		t.Fatalf("given back %+v before the call took the attempt's end", b.back)
	}
	if retry, _ := c.afterAttempt(context.Background(), status.Error(codes.InvalidArgument, "bad"), nil, false, false); retry {
		t.Fatal("retry after INVALID_ARGUMENT")
	}
	if len(b.back) != 1 || b.back[0].Number != 2 || b.back[0].Outcome != budget.Other || b.back[0].Admission != budget.AdmitBudget {
		t.Errorf("given back %+v, want the timer's admission once (attempt 2, other)", b.back)
	}
}

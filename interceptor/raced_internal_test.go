package interceptor

import (
	"context"
	"testing"

	"github.com/stagger-go/stagger/budget"
	"github.com/stagger-go/stagger/policy"
	"google.golang.org/grpc/codes"
)

// TestRacedVerdict: a hedged attempt's failure before any commit (askRaced)
// is judged by the retry's function (verdict) with the retry's caller rule
// (callerEnded): a context code within callerDeadlineSlack of the caller's
// deadline is the caller's, as for a retried attempt; and the caller's
// status replaces a failure only when the failure would have been hedged
// (callerEnd), so a committed attempt's failure stays the call's, as a
// retried one's does. A hedged call reads no retry policy (retrying false).
func TestRacedVerdict(t *testing.T) {
	far, near, cancelled, server := rowFar, rowNear, rowCancelled, rowServer
	tests := []struct {
		name       string
		ctx        mkCtx
		err        error
		committed  bool
		wantRetry  bool
		wantReason policy.Reason
		wantRecord budget.Outcome
		wantCaller bool // callerEnd: the call ends with the caller's status
	}{
		{"non-fatal: the next hedge may go", far, server(codes.Unavailable), false, true, policy.ReasonNone, budget.Failure, false},
		{"fatal", far, server(codes.Internal), false, false, policy.ReasonNotRetryable, budget.Other, false},
		{"committed", far, server(codes.Unavailable), true, false, policy.ReasonCommitted, budget.Other, false},
		{"DEADLINE_EXCEEDED within the slack is the caller's", near, server(codes.DeadlineExceeded), false, false, policy.ReasonCaller, budget.Other, false},
		{"caller left on a non-fatal failure: the caller's status", cancelled, server(codes.Unavailable), false, false, policy.ReasonCaller, budget.Other, true},
		{"caller left on a fatal failure: the failure's", cancelled, server(codes.Internal), false, false, policy.ReasonCaller, budget.Other, false},
		{"caller left on a committed failure: the failure's", cancelled, server(codes.Unavailable), true, false, policy.ReasonCaller, budget.Other, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx, cancel := tt.ctx()
			defer cancel()
			f := &retryFacts{o: &options{}, ctx: context.Background()}
			q := question{kind: askRaced, n: 1, err: tt.err, committed: tt.committed, first: true, nonFatal: policy.NewCodeSet(codes.Unavailable)}
			ans := f.shouldRetry(ctx, &q)
			v := ans.verdict
			if v.Retry != tt.wantRetry || v.Reason != tt.wantReason || v.Record != tt.wantRecord || ans.callerEnd != tt.wantCaller {
				t.Errorf("verdict %+v, callerEnd %v; want retry %v, %v, record %v, callerEnd %v", v, ans.callerEnd, tt.wantRetry, tt.wantReason, tt.wantRecord, tt.wantCaller)
			}
		})
	}
}

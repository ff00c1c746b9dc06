//go:build go1.25

package test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"google.golang.org/grpc"

	"github.com/stagger-go/stagger/budget"
	"github.com/stagger-go/stagger/criticality"
	"github.com/stagger-go/stagger/interceptor"
	"github.com/stagger-go/stagger/policy"
	testingv1 "github.com/stagger-go/stagger/proto/stagger/testing/v1"
	"github.com/stagger-go/stagger/testserver"
)

// requestLog is a budget that admits everything and keeps the requests it
// was asked.
type requestLog struct {
	mu   sync.Mutex
	reqs []budget.Request
}

func (r *requestLog) Record(budget.Attempt) {}
func (r *requestLog) Allow(q budget.Request) bool {
	r.mu.Lock()
	r.reqs = append(r.reqs, q)
	r.mu.Unlock()
	return true
}
func (r *requestLog) State() budget.State { return budget.State{Kind: "log"} }

func (r *requestLog) all() []budget.Request {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]budget.Request(nil), r.reqs...)
}

// fileCriticality is retryFile with "criticality": level on its entry.
func fileCriticality(level string) string {
	if level == "" {
		return retryFile
	}
	return strings.Replace(retryFile, `"name": [`, `"criticality": "`+level+`", "name": [`, 1)
}

// TestCriticalityPrecedence: a call's criticality comes from the call
// option, else the context, else the file, else the interceptor's default,
// else none (CRITICAL); it goes on every attempt in the header (none when
// nothing named it), into every event, the Report and every budget
// request.
func TestCriticalityPrecedence(t *testing.T) {
	for _, tc := range []struct {
		name  string
		deflt criticality.Level // the interceptor's WithCriticality
		file  string
		ctx   criticality.Level // criticality.NewContext
		call  []grpc.CallOption
		want  criticality.Level // Unset: none named, none sent
	}{
		{name: "nothing", want: criticality.Unset},
		{name: "interceptor default", deflt: criticality.SheddablePlus, want: criticality.SheddablePlus},
		{name: "file over default", deflt: criticality.CriticalPlus, file: "SHEDDABLE", want: criticality.Sheddable},
		{name: "context over file", file: "SHEDDABLE", ctx: criticality.Critical, want: criticality.Critical},
		{name: "call over everything", deflt: criticality.Critical, file: "SHEDDABLE", ctx: criticality.CriticalPlus,
			call: []grpc.CallOption{interceptor.WithCriticality(criticality.SheddablePlus)}, want: criticality.SheddablePlus},
		{name: "invalid call level names none", file: "sheddable",
			call: []grpc.CallOption{interceptor.WithCriticality(criticality.Level(9))}, want: criticality.Sheddable},
		{name: "Unset call level names none", deflt: criticality.SheddablePlus,
			call: []grpc.CallOption{interceptor.WithCriticality(criticality.Unset)}, want: criticality.SheddablePlus},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				var hooks hookLog
				var rep interceptor.Report
				budget := &requestLog{}
				b := newBench(t, []interceptor.Option{interceptor.WithConfig(parse(t, fileCriticality(tc.file))),
					interceptor.WithCriticality(tc.deflt), interceptor.WithHook(hooks.hook), interceptor.WithBudget(budget)})
				ctx := criticality.NewContext(context.Background(), tc.ctx)
				if err := b.get(ctx, &testingv1.Script{Key: "k", FailAttempts: 2}, append(tc.call, interceptor.WithReport(&rep))...); err != nil {
					t.Fatal(err)
				}
				header := ""
				if tc.want != criticality.Unset {
					header = tc.want.String()
				}
				recs := b.attempts(t, "k")
				if len(recs) != 3 {
					t.Fatalf("%d attempts, want 3", len(recs))
				}
				for _, r := range recs {
					if r.Criticality != header {
						t.Errorf("attempt %d sent %q, want %q", r.Attempt, r.Criticality, header)
					}
				}
				if rep.Criticality != tc.want {
					t.Errorf("Report.Criticality = %v, want %v", rep.Criticality, tc.want)
				}
				retries := hooks.kinds(interceptor.EventRetry)
				if len(retries) != 2 {
					t.Fatalf("%d retry events, want 2", len(retries))
				}
				for _, e := range retries {
					if e.Criticality != tc.want {
						t.Errorf("event %v: Criticality %v, want %v", e.Kind, e.Criticality, tc.want)
					}
				}
				reqs := budget.all()
				if len(reqs) != 2 {
					t.Fatalf("%d budget requests, want 2", len(reqs))
				}
				for _, q := range reqs {
					if q.Criticality != tc.want {
						t.Errorf("budget request %d: Criticality %v, want %v", q.Number, q.Criticality, tc.want)
					}
				}
			})
		})
	}
}

// TestCriticalityEveryAttempt: the header goes on every attempt of a
// hedged call (each hedge's budget request carries the level), of a
// retried server stream, and on a call made with Disable, so that a chain
// keeps it.
func TestCriticalityEveryAttempt(t *testing.T) {
	sheddable := interceptor.WithCriticality(criticality.Sheddable)
	check := func(t *testing.T, recs []testserver.AttemptRecord, n int) {
		t.Helper()
		if len(recs) != n {
			t.Fatalf("%d attempts, want %d", len(recs), n)
		}
		for _, r := range recs {
			if r.Criticality != "SHEDDABLE" {
				t.Errorf("attempt %d sent %q, want SHEDDABLE", r.Attempt, r.Criticality)
			}
		}
	}
	t.Run("hedges", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			budget := &requestLog{}
			b := newBench(t, []interceptor.Option{interceptor.WithConfig(hedgeConfig(t, 3, 10*time.Millisecond, "")), interceptor.WithBudget(budget)})
			if err := b.get(context.Background(), &testingv1.Script{Key: "k", FailAttempts: 2}, sheddable); err != nil {
				t.Fatal(err)
			}
			check(t, b.attempts(t, "k"), 3)
			if len(budget.all()) != 2 {
				t.Errorf("%d budget requests, want 2 (the hedges)", len(budget.all()))
			}
			for _, q := range budget.all() {
				if !q.Hedge || q.Criticality != criticality.Sheddable {
					t.Errorf("budget request %+v, want a hedge, SHEDDABLE", q)
				}
			}
		})
	})
	t.Run("stream", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			srv := testserver.New()
			t.Cleanup(srv.Close)
			cc := srv.ClientConn(t, grpc.WithDisableRetry(),
				grpc.WithChainStreamInterceptor(interceptor.StreamClientInterceptor(interceptor.WithConfig(parse(t, retryFile)))))
			st, err := testingv1.NewTestServiceClient(cc).ListItems(context.Background(),
				&testingv1.ListItemsRequest{Script: &testingv1.Script{Key: "k", FailAttempts: 2, ResponseCount: 1}}, sheddable)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := st.Recv(); err != nil {
				t.Fatal(err)
			}
			check(t, srv.Attempts("k"), 3)
		})
	})
	t.Run("Disable", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			b := newBench(t, []interceptor.Option{interceptor.WithConfig(parse(t, retryFile))})
			_ = b.get(criticality.NewContext(context.Background(), criticality.Sheddable), &testingv1.Script{Key: "k", FailAttempts: 2}, interceptor.Disable())
			check(t, b.attempts(t, "k"), 1)
		})
	})
}

// TestCriticalityBudgetReserve: through the interceptor, a token bucket
// that holds 20 of 100 tokens pays a CRITICAL call's retries (5 each) and
// refuses a SHEDDABLE call's first retry, which must leave a quarter of
// the bucket: the SHEDDABLE call ends after one attempt, for the budget,
// and the bucket is spent only by the CRITICAL call.
func TestCriticalityBudgetReserve(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tb, err := budget.New(budget.Settings{Kind: budget.KindTokenBucket,
			TokenBucket: budget.TokenBucketSettings{Capacity: 100, Initial: 20, RetryCost: 5},
			Defer:       budget.DeferSettings{Mode: budget.DeferOff}})
		if err != nil {
			t.Fatal(err)
		}
		b := newBench(t, []interceptor.Option{interceptor.WithConfig(parse(t, retryFile)), interceptor.WithBudget(tb)})
		var shedRep, critRep interceptor.Report
		err = b.get(context.Background(), &testingv1.Script{Key: "shed", FailAttempts: 2},
			interceptor.WithCriticality(criticality.Sheddable), interceptor.WithReport(&shedRep))
		if err == nil || shedRep.Attempts != 1 || shedRep.Reason != policy.ReasonBudget {
			t.Fatalf("SHEDDABLE: err %v after %d attempts (%s), want a failure after 1 attempt for the budget", err, shedRep.Attempts, shedRep.Reason)
		}
		if lvl := tb.State().Level; lvl != 20 {
			t.Fatalf("bucket at %v after the SHEDDABLE call, want 20 (nothing spent)", lvl)
		}
		if err := b.get(context.Background(), &testingv1.Script{Key: "crit", FailAttempts: 2},
			interceptor.WithCriticality(criticality.Critical), interceptor.WithReport(&critRep)); err != nil || critRep.Attempts != 3 {
			t.Fatalf("CRITICAL: err %v after %d attempts, want success on the third", err, critRep.Attempts)
		}
		if lvl := tb.State().Level; lvl != 15 {
			t.Fatalf("bucket at %v after the CRITICAL call, want 15 (two retries of 5, the one that succeeded refunded)", lvl)
		}
	})
}

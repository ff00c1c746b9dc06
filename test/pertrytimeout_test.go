//go:build go1.25

package test

import (
	"context"
	"fmt"
	"maps"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/stagger-go/stagger/budget"
	"github.com/stagger-go/stagger/interceptor"
	testingv1 "github.com/stagger-go/stagger/proto/stagger/testing/v1"
	"github.com/stagger-go/stagger/testserver"
)

// delays makes a script's AttemptDelays: attempt i answers after ds[i].
func delays(ds ...time.Duration) []*durationpb.Duration {
	out := make([]*durationpb.Duration, len(ds))
	for i, d := range ds {
		out[i] = durationpb.New(d)
	}
	return out
}

// refusingDeferrer is a Deferrer that never admits: Allow refuses, Wait
// waits for the caller's context.
type refusingDeferrer struct{ streamRefusingBudget }

func (b *refusingDeferrer) Wait(ctx context.Context, _ budget.Request, _ time.Duration) (budget.Admission, error) {
	<-ctx.Done()
	return budget.AdmitNone, ctx.Err()
}

// timerRunsOnCases are the per-attempt timer's cases under perAttemptFile
// (maxAttempts 3, pause 100ms, timer 1s) with the server's answer after each
// attempt's delay: when the timer fires and no retry can go now, the
// attempt runs on and its answer is the call's; when one can, the attempt
// is cut off and retried.
var timerRunsOnCases = []struct {
	name     string
	delays   []time.Duration
	deadline time.Duration // the caller's; 0: none
	opts     []interceptor.Option
	took     time.Duration
	attempts int
	cut      int // attempts the client cancelled
}{
	// Cut at 1s and 2.1s; the third, at 2.2s, is the last: its timer
	// fires at 3.2s and it answers at 3.7s.
	{"maxAttempts reached: the last attempt runs on", []time.Duration{5 * time.Second, 5 * time.Second, 1500 * time.Millisecond}, 0, nil, 3700 * time.Millisecond, 3, 2},
	{"the budget refuses: runs on", []time.Duration{1500 * time.Millisecond}, 0, []interceptor.Option{interceptor.WithBudget(&streamRefusingBudget{})}, 1500 * time.Millisecond, 1, 0},
	{"a deferring budget would make it wait: runs on", []time.Duration{1500 * time.Millisecond}, 10 * time.Second, []interceptor.Option{interceptor.WithBudget(&refusingDeferrer{})}, 1500 * time.Millisecond, 1, 0},
	// At 1s, 50ms are left: the 100ms pause would not end before them.
	{"the pause would outlast the deadline: runs on", []time.Duration{1030 * time.Millisecond}, 1050 * time.Millisecond, nil, 1030 * time.Millisecond, 1, 0},
	{"a retry can go: cut off and retried", []time.Duration{5 * time.Second, 0}, 0, nil, 1100 * time.Millisecond, 2, 1},
}

// TestPerAttemptTimerRunsOn: unary calls.
func TestPerAttemptTimerRunsOn(t *testing.T) {
	for _, tt := range timerRunsOnCases {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				opts := append([]interceptor.Option{interceptor.WithConfig(parse(t, perAttemptFile))}, tt.opts...)
				b := newBench(t, opts)
				ctx := context.Background()
				if tt.deadline > 0 {
					var cancel context.CancelFunc
					ctx, cancel = context.WithTimeout(ctx, tt.deadline)
					defer cancel()
				}
				start := time.Now()
				err := b.get(ctx, &testingv1.Script{Key: "k", AttemptDelays: delays(tt.delays...)})
				if err != nil {
					t.Fatalf("err = %v (code %v), want OK", err, status.Code(err))
				}
				if took := time.Since(start); took != tt.took {
					t.Errorf("call took %v, want %v", took, tt.took)
				}
				synctest.Wait()
				checkTimerAttempts(t, b.attempts(t, "k"), tt.attempts, tt.cut)
			})
		})
	}
}

// TestStreamPerAttemptTimerRunsOn: the same for every kind of stream,
// whose timer covers the wait for the first header or message.
func TestStreamPerAttemptTimerRunsOn(t *testing.T) {
	for _, k := range streamKinds {
		for _, tt := range timerRunsOnCases {
			t.Run(k.name+"/"+tt.name, func(t *testing.T) {
				synctest.Test(t, func(t *testing.T) {
					opts := append([]interceptor.Option{interceptor.WithConfig(parse(t, perAttemptFile))}, tt.opts...)
					srv, c := newStreamBench(t, opts...)
					ctx := context.Background()
					if tt.deadline > 0 {
						var cancel context.CancelFunc
						ctx, cancel = context.WithTimeout(ctx, tt.deadline)
						defer cancel()
					}
					start := time.Now()
					r := k.run(ctx, c, &testingv1.Script{Key: "k", AttemptDelays: delays(tt.delays...)}, 2, interceptor.Idempotent())
					if r.err != nil {
						t.Fatalf("err = %v (code %v), want OK", r.err, status.Code(r.err))
					}
					if took := time.Since(start); took != tt.took {
						t.Errorf("call took %v, want %v", took, tt.took)
					}
					synctest.Wait()
					checkTimerAttempts(t, srv.Attempts("k"), tt.attempts, tt.cut)
				})
			})
		}
	}
}

// checkTimerAttempts checks the server's records: n attempts, the first cut
// cancelled by the client, the last answered OK.
func checkTimerAttempts(t *testing.T, recs []testserver.AttemptRecord, n, cut int) {
	t.Helper()
	if len(recs) != n {
		t.Fatalf("server saw %d attempts %+v, want %d", len(recs), recs, n)
	}
	for i, r := range recs {
		if wantCut := i < cut; r.Cancelled != wantCut {
			t.Errorf("attempt %d: cancelled %v, want %v (%+v)", i+1, r.Cancelled, wantCut, r)
		}
	}
	if last := recs[n-1]; !last.Done || last.Code != codes.OK {
		t.Errorf("last attempt %+v, want answered OK", last)
	}
}

// hedgeTimerFile is perAttemptFile with hedgeOnPerTryTimeout: an attempt
// whose timer fires keeps running beside its retry.
const hedgeTimerFile = `{"methodConfig": [{
	"name": [{"service": "stagger.testing.v1.TestService"}],
	"retryPolicy": {"maxAttempts": 3, "initialBackoff": "0.1s", "maxBackoff": "0.1s",
		"backoffMultiplier": 1, "retryableStatusCodes": ["UNAVAILABLE"], "jitter": "NONE",
		"perAttemptRecvTimeout": "1s", "hedgeOnPerTryTimeout": true}
}]}`

// TestHedgeOnPerTryTimeout: the first attempt's timer fires at 1s and a
// retry goes at 1.1s while it runs on; the first success wins and the other
// attempt is cancelled; a failure while the other runs ends nothing; the
// last failure decides as usual.
func TestHedgeOnPerTryTimeout(t *testing.T) {
	type rec struct {
		code      codes.Code
		cancelled bool
		ended     time.Duration // from the call's start
	}
	tests := []struct {
		name   string
		delays []time.Duration
		fail   int32 // the first attempts that fail (UNAVAILABLE, after their delay)
		took   time.Duration
		recs   []rec
	}{
		{"the slow attempt answers first: it wins, the retry is cancelled", []time.Duration{1500 * time.Millisecond, 5 * time.Second}, 0, 1500 * time.Millisecond,
			[]rec{{codes.OK, false, 1500 * time.Millisecond}, {codes.Canceled, true, 1500 * time.Millisecond}}},
		{"the retry answers first: it wins, the slow attempt is cancelled", []time.Duration{5 * time.Second, 200 * time.Millisecond}, 0, 1300 * time.Millisecond,
			[]rec{{codes.Canceled, true, 1300 * time.Millisecond}, {codes.OK, false, 1300 * time.Millisecond}}},
		{"the slow attempt fails while the retry runs: the retry's answer is the call's", []time.Duration{1500 * time.Millisecond, 800 * time.Millisecond}, 1, 1900 * time.Millisecond,
			[]rec{{codes.Unavailable, false, 1500 * time.Millisecond}, {codes.OK, false, 1900 * time.Millisecond}}},
		{"both fail: the last failure decides (a retry)", []time.Duration{1500 * time.Millisecond, 200 * time.Millisecond}, 2, 1600 * time.Millisecond,
			[]rec{{codes.Unavailable, false, 1500 * time.Millisecond}, {codes.Unavailable, false, 1300 * time.Millisecond}, {codes.OK, false, 1600 * time.Millisecond}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				var h hookLog
				b := newBench(t, []interceptor.Option{interceptor.WithConfig(parse(t, hedgeTimerFile)), interceptor.WithCallHook(func(_ context.Context, e interceptor.Event) { h.hook(e) })})
				start := time.Now()
				var header, trailer metadata.MD
				reply, err := b.client.Get(context.Background(), &testingv1.GetRequest{Script: &testingv1.Script{Key: "k", AttemptDelays: delays(tt.delays...), FailAttempts: tt.fail}},
					grpc.Header(&header), grpc.Trailer(&trailer))
				if err != nil {
					t.Fatalf("err = %v, want OK", err)
				}
				if took := time.Since(start); took != tt.took {
					t.Errorf("call took %v, want %v", took, tt.took)
				}
				synctest.Wait()
				recs := b.attempts(t, "k")
				if len(recs) != len(tt.recs) {
					t.Fatalf("server saw %d attempts %+v, want %d", len(recs), recs, len(tt.recs))
				}
				for i, want := range tt.recs {
					r := recs[i]
					if !r.Done || r.Cancelled != want.cancelled || !want.cancelled && r.Code != want.code || r.Ended.Sub(start) != want.ended {
						t.Errorf("attempt %d: %+v (ended at %v), want %+v", i+1, r, r.Ended.Sub(start), want)
					}
				}
				// The winner's reply and headers are the caller's.
				winner := len(tt.recs) - 1
				for i, want := range tt.recs {
					if want.code == codes.OK {
						winner = i
					}
				}
				if got := reply.GetReply().GetAttempt(); got != int32(winner+1) {
					t.Errorf("reply from attempt %d, want %d", got, winner+1)
				}
				if header == nil {
					t.Error("no header for the caller")
				}
				if e := h.last(); e.Kind != interceptor.EventEnd || e.Attempt != len(tt.recs) || e.Retries != len(tt.recs)-1 {
					t.Errorf("end event %+v, want %d attempts", e, len(tt.recs))
				}
			})
		})
	}
}

// TestHedgeOnPerTryTimeoutCannotRetry: when no retry can go, the timer
// lets the attempt run on, as without hedgeOnPerTryTimeout; and a stream,
// which the option does not hedge, is cut off and retried as before.
func TestHedgeOnPerTryTimeoutCannotRetry(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := newBench(t, []interceptor.Option{interceptor.WithConfig(parse(t, hedgeTimerFile)), interceptor.WithBudget(&streamRefusingBudget{})})
		start := time.Now()
		if err := b.get(context.Background(), &testingv1.Script{Key: "k", AttemptDelays: delays(1500 * time.Millisecond)}); err != nil {
			t.Fatal(err)
		}
		if took := time.Since(start); took != 1500*time.Millisecond {
			t.Errorf("took %v, want 1.5s", took)
		}
		synctest.Wait()
		if recs := b.attempts(t, "k"); len(recs) != 1 || recs[0].Cancelled {
			t.Errorf("records %+v, want one attempt, run on", recs)
		}
	})
	synctest.Test(t, func(t *testing.T) {
		srv, c := newStreamBench(t, interceptor.WithConfig(parse(t, hedgeTimerFile)))
		start := time.Now()
		r := runListItems(context.Background(), c, &testingv1.Script{Key: "k", AttemptDelays: delays(5*time.Second, 0)}, 2, interceptor.Idempotent())
		if r.err != nil {
			t.Fatal(r.err)
		}
		if took := time.Since(start); took != 1100*time.Millisecond {
			t.Errorf("stream took %v, want 1.1s (cut off at 1s, retried)", took)
		}
		synctest.Wait()
		if recs := srv.Attempts("k"); len(recs) != 2 || !recs[0].Cancelled {
			t.Errorf("stream records %+v, want the first cut off", recs)
		}
	})
}

// TestBudgetHearsSlowAndFinal: the budget hears a success that answered
// after a quarter of its per-attempt timeout (1s) as a sign of overload
// (rising latency), a quicker one not; and which attempt was its call's
// final one.
func TestBudgetHearsSlowAndFinal(t *testing.T) {
	tests := []struct {
		name   string
		script *testingv1.Script
		want   []budget.Attempt
	}{
		{"quick success", &testingv1.Script{Key: "quick", AttemptDelays: delays(200 * time.Millisecond)},
			[]budget.Attempt{{Number: 1, Outcome: budget.Success, Final: true}}},
		{"slow success", &testingv1.Script{Key: "slow", AttemptDelays: delays(250 * time.Millisecond)},
			[]budget.Attempt{{Number: 1, Outcome: budget.Success, Overload: true, Final: true}}},
		{"every attempt fails", &testingv1.Script{Key: "down", FailAttempts: 3, Code: int32(codes.Unavailable)},
			[]budget.Attempt{{Number: 1, Outcome: budget.Failure}, {Number: 2, Outcome: budget.Failure}, {Number: 3, Outcome: budget.Failure, Final: true}}},
		{"not retried", &testingv1.Script{Key: "bad", FailAttempts: 1, Code: int32(codes.InvalidArgument)},
			[]budget.Attempt{{Number: 1, Outcome: budget.Other, Final: true}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				rb := &refusingBudget{allow: 10}
				b := newBench(t, []interceptor.Option{interceptor.WithConfig(parse(t, perAttemptFile)), interceptor.WithBudget(rb)})
				_ = b.get(context.Background(), tt.script)
				rb.mu.Lock()
				defer rb.mu.Unlock()
				if len(rb.recorded) != len(tt.want) {
					t.Fatalf("budget heard %+v, want %+v", rb.recorded, tt.want)
				}
				for i, a := range rb.recorded {
					// A retry's attempt names its call by one number
					// (budget.Attempt.Call), the process's count.
					if a.Number > 1 && (a.Call == 0 || a.Call != rb.recorded[1].Call) {
						t.Errorf("attempt %d: budget heard call %d; want the call's one nonzero number", i+1, a.Call)
					}
					a.Call = 0
					if a != tt.want[i] {
						t.Errorf("attempt %d: budget heard %+v, want %+v", i+1, a, tt.want[i])
					}
				}
			})
		})
	}
}

// TestPerAttemptTimerSlowForAll: a busy process (a call every 200ms) and
// a server slow for every attempt (2.5s each, against perAttemptFile's 1s
// timer and 0.1s pause), on virtual time. A retry would only join the
// queue the attempt waits in, so while the attempts sent after a timed-out
// one are unanswered too the timer waits another period instead of
// cutting it off, and one retry at a time goes as a scout, with doubling
// gaps (1s, 2s, 4s), in case the attempts were lost rather than queued.
// 20 calls at 0s to 3.8s: each attempt is asked about at 1.1s (it waits)
// and 2.2s after it left (a scout may go), and answers at 2.5s. Scouts:
// call 0 at 2.2s, call 5 at 3.2s, call 15 at 5.2s (the next may not go
// before 9.2s). Call 19's attempt, at 4.9s, and call 15's retry, at 6.3s,
// see nothing sent after them: nothing is known, and they are cut off and
// retried as before. 5 attempts cut off in all, every call answered OK;
// without the rule the timer cut off every call's first two attempts.
//
// Beside it, the same process with every other call's first attempt lost
// (a minute) and the rest answering at once: the attempts sent after a
// lost one are answered in time, so every lost one is cut off and retried
// at its first timeout, 1.1s after it left.
func TestPerAttemptTimerSlowForAll(t *testing.T) {
	run := func(t *testing.T, script func(i int) *testingv1.Script) (b *bench, took []time.Duration) {
		b = newBench(t, []interceptor.Option{interceptor.WithConfig(parse(t, perAttemptFile)), interceptor.WithBudget(nil)})
		took = make([]time.Duration, 20)
		spaced(20, 200*time.Millisecond, func(i int) {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			start := time.Now()
			if err := b.get(ctx, script(i)); err != nil {
				t.Errorf("call %d: %v, want OK", i, err)
			}
			took[i] = time.Since(start)
		})
		synctest.Wait()
		return b, took
	}
	t.Run("slow for all", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			b, _ := run(t, func(i int) *testingv1.Script {
				return &testingv1.Script{Key: fmt.Sprint("slow-", i), Delay: durationpb.New(2500 * time.Millisecond)}
			})
			cut := map[int]int{}
			total := 0
			for i := range 20 {
				for _, r := range b.attempts(t, fmt.Sprint("slow-", i)) {
					if r.Cancelled {
						cut[i]++
						total++
					}
				}
			}
			if want := map[int]int{0: 1, 5: 1, 15: 2, 19: 1}; !maps.Equal(cut, want) {
				t.Errorf("attempts cut off per call %v (%d in all), want %v (5)", cut, total, want)
			}
		})
	})
	t.Run("lost among answered", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			b, took := run(t, func(i int) *testingv1.Script {
				sc := &testingv1.Script{Key: fmt.Sprint("lost-", i)}
				if i%2 == 1 {
					sc.AttemptDelays = delays(time.Minute, 0)
				}
				return sc
			})
			for i := range 20 {
				want, wantTook := 1, time.Duration(0)
				if i%2 == 1 {
					want, wantTook = 2, 1100*time.Millisecond
				}
				if recs := b.attempts(t, fmt.Sprint("lost-", i)); len(recs) != want || took[i] != wantTook {
					t.Errorf("call %d: %d attempts in %v, want %d in %v", i, len(recs), took[i], want, wantTook)
				}
			}
		})
	})
}

// admitRecorder is a budget that admits every retry as a paid one
// (budget.Admitter, as a Gate answers) and records what it is told.
type admitRecorder struct {
	mu      sync.Mutex
	records []budget.Attempt
}

func (b *admitRecorder) Allow(budget.Request) bool { return true }
func (b *admitRecorder) Admit(budget.Request) (budget.Admission, bool) {
	return budget.AdmitBudget, true
}
func (b *admitRecorder) State() budget.State { return budget.State{Kind: "admit-recorder"} }
func (b *admitRecorder) Record(a budget.Attempt) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.records = append(b.records, a)
}

// TestHedgeOnPerTryTimeoutAdmissionPerAttempt: under hedgeOnPerTryTimeout
// attempts overlap, and each tells the budget the admission it went with:
// the retry the timer admitted (paid) is recorded with it, the first
// attempt (cancelled when the retry won) without. The call had one
// admission field, recorded against whichever attempt ended: the retry's
// was lost (a Gate's probe slot would have stayed out).
func TestHedgeOnPerTryTimeoutAdmissionPerAttempt(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rec := &admitRecorder{}
		b := newBench(t, []interceptor.Option{interceptor.WithConfig(parse(t, hedgeTimerFile)), interceptor.WithBudget(rec)})
		_, err := b.client.Get(context.Background(), &testingv1.GetRequest{Script: &testingv1.Script{Key: "k", AttemptDelays: delays(5*time.Second, 200*time.Millisecond)}})
		if err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		rec.mu.Lock()
		defer rec.mu.Unlock()
		got := map[int]budget.Admission{}
		for _, a := range rec.records {
			got[a.Number] = a.Admission
		}
		if len(rec.records) != 2 || got[1] != budget.AdmitNone || got[2] != budget.AdmitBudget {
			t.Errorf("the budget heard %+v; want attempt 1 without an admission, attempt 2 paid", rec.records)
		}
	})
}

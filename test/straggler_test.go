//go:build go1.25

package test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stagger-go/stagger/budget"
	"github.com/stagger-go/stagger/interceptor"
	"github.com/stagger-go/stagger/policy"
	testingv1 "github.com/stagger-go/stagger/proto/stagger/testing/v1"
)

// stragglerFile is the new user's file: 3 attempts, a 20 ms pause,
// a 150 ms per-attempt timeout.
const stragglerFile = `{"methodConfig": [{
	"name": [{"service": "stagger.testing.v1.TestService"}],
	"retryPolicy": {"maxAttempts": 3, "initialBackoff": "0.02s", "maxBackoff": "0.02s",
		"backoffMultiplier": 1, "retryableStatusCodes": ["UNAVAILABLE"], "jitter": "NONE",
		"perAttemptRecvTimeout": "0.15s"}
}]}`

// stragglerRun makes 50 calls at 5 calls/s, one process: the first attempt
// of every tenth call (0, 10, ... 40) answers after 400 ms, every other
// attempt at once. It returns each call's attempts and Report.
func stragglerRun(t *testing.T, b budget.Budget) (attempts []int, cut []bool, reports []interceptor.Report) {
	t.Helper()
	bn := newBench(t, []interceptor.Option{interceptor.WithConfig(parse(t, stragglerFile)), interceptor.WithBudget(b)})
	const n = 50
	reports = make([]interceptor.Report, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			time.Sleep(time.Duration(i) * 200 * time.Millisecond)
			sc := &testingv1.Script{Key: fmt.Sprint("s-", i)}
			if i%10 == 0 {
				sc.AttemptDelays = delays(400*time.Millisecond, 0)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			defer cancel()
			if err := bn.get(ctx, sc, interceptor.WithReport(&reports[i])); err != nil {
				t.Errorf("call %d: %v, want OK", i, err)
			}
		}()
	}
	wg.Wait()
	synctest.Wait()
	attempts, cut = make([]int, n), make([]bool, n)
	for i := range n {
		recs := bn.attempts(t, fmt.Sprint("s-", i))
		attempts[i] = len(recs)
		cut[i] = len(recs) > 0 && recs[0].Cancelled
	}
	return attempts, cut, reports
}

// TestStragglerCut is issue 39's "a straggler is cut as configured": a
// quiet process (5 calls/s), a server that answers one attempt in ten in
// 400 ms and the rest at once, perAttemptRecvTimeout 150 ms, the default
// budget, fresh. Before, the first straggler ran on (the timeout retry
// costs 10 tokens, a fresh bucket holds 9), and its slow success held
// every later timeout retry back (the Gate's overload rule): 0 of 5 cut.
// Now the first still runs on, since nothing was served before it, and
// says so (Report.TimerRefused, reason budget); every later one is a
// straggler (the method's latest attempt was served at once), cut off at
// 150 ms and retried after its 20 ms pause.
func TestStragglerCut(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b, err := budget.New(budget.DefaultSettings())
		if err != nil {
			t.Fatal(err)
		}
		attempts, cut, reports := stragglerRun(t, b)
		for i := range attempts {
			want, wantCut, wantRefused := 1, false, 0
			switch {
			case i == 0:
				wantRefused = 1
			case i%10 == 0:
				want, wantCut = 2, true
			}
			if attempts[i] != want || cut[i] != wantCut || reports[i].TimerRefused != wantRefused {
				t.Errorf("call %d: %d attempts, first cut off %v, Report.TimerRefused %d; want %d, %v, %d", i, attempts[i], cut[i], reports[i].TimerRefused, want, wantCut, wantRefused)
			}
		}
		if r := reports[0]; r.TimerReason != policy.ReasonBudget {
			t.Errorf("call 0: Report.TimerReason = %v, want budget", r.TimerReason)
		}
	})
}

// TestStragglerCutUnpaid: the same with a budget that never holds a
// timeout retry's cost (10 tokens, 9 held, a success adds 0.01): the Gate
// admits every straggler's retry after the first as a healing retry,
// unpaid, and the budget refunds none of them (a healed retry adds the
// success reward, as a first attempt's success does).
func TestStragglerCutUnpaid(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := budget.DefaultSettings()
		s.TokenBucket.Capacity, s.TokenBucket.SuccessReward = 10, 0.01
		b, err := budget.New(s)
		if err != nil {
			t.Fatal(err)
		}
		attempts, cut, _ := stragglerRun(t, b)
		for i := range attempts {
			want := 1
			if i%10 == 0 && i > 0 {
				want = 2
			}
			if attempts[i] != want || cut[i] != (want == 2) {
				t.Errorf("call %d: %d attempts, first cut off %v; want %d, %v", i, attempts[i], cut[i], want, want == 2)
			}
		}
		// 46 first attempts (the first straggler's, which ran on,
		// included) and 4 healed retries succeeded, 0.01 each; a refund
		// of the timeout retry's cost would have filled the bucket (10).
		if got, want := b.State().Level, 9+0.01*50; got < want-1e-9 || got > want+1e-9 {
			t.Errorf("budget level %v, want %v: no refund of an unpaid retry", got, want)
		}
	})
}

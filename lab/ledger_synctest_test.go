//go:build go1.25

package lab

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stagger-go/stagger"
	"github.com/stagger-go/stagger/budget"
	"github.com/stagger-go/stagger/interceptor"
	"github.com/stagger-go/stagger/policy"
	testingv1 "github.com/stagger-go/stagger/proto/stagger/testing/v1"
	"github.com/stagger-go/stagger/testserver"
	"google.golang.org/protobuf/types/known/durationpb"
)

// ledgerReplayResult is what a ledger replay measured: the calls made
// while the backend was down, those served, and how long after its return
// the last of them was served; the same of those with a deadline.
type ledgerReplayResult struct {
	calls, served   int
	last            time.Duration
	dCalls, dServed int
	dLast           time.Duration
	// ok holds, by call number, whether each call made while it was down
	// was served.
	ok map[int]bool
}

// ledgerReplay is the checkout scenario's ledger (checkout_test.go) on
// virtual time, over bufconn in a synctest bubble: stagger as a new user
// sets it up (checkoutFile's policy, a fresh budget.Backends), checkoutRate
// calls a second for checkoutFull's load, call i with deadline(i) (0:
// none), each attempt answered after delay, the backend down from its
// ledgerDown to its ledgerUp, the jitter
// and the Gate's draws seeded by seed. Where the real-time run's figures
// move with the machine's load, the replay's are the same every run.
func ledgerReplay(t *testing.T, seed uint64, deadline func(i int) time.Duration, delay time.Duration) ledgerReplayResult {
	t.Helper()
	parsed, err := policy.ParseConfig([]byte(checkoutFile))
	if err != nil {
		t.Fatal(err)
	}
	r := ledgerReplayResult{ok: make(map[int]bool)}
	synctest.Test(t, func(t *testing.T) {
		gateRand := policy.NewSeededRandom(seed + 1000)
		bs, err := budget.NewBackends(budget.DefaultSettings(), budget.WithRandom(gateRand))
		if err != nil {
			t.Fatal(err)
		}
		srv := testserver.New()
		defer srv.Close()
		cc, err := srv.Dial(stagger.DialOptions(parsed, interceptor.WithDefaultBudgets(bs),
			interceptor.WithRandom(policy.NewSeededRandom(seed)))...)
		if err != nil {
			t.Fatal(err)
		}
		defer cc.Close()
		ledger := testingv1.NewTestServiceClient(cc)
		shape := checkoutFull
		start := time.Now()
		var (
			mu       sync.Mutex
			returned time.Time
			calls    sync.WaitGroup
		)
		tk := time.NewTicker(time.Second / checkoutRate)
		defer tk.Stop()
		down, up := false, false
		for i := 0; ; i++ {
			now := <-tk.C
			at := now.Sub(start)
			if at >= shape.load {
				break
			}
			if !down && at >= shape.ledgerDown {
				srv.SetOutage(true)
				down = true
			}
			if down && !up && at >= shape.ledgerUp {
				mu.Lock()
				returned, up = time.Now(), true
				mu.Unlock()
				srv.SetOutage(false)
			}
			inOutage := at >= shape.ledgerDown && at < shape.ledgerUp
			d := deadline(i)
			calls.Add(1)
			go func() {
				defer calls.Done()
				ctx, cancel := context.WithCancel(context.Background())
				if d > 0 {
					ctx, cancel = context.WithTimeout(context.Background(), d)
				}
				defer cancel()
				_, err := ledger.Get(ctx, &testingv1.GetRequest{Script: &testingv1.Script{Delay: durationpb.New(delay)}})
				end := time.Now()
				mu.Lock()
				defer mu.Unlock()
				if !inOutage {
					return
				}
				r.calls++
				r.ok[i] = err == nil
				if d > 0 {
					r.dCalls++
				}
				if err == nil {
					r.served++
					r.last = max(r.last, end.Sub(returned))
					if d > 0 {
						r.dServed++
						r.dLast = max(r.dLast, end.Sub(returned))
					}
				}
			}()
		}
		calls.Wait()
	})
	return r
}

// TestLedgerReplayDeadlinesBesideNone replays the ledger with every other
// call carrying a 500 ms deadline and the rest none: the calls with a
// deadline are served as often as when every call has one. Held retries
// went by their MaxWait, a call with a deadline too, so the calls made in
// the outage's last 500 ms went behind the held calls without one, made
// seconds before, and their deadlines passed during the return (seeds 1-3:
// 5, 5 and 3 of them served, where 7, 6 and 7 were when every call had
// one).
func TestLedgerReplayDeadlinesBesideNone(t *testing.T) {
	for seed := uint64(1); seed <= 3; seed++ {
		all := ledgerReplay(t, seed, func(int) time.Duration { return 500 * time.Millisecond }, 0)
		mixed := ledgerReplay(t, seed, func(i int) time.Duration { return time.Duration(i%2) * 500 * time.Millisecond }, 0)
		want := 0
		for i, ok := range all.ok {
			if ok && i%2 == 1 {
				want++
			}
		}
		if mixed.dServed < want || mixed.served-mixed.dServed < mixed.calls-mixed.dCalls {
			t.Errorf("seed %d: served %d of the %d calls with a deadline (%d when every call had one) and %d of the %d without",
				seed, mixed.dServed, mixed.dCalls, want, mixed.served-mixed.dServed, mixed.calls-mixed.dCalls)
		}
	}
}

// TestLedgerReplayFigures prints the replay for seeds 1 to
// LAB_LEDGER_SEEDS: every call with a 500 ms deadline (the checkout's
// variant), its attempts answered at once or after a delay (what a loaded
// machine adds to every attempt over loopback TCP), and every other call
// with one.
func TestLedgerReplayFigures(t *testing.T) {
	n, _ := strconv.Atoi(os.Getenv("LAB_LEDGER_SEEDS"))
	if n <= 0 {
		t.Skip("LAB_LEDGER_SEEDS=N replays the ledger for seeds 1 to N")
	}
	for seed := uint64(1); seed <= uint64(n); seed++ {
		for _, delay := range []time.Duration{0, 5 * time.Millisecond, 20 * time.Millisecond, 50 * time.Millisecond} {
			r := ledgerReplay(t, seed, func(int) time.Duration { return 500 * time.Millisecond }, delay)
			fmt.Printf("seed %d: 500 ms, attempts of %v: served %d of %d, last %.3f s after the return\n", seed, delay, r.served, r.calls, r.last.Seconds())
		}
		r := ledgerReplay(t, seed, func(i int) time.Duration { return time.Duration(i%2) * 500 * time.Millisecond }, 0)
		fmt.Printf("seed %d: half 500 ms, half none: served %d of %d (with a deadline %d of %d), last %.3f s after the return (with a deadline %.3f s)\n",
			seed, r.served, r.calls, r.dServed, r.dCalls, r.last.Seconds(), r.dLast.Seconds())
	}
}

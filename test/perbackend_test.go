package test

import (
	"context"
	"math/rand/v2"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/stagger-go/stagger"
	"github.com/stagger-go/stagger/budget"
	"github.com/stagger-go/stagger/interceptor"
	"github.com/stagger-go/stagger/policy"
	testingv1 "github.com/stagger-go/stagger/proto/stagger/testing/v1"
	"github.com/stagger-go/stagger/testserver"
)

// countAttempts counts the attempts a connection sends (installed after
// stagger's interceptors, it sees every attempt).
func countAttempts(n *atomic.Int64) grpc.DialOption {
	return grpc.WithChainUnaryInterceptor(func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		n.Add(1)
		return invoker(ctx, method, req, reply, cc, opts...)
	})
}

// backendRun is what one backend's calls saw.
type backendRun struct {
	calls, ok     int
	attempts      int64
	failedLatency []time.Duration
}

func (r *backendRun) success() float64 { return float64(r.ok) / float64(r.calls) }

// backToBack starts two workers that call c's Get back to back until end,
// each call with deadline, and counts them in r under mu.
func backToBack(wg *sync.WaitGroup, mu *sync.Mutex, c testingv1.TestServiceClient, r *backendRun, end time.Time, deadline time.Duration) {
	for range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().Before(end) {
				ctx, cancel := context.WithTimeout(context.Background(), deadline)
				_, err := c.Get(ctx, &testingv1.GetRequest{Script: &testingv1.Script{}})
				cancel()
				mu.Lock()
				r.calls++
				if err == nil {
					r.ok++
				}
				mu.Unlock()
				time.Sleep(5 * time.Millisecond)
			}
		}()
	}
}

// defers reports whether a budget of s defers the retries it refuses (is
// a budget.Deferrer).
func defers(s budget.Settings) bool {
	b, err := budget.New(s)
	_, ok := b.(budget.Deferrer)
	return err == nil && ok
}

func p50(ds []time.Duration) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := append([]time.Duration(nil), ds...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	return s[len(s)/2]
}

// Two backends dialed with one policy file and stagger's defaults: a
// flaky one (a fifth of its attempts fail; a twentieth under the A6
// throttle, whose arithmetic stops retrying a fifth) and one that goes down for
// two and a half seconds, longer than its calls' one-second deadline. With one
// budget and one Gate for the process, the flaky backend's healed retries
// paid for 2.9 attempts per call on the down one for its whole outage.
// Per backend, the down one gets no more than 1.15 attempts per call, its
// calls wait for its return no longer than their deadline, and the
// flaky one does as well as a process that calls it alone (run beside it
// on a server of its own). On real time over loopback TCP; once with the
// default budget and once with a retryThrottling file dialed for both.
//
// The two tests of this file run on real time over loopback TCP for about
// 20 s in all, so they run once per lane (make test) rather than in the
// real-time lane's repetitions; they passed three runs of three at
// -cpu=1 beside three busy loops when they were written (issue 45).
func TestPerBackendTwoBackends(t *testing.T) {
	for _, tt := range []struct {
		name, file      string
		flaky, payFlaky float64
	}{
		{"default budget", rtNoTimerFile, 0.2, 0},
		// Payments fails a fifth of its attempts before its outage too:
		// a flaky server that goes down got every call's every retry for
		// its whole outage (3.00 attempts per call).
		{"default budget, payments flaky before", rtNoTimerFile, 0.2, 0.2},
		{"retryThrottling", `{"methodConfig": [{
			"name": [{"service": "stagger.testing.v1.TestService"}],
			"retryPolicy": {"maxAttempts": 3, "initialBackoff": "0.01s", "maxBackoff": "0.01s",
				"backoffMultiplier": 1, "retryableStatusCodes": ["UNAVAILABLE"], "jitter": "NONE"}
		}], "retryThrottling": {"maxTokens": 10, "tokenRatio": 0.1}}`, 0.05, 0},
	} {
		t.Run(tt.name, func(t *testing.T) {
			inv, alone, pay := twoBackendsRun(t, tt.file, tt.flaky, tt.payFlaky)
			t.Logf("inventory: %d calls, %.1f %% (alone %.1f %%); payments in its outage: %d calls, %.2f attempts per call, failed p50 %v after the first deadline",
				inv.calls, 100*inv.success(), 100*alone.success(), pay.calls, float64(pay.attempts)/float64(pay.calls), p50(pay.failedLatency))
			if got := float64(pay.attempts) / float64(pay.calls); got > 1.15 {
				t.Errorf("the down backend got %.2f attempts per call in its outage, want 1.15 at most", got)
			}
			// Held for the return to their deadline (the futility rule
			// spares a call with one), never past it.
			if got := p50(pay.failedLatency); got > time.Second+100*time.Millisecond {
				t.Errorf("the down backend's failed calls took %v at p50 once the outage outlived the deadline, want their deadline (1 s) and 100ms at most", got)
			}
			if inv.success() < alone.success()-0.02 {
				t.Errorf("the flaky backend's success %.1f %%, alone %.1f %%: more than 2 points lost to the down one", 100*inv.success(), 100*alone.success())
			}
		})
	}
}

// twoBackendsRun runs the scenario for 4.5 s: inventory (a share flaky of
// its attempts fail, 2 workers calling back to back) and payments (a share
// payFlaky of its attempts fail, and all from 1.5 s to 4 s; 50 calls a
// second, deadline 1 s) through one client made with file; beside it, inventory alone through a client of its own. It returns
// inventory's calls, inventory alone's, and payments' calls made in its
// outage (attempts counted then; failed latency of those made after its
// first second). Payments serves for its first 1.5 s: the Gate takes
// failures in a row for an outage only after a server looked healthy
// for a second (its outage rule).
func twoBackendsRun(t *testing.T, file string, flaky, payFlaky float64) (inv, alone, pay backendRun) {
	t.Helper()
	const (
		run      = 4500 * time.Millisecond
		downFrom = 1500 * time.Millisecond
		downTo   = 4 * time.Second
		deadline = time.Second
	)
	newServer := func(seed int64) *testserver.Server {
		srv := testserver.New(testserver.WithTCP(), testserver.WithFailureRate(flaky, seed))
		t.Cleanup(srv.Close)
		return srv
	}
	invSrv, aloneSrv := newServer(1), newServer(2)
	paySrv := testserver.New(testserver.WithTCP(), testserver.WithFailureRate(payFlaky, 3))
	t.Cleanup(paySrv.Close)
	dial := func(srv *testserver.Server, cfg *policy.Config, bs *budget.Backends, n *atomic.Int64, opts ...interceptor.Option) testingv1.TestServiceClient {
		cc, err := srv.DialTCP(append(stagger.DialOptions(cfg, append(opts, interceptor.WithDefaultBudgets(bs))...), countAttempts(n))...)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cc.Close() })
		return testingv1.NewTestServiceClient(cc)
	}
	fresh := func() *budget.Backends {
		bs, err := budget.NewBackends(budget.DefaultSettings())
		if err != nil {
			t.Fatal(err)
		}
		return bs
	}
	// One file, one process's defaults, both backends.
	cfg, process := rtConfig(t, file), fresh()
	var invN, aloneN, payN atomic.Int64
	invClient := dial(invSrv, cfg, process, &invN)
	// A refused retry's event names its backend and the Gate's view of it.
	var refusedMu sync.Mutex
	var refused []interceptor.Event
	payClient := dial(paySrv, cfg, process, &payN, interceptor.WithHook(func(e interceptor.Event) {
		if e.Kind == interceptor.EventGiveUp && (e.Reason == policy.ReasonOutage || e.Reason == policy.ReasonDeferred && e.Budget.Health == "outage") {
			refusedMu.Lock()
			refused = append(refused, e)
			refusedMu.Unlock()
		}
	}))
	t.Cleanup(func() {
		refusedMu.Lock()
		defer refusedMu.Unlock()
		if len(refused) == 0 {
			if defers(cfg.BudgetSettings()) || cfg.BudgetSettings().Kind == budget.KindNone {
				t.Error("no payments call ended for its outage (reason outage, or deferred in an outage)")
			}
			return
		}
		for _, e := range refused {
			if e.Target != "passthrough:///"+paySrv.Addr() || e.Budget.Health != "outage" {
				t.Errorf("a call that gave up for the outage names target %q, Gate %q; want payments' %q, outage", e.Target, e.Budget.Health, "passthrough:///"+paySrv.Addr())
				return
			}
		}
	})
	aloneClient := dial(aloneSrv, rtConfig(t, file), fresh(), &aloneN)

	start := time.Now()
	end := start.Add(run)
	var mu sync.Mutex
	var wg sync.WaitGroup
	call := func(c testingv1.TestServiceClient, opts ...grpc.CallOption) (time.Duration, error) {
		ctx, cancel := context.WithTimeout(context.Background(), deadline)
		defer cancel()
		t0 := time.Now()
		_, err := c.Get(ctx, &testingv1.GetRequest{Script: &testingv1.Script{}}, opts...)
		return time.Since(t0), err
	}
	// A payments call that its budget ended says so in its Report: the
	// backend, and the state that decided.
	var reportMu sync.Mutex
	var budgetEnded []interceptor.Report
	t.Cleanup(func() {
		reportMu.Lock()
		defer reportMu.Unlock()
		if len(budgetEnded) > 0 {
			t.Logf("a payments call its budget ended: %s", budgetEnded[len(budgetEnded)-1])
		}
		for _, r := range budgetEnded {
			if r.Target != "passthrough:///"+paySrv.Addr() || r.Budget.Kind == "" || !strings.Contains(r.String(), r.Target) {
				t.Errorf("a payments call its budget ended reports %q (budget %+v): want the backend and the budget's state", r.String(), r.Budget)
				return
			}
			if r.Budget.Health == "" && defers(cfg.BudgetSettings()) {
				t.Errorf("a payments call its budget ended reports %q: no Gate state", r.String())
				return
			}
		}
	})
	backToBack(&wg, &mu, invClient, &inv, end, deadline)
	backToBack(&wg, &mu, aloneClient, &alone, end, deadline)
	wg.Add(1)
	go func() {
		defer wg.Done()
		tick := time.NewTicker(20 * time.Millisecond)
		defer tick.Stop()
		down, up := false, false
		var calls sync.WaitGroup
		defer calls.Wait()
		for now := range tick.C {
			at := now.Sub(start)
			if at >= run {
				return
			}
			if !down && at >= downFrom {
				paySrv.SetOutage(true)
				payN.Store(0)
				down = true
			}
			if down && !up && at >= downTo {
				paySrv.SetOutage(false)
				up = true
				calls.Wait()
				mu.Lock()
				pay.attempts = payN.Load()
				mu.Unlock()
			}
			inOutage := down && !up
			calls.Add(1)
			go func() {
				defer calls.Done()
				var rep interceptor.Report
				took, err := call(payClient, interceptor.WithReport(&rep))
				if rep.Reason == policy.ReasonBudget || rep.Reason == policy.ReasonDeferred || rep.Reason == policy.ReasonOutage {
					reportMu.Lock()
					budgetEnded = append(budgetEnded, rep)
					reportMu.Unlock()
				}
				if !inOutage {
					return
				}
				mu.Lock()
				defer mu.Unlock()
				pay.calls++
				if err != nil && at >= downFrom+deadline {
					pay.failedLatency = append(pay.failedLatency, took)
				}
			}()
		}
	}()
	wg.Wait()
	return inv, alone, pay
}

// One server whose Put is down for 2.5 s (a broken dependency behind it)
// while a fifth of its Get attempts fail at random, both called through
// one connection: the Gates are per method, so the down method does not
// borrow the flaky one's healed retries (it got 2.42 attempts per call with
// one Gate for the process), and the flaky one does as well as alone,
// beside the down one, as through a connection of its own to a server of
// its own.
func TestPerBackendDownMethodBesideAFlakyOne(t *testing.T) {
	const (
		run      = 4500 * time.Millisecond
		downFrom = 1500 * time.Millisecond
		downTo   = 4 * time.Second
		deadline = time.Second
	)
	var down atomic.Bool
	faults := func(seed uint64) grpc.ServerOption {
		var mu sync.Mutex
		rnd := rand.New(rand.NewPCG(seed, seed))
		return grpc.ChainUnaryInterceptor(func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
			switch info.FullMethod {
			case testingv1.TestService_Put_FullMethodName:
				if down.Load() {
					return nil, status.Error(codes.Unavailable, "Put's dependency is down")
				}
			case testingv1.TestService_Get_FullMethodName:
				mu.Lock()
				fail := rnd.Float64() < 0.2
				mu.Unlock()
				if fail {
					return nil, status.Error(codes.Unavailable, "flaky")
				}
			}
			return handler(ctx, req)
		})
	}
	srv := testserver.New(testserver.WithTCP(), testserver.WithServerOptions(faults(1)))
	t.Cleanup(srv.Close)
	aloneSrv := testserver.New(testserver.WithTCP(), testserver.WithServerOptions(faults(2)))
	t.Cleanup(aloneSrv.Close)
	byMethod := func(counts map[string]*atomic.Int64) grpc.DialOption {
		return grpc.WithChainUnaryInterceptor(func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
			if n := counts[method]; n != nil {
				n.Add(1)
			}
			return invoker(ctx, method, req, reply, cc, opts...)
		})
	}
	var putN atomic.Int64
	dial := func(srv *testserver.Server, counts map[string]*atomic.Int64) testingv1.TestServiceClient {
		bs, err := budget.NewBackends(budget.DefaultSettings())
		if err != nil {
			t.Fatal(err)
		}
		cc, err := srv.DialTCP(append(stagger.DialOptions(rtConfig(t, rtNoTimerFile), interceptor.WithDefaultBudgets(bs)), byMethod(counts))...)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cc.Close() })
		return testingv1.NewTestServiceClient(cc)
	}
	client := dial(srv, map[string]*atomic.Int64{testingv1.TestService_Put_FullMethodName: &putN})
	aloneClient := dial(aloneSrv, nil)

	var (
		mu              sync.Mutex
		wg              sync.WaitGroup
		flaky, alone    backendRun
		downRun         backendRun
		start           = time.Now()
		end             = start.Add(run)
		ctxWithDeadline = func() (context.Context, context.CancelFunc) {
			return context.WithTimeout(context.Background(), deadline)
		}
	)
	backToBack(&wg, &mu, client, &flaky, end, deadline)
	backToBack(&wg, &mu, aloneClient, &alone, end, deadline)
	tick := time.NewTicker(20 * time.Millisecond)
	var calls sync.WaitGroup
	for now := range tick.C {
		at := now.Sub(start)
		if at >= run {
			break
		}
		if at >= downFrom && at < downTo && !down.Load() {
			down.Store(true)
			putN.Store(0)
		}
		if at >= downTo && down.Load() {
			down.Store(false)
			calls.Wait()
			mu.Lock()
			downRun.attempts = putN.Load()
			mu.Unlock()
		}
		inOutage := down.Load()
		calls.Add(1)
		go func() {
			defer calls.Done()
			ctx, cancel := ctxWithDeadline()
			defer cancel()
			t0 := time.Now()
			_, err := client.Put(ctx, &testingv1.PutRequest{Script: &testingv1.Script{}})
			took := time.Since(t0)
			if !inOutage {
				return
			}
			mu.Lock()
			defer mu.Unlock()
			downRun.calls++
			if err != nil && at >= downFrom+deadline {
				downRun.failedLatency = append(downRun.failedLatency, took)
			}
		}()
	}
	tick.Stop()
	calls.Wait()
	wg.Wait()
	perCall := float64(downRun.attempts) / float64(downRun.calls)
	t.Logf("flaky Get: %d calls, %.1f %% (alone %.1f %%); Put in its outage: %d calls, %.2f attempts per call, failed p50 %v after the first deadline",
		flaky.calls, 100*flaky.success(), 100*alone.success(), downRun.calls, perCall, p50(downRun.failedLatency))
	if perCall > 1.15 {
		t.Errorf("the down method got %.2f attempts per call in its outage, want 1.15 at most", perCall)
	}
	if got := p50(downRun.failedLatency); got > deadline+100*time.Millisecond {
		t.Errorf("the down method's failed calls took %v at p50 once the outage outlived the deadline, want their deadline %v and 100ms at most", got, deadline)
	}
	if flaky.success() < alone.success()-0.02 {
		t.Errorf("the flaky method's success %.1f %%, alone %.1f %%: more than 2 points lost to the down one", 100*flaky.success(), 100*alone.success())
	}
}

package lab

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"

	"github.com/stagger-go/stagger"
	"github.com/stagger-go/stagger/budget"
	"github.com/stagger-go/stagger/interceptor"
	"github.com/stagger-go/stagger/policy"
	testingv1 "github.com/stagger-go/stagger/proto/stagger/testing/v1"
	"github.com/stagger-go/stagger/testserver"
)

// The orders scenario of issue 55 (the wait contract), on real time over
// loopback TCP: an "orders" process calls a flaky inventory (a fifth of
// its attempts fail, two callers back to back) and payments, which serves
// for 3 s and is then down for 8 s, through one retry layer configured by a
// grpc service config (3 attempts, UNAVAILABLE). Two runs: payments called
// 20 times a second without a deadline, and 50 times a second with a 1 s
// deadline. What the contract promises, and this measures:
//
//   - without a deadline, no failed call ends more than a second after
//     payments serves again ("late", the latest failed call's end past
//     the return);
//   - with a 1 s deadline, the failed calls made once the outage has
//     outlived two deadlines end within 100 ms at p99;
//   - payments gets few attempts per call while down; inventory's success
//     beside it is grpc-go's.
//
// LAB_ORDERS=N runs it N times per layer and prints a table (about 40 s a
// run per layer); LAB_ORDERS_LAYERS (comma-separated) picks the layers.
func TestOrdersFigures(t *testing.T) {
	runs, _ := strconv.Atoi(os.Getenv("LAB_ORDERS"))
	if runs <= 0 {
		t.Skip("LAB_ORDERS=N runs the orders scenario N times")
	}
	layers := ordersLayers(t)
	if pick := os.Getenv("LAB_ORDERS_LAYERS"); pick != "" {
		var some []twoBackendLayer
		for _, l := range layers {
			if strings.Contains(","+pick+",", ","+l.name+",") {
				some = append(some, l)
			}
		}
		layers = some
	}
	for _, v := range ordersVariants {
		results := make(map[string][]ordersResult)
		for i := range runs {
			var mu sync.Mutex
			var wg sync.WaitGroup
			// The layers run side by side, each with servers of its own:
			// a run is as long as one layer's.
			for _, l := range layers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					r := runOrders(t, l, int64(i), v)
					mu.Lock()
					results[l.name] = append(results[l.name], r)
					mu.Unlock()
					t.Logf("%s run %d %s: %s", v.name, i+1, l.name, r)
				}()
			}
			wg.Wait()
		}
		var b strings.Builder
		fmt.Fprintf(&b, "| layer | inventory success | payments attempts/call while down | payments served while down | ok p50 / p99 (ms) | failed p50 / p99 (ms) | failed made past two deadlines p99 (ms) | latest failed end past the return (ms) |\n|---|---|---|---|---|---|---|---|\n")
		for _, l := range layers {
			rs := results[l.name]
			pick := func(f func(ordersResult) float64, scale float64, digits int) string {
				var v []float64
				for _, r := range rs {
					v = append(v, f(r)*scale)
				}
				return medianSpread(v, digits)
			}
			ms := func(f func(ordersResult) time.Duration) string {
				return pick(func(r ordersResult) float64 { return float64(f(r)) / 1e6 }, 1, 0)
			}
			fmt.Fprintf(&b, "| %s | %s %% | %s | %s %% | %s / %s | %s / %s | %s | %s |\n", l.name,
				pick(func(r ordersResult) float64 { return r.invSuccess }, 100, 1),
				pick(func(r ordersResult) float64 { return r.payPerCall }, 1, 2),
				pick(func(r ordersResult) float64 { return r.paySuccess }, 100, 1),
				ms(func(r ordersResult) time.Duration { return r.payOK.p50 }),
				ms(func(r ordersResult) time.Duration { return r.payOK.p99 }),
				ms(func(r ordersResult) time.Duration { return r.payFail.p50 }),
				ms(func(r ordersResult) time.Duration { return r.payFail.p99 }),
				ms(func(r ordersResult) time.Duration { return r.lateFail.p99 }),
				ms(func(r ordersResult) time.Duration { return r.pastReturn }))
		}
		t.Logf("orders, %s, %d runs:\n%s", v.name, runs, b.String())
	}
}

// ordersVariant is one of the scenario's two runs.
type ordersVariant struct {
	name     string
	rate     int           // payments calls per second
	deadline time.Duration // zero: none
}

var ordersVariants = []ordersVariant{
	{"no deadline, 20 calls/s", 20, 0},
	{"1 s deadline, 50 calls/s", 50, time.Second},
}

// The payments outage, from the start of the run.
const (
	ordersDownFrom = 3 * time.Second
	ordersDownTo   = 11 * time.Second
	ordersRun      = 14 * time.Second
)

// ordersFile is the orders process's grpc service config.
const ordersFile = `{"methodConfig": [{"name": [{"service": "stagger.testing.v1.TestService"}],
  "retryPolicy": {"maxAttempts": 3, "initialBackoff": "0.1s", "maxBackoff": "1s", "backoffMultiplier": 2,
    "retryableStatusCodes": ["UNAVAILABLE"]}}]}`

// ordersLayers: stagger as DialOptions installs it (deferral on, the
// default), stagger with "defer": false, grpc-go's built-in retry from the
// same file, go-grpc-middleware, failsafe-go and no retry at all.
func ordersLayers(t *testing.T) []twoBackendLayer {
	t.Helper()
	staggerLayer := func(name string, s budget.Settings) twoBackendLayer {
		parsed, err := policy.ParseConfig([]byte(ordersFile))
		if err != nil {
			t.Fatal(err)
		}
		return twoBackendLayer{
			name: name,
			process: func() any {
				bs, err := budget.NewBackends(s)
				if err != nil {
					t.Fatal(err)
				}
				return bs
			},
			dial: func(state any) []grpc.DialOption {
				return stagger.DialOptions(parsed, interceptor.WithDefaultBudgets(state.(*budget.Backends)))
			},
		}
	}
	noDefer := budget.DefaultSettings()
	noDefer.Defer.Mode = budget.DeferOff
	layers := []twoBackendLayer{staggerLayer("stagger", budget.DefaultSettings()), staggerLayer("stagger, defer off", noDefer)}
	cfg := Config{Scenario: ScenarioUnavailable, MaxAttempts: 3, CallTimeout: time.Second}.Defaults()
	cfg.Backoff.Initial, cfg.Backoff.Max, cfg.Backoff.Multiplier = 100*time.Millisecond, time.Second, 2
	layers = append(layers, twoBackendLayer{
		name:    "grpc-go",
		process: func() any { return nil },
		dial: func(any) []grpc.DialOption {
			return []grpc.DialOption{grpc.WithDefaultServiceConfig(ordersFile)}
		},
	})
	for _, name := range []string{"grpc-middleware", "failsafe-go", "no-retry"} {
		c, ok := ContenderByName(ScenarioUnavailable, name)
		if !ok {
			t.Fatalf("no contender %s", name)
		}
		layers = append(layers, twoBackendLayer{
			name:    name,
			process: func() any { return nil },
			dial: func(any) []grpc.DialOption {
				opts, err := c.dialOptions(&cfg)
				if err != nil {
					t.Fatal(err)
				}
				return opts
			},
		})
	}
	return layers
}

type ordersResult struct {
	invSuccess                  float64
	payPerCall, paySuccess      float64
	payOK, payFail, lateFail    quantiles
	pastReturn                  time.Duration
	failedCalls, failedPastBack int
}

func (r ordersResult) String() string {
	return fmt.Sprintf("inventory %.1f %%; payments %.2f attempts/call while down, %.1f %% served, ok p50 %v p99 %v, failed p50 %v p99 %v (made past two deadlines: p99 %v), latest failed end %v past the return (%d of %d failed calls ended past it)",
		100*r.invSuccess, r.payPerCall, 100*r.paySuccess, r.payOK.p50, r.payOK.p99, r.payFail.p50, r.payFail.p99, r.lateFail.p99, r.pastReturn, r.failedPastBack, r.failedCalls)
}

// runOrders runs the scenario once for layer l.
func runOrders(t *testing.T, l twoBackendLayer, seed int64, v ordersVariant) ordersResult {
	t.Helper()
	newServer := func(p float64, seed int64) *testserver.Server {
		srv := testserver.New(testserver.WithTCP(), testserver.WithFailureRate(p, seed))
		t.Cleanup(srv.Close)
		return srv
	}
	invSrv, paySrv := newServer(0.2, 2*seed+1), newServer(0, 2*seed+2)
	process := l.process()
	dial := func(srv *testserver.Server) testingv1.TestServiceClient {
		cc, err := srv.DialTCP(l.dial(process)...)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cc.Close() })
		return testingv1.NewTestServiceClient(cc)
	}
	inv, pay := dial(invSrv), dial(paySrv)
	call := func(c testingv1.TestServiceClient, deadline time.Duration) (time.Duration, error) {
		ctx := context.Background()
		if deadline > 0 {
			var cancel context.CancelFunc
			ctx, cancel = context.WithTimeout(ctx, deadline)
			defer cancel()
		}
		t0 := time.Now()
		_, err := c.Get(ctx, &testingv1.GetRequest{Script: &testingv1.Script{}})
		return time.Since(t0), err
	}
	start := time.Now()
	end := start.Add(ordersRun)
	var mu sync.Mutex
	var wg sync.WaitGroup
	var invCalls, invOK int
	for range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().Before(end) {
				_, err := call(inv, time.Second)
				mu.Lock()
				invCalls++
				if err == nil {
					invOK++
				}
				mu.Unlock()
				time.Sleep(5 * time.Millisecond)
			}
		}()
	}
	var r ordersResult
	var payCalls, payOK int
	var attemptsAtStart, attemptsInOutage int64
	var failed, late, served []time.Duration
	returned, back := start.Add(ordersDownTo), false // under mu
	wg.Add(1)
	go func() {
		defer wg.Done()
		tick := time.NewTicker(time.Second / time.Duration(v.rate))
		defer tick.Stop()
		down, up := false, false
		var calls sync.WaitGroup
		defer calls.Wait()
		for now := range tick.C {
			at := now.Sub(start)
			if at >= ordersRun {
				return
			}
			if !down && at >= ordersDownFrom {
				paySrv.SetOutage(true)
				attemptsAtStart = paySrv.Stats().Received
				down = true
			}
			if down && !up && at >= ordersDownTo {
				paySrv.SetOutage(false)
				mu.Lock()
				returned, back = time.Now(), true
				mu.Unlock()
				up = true
				attemptsInOutage = paySrv.Stats().Received - attemptsAtStart
			}
			inOutage := down && !up
			calls.Add(1)
			go func() {
				defer calls.Done()
				took, err := call(pay, v.deadline)
				if !inOutage {
					return
				}
				mu.Lock()
				defer mu.Unlock()
				payCalls++
				if err == nil {
					payOK++
					served = append(served, took)
					return
				}
				failed = append(failed, took)
				if v.deadline > 0 && at >= ordersDownFrom+2*v.deadline {
					late = append(late, took)
				}
				if past := now.Add(took).Sub(returned); past > 0 && back {
					r.failedPastBack++
					r.pastReturn = max(r.pastReturn, past)
				}
			}()
		}
	}()
	wg.Wait()
	r.invSuccess = float64(invOK) / float64(invCalls)
	r.payPerCall = float64(attemptsInOutage) / float64(payCalls)
	r.paySuccess = float64(payOK) / float64(payCalls)
	r.payOK, r.payFail, r.lateFail = quantilesOf(served), quantilesOf(failed), quantilesOf(late)
	r.failedCalls = len(failed)
	return r
}

// TestOrdersContract checks the wait contract on the orders scenario, once
// per variant (about 30 s on real time), stagger beside a client that does
// not retry, run at the same time so that the machine's load weighs on
// both: without a deadline no failed call ends more than a second after
// payments serves again; with a 1 s deadline the failed calls made once the
// outage has outlived two deadlines wait for the return no longer than
// their deadline and 100 ms at p99 (the futility rule spares a call with a
// deadline: the return may come first); payments gets at most 1.15
// attempts per call while down.
func TestOrdersContract(t *testing.T) {
	if testing.Short() {
		t.Skip("real time: about 30 s")
	}
	layers := ordersLayers(t)
	stagger, noRetry := layers[0], layers[len(layers)-1]
	if stagger.name != "stagger" || noRetry.name != "no-retry" {
		t.Fatalf("layers %q and %q, want stagger and no-retry", stagger.name, noRetry.name)
	}
	for _, v := range ordersVariants {
		t.Run(v.name, func(t *testing.T) {
			var r, base ordersResult
			var wg sync.WaitGroup
			wg.Add(2)
			go func() { defer wg.Done(); r = runOrders(t, stagger, 1, v) }()
			go func() { defer wg.Done(); base = runOrders(t, noRetry, 1, v) }()
			wg.Wait()
			t.Logf("stagger: %s", r)
			t.Logf("no-retry: %s", base)
			if r.payPerCall > 1.15 {
				t.Errorf("payments got %.2f attempts per call while down, want 1.15 at most", r.payPerCall)
			}
			if v.deadline == 0 && r.pastReturn > time.Second+base.payFail.p99 {
				t.Errorf("a failed call ended %v after payments served again, want a second at most (and the %v a failed call took without retries)", r.pastReturn, base.payFail.p99)
			}
			if v.deadline > 0 && r.lateFail.p99 > v.deadline+100*time.Millisecond {
				t.Errorf("failed calls made once the outage outlived two deadlines ended at p99 %v, want their deadline %v and 100 ms at most", r.lateFail.p99, v.deadline)
			}
		})
	}
}

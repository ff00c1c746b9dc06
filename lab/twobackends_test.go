package lab

import (
	"context"
	"fmt"
	"os"
	"slices"
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

// The two-backends scenario of issue 45, with the peers, on real time over
// loopback TCP: a process calls two backends through one retry layer (one
// policy: 3 attempts, UNAVAILABLE). inventory fails a fifth of its attempts
// at random, called back to back by two workers; payments, called 50 times
// a second with a 1 s deadline, is down from 2 s to 10 s of a 12 s run.
// Beside it, inventory alone, through a process of its own (a server of its
// own, the same layer). What matters: payments' attempts per call in its
// outage (a retry storm on the down backend), its failed calls' latency
// once the outage has outlived their deadline, and inventory's success
// beside the down backend against alone.
//
// It runs in three variants (twoBackendVariants): inventory busy, and
// quiet (one call every 200 ms, half its attempts fail: a process whose
// few calls teach its budget little), beside the 8 s outage; and busy
// beside a 0.5 s outage, shorter than the deadline, where retries heal.
// LAB_TWO_BACKENDS=N runs it N times (about 4.5 min a run) and prints a
// BENCHMARKS.md table, medians and spreads; without it the test is
// skipped (the root module's TestPerBackendTwoBackends checks stagger's
// bars in every make test).
func TestTwoBackendsFigures(t *testing.T) {
	runs, _ := strconv.Atoi(os.Getenv("LAB_TWO_BACKENDS"))
	if runs <= 0 {
		t.Skip("LAB_TWO_BACKENDS=N runs the two-backends figures N times")
	}
	for _, v := range twoBackendVariants {
		t.Run(v.name, func(t *testing.T) { twoBackendsFigures(t, runs, v) })
	}
}

// twoBackendVariant is one shape of the scenario: inventory's load and
// failures, and payments' outage.
type twoBackendVariant struct {
	name             string
	flaky            float64       // inventory's share of attempts that fail
	workers          int           // inventory's callers, back to back
	gap              time.Duration // between a caller's calls
	downFrom, downTo time.Duration // payments' outage
}

// twoBackendVariants: busy and quiet inventory beside payments down for
// 8 s (eight deadlines), and busy inventory beside payments down for
// 0.5 s (half a deadline: retries can heal its calls).
var twoBackendVariants = []twoBackendVariant{
	{"busy, long outage", 0.2, 2, 5 * time.Millisecond, 2 * time.Second, 10 * time.Second},
	{"quiet, long outage", 0.5, 1, 200 * time.Millisecond, 2 * time.Second, 10 * time.Second},
	{"busy, short outage", 0.2, 2, 5 * time.Millisecond, 2 * time.Second, 2500 * time.Millisecond},
}

// twoBackendsFigures runs every layer runs times in variant v and logs the
// table.
func twoBackendsFigures(t *testing.T, runs int, v twoBackendVariant) {
	layers := twoBackendLayers(t)
	results := make(map[string][]twoBackendResult)
	for i := range runs {
		for _, l := range layers {
			r := runTwoBackends(t, l, int64(i), v)
			results[l.name] = append(results[l.name], r)
			t.Logf("run %d %s: inventory %.1f %% (alone %.1f %%); payments %.2f attempts per call in its outage, %.1f %% served, failed p50 %v p99 %v",
				i+1, l.name, 100*r.invSuccess, 100*r.aloneSuccess, r.payPerCall, 100*r.paySuccess, r.payFail.p50, r.payFail.p99)
		}
	}
	var b strings.Builder
	fmt.Fprintf(&b, "| layer | inventory success beside / alone | inventory ok p50 / p99 (ms) | payments attempts/call in outage | payments served in outage | payments ok p50 / p99 (ms) | payments failed p50 / p99 (ms) |\n|---|---|---|---|---|---|---|\n")
	for _, l := range layers {
		rs := results[l.name]
		pick := func(f func(twoBackendResult) float64, scale float64, digits int) string {
			var v []float64
			for _, r := range rs {
				v = append(v, f(r)*scale)
			}
			return medianSpread(v, digits)
		}
		ms := func(f func(twoBackendResult) time.Duration) string {
			return pick(func(r twoBackendResult) float64 { return float64(f(r)) / 1e6 }, 1, 0)
		}
		fmt.Fprintf(&b, "| %s | %s %% / %s %% | %s / %s | %s | %s %% | %s / %s | %s / %s |\n", l.name,
			pick(func(r twoBackendResult) float64 { return r.invSuccess }, 100, 1),
			pick(func(r twoBackendResult) float64 { return r.aloneSuccess }, 100, 1),
			ms(func(r twoBackendResult) time.Duration { return r.invOK.p50 }),
			ms(func(r twoBackendResult) time.Duration { return r.invOK.p99 }),
			pick(func(r twoBackendResult) float64 { return r.payPerCall }, 1, 2),
			pick(func(r twoBackendResult) float64 { return r.paySuccess }, 100, 1),
			ms(func(r twoBackendResult) time.Duration { return r.payOK.p50 }),
			ms(func(r twoBackendResult) time.Duration { return r.payOK.p99 }),
			ms(func(r twoBackendResult) time.Duration { return r.payFail.p50 }),
			ms(func(r twoBackendResult) time.Duration { return r.payFail.p99 }))
	}
	t.Logf("%s, %d runs:\n%s", v.name, runs, b.String())
}

// medianSpread is the median of v and, when the runs differ, [min, max].
func medianSpread(v []float64, digits int) string {
	slices.Sort(v)
	f := func(x float64) string { return strconv.FormatFloat(x, 'f', digits, 64) }
	med := f(v[len(v)/2])
	if lo, hi := f(v[0]), f(v[len(v)-1]); lo != hi {
		return med + " [" + lo + ", " + hi + "]"
	}
	return med
}

// twoBackendLayer is a retry layer as a process sets it up: process makes
// the process's state (stagger's budgets), dial one connection's options.
type twoBackendLayer struct {
	name    string
	process func() any
	dial    func(state any) []grpc.DialOption
}

func twoBackendLayers(t *testing.T) []twoBackendLayer {
	t.Helper()
	cfg := Config{Scenario: ScenarioUnavailable, MaxAttempts: 3, CallTimeout: time.Second}.Defaults()
	file := staggerFile(&cfg)
	throttled := strings.TrimSuffix(strings.TrimSpace(file), "}") + `, "retryThrottling": {"maxTokens": 10, "tokenRatio": 0.1}}`
	staggerLayer := func(name, file string) twoBackendLayer {
		parsed, err := policy.ParseConfig([]byte(file))
		if err != nil {
			t.Fatal(err)
		}
		return twoBackendLayer{
			name: name,
			// As stagger.DialOptions does for every connection of a
			// process: budget.DefaultBackends(), here fresh per run.
			process: func() any {
				bs, err := budget.NewBackends(budget.DefaultSettings())
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
	layers := []twoBackendLayer{staggerLayer("stagger", file), staggerLayer("stagger, retryThrottling file", throttled)}
	for _, name := range []string{"grpc-go", "grpc-go-throttle", "grpc-middleware", "failsafe-go", "no-retry"} {
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

type twoBackendResult struct {
	invSuccess, aloneSuccess float64
	invOK                    quantiles
	payPerCall, paySuccess   float64
	payOK, payFail           quantiles
}

// quantiles are the p50 and p99 of some calls' latency (0 for none).
type quantiles struct{ p50, p99 time.Duration }

func quantilesOf(ds []time.Duration) quantiles {
	if len(ds) == 0 {
		return quantiles{}
	}
	slices.Sort(ds)
	q := func(p float64) time.Duration { return ds[min(len(ds)-1, int(p*float64(len(ds))))] }
	return quantiles{q(0.5), q(0.99)}
}

// runTwoBackends runs the scenario once for layer l.
func runTwoBackends(t *testing.T, l twoBackendLayer, seed int64, v twoBackendVariant) twoBackendResult {
	t.Helper()
	const (
		run      = 12 * time.Second
		deadline = time.Second
	)
	flaky, workers, gap, downFrom, downTo := v.flaky, v.workers, v.gap, v.downFrom, v.downTo
	// The failed calls measured: in a long outage those made once it had
	// outlived their deadline; in a short one, all made in it.
	failFrom := downFrom + deadline
	if downTo-downFrom < 2*deadline {
		failFrom = downFrom
	}
	newServer := func(p float64, seed int64) *testserver.Server {
		srv := testserver.New(testserver.WithTCP(), testserver.WithFailureRate(p, seed))
		t.Cleanup(srv.Close)
		return srv
	}
	invSrv, aloneSrv, paySrv := newServer(flaky, 3*seed+1), newServer(flaky, 3*seed+2), newServer(0, 3*seed+3)
	dial := func(srv *testserver.Server, state any) testingv1.TestServiceClient {
		cc, err := srv.DialTCP(l.dial(state)...)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cc.Close() })
		return testingv1.NewTestServiceClient(cc)
	}
	process := l.process()
	inv, pay := dial(invSrv, process), dial(paySrv, process)
	alone := dial(aloneSrv, l.process())

	call := func(c testingv1.TestServiceClient) (time.Duration, error) {
		ctx, cancel := context.WithTimeout(context.Background(), deadline)
		defer cancel()
		t0 := time.Now()
		_, err := c.Get(ctx, &testingv1.GetRequest{Script: &testingv1.Script{}})
		return time.Since(t0), err
	}
	start := time.Now()
	end := start.Add(run)
	var mu sync.Mutex
	var wg sync.WaitGroup
	var invCalls, invOK, aloneCalls, aloneOK int
	var invLatency, ignored []time.Duration
	worker := func(c testingv1.TestServiceClient, calls, ok *int, okLatency *[]time.Duration) {
		for range workers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for time.Now().Before(end) {
					took, err := call(c)
					mu.Lock()
					*calls++
					if err == nil {
						*ok++
						*okLatency = append(*okLatency, took)
					}
					mu.Unlock()
					time.Sleep(gap)
				}
			}()
		}
	}
	worker(inv, &invCalls, &invOK, &invLatency)
	worker(alone, &aloneCalls, &aloneOK, &ignored)

	var payCalls, payOK int
	var attemptsAtStart, attemptsInOutage int64
	var failed, served []time.Duration
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
				attemptsAtStart = paySrv.Stats().Received
				down = true
			}
			if down && !up && at >= downTo {
				paySrv.SetOutage(false)
				up = true
				calls.Wait()
				attemptsInOutage = paySrv.Stats().Received - attemptsAtStart
			}
			inOutage := down && !up
			calls.Add(1)
			go func() {
				defer calls.Done()
				took, err := call(pay)
				if !inOutage {
					return
				}
				mu.Lock()
				defer mu.Unlock()
				payCalls++
				switch {
				case err == nil:
					payOK++
					served = append(served, took)
				case at >= failFrom:
					failed = append(failed, took)
				}
			}()
		}
	}()
	wg.Wait()
	return twoBackendResult{
		invSuccess:   float64(invOK) / float64(invCalls),
		aloneSuccess: float64(aloneOK) / float64(aloneCalls),
		invOK:        quantilesOf(invLatency),
		payPerCall:   float64(attemptsInOutage) / float64(payCalls),
		paySuccess:   float64(payOK) / float64(payCalls),
		payOK:        quantilesOf(served), payFail: quantilesOf(failed),
	}
}

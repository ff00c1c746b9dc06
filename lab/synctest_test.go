//go:build go1.25

// synctest needs the Go 1.23 timer channels; go.mod says go 1.22.
//go:debug asynctimerchan=0

package lab

import (
	"context"
	"runtime/pprof"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"google.golang.org/grpc/stats"
)

// The lab runs on the time package's clock, so inside a synctest bubble a
// run over bufconn is on virtual time: the offered calls are exact, and the
// assertions below hold whatever the jitter draws.

// tinyConfig is ScenarioUnavailable small: 2 workers of 50 ms (40
// attempts/s), a queue of 10, 20 calls/s from 3 clients.
func tinyConfig() Config {
	return Config{
		Scenario:    ScenarioUnavailable,
		Duration:    3 * time.Second,
		OutageStart: time.Second,
		OutageEnd:   2 * time.Second,
		Clients:     3,
		Capacity:    40,
		Workers:     2,
		Rate:        20,
		CallTimeout: time.Second,
	}
}

func runTiny(t *testing.T, cfg Config) map[string]Result {
	t.Helper()
	var rep *Report
	synctest.Test(t, func(t *testing.T) {
		var err error
		rep, err = Run(context.Background(), cfg)
		if err != nil {
			t.Fatalf("Run: %v", err)
		}
	})
	byName := map[string]Result{}
	for _, r := range rep.Results {
		byName[r.Contender] = r
	}
	if len(byName) != len(rep.Config.Contenders) {
		t.Fatalf("got results for %d contenders, want %d", len(byName), len(rep.Config.Contenders))
	}
	return byName
}

func TestRunAccounting(t *testing.T) {
	cfg := tinyConfig()
	res := runTiny(t, cfg)
	// 3 clients, one call every 150 ms each, for 3 s: 60 calls, 20 of them
	// in the outage second.
	const wantCalls = 60
	for name, r := range res {
		t.Run(name, func(t *testing.T) {
			if r.Calls != wantCalls {
				t.Errorf("Calls = %d, want %d", r.Calls, wantCalls)
			}
			load := 0
			for _, n := range r.Load {
				load += n
			}
			// Over bufconn every attempt reaches the server: the client's
			// count and the server's arrivals must agree.
			if load != r.Attempts {
				t.Errorf("server arrivals %d != attempts %d", load, r.Attempts)
			}
			// A circuit breaker fails calls at once while open (no
			// attempt), and stays open past the outage until its probe:
			// at least the calls before the outage get through.
			minAttempts, minSuccesses := r.Calls, 40
			if name == "stagger-breaker" {
				minAttempts, minSuccesses = 20, 20
			}
			if r.Attempts < minAttempts || r.Attempts > 5*r.Calls {
				t.Errorf("Attempts = %d, want within [%d, %d]", r.Attempts, minAttempts, 5*r.Calls)
			}
			// Calls outside the outage meet a server with spare capacity.
			if r.Successes < minSuccesses || r.Successes > r.Calls {
				t.Errorf("Successes = %d, want within [%d, %d]", r.Successes, minSuccesses, r.Calls)
			}
			if r.P50 > r.P99 || r.P99 > r.P999 || r.FailP50 > r.FailP99 {
				t.Errorf("percentiles not ordered: %v %v %v; failures %v %v", r.P50, r.P99, r.P999, r.FailP50, r.FailP99)
			}
			// From the outage on the server can serve 40 attempts (none
			// in the outage, 40 after it), the calls 40: the outage's
			// calls return after it, if healed.
			if r.Goodput < 0 || r.Goodput > 1 {
				t.Errorf("Goodput = %v, want within [0, 1]", r.Goodput)
			}
			// The timeline adds up to the totals.
			var calls, ok, attempts, successes int
			for _, sec := range r.Timeline {
				calls, ok, attempts, successes = calls+sec.Calls, ok+sec.CallsSucceeded, attempts+sec.Attempts, successes+sec.Successes
			}
			if calls != r.Calls || ok != r.Successes || successes != r.Successes || attempts != r.Attempts {
				t.Errorf("timeline: %d calls, %d succeeded (%d by their end), %d attempts; want %d, %d, %d",
					calls, ok, successes, attempts, r.Calls, r.Successes, r.Attempts)
			}
			if r.Wasted < 0 || r.Wasted > 1 {
				t.Errorf("Wasted = %v, want a share", r.Wasted)
			}
		})
	}
}

func TestRunBudgetCutsTheStorm(t *testing.T) {
	// The outage comes after a second and a half of service: a Gate takes
	// failures for an outage only after a second without them.
	cfg := tinyConfig()
	cfg.Duration, cfg.OutageStart, cfg.OutageEnd = 3500*time.Millisecond, 1500*time.Millisecond, 2500*time.Millisecond
	res := runTiny(t, cfg)
	s, nb := res["stagger"], res["stagger-nobudget"]
	// Each client's budget starts at 9 tokens, retries cost 5 and every
	// success adds 1; a client makes at most 10 calls, all successful,
	// before the outage, so it has at most 19 tokens: 3 retries in the outage,
	// where the unlimited contenders retry every outage call. The retries
	// the budget refuses wait (budget.Gate) and go out as probes: one out
	// at a time per client, after a quiet time that starts at the retry's
	// pause (40-60 ms) and doubles with every failure recorded while calls
	// wait; the client's own first attempts fail every 150 ms, which leaves
	// room for at most 2 probes per client in the outage.
	if s.AttemptsPerCall >= nb.AttemptsPerCall {
		t.Errorf("stagger attempts/call %.3f, want below stagger-nobudget's %.3f", s.AttemptsPerCall, nb.AttemptsPerCall)
	}
	if s.OutageAttempts >= nb.OutageAttempts {
		t.Errorf("stagger outage attempts %d, want below stagger-nobudget's %d", s.OutageAttempts, nb.OutageAttempts)
	}
	if max := 20 + 3*3 + 3*2; s.OutageAttempts > max {
		t.Errorf("stagger outage attempts %d, want at most %d (20 calls, 3 retries and 2 probes per client)", s.OutageAttempts, max)
	}
	// Unlimited retrying with 5 attempts: a call that starts in the outage
	// more than the whole backoff (about 0.9 s at most) before its end fails
	// all 5 attempts, so the outage sees far more than one attempt per call.
	for _, name := range []string{"stagger-nobudget", "grpc-middleware", "failsafe-go", "grpc-go", "naive"} {
		if r := res[name]; r.OutageAttempts < 40 {
			t.Errorf("%s outage attempts %d, want at least 40 (retries of 20 failing calls)", name, r.OutageAttempts)
		}
	}
}

func TestRunHedgingCutsTheTail(t *testing.T) {
	cfg := Config{Scenario: ScenarioSlowReplica, Duration: 2 * time.Second, OutageStart: time.Second,
		OutageEnd: 2 * time.Second, Clients: 3, Capacity: 400, CallTimeout: time.Second}
	res := runTiny(t, cfg)
	plain, hedged := res["stagger-nohedge"], res["stagger-hedge"]
	for name, r := range res {
		if r.Calls != 400 || r.Successes != r.Calls {
			t.Errorf("%s: %d of %d calls succeeded, want 400 of 400", name, r.Successes, r.Calls)
		}
	}
	// On virtual time an attempt takes exactly 20 ms or 200 ms; with 400 calls
	// about 20 first attempts are slow, so the unhedged p99 is a slow one.
	if plain.AttemptsPerCall != 1 || plain.P99 != SlowFactor*SlowBase {
		t.Errorf("no hedging: %.3f attempts/call, p99 %v; want 1 and %v", plain.AttemptsPerCall, plain.P99, SlowFactor*SlowBase)
	}
	// A hedge leaves after 30 ms and is fast 19 times in 20: 50 ms.
	if want := SlowHedgeDelay + SlowBase; hedged.P99 != want {
		t.Errorf("hedging: p99 %v, want %v", hedged.P99, want)
	}
	if hedged.AttemptsPerCall <= 1 || hedged.AttemptsPerCall > 1.2 {
		t.Errorf("hedging: %.3f attempts/call, want in (1, 1.2]: a hedge only after a slow first attempt", hedged.AttemptsPerCall)
	}
	if hedged.P50 != SlowBase || plain.P50 != SlowBase {
		t.Errorf("p50 %v (hedging) and %v (none), want %v", hedged.P50, plain.P50, SlowBase)
	}
}

// TestRunHedgingCutsTheStreamTail: the slow replica with a server stream.
// Hedges race until one attempt commits, at its first message here; the
// time to the first message loses its slow tail as the unary call's
// latency does, at the cost of a hedge for about one call in twenty.
func TestRunHedgingCutsTheStreamTail(t *testing.T) {
	cfg := Config{Scenario: ScenarioSlowReplicaStream, Duration: 2 * time.Second, OutageStart: time.Second,
		OutageEnd: 2 * time.Second, Clients: 3, Capacity: 400, CallTimeout: time.Second}
	res := runTiny(t, cfg)
	plain, hedged := res["stagger-nohedge"], res["stagger-hedge"]
	for name, r := range res {
		t.Logf("%s: %.4f attempts/call, first message p50 %v p99 %v p99.9 %v", name, r.AttemptsPerCall, r.FirstP50, r.FirstP99, r.FirstP999)
		if r.Calls != 400 || r.Successes != r.Calls {
			t.Errorf("%s: %d of %d streams succeeded, want 400 of 400", name, r.Successes, r.Calls)
		}
		if r.FirstP50 != SlowBase {
			t.Errorf("%s: time to first message p50 %v, want %v", name, r.FirstP50, SlowBase)
		}
	}
	if plain.AttemptsPerCall != 1 || plain.FirstP99 != SlowFactor*SlowBase {
		t.Errorf("no hedging: %.3f attempts/call, first message p99 %v; want 1 and %v", plain.AttemptsPerCall, plain.FirstP99, SlowFactor*SlowBase)
	}
	// A hedge leaves after 30 ms and is fast 19 times in 20: 50 ms, 4×
	// less than 200 ms.
	if want := SlowHedgeDelay + SlowBase; hedged.FirstP99 != want {
		t.Errorf("hedging: first message p99 %v, want %v", hedged.FirstP99, want)
	}
	if plain.FirstP99 < 3*hedged.FirstP99 {
		t.Errorf("hedging: first message p99 %v, want at least 3× below %v", hedged.FirstP99, plain.FirstP99)
	}
	if hedged.AttemptsPerCall <= 1 || hedged.AttemptsPerCall > 1.1 {
		t.Errorf("hedging: %.3f attempts/call, want in (1, 1.1]: a hedge only after a slow first attempt", hedged.AttemptsPerCall)
	}
	if got := res["stagger-hedge-adaptive"]; got.FirstP99 >= plain.FirstP99 {
		t.Errorf("adaptive hedging: first message p99 %v, want below %v", got.FirstP99, plain.FirstP99)
	}
}

// TestRunStormsCost: on the worker server an attempt takes a worker's
// time. 20 calls/s against 10 attempts/s (2 workers of 200 ms, a queue of
// 2), one attempt each, no outage to speak of: the server serves at most
// its capacity; an attempt that waits in the queue (100 ms or more) is
// served past its 300 ms deadline, for a caller that has gone, and that
// work is wasted. Few calls find a worker free.
func TestRunStormsCost(t *testing.T) {
	cfg := Config{Scenario: ScenarioUnavailable, Duration: 2 * time.Second, OutageStart: 1900 * time.Millisecond,
		OutageEnd: 2 * time.Second, Clients: 1, Capacity: 10, Workers: 2, Queue: 2, Rate: 20, MaxAttempts: 1,
		CallTimeout: 300 * time.Millisecond, Contenders: []string{"naive", "no-retry"}}
	for name, r := range runTiny(t, cfg) {
		if r.Calls != 40 || r.Attempts != 40 || r.Successes > 20 || r.Successes < 1 {
			t.Errorf("%s: %d of %d calls succeeded in %d attempts, want 1 to 20 of 40 in 40", name, r.Successes, r.Calls, r.Attempts)
		}
		if r.Wasted < 0.5 {
			t.Errorf("%s: wasted %v, want at least half the work: a 300 ms deadline behind 200 ms attempts", name, r.Wasted)
		}
	}
}

// TestRunBlip runs the blip scenario small. An attempt takes a worker's
// 10 ms (4 workers, 400 attempts/s), an attempt met by the outage none: a
// call in flight is in an attempt or waiting between attempts.
func TestRunBlip(t *testing.T) {
	cfg := Config{Scenario: ScenarioBlip, Duration: 3 * time.Second, OutageStart: time.Second,
		OutageEnd: 1500 * time.Millisecond, Clients: 4, Capacity: 400, Workers: 4, CallTimeout: time.Second}
	if d := cfg.Defaults(); d.Rate != 4 {
		t.Fatalf("blip's default Rate with 4 clients = %v, want 4 (1 call/s per client)", d.Rate)
	}
	res := runTiny(t, cfg)
	// 4 calls/s for 3 s: 12 calls, 2 of them in the outage.
	for name, r := range res {
		if r.Calls != 12 {
			t.Errorf("%s: %d calls, want 12", name, r.Calls)
		}
		if r.PeakInFlight > r.PeakWaiting+r.PeakAttemptsInFlight || r.PeakAttemptsInFlight < 1 {
			t.Errorf("%s: peaks in flight %d, waiting %d, attempts %d; want in flight <= waiting + attempts, attempts > 0", name, r.PeakInFlight, r.PeakWaiting, r.PeakAttemptsInFlight)
		}
		// Each client connection keeps goroutines of its own.
		if r.PeakGoroutines < cfg.Clients {
			t.Errorf("%s: peak goroutines %d, want at least one per client (%d)", name, r.PeakGoroutines, cfg.Clients)
		}
	}
	// The unlimited retrying layers heal both outage calls: their backoff
	// (50 ms, 100, 200, 400 ×U(0.8, 1.2)) outlasts the 0.5 s outage, and
	// both calls pause at the same time.
	for _, name := range []string{"stagger-nobudget", "grpc-middleware", "grpc-go"} {
		if r := res[name]; r.Successes != 12 || r.PeakWaiting != 2 {
			t.Errorf("%s: %d of 12 calls succeeded, peak waiting %d; want 12 and 2", name, r.Successes, r.PeakWaiting)
		}
	}
	// The naive loop gives up after 4 × 50 ms.
	if r := res["naive"]; r.Successes != 10 {
		t.Errorf("naive: %d of 12 calls succeeded, want 10", r.Successes)
	}
}

// TestRunNoRetriesNoWaits: with one attempt per call nothing waits: every
// call in flight is in its attempt.
func TestRunNoRetriesNoWaits(t *testing.T) {
	cfg := tinyConfig()
	cfg.MaxAttempts = 1
	for name, r := range runTiny(t, cfg) {
		if r.PeakWaiting != 0 || r.PeakInFlight != r.PeakAttemptsInFlight || r.PeakInFlight == 0 {
			t.Errorf("%s: peaks waiting %d, in flight %d, attempts %d; want 0, and calls = attempts > 0", name, r.PeakWaiting, r.PeakInFlight, r.PeakAttemptsInFlight)
		}
	}
}

// TestAttemptCounterWaits drives the stats handler as grpc-go does: a call
// whose first attempt fails waits until its second begins; the wait after
// its last attempt lasts until it returns; an attempt that ends after its
// call returned (a hedge) makes no wait.
func TestAttemptCounterWaits(t *testing.T) {
	synctest.Test(t, testAttemptCounterWaits)
}

func testAttemptCounterWaits(t *testing.T) {
	a := &attemptCounter{}
	begin := &stats.Begin{Client: true}
	end := &stats.End{Client: true}

	ctx1, c1 := a.callStarted(context.Background())
	ctx2, c2 := a.callStarted(context.Background())
	a.HandleRPC(ctx1, begin)
	a.HandleRPC(ctx2, begin)
	a.HandleRPC(ctx2, begin) // a hedge
	time.Sleep(time.Millisecond)
	a.HandleRPC(ctx1, end) // call 1 waits
	time.Sleep(time.Millisecond)
	a.HandleRPC(ctx2, end) // call 2 still has an attempt
	a.HandleRPC(ctx1, begin)
	a.HandleRPC(ctx1, end) // call 1 waits again
	time.Sleep(time.Millisecond)
	a.callEnded(c1)
	a.callEnded(c2)
	a.HandleRPC(ctx2, end) // the hedge ends after its call returned
	a.HandleRPC(ctx2, &stats.End{Client: false})

	got := a.flight.peaks()
	if got[flightCall] != 2 || got[flightAttempt] != 3 || got[flightWaiting] != 1 {
		t.Errorf("peaks = %v, want calls 2, attempts 3, waiting 1", got)
	}
	if a.attempts != 4 {
		t.Errorf("attempts = %d, want 4", a.attempts)
	}
	open := [flightKinds]int{}
	for _, e := range a.flight.events {
		open[e.kind] += int(e.delta)
	}
	if open != ([flightKinds]int{}) {
		t.Errorf("left open: %v, want every interval closed", open)
	}
}

// TestGoroutineSampler counts goroutines started under a label, and those
// they start, and not the others.
func TestGoroutineSampler(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		label := "test/sampler"
		g := sampleGoroutines([]string{label, "test/none"})
		stop := make(chan struct{})
		var wg sync.WaitGroup
		pprof.Do(context.Background(), pprof.Labels(goroutineLabel, label), func(context.Context) {
			for i := 0; i < 10; i++ {
				wg.Add(2)
				go func() {
					defer wg.Done()
					go func() { defer wg.Done(); <-stop }()
					<-stop
				}()
			}
		})
		for i := 0; i < 5; i++ {
			wg.Add(1)
			go func() { defer wg.Done(); <-stop }()
		}
		synctest.Wait()
		time.Sleep(Bin) // the sampler's next sample
		synctest.Wait()
		close(stop)
		wg.Wait()
		peaks := g.peaksAfterStop()
		if peaks[label] != 20 || peaks["test/none"] != 0 || len(peaks) != 2 {
			t.Errorf("peaks = %v, want %s 20 and test/none 0", peaks, label)
		}
	})
}

// tinyOverload is ScenarioOverload small: 4 workers of 20 ms (200
// attempts/s, 100 with 2 workers in [0.5 s, 1.5 s)), a queue of 20, 160
// calls/s from 4 clients, one every 6.25 ms.
func tinyOverload() Config {
	return Config{Scenario: ScenarioOverload, Duration: 2 * time.Second, OutageStart: 500 * time.Millisecond,
		OutageEnd: 1500 * time.Millisecond, Clients: 4, Capacity: 200, Workers: 4, CallTimeout: time.Second}
}

func TestRunOverloadGoodput(t *testing.T) {
	cfg := tinyOverload()
	if d := cfg.Defaults(); d.Queue != 20 || d.Rate != 160 || d.ServiceTime() != 20*time.Millisecond || d.ReducedCapacity() != 100 {
		t.Fatalf("defaults: queue %d, rate %v, service %v, reduced capacity %v; want 20, 160, 20ms, 100",
			d.Queue, d.Rate, d.ServiceTime(), d.ReducedCapacity())
	}
	// One attempt per call: every contender makes the same calls at the
	// same virtual times. In the overload 160 attempts arrive in the
	// second, the 2 workers never idle and serve 100 attempts' time: up
	// to 2 more are those the idled workers began before; the queue (200
	// ms of work) makes no call miss its deadline; the rejections, at
	// most 60, cost at most 6 attempts' time.
	cfg.MaxAttempts = 1
	var once float64
	for name, r := range runTiny(t, cfg) {
		if once == 0 {
			once = r.Goodput
		}
		if r.Goodput != once || r.Goodput < 0.94 || r.Goodput > 1.02 {
			t.Errorf("%s, one attempt per call: goodput %v, want the same for all, within [0.94, 1.02]", name, r.Goodput)
		}
		if r.Attempts != r.Calls || r.Calls != 320 {
			t.Errorf("%s, one attempt per call: %d attempts for %d calls, want 320 and 320", name, r.Attempts, r.Calls)
		}
	}
	// The naive loop retries every rejection 50 ms later, 4 times: the
	// rejections take the workers' time from the calls that could succeed.
	// The budget and grpc-go's throttling refuse most of those retries.
	cfg = tinyOverload()
	cfg.Contenders = []string{"naive", "stagger", "grpc-go-throttle"}
	res := runTiny(t, cfg)
	naive := res["naive"]
	t.Logf("goodput: one attempt %.2f; naive %.2f, stagger %.2f, grpc-go-throttle %.2f", once, naive.Goodput, res["stagger"].Goodput, res["grpc-go-throttle"].Goodput)
	if naive.Goodput > once-0.15 || naive.Goodput <= 0 {
		t.Errorf("naive: goodput %v, want in (0, %v]: retries cost the overloaded server", naive.Goodput, once-0.15)
	}
	for _, name := range []string{"stagger", "grpc-go-throttle"} {
		if r := res[name]; r.Goodput < naive.Goodput+0.1 || r.Goodput > 1.02 {
			t.Errorf("%s: goodput %v, want within [%v, 1.02] (naive's %v + 0.1)", name, r.Goodput, naive.Goodput+0.1, naive.Goodput)
		}
	}
	// OutageLoad is ÷ the reduced capacity: the naive loop sends several
	// times what the two workers can serve.
	if naive.OutageLoad < 2 {
		t.Errorf("naive: overload attempts ÷ reduced capacity %v, want at least 2", naive.OutageLoad)
	}
}

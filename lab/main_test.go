package lab

import (
	"math/rand/v2"
	"runtime/debug"
	"slices"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
	"google.golang.org/grpc"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestValidate(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  Config
		want string // in the error; "" means valid
	}{
		{"defaults", Config{}, ""},
		{"unknown scenario", Config{Scenario: "flood"}, `lab: Scenario: must be one of unavailable, refused, refused-wfr, blip, slow-replica, slow-replica-stream, overload, chain, flaky-quiet, flaky-quiet-random, slowdown, slowdown-90, metastable, bad-replica, slow-replica-3, mixed-criticality, long-outage, stragglers, got "flood"`},
		{"negative duration", Config{Duration: -time.Second}, "lab: Duration: must be > 0, got -1s"},
		{"outage past the end", Config{Duration: 3 * time.Second, OutageStart: time.Second, OutageEnd: 4 * time.Second}, "lab: OutageStart/OutageEnd: must satisfy 0 <= start < end <= Duration, got [1s, 4s) of 3s"},
		{"outage reversed", Config{OutageStart: 3 * time.Second, OutageEnd: 2 * time.Second}, "OutageStart/OutageEnd"},
		{"clients", Config{Clients: -1}, "lab: Clients: must be in [1, 10000], got -1"},
		{"capacity", Config{Capacity: -5}, "lab: Capacity: must be > 0, got -5"},
		{"rate", Config{Rate: -1}, "lab: Rate: must be in (0, 1e6] calls per second, got -1"},
		{"attempts above grpc-go's cap", Config{MaxAttempts: 6}, "lab: MaxAttempts: must be in [1, 5] (grpc-go's cap), got 6"},
		{"call timeout", Config{CallTimeout: -time.Second}, "lab: CallTimeout: must be > 0, got -1s"},
		{"one worker", Config{Scenario: ScenarioOverload, Workers: 1}, "lab: Workers: must be in [2, 10000], got 1"},
		{"negative queue", Config{Scenario: ScenarioOverload, Queue: -1}, "lab: Queue: must be in [0, 1e6], got -1"},
		{"service time below 1µs", Config{Scenario: ScenarioOverload, Workers: 2, Capacity: 3e6}, "lab: Capacity: must leave each of the Workers at least 1µs per attempt"},
		{"overload defaults", Config{Scenario: ScenarioOverload}, ""},
		{"slowdown below 1", Config{Scenario: ScenarioSlowdown, Slow: 0.5}, "lab: Slow: must be in [1, 1000], got 0.5"},
		{"negative per-attempt timeout", Config{Scenario: ScenarioMetastable, PerAttemptTimeout: -time.Second}, "lab: PerAttemptTimeout: must be >= 0, got -1s"},
		{"failure rate above 1", Config{Scenario: ScenarioFlakyQuietRandom, FailureRate: 2}, "lab: FailureRate: must be in [0, 1], got 2"},
		{"flaky defaults, no trigger", Config{Scenario: ScenarioFlakyQuiet}, ""},
		{"unknown contender", Config{Contenders: []string{"stagger", "envoy"}}, `lab: Contenders: must be among stagger, stagger-nobudget, stagger-breaker, stagger-throttling, grpc-middleware, failsafe-go, grpc-go, grpc-go-throttle, naive, no-retry, stagger-connect, connect-no-retry, got "envoy"`},
		{"repeated contender", Config{Contenders: []string{"naive", "naive"}}, `lab: Contenders: must not repeat a name, got "naive"`},
		{"no contender", Config{Contenders: []string{}}, "lab: Contenders: must name at least one, got none"},
		{"chain defaults", Config{Scenario: ScenarioChain}, ""},
		{"retry contender in the chain", Config{Scenario: ScenarioChain, Contenders: []string{"naive"}},
			`lab: Contenders: must be among stagger, stagger-nobudget, stagger-no-server, grpc-go, grpc-middleware, mixed, grpc-middleware-top, no-retry, got "naive"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.cfg.Defaults().Validate()
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("Validate() = %v, want nil", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("Validate() = %v, want an error containing %q", err, tc.want)
			}
		})
	}
}

func TestValidateReportsEveryField(t *testing.T) {
	err := Config{Clients: -1, Capacity: -1, MaxAttempts: 9}.Defaults().Validate()
	for _, field := range []string{"Clients", "Capacity", "MaxAttempts"} {
		if err == nil || !strings.Contains(err.Error(), "lab: "+field+":") {
			t.Errorf("Validate() = %v, want it to name %s", err, field)
		}
	}
}

func TestPercentile(t *testing.T) {
	ms := func(ns ...int) []time.Duration {
		out := make([]time.Duration, len(ns))
		for i, n := range ns {
			out[i] = time.Duration(n) * time.Millisecond
		}
		return out
	}
	hundred := make([]int, 100)
	for i := range hundred {
		hundred[i] = i + 1
	}
	for _, tc := range []struct {
		name   string
		sorted []time.Duration
		q      float64
		want   time.Duration
	}{
		{"none", nil, 0.5, 0},
		{"one", ms(7), 0.99, 7 * time.Millisecond},
		{"median of four is the second", ms(1, 2, 3, 4), 0.5, 2 * time.Millisecond},
		{"p99 of 100", ms(hundred...), 0.99, 99 * time.Millisecond},
		{"p99.9 of 100 is the largest", ms(hundred...), 0.999, 100 * time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := percentile(tc.sorted, tc.q); got != tc.want {
				t.Fatalf("percentile(%v) = %v, want %v", tc.q, got, tc.want)
			}
		})
	}
}

func TestServiceConfig(t *testing.T) {
	c := Config{}.Defaults()
	got := serviceConfig(&c, true)
	for _, want := range []string{`"maxAttempts": 5`, `"initialBackoff": "0.050000000s"`, `"maxBackoff": "1.000000000s"`,
		`"backoffMultiplier": 2`, `"retryThrottling": {"maxTokens": 10, "tokenRatio": 0.1}`} {
		if !strings.Contains(got, want) {
			t.Errorf("serviceConfig() = %s\nwant it to contain %s", got, want)
		}
	}
}

// TestSlowDraws checks the slow-replica draws across clients: about one
// attempt in twenty slow, and the first two attempts of a call both slow
// about one call in 400 (independent draws), not more.
func TestSlowDraws(t *testing.T) {
	const clients, calls = 50, 200
	slow, both := 0, 0
	for i := 0; i < clients; i++ {
		rng := rand.New(rand.NewChaCha8(slowSeed(i)))
		for c := 0; c < calls; c++ {
			ds := slowScript(rng, "k").GetAttemptDelays()
			if len(ds) != 3 {
				t.Fatalf("slowScript gave %d delays, want 3", len(ds))
			}
			for _, d := range ds {
				if d.AsDuration() == SlowFactor*SlowBase {
					slow++
				} else if d.AsDuration() != SlowBase {
					t.Fatalf("delay %v, want %v or %v", d.AsDuration(), SlowBase, SlowFactor*SlowBase)
				}
			}
			if ds[0].AsDuration() > SlowBase && ds[1].AsDuration() > SlowBase {
				both++
			}
		}
	}
	// 30000 draws: mean 1500 slow, sd about 38; 10000 calls: mean 25 with
	// both slow, sd 5.
	if slow < 1350 || slow > 1650 {
		t.Errorf("%d slow attempts of %d, want about %d", slow, 3*clients*calls, 3*clients*calls/20)
	}
	if both > 50 {
		t.Errorf("%d calls of %d with both first attempts slow, want about 25", both, clients*calls)
	}
}

func TestVersionsOf(t *testing.T) {
	got := versionsOf([]*debug.Module{
		{Path: "github.com/grpc-ecosystem/go-grpc-middleware/v2", Version: "v2.3.4"},
		{Path: "github.com/failsafe-go/failsafe-go", Version: "v0.9.0", Replace: &debug.Module{Path: "../failsafe", Version: ""}},
		{Path: "google.golang.org/protobuf", Version: "v1.36.0", Replace: &debug.Module{Path: "example.com/protobuf", Version: "v1.36.99"}},
	})
	want := []Module{
		{"google.golang.org/grpc", "v" + grpc.Version},
		{"github.com/grpc-ecosystem/go-grpc-middleware/v2", "v2.3.4"},
		// A local replacement has no version: say unknown rather than the
		// version it replaced.
		{"github.com/failsafe-go/failsafe-go", "unknown"},
		{"google.golang.org/protobuf", "v1.36.99"},
	}
	if !slices.Equal(got, want) {
		t.Errorf("versionsOf = %v, want %v", got, want)
	}
	// Test binaries carry no dependencies; grpc-go's version is still known.
	if v := Versions(); v[0].Version != "v"+grpc.Version {
		t.Errorf("Versions()[0] = %v, want grpc-go v%s", v[0], grpc.Version)
	}
}

func TestDefaultsPerScenario(t *testing.T) {
	for _, tc := range []struct {
		cfg                Config
		rate               float64
		outStart, outEnd   time.Duration
		duration, deadline time.Duration
	}{
		{Config{}, 400, 2 * time.Second, 4 * time.Second, 8 * time.Second, 2 * time.Second},
		{Config{Scenario: ScenarioRefused}, 400, 2 * time.Second, 4 * time.Second, 8 * time.Second, 2 * time.Second},
		{Config{Scenario: ScenarioBlip}, 50, 2 * time.Second, 3500 * time.Millisecond, 8 * time.Second, 2 * time.Second},
		// One call a second per client, whatever their number.
		{Config{Scenario: ScenarioBlip, Clients: 20}, 20, 2 * time.Second, 3500 * time.Millisecond, 8 * time.Second, 2 * time.Second},
		// What the Config sets wins.
		{Config{Scenario: ScenarioBlip, Rate: 7, OutageStart: time.Second, OutageEnd: 5 * time.Second}, 7, time.Second, 5 * time.Second, 8 * time.Second, 2 * time.Second},
		{Config{Scenario: ScenarioSlowReplica}, 250, 2 * time.Second, 4 * time.Second, 8 * time.Second, 2 * time.Second},
		{Config{Scenario: ScenarioOverload}, 400, 2 * time.Second, 6 * time.Second, 10 * time.Second, 2 * time.Second},
		{Config{Scenario: ScenarioChain}, 100, time.Second, 3 * time.Second, 4 * time.Second, 2 * time.Second},
		{Config{Scenario: ScenarioBadReplica}, 400, 2 * time.Second, 4 * time.Second, 4 * time.Second, 2 * time.Second},
		{Config{Scenario: ScenarioLongOutage}, 400, 2 * time.Second, 22 * time.Second, 30 * time.Second, 2 * time.Second},
		{SweepConfig(20 * time.Second), 400, 2 * time.Second, 22 * time.Second, 30 * time.Second, 2 * time.Second},
		{SweepConfig(500 * time.Millisecond), 400, 2 * time.Second, 2500 * time.Millisecond, 10500 * time.Millisecond, 2 * time.Second},
		{Config{Scenario: ScenarioStragglers}, 5, 2 * time.Second, 4 * time.Second, 40 * time.Second, 2 * time.Second},
	} {
		d := tc.cfg.Defaults()
		if d.Rate != tc.rate || d.OutageStart != tc.outStart || d.OutageEnd != tc.outEnd || d.Duration != tc.duration ||
			d.CallTimeout != tc.deadline || d.Capacity != 500 {
			t.Errorf("%+v.Defaults() = rate %v, outage [%v, %v), duration %v, deadline %v, capacity %d; want %v, [%v, %v), %v, %v, 500",
				tc.cfg, d.Rate, d.OutageStart, d.OutageEnd, d.Duration, d.CallTimeout, d.Capacity, tc.rate, tc.outStart, tc.outEnd, tc.duration, tc.deadline)
		}
	}
}

// The overload's server: 10 workers of 20 ms, 500 attempts/s, 250 with
// half of them; a queue of 50; 400 calls/s, 160 % of the reduced capacity.
func TestOverloadDefaults(t *testing.T) {
	d := Config{Scenario: ScenarioOverload}.Defaults()
	if d.Workers != 10 || d.Queue != 50 || d.ServiceTime() != 20*time.Millisecond || d.ReducedCapacity() != 250 || d.Rate/d.ReducedCapacity() != 1.6 {
		t.Errorf("overload defaults: %d workers, queue %d, service %v, reduced capacity %v, rate %v; want 10, 50, 20ms, 250, 400",
			d.Workers, d.Queue, d.ServiceTime(), d.ReducedCapacity(), d.Rate)
	}
	if w := overloadWorkers(&d, time.Unix(2, 0), time.Unix(6, 0)); w.Count != 10 || w.Reduced != 5 || w.Queue != 50 ||
		w.Service != 20*time.Millisecond || w.RejectionCost() != 2*time.Millisecond {
		t.Errorf("overloadWorkers = %+v, want 10 workers, 5 in the overload, queue 50, 20ms", w)
	}
	// An odd number of workers: the overload keeps the lesser half.
	if c := (Config{Scenario: ScenarioOverload, Workers: 5, Capacity: 100}).Defaults(); c.ServiceTime() != 50*time.Millisecond || c.ReducedCapacity() != 40 {
		t.Errorf("5 workers at 100/s: service %v, reduced capacity %v; want 50ms, 40", c.ServiceTime(), c.ReducedCapacity())
	}
	names := namesOf(contendersFor(ScenarioOverload))
	if !slices.Equal(names[:len(ContenderNames())], ContenderNames()) {
		t.Errorf("overload contenders %v, want Contenders first", names)
	}
}

func TestRecovery(t *testing.T) {
	t0 := time.Unix(1000, 0)
	cfg := &Config{Scenario: ScenarioMetastable, OutageStart: time.Second, OutageEnd: 2 * time.Second, Duration: 6 * time.Second}
	// call makes n calls in [at, at+1 s) after t0, ok of them successful.
	calls := func(spec ...[3]int) []loggedCall {
		var out []loggedCall
		for _, s := range spec {
			at, n, ok := time.Duration(s[0])*time.Second, s[1], s[2]
			for i := 0; i < n; i++ {
				b := t0.Add(at + time.Duration(i)*time.Second/time.Duration(n))
				out = append(out, loggedCall{begin: b, end: b.Add(10 * time.Millisecond), ok: i < ok})
			}
		}
		return out
	}
	for _, tc := range []struct {
		name string
		in   []loggedCall
		ok   bool
		at   time.Duration
	}{
		{"at once", calls([3]int{1, 10, 0}, [3]int{2, 10, 10}, [3]int{3, 10, 10}, [3]int{4, 10, 10}, [3]int{5, 10, 10}), true, 0},
		{"after two seconds", calls([3]int{2, 10, 0}, [3]int{3, 20, 18}, [3]int{4, 20, 19}, [3]int{5, 20, 20}), true, 2 * time.Second},
		{"a relapse", calls([3]int{2, 10, 10}, [3]int{3, 10, 10}, [3]int{4, 10, 5}, [3]int{5, 10, 10}), true, 3 * time.Second},
		{"never", calls([3]int{2, 10, 10}, [3]int{5, 10, 9}), false, 0},
		{"a quiet second passes", calls([3]int{2, 10, 0}, [3]int{3, 10, 10}, [3]int{5, 10, 10}), true, time.Second},
	} {
		ok, at := recovery(cfg, tc.in, t0)
		if ok != tc.ok || at != tc.at {
			t.Errorf("%s: recovered %v after %v, want %v after %v", tc.name, ok, at, tc.ok, tc.at)
		}
	}
}

func TestTimeline(t *testing.T) {
	t0 := time.Unix(1000, 0)
	cfg := &Config{Duration: 2 * time.Second}
	calls := []loggedCall{
		{begin: t0, end: t0.Add(100 * time.Millisecond), ok: true},
		{begin: t0.Add(900 * time.Millisecond), end: t0.Add(1100 * time.Millisecond), ok: true},
		{begin: t0.Add(1500 * time.Millisecond), end: t0.Add(3500 * time.Millisecond), ok: false},
	}
	got := timeline(cfg, calls, []int{3, 1}, t0)
	want := []Second{{Calls: 2, CallsSucceeded: 2, Attempts: 3, Successes: 1}, {Calls: 1, Attempts: 1, Successes: 1}, {}, {}}
	if !slices.Equal(got, want) {
		t.Errorf("timeline %+v, want %+v", got, want)
	}
}

// The stragglers' quiet process: one client, 3 attempts, a per-attempt
// timeout of three fast attempts, no trigger.
func TestStragglersDefaults(t *testing.T) {
	d := Config{Scenario: ScenarioStragglers}.Defaults()
	if d.Clients != 1 || d.MaxAttempts != 3 || d.PerAttemptTimeout != 3*StragglerBase || d.Scenario.HasTrigger() || d.Scenario.workerServer() {
		t.Errorf("stragglers defaults: clients %d, attempts %d, per-attempt timeout %v, trigger %v, worker server %v; want 1, 3, %v, false, false",
			d.Clients, d.MaxAttempts, d.PerAttemptTimeout, d.Scenario.HasTrigger(), d.Scenario.workerServer(), 3*StragglerBase)
	}
	if c := Ceiling(d); c != 1 {
		t.Errorf("Ceiling(stragglers) = %v, want 1", c)
	}
}

package budget

import (
	"container/heap"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stagger-go/stagger/criticality"
)

// stormModel is the random-failures model (M. Brooker, "Fixing retries
// with token buckets and circuit breakers"), small enough to live beside the
// budgets it helps to choose: Clients processes split TotalRate calls/s
// (Poisson arrivals) for Duration, each with its own budget; the server fails
// each attempt with probability P; a call makes at most MaxAttempts attempts,
// each taking Latency, retries sent as soon as the previous attempt failed.
// The full simulator lives in sim/; this one only drives the real budgets on a
// virtual clock.
type stormModel struct {
	Clients     int
	TotalRate   float64 // calls per second, all clients together
	Duration    time.Duration
	P           float64
	MaxAttempts int
	Latency     time.Duration
	Seed        uint64
	// Mix, when set, is the share of calls of each criticality level (by
	// Index); unset, every call names none.
	Mix [4]float64
}

type stormResult struct {
	Calls, Attempts, Successes int
	// LevelCalls and LevelSuccesses count by criticality index (a call
	// that names none as CRITICAL).
	LevelCalls, LevelSuccesses [4]int
}

// LevelSuccessRate is the success rate of the calls of level l.
func (r stormResult) LevelSuccessRate(l criticality.Level) float64 {
	return float64(r.LevelSuccesses[l.Index()]) / float64(r.LevelCalls[l.Index()])
}

func (r stormResult) Amplification() float64 { return float64(r.Attempts) / float64(r.Calls) }
func (r stormResult) SuccessRate() float64   { return float64(r.Successes) / float64(r.Calls) }

// stormEvent is an attempt of a call ending at At.
type stormEvent struct {
	At      time.Duration
	Client  int
	Attempt int
	Level   criticality.Level
	Seq     int // breaks ties so that runs are deterministic
}

type stormQueue []stormEvent

func (q stormQueue) Len() int { return len(q) }
func (q stormQueue) Less(i, j int) bool {
	if q[i].At != q[j].At {
		return q[i].At < q[j].At
	}
	return q[i].Seq < q[j].Seq
}
func (q stormQueue) Swap(i, j int) { q[i], q[j] = q[j], q[i] }
func (q *stormQueue) Push(x any)   { *q = append(*q, x.(stormEvent)) }
func (q *stormQueue) Pop() any {
	old := *q
	e := old[len(old)-1]
	*q = old[:len(old)-1]
	return e
}

// run builds one budget per client with build (nil: unlimited) and plays the
// model out.
func (m stormModel) run(t testing.TB, build func(now func() time.Time) Budget) stormResult {
	t.Helper()
	rng := rand.New(rand.NewPCG(m.Seed, 0x5eed))
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	var clock time.Duration
	now := func() time.Time { return start.Add(clock) }
	budgets := make([]Budget, m.Clients)
	for i := range budgets {
		budgets[i] = build(now)
	}
	var q stormQueue
	seq := 0
	push := func(e stormEvent) {
		e.Seq = seq
		seq++
		heap.Push(&q, e)
	}
	// Arrivals are drawn up front: each client's calls are a Poisson process.
	rate := m.TotalRate / float64(m.Clients)
	var res stormResult
	for c := range m.Clients {
		at := time.Duration(0)
		for {
			at += time.Duration(rng.ExpFloat64() / rate * float64(time.Second))
			if at >= m.Duration {
				break
			}
			res.Calls++
			res.Attempts++
			level := criticality.Unset
			if m.Mix != ([4]float64{}) {
				u := rng.Float64()
				for _, l := range criticality.Levels() {
					if level = l; u < m.Mix[l.Index()] {
						break
					}
					u -= m.Mix[l.Index()]
				}
			}
			res.LevelCalls[level.Index()]++
			push(stormEvent{At: at + m.Latency, Client: c, Attempt: 1, Level: level})
		}
	}
	for q.Len() > 0 {
		e := heap.Pop(&q).(stormEvent)
		clock = e.At
		b := budgets[e.Client]
		failed := rng.Float64() < m.P
		outcome := Success
		if failed {
			outcome = Failure
		}
		if b != nil {
			b.Record(Attempt{Number: e.Attempt, Outcome: outcome})
		}
		if !failed {
			res.Successes++
			res.LevelSuccesses[e.Level.Index()]++
			continue
		}
		if e.Attempt >= m.MaxAttempts {
			continue
		}
		if b != nil && !b.Allow(Request{Number: e.Attempt + 1, Criticality: e.Level}) {
			continue
		}
		res.Attempts++
		push(stormEvent{At: e.At + m.Latency, Client: e.Client, Attempt: e.Attempt + 1, Level: e.Level})
	}
	return res
}

type stormCandidate struct {
	name  string
	build func(now func() time.Time) Budget
}

func mustBudget(t testing.TB, s Settings) func(now func() time.Time) Budget {
	return func(now func() time.Time) Budget {
		b, err := New(s, WithClock(now))
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
}

// TestStormDefaultBudget holds stagger's default budget to issue 7's goals
// in model 2: amplification at p = 1 at most 1.15 and success at p = 0.1 at
// least 99%, for 10, 100 and 1000 clients splitting 1000 calls/s for 10 s,
// warm-up included. It logs the same figures for the other kinds (go test -v
// -run Storm), which is how the default was chosen.
func TestStormDefaultBudget(t *testing.T) {
	candidates := []stormCandidate{
		{"default", mustBudget(t, DefaultSettings())},
		{"none", func(func() time.Time) Budget { return nil }},
		{"throttle 10/0.1", mustBudget(t, Settings{Kind: KindThrottle, Throttle: ThrottleSettings{MaxTokens: 10, TokenRatio: 0.1}})},
		{"aws bucket", mustBudget(t, Settings{Kind: KindTokenBucket})},
		{"ratio default", mustBudget(t, Settings{Kind: KindRatio})},
		{"ratio 12% no floor", mustBudget(t, Settings{Kind: KindRatio, Ratio: RatioSettings{Percent: 12, MinRetriesPerSecond: -1}})},
	}
	if !testing.Verbose() {
		candidates = candidates[:1] // the others are for reading, with -v
	}
	for _, lat := range []time.Duration{0, 20 * time.Millisecond} {
		for _, clients := range []int{10, 100, 1000} {
			for _, c := range candidates {
				m := stormModel{Clients: clients, TotalRate: 1000, Duration: 10 * time.Second, MaxAttempts: 3, Latency: lat, Seed: 1}
				m.P = 1
				down := m.run(t, c.build)
				m.P = 0.1
				flaky := m.run(t, c.build)
				t.Logf("latency %-5v clients %-4d %-20s amplification(p=1) %.3f  success(p=0.1) %.2f%%",
					lat, clients, c.name, down.Amplification(), 100*flaky.SuccessRate())
				if c.name != "default" {
					continue
				}
				if a := down.Amplification(); a > 1.15 {
					t.Errorf("default budget, %d clients, latency %v: amplification at p=1 = %.3f, want <= 1.15", clients, lat, a)
				}
				if s := flaky.SuccessRate(); s < 0.99 {
					t.Errorf("default budget, %d clients, latency %v: success at p=0.1 = %.2f%%, want >= 99%%", clients, lat, 100*s)
				}
			}
		}
	}
}

// TestStormCriticality is how the reserve by criticality was chosen
// (tuning.go): model 2, 100 clients (1000 for CRITICAL_PLUS at p = 1), 20
// ms attempts, for the default budget, the AWS bucket and the ratio. First
// 30 % CRITICAL and 70 % SHEDDABLE calls at SHEDDABLE reserves of 0 (no
// criticality), an eighth, a quarter and a half (SHEDDABLE_PLUS half of
// it); then 5 % CRITICAL_PLUS at reserves of 0 to 0.3 below CRITICAL's
// floor. Without -v it runs the chosen numbers against none and holds
// them to what they promise: CRITICAL calls succeed at least as often,
// amplification is no higher (no higher than issue 7's 1.15 at p = 1 with
// CRITICAL_PLUS), SHEDDABLE calls lose nothing while the budget is nearly
// full (the AWS bucket at p = 0.1), and no level succeeds less often than
// a less critical one, beyond chance (2.5 points: a level that the budget
// does not tell apart, in a full bucket or in the Gate's outage, differs
// from another by chance, and CRITICAL_PLUS has a thousand calls).
func TestStormCriticality(t *testing.T) {
	budgets := []stormCandidate{
		{"default", mustBudget(t, DefaultSettings())},
		{"aws bucket", mustBudget(t, Settings{Kind: KindTokenBucket})},
		{"ratio default", mustBudget(t, Settings{Kind: KindRatio})},
	}
	chosen := reserveShares
	defer func() { reserveShares = chosen }()
	sheddable := []float64{0, reserveSheddable}
	plus := []float64{0, reserveCriticalPlus}
	if testing.Verbose() {
		sheddable = []float64{0, 0.125, 0.25, 0.5}
		plus = []float64{0, 0.1, 0.2, 0.3}
	}
	const sh, sp, cr, cp = 0, 1, 2, 3 // criticality.Level.Index()
	rate := func(r stormResult, l int) float64 { return float64(r.LevelSuccesses[l]) / float64(r.LevelCalls[l]) }
	model := func(p float64, clients int, mix [4]float64) stormModel {
		return stormModel{Clients: clients, TotalRate: 1000, Duration: 10 * time.Second, MaxAttempts: 3, Latency: 20 * time.Millisecond, Seed: 1, P: p, Mix: mix}
	}
	for _, c := range budgets {
		for _, p := range []float64{0.1, 0.3, 0.5, 1} {
			var base stormResult
			for _, share := range sheddable {
				reserveShares = chosen
				reserveShares[sh], reserveShares[sp] = share, share/2
				r := model(p, 100, [4]float64{0.7, 0, 0.3, 0}).run(t, c.build)
				t.Logf("%-13s p=%.1f SHEDDABLE reserve %.3f: critical %6.2f%%  sheddable %6.2f%%  amplification %.3f",
					c.name, p, share, 100*rate(r, cr), 100*rate(r, sh), r.Amplification())
				if share == 0 {
					base = r
					continue
				}
				if share != reserveSheddable {
					continue
				}
				if rate(r, cr) < rate(base, cr) {
					t.Errorf("%s, p=%.1f: CRITICAL success %.2f%% with the reserve, %.2f%% without", c.name, p, 100*rate(r, cr), 100*rate(base, cr))
				}
				if r.Amplification() > base.Amplification()+1e-9 {
					t.Errorf("%s, p=%.1f: amplification %.3f with the reserve, %.3f without", c.name, p, r.Amplification(), base.Amplification())
				}
				if c.name == "aws bucket" && p == 0.1 && rate(r, sh) != rate(base, sh) {
					t.Errorf("aws bucket, p=0.1: SHEDDABLE success %.2f%% with the reserve, %.2f%% without", 100*rate(r, sh), 100*rate(base, sh))
				}
			}
			// The four levels together: each succeeds at least as often
			// as the less critical ones.
			reserveShares = chosen
			r := model(p, 100, [4]float64{0.3, 0.3, 0.3, 0.1}).run(t, c.build)
			t.Logf("%-13s p=%.1f four levels: %6.2f%% %6.2f%% %6.2f%% %6.2f%%  amplification %.3f",
				c.name, p, 100*rate(r, sh), 100*rate(r, sp), 100*rate(r, cr), 100*rate(r, cp), r.Amplification())
			const slack = 0.025
			if rate(r, sp) < rate(r, sh)-slack || rate(r, cr) < rate(r, sp)-slack || rate(r, cp) < rate(r, cr)-slack {
				t.Errorf("%s, p=%.1f: success by level %.4f %.4f %.4f %.4f, want rising", c.name, p, rate(r, sh), rate(r, sp), rate(r, cr), rate(r, cp))
			}
		}
		for _, reserve := range plus {
			reserveShares = chosen
			reserveShares[cp] = -reserve
			mix := [4]float64{0.65, 0, 0.3, 0.05}
			flaky := model(0.5, 100, mix).run(t, c.build)
			down := model(1, 1000, mix).run(t, c.build)
			t.Logf("%-13s CRITICAL_PLUS reserve %.2f: p=0.5 critical+ %6.2f%% critical %6.2f%%; p=1 amplification (1000 clients) %.3f",
				c.name, reserve, 100*rate(flaky, cp), 100*rate(flaky, cr), down.Amplification())
			// The reserve lets the 5 % CRITICAL_PLUS calls of a fleet of
			// quiet processes retry a down server a little more: 1.095
			// without it, 1.182 with it under the Gate's rules of issue
			// 29 (1.135 before them).
			if reserve == reserveCriticalPlus && c.name == "default" && down.Amplification() > 1.20 {
				t.Errorf("default, CRITICAL_PLUS reserve: amplification at p=1 %.3f, want <= 1.20", down.Amplification())
			}
		}
	}
}

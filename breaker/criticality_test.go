package breaker

import (
	"errors"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/stagger-go/stagger/budget"
	"github.com/stagger-go/stagger/criticality"
)

const (
	shed  = criticality.Sheddable
	shedP = criticality.SheddablePlus
	unset = criticality.Unset
	crit  = criticality.Critical
	critP = criticality.CriticalPlus
)

// admitLevel asks for n first attempts of level l and records o for each
// one admitted; it returns how many throttling rejected.
func admitLevel(t *testing.T, b *Breaker, l criticality.Level, o budget.Outcome, n int) (throttled int) {
	t.Helper()
	for range n {
		err := b.Admit(l, nil)
		if err == nil {
			b.Record(o, true, l, nil)
			continue
		}
		if !errors.Is(err, ErrThrottled) {
			t.Fatalf("%v: Admit = %v", l, err)
		}
		throttled++
	}
	return throttled
}

// Each level's K: ThrottleK for CRITICAL (exactly, whatever the rounding),
// 1 + (K − 1) × the level's share for the others.
func TestThrottleKByLevel(t *testing.T) {
	for _, tt := range []struct {
		k    float64
		want [4]float64
	}{
		{2, [4]float64{1.75, 1.875, 2, 3}},
		{1, [4]float64{1, 1, 1, 1}},
		{3.3, [4]float64{1 + 2.3*0.75, 1 + 2.3*0.875, 3.3, 1 + 2.3*2}},
		{0, [4]float64{}},
	} {
		b, err := New("k", Settings{NoTrip: tt.k > 0, ThrottleK: tt.k}, nil)
		if err != nil {
			t.Fatal(err)
		}
		for i, want := range tt.want {
			if got := b.ks[i]; got != want && !(i != 2 && abs(got-want) < 1e-12) {
				t.Errorf("ThrottleK %v: K of %v = %v, want %v", tt.k, criticality.Levels()[i], got, want)
			}
		}
	}
}

func abs(x float64) float64 {
	if x < 0 {
		return -x
	}
	return x
}

// Throttling keeps each level's counts: a level the server sheds is
// throttled, the others are not; Unset shares CRITICAL's counts.
func TestThrottlingCountsEachLevel(t *testing.T) {
	clk := &manualClock{now: t0}
	var changes []Change
	b := newTestBreaker(t, Settings{NoTrip: true, ThrottleK: 2}, clk, &changes, WithRandom(func() float64 { return 0 }))
	// The server serves CRITICAL (named or not) and sheds SHEDDABLE.
	admitLevel(t, b, crit, budget.Success, 50)
	admitLevel(t, b, unset, budget.Success, 50)
	if n := admitLevel(t, b, shed, budget.Failure, 100); n != 99 {
		t.Fatalf("SHEDDABLE throttled %d of 100, want 99 (all but the first)", n)
	}
	for _, l := range []criticality.Level{crit, unset} {
		if n := admitLevel(t, b, l, budget.Success, 100); n != 0 {
			t.Fatalf("%v throttled %d while the server served every one", l, n)
		}
	}
	if s := b.Snapshot(); s.Requests != 400 || s.Accepts != 300 || s.ThrottleP != 0 || s.Throttled != 99 {
		t.Fatalf("snapshot %+v: want 400 requests, 300 accepts, CRITICAL's p 0, 99 throttled", s)
	}
	// SHEDDABLE_PLUS has counts of its own: nothing yet, never throttled.
	if n := admitLevel(t, b, shedP, budget.Success, 10); n != 0 {
		t.Fatalf("SHEDDABLE_PLUS throttled %d on SHEDDABLE's counts", n)
	}
}

// When the server fails every level alike, the less critical are
// rejected first: at one accept in two, K = 2 (CRITICAL) does not reject
// and K = 1.75 (SHEDDABLE) and 1.875 (SHEDDABLE_PLUS) do; at one in three
// only CRITICAL_PLUS (K = 3) is still not rejected.
func TestThrottlingRejectsTheLessCriticalFirst(t *testing.T) {
	for _, tt := range []struct {
		acceptEvery int
		rejects     map[criticality.Level]bool
	}{
		{2, map[criticality.Level]bool{shed: true, shedP: true, crit: false, unset: false, critP: false}},
		{3, map[criticality.Level]bool{shed: true, shedP: true, crit: true, unset: true, critP: false}},
	} {
		for l, want := range tt.rejects {
			clk := &manualClock{now: t0}
			var changes []Change
			b := newTestBreaker(t, Settings{NoTrip: true, ThrottleK: 2}, clk, &changes, WithRandom(func() float64 { return 0 }))
			// 300 requests in the window, an accept in acceptEvery; then
			// one more asks (u = 0: rejected whenever p > 0).
			b.w.Add(t0, counter(l.Index(), brRequests), 300)
			b.w.Add(t0, counter(l.Index(), brAccepts), uint64(300/tt.acceptEvery))
			err := b.Admit(l, nil)
			if got := errors.Is(err, ErrThrottled); got != want {
				t.Errorf("one accept in %d, %v: rejected %v, want %v (%v)", tt.acceptEvery, l, got, want, err)
			}
		}
	}
}

// Tripping needs the most critical level with enough answers to fail too:
// a server that sheds SHEDDABLE calls and serves CRITICAL ones is not down.
func TestBreakerTripsOnTheMostCriticalLevel(t *testing.T) {
	settings := Settings{FailureRatio: 0.5, MinimumThroughput: 10, ConsecutiveFailures: 1e6}
	for _, tt := range []struct {
		name  string
		calls []struct {
			l criticality.Level
			o budget.Outcome
			n int
		}
		open bool
	}{
		{"SHEDDABLE shed, CRITICAL served", []struct {
			l criticality.Level
			o budget.Outcome
			n int
		}{{crit, budget.Success, 10}, {shed, budget.Failure, 30}}, false},
		{"Unset served counts as CRITICAL", []struct {
			l criticality.Level
			o budget.Outcome
			n int
		}{{unset, budget.Success, 10}, {shedP, budget.Failure, 30}}, false},
		{"every level fails", []struct {
			l criticality.Level
			o budget.Outcome
			n int
		}{{crit, budget.Success, 4}, {crit, budget.Failure, 6}, {shed, budget.Failure, 30}}, true},
		{"CRITICAL too few to judge", []struct {
			l criticality.Level
			o budget.Outcome
			n int
		}{{crit, budget.Success, 9}, {shed, budget.Failure, 30}}, true},
		{"SHEDDABLE alone fails", []struct {
			l criticality.Level
			o budget.Outcome
			n int
		}{{shed, budget.Failure, 10}}, true},
	} {
		clk := &manualClock{now: t0}
		var changes []Change
		b := newTestBreaker(t, settings, clk, &changes)
		for _, c := range tt.calls {
			for range c.n {
				if b.Admit(c.l, nil) != nil {
					break
				}
				b.Record(c.o, true, c.l, nil)
			}
		}
		if got := !b.Closed(); got != tt.open {
			t.Errorf("%s: open %v, want %v", tt.name, got, tt.open)
		}
	}
}

// Half-open, the probe goes to the most critical level refused while the
// breaker was open: a less critical first attempt or retry is refused for
// one more break, and after it whichever asks first probes. Unset counts
// as CRITICAL, and a breaker whose calls name no level probes as before.
func TestBreakerProbeGoesToTheMostCritical(t *testing.T) {
	settings := Settings{MinimumThroughput: 1, ProbeEvery: 1, BreakDuration: time.Second, MaxBreakDuration: time.Second}
	open := func(t *testing.T, refused ...criticality.Level) (*Breaker, *manualClock) {
		clk := &manualClock{now: t0}
		var changes []Change
		b := newTestBreaker(t, settings, clk, &changes)
		admitN(t, b, budget.Failure, 1)
		for _, l := range refused {
			wantRefusal(t, b.Admit(l, nil), ErrOpen, time.Time{})
		}
		clk.advance(time.Second)
		return b, clk
	}
	t.Run("held for CRITICAL", func(t *testing.T) {
		b, clk := open(t, shed, crit, shedP)
		wantRefusal(t, b.Admit(shed, nil), ErrOpen, t0.Add(2*time.Second))
		if ok, next := b.AllowRetry(shedP, nil); ok || !next.Equal(t0.Add(2*time.Second)) {
			t.Fatalf("SHEDDABLE_PLUS retry: %v, %v; want refused until the hold ends", ok, next)
		}
		if s := b.Snapshot(); s.State != StateHalfOpen {
			t.Fatalf("state %v, want half-open", s.State)
		}
		clk.advance(500 * time.Millisecond)
		if err := b.Admit(unset, nil); err != nil {
			t.Fatalf("Unset (CRITICAL) could not probe: %v", err)
		}
		wantRefusal(t, b.Admit(critP, nil), ErrOpen, clk.Now().Add(time.Second))
	})
	t.Run("the hold ends", func(t *testing.T) {
		b, clk := open(t, critP)
		wantRefusal(t, b.Admit(crit, nil), ErrOpen, t0.Add(2*time.Second))
		clk.advance(time.Second)
		g := b.Guard(shed, nil)
		if ok, _ := g.AllowRetry(); !ok {
			t.Fatal("after the hold a SHEDDABLE retry could not probe")
		}
	})
	t.Run("the most critical refused is the bar", func(t *testing.T) {
		b, _ := open(t, shed, shedP)
		if err := b.Admit(shedP, nil); err != nil {
			t.Fatalf("SHEDDABLE_PLUS, the most critical refused, could not probe: %v", err)
		}
	})
	t.Run("no levels", func(t *testing.T) {
		b, _ := open(t, unset, unset)
		if err := b.Admit(unset, nil); err != nil {
			t.Fatalf("no level named: the first to ask could not probe: %v", err)
		}
	})
	t.Run("a new break forgets", func(t *testing.T) {
		b, clk := open(t, critP)
		if err := b.Admit(critP, nil); err != nil {
			t.Fatal(err)
		}
		b.Record(budget.Failure, true, critP, nil) // open again, for 1s
		clk.advance(time.Second)
		if err := b.Admit(shed, nil); err != nil {
			t.Fatalf("nothing refused in the new break, yet SHEDDABLE was held: %v", err)
		}
	})
}

// throttleModel plays client-side throttling against a server that serves
// Capacity first attempts per 100 ms tick: Offered calls per tick (Poisson),
// a share Critical of them CRITICAL and the rest SHEDDABLE (all Unset when
// NoLevels), each asking one breaker; the server serves those admitted up
// to its capacity, the CRITICAL ones first when Aware, else in random
// order, and fails the rest at once, each rejection costing RejectCost of
// a call's work out of the next tick's capacity (a rejection is cheaper
// than a call, not free). It runs 30 s and counts the last 20, for each of
// Seeds seeds.
type throttleModel struct {
	Capacity, Offered, Critical, RejectCost float64
	Aware, NoLevels                         bool
	Seeds                                   int
}

type throttleResult struct {
	offered, served [2]int // [SHEDDABLE, CRITICAL]
	ticks           int
}

func (r throttleResult) success(i int) float64 { return float64(r.served[i]) / float64(r.offered[i]) }

// goodput is the calls served per unit of the server's capacity.
func (r throttleResult) goodput(capacity float64) float64 {
	return float64(r.served[0]+r.served[1]) / (capacity * float64(r.ticks))
}

func (m throttleModel) run(t *testing.T) throttleResult {
	t.Helper()
	var r throttleResult
	for seed := range m.Seeds {
		m.runSeed(t, uint64(seed+1), &r)
	}
	return r
}

func (m throttleModel) runSeed(t *testing.T, seed uint64, r *throttleResult) {
	rng := rand.New(rand.NewPCG(seed, 7))
	clk := &manualClock{now: t0}
	b, err := New("model", Settings{NoTrip: true, ThrottleK: 2}, nil, WithClock(clk.Now), WithRandom(rng.Float64))
	if err != nil {
		t.Fatal(err)
	}
	type call struct {
		l    criticality.Level
		kind int // 0 SHEDDABLE, 1 CRITICAL, named or not
	}
	const tick = 100 * time.Millisecond
	debt := 0.0
	for i := range 300 {
		measured := i >= 100
		var sent []call
		for range poisson(rng, m.Offered) {
			c := call{shed, 0}
			if rng.Float64() < m.Critical {
				c = call{crit, 1}
			}
			if m.NoLevels {
				c.l = unset
			}
			if measured {
				r.offered[c.kind]++
			}
			if b.Admit(c.l, nil) == nil {
				sent = append(sent, c)
			}
		}
		rng.Shuffle(len(sent), func(i, j int) { sent[i], sent[j] = sent[j], sent[i] })
		if m.Aware {
			slices.SortStableFunc(sent, func(a, b call) int { return b.kind - a.kind })
		}
		room := m.Capacity - debt
		debt = 0
		for _, c := range sent {
			o := budget.Failure
			if room >= 1 {
				room--
				o = budget.Success
				if measured {
					r.served[c.kind]++
				}
			} else {
				debt += m.RejectCost
			}
			b.Record(o, true, c.l, nil)
		}
		if measured {
			r.ticks++
		}
		clk.advance(tick)
	}
}

// poisson draws a Poisson count of mean m (Knuth's method; m is small).
func poisson(rng *rand.Rand, m float64) int {
	l, k, p := math.Exp(-m), 0, 1.0
	for {
		p *= rng.Float64()
		if p < l {
			return k
		}
		k++
	}
}

// TestThrottleCriticalityModel is how the levels' K were chosen
// (tuning.go): 30 % CRITICAL and 70 % SHEDDABLE calls at twice a server's
// capacity, rejections costing a tenth (and, with -v, three tenths) of a
// call, K = 2, SHEDDABLE's share of K − 1 from 1 (one K for all) down to 0
// (K = 1), against no levels at all (today's throttling), for a server
// that fails calls alike and for one that serves CRITICAL first, five
// seeds each (-v logs every candidate; without it, the chosen one and no
// levels). It holds the choice to what it promises: CRITICAL calls
// succeed more often than without levels (by 10 points against the server
// that fails alike), and the goodput is no lower (within a point).
func TestThrottleCriticalityModel(t *testing.T) {
	chosen := throttleKShares
	defer func() { throttleKShares = chosen }()
	shares := []float64{chosen[0]}
	costs := []float64{0.1}
	if testing.Verbose() {
		shares = []float64{1, 0.75, 0.5, 0.25, 0.1, 0}
		costs = []float64{0.1, 0.3}
	}
	const capacity = 10
	for _, cost := range costs {
		for _, aware := range []bool{false, true} {
			m := throttleModel{Capacity: capacity, Offered: 2 * capacity, Critical: 0.3, RejectCost: cost, Aware: aware, Seeds: 5}
			m.NoLevels = true
			base := m.run(t)
			t.Logf("reject cost %.1f aware %-5v no levels:         CRITICAL %6.2f%%  SHEDDABLE %6.2f%%  goodput %.3f", cost, aware, 100*base.success(1), 100*base.success(0), base.goodput(capacity))
			m.NoLevels = false
			for _, share := range shares {
				throttleKShares = chosen
				throttleKShares[0] = share
				r := m.run(t)
				t.Logf("reject cost %.1f aware %-5v SHEDDABLE K %.3f: CRITICAL %6.2f%%  SHEDDABLE %6.2f%%  goodput %.3f", cost, aware, 1+share, 100*r.success(1), 100*r.success(0), r.goodput(capacity))
				if share != chosen[0] {
					continue
				}
				gain := 0.0
				if !aware {
					gain = 0.1
				}
				if r.success(1) < base.success(1)+gain {
					t.Errorf("cost %.1f, aware %v: CRITICAL success %.2f%%, without levels %.2f%%; want %.0f points more", cost, aware, 100*r.success(1), 100*base.success(1), 100*gain)
				}
				if r.goodput(capacity) < base.goodput(capacity)-0.01 {
					t.Errorf("cost %.1f, aware %v: goodput %.3f, without levels %.3f", cost, aware, r.goodput(capacity), base.goodput(capacity))
				}
			}
		}
	}
}

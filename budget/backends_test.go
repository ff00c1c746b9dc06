package budget_test

import (
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stagger-go/stagger/budget"
	"github.com/stagger-go/stagger/criticality"
)

// fakeClock is a clock a test moves by hand.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fakeClock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) advance(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

func newClockedBackends(t *testing.T, s budget.Settings) (*budget.Backends, *fakeClock) {
	t.Helper()
	clk := &fakeClock{t: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	bs, err := budget.NewBackends(s, budget.WithClock(clk.now))
	if err != nil {
		t.Fatal(err)
	}
	return bs, clk
}

// drain spends b's tokens on retries.
func drain(b budget.Budget) {
	for range 200 {
		b.Record(budget.Attempt{Number: 1, Outcome: budget.Failure})
		b.Allow(budget.Request{Number: 2})
	}
}

func targets(bs *budget.Backends) map[string]bool {
	out := map[string]bool{}
	for _, st := range bs.States() {
		out[st.Target] = true
	}
	return out
}

// A process that called 1,100 targets, then went idle, gives its newest
// target its own state, and forgets what the idle ones knew.
func TestBackendsForgetIdleTargets(t *testing.T) {
	bs, clk := newClockedBackends(t, budget.DefaultSettings())
	initial := bs.Get("t0", "/m").State().Level
	for i := range 1100 {
		clk.advance(time.Millisecond)
		bs.Get(fmt.Sprintf("t%d", i), "/m")
	}
	if n := len(targets(bs)); n > 1024 {
		t.Fatalf("%d targets kept; want at most 1,024", n)
	}
	// Past the cap each target still has its own: draining one leaves the
	// next untouched.
	drain(bs.Get("t1099", "/m"))
	if st := bs.Get("t1098", "/m").State(); st.Level != initial {
		t.Fatalf("t1098 level %v after t1099 was drained; want its own %v", st.Level, initial)
	}
	old := bs.Get("t1098", "/m")
	drain(old)
	if old.State().Level == initial {
		t.Fatal("drain left the level as it was")
	}

	// A lookup reads no clock: the set times the uses by its next reading
	// that begins an epoch, at least 6 s after the last (as a metrics
	// reader's States does, or the set's sweep timer).
	clk.advance(10 * time.Second) // an epoch lasts at least 6 s
	bs.States()
	clk.advance(2 * time.Hour)
	fresh := bs.Get("new", "/m")
	if st := fresh.State(); st.Level != initial || st.Health != "quiet" {
		t.Fatalf("newest target: %+v; want its own fresh state", st)
	}
	if got := targets(bs); len(got) != 1 || !got["new"] {
		t.Fatalf("after two idle hours the set reports %d targets; want only the newest", len(got))
	}
	again := bs.Get("t1098", "/m")
	if again == old {
		t.Fatal("t1098 kept its budget through two idle hours; want it forgotten")
	}
	if st := again.State(); st.Level != initial {
		t.Fatalf("t1098 after the gap: level %v; want a fresh %v (what it knew is gone)", st.Level, initial)
	}
}

// A target and a method in use within the idle time are kept; idle ones
// beside them are forgotten.
func TestBackendsKeepWhatIsUsed(t *testing.T) {
	bs, clk := newClockedBackends(t, budget.DefaultSettings())
	busy, idle := bs.Get("busy", "/m"), bs.Get("busy", "/idle")
	bs.Get("idle", "/m")
	for range 20 {
		clk.advance(time.Minute)
		bs.Get("busy", "/m")
		bs.States()
	}
	if bs.Get("busy", "/m") != busy {
		t.Fatal("a method used every minute was forgotten")
	}
	if bs.Get("busy", "/idle") == idle {
		t.Fatal("a method idle for 20 minutes was kept")
	}
	if targets(bs)["idle"] {
		t.Fatal("a target idle for 20 minutes is still reported")
	}
}

// A Slot says when its key was forgotten; the next lookup learns afresh.
func TestBackendsSlotForgotten(t *testing.T) {
	bs, clk := newClockedBackends(t, budget.DefaultSettings())
	s := bs.Slot("a", "/m")
	b, ok := s.Budget()
	if !ok || b == nil {
		t.Fatalf("new slot: %v, %v", b, ok)
	}
	clk.advance(10 * time.Second) // an epoch lasts at least 6 s
	bs.States()
	clk.advance(time.Hour)
	bs.States()
	if _, ok := s.Budget(); ok {
		t.Fatal("Slot.Budget ok after an idle hour; want false (forgotten)")
	}
	if nb, ok := bs.Slot("a", "/m").Budget(); !ok || nb == b {
		t.Fatal("a forgotten key's new Slot returned the old budget")
	}
}

// enter makes a retry wait on b, a Gate, for a minute.
func enter(t *testing.T, b budget.Budget, c criticality.Level, now time.Time) (*budget.Waiter, error) {
	t.Helper()
	g, ok := b.(*budget.Gate)
	if !ok {
		t.Fatalf("budget %T; want a *budget.Gate", b)
	}
	return g.Enter(budget.Request{Number: 2, Criticality: c}, time.Minute, now.Add(time.Hour))
}

// A target with a waiting call is not forgotten while it waits, however
// long, and is once the wait is over and it went idle.
func TestBackendsKeepWhileWaiting(t *testing.T) {
	bs, clk := newClockedBackends(t, budget.DefaultSettings())
	g := bs.Get("waited", "/m")
	w, err := enter(t, g, criticality.Critical, clk.now())
	if err != nil {
		t.Fatal(err)
	}
	clk.advance(2 * time.Hour)
	for i := range 1100 { // at the cap, the least recently used go first
		bs.Get(fmt.Sprintf("t%d", i), "/m")
	}
	bs.States()
	if !targets(bs)["waited"] {
		t.Fatal("a target whose call waits was forgotten")
	}
	w.Leave()
	if bs.Get("waited", "/m") != g {
		t.Fatal("a target whose call waited was forgotten before it went idle")
	}
	clk.advance(10 * time.Second) // an epoch lasts at least 6 s
	bs.States()
	clk.advance(2 * time.Hour)
	bs.States()
	if bs.Get("waited", "/m") == g {
		t.Fatal("a target idle for two hours after its wait was kept")
	}
}

func deferring(maxWaiting int) budget.Settings {
	s := budget.DefaultSettings()
	s.Defer.MaxWaiting = maxWaiting
	return s
}

// MaxWaiting bounds one backend's waiting calls, all its methods together.
func TestBackendsMaxWaitingPerBackend(t *testing.T) {
	bs, clk := newClockedBackends(t, deferring(2))
	var in []*budget.Waiter
	refused := 0
	for i := range 10 {
		for range 2 {
			w, err := enter(t, bs.Get("a", fmt.Sprintf("/m%d", i)), criticality.Critical, clk.now())
			switch {
			case errors.Is(err, budget.ErrTooManyWaiting):
				refused++
			case err != nil:
				t.Fatal(err)
			default:
				in = append(in, w)
			}
		}
	}
	if len(in) != 2 || refused != 18 {
		t.Fatalf("%d waiting, %d refused across 10 methods with MaxWaiting 2; want 2 and 18", len(in), refused)
	}
	waiting := 0
	for _, st := range bs.States() {
		waiting += st.Waiting
	}
	if waiting != 2 {
		t.Fatalf("States report %d waiting; want 2", waiting)
	}
	for _, w := range in {
		w.Leave()
	}
	w, err := enter(t, bs.Get("a", "/m9"), criticality.Critical, clk.now())
	if err != nil {
		t.Fatalf("after the waiters left: %v; want room", err)
	}
	w.Leave()
}

// Two backends each fill a room of their own; neither evicts the other's
// waiters, and a full set refuses rather than evict across backends.
func TestBackendsRoomsApart(t *testing.T) {
	bs, clk := newClockedBackends(t, deferring(1024))
	var all []*budget.Waiter
	defer func() {
		for _, w := range all {
			w.Leave()
		}
	}()
	fill := func(target string, c criticality.Level) {
		t.Helper()
		for range 1024 {
			w, err := enter(t, bs.Get(target, "/m"), c, clk.now())
			if err != nil {
				t.Fatalf("%s: %v", target, err)
			}
			all = append(all, w)
		}
	}
	fill("a", criticality.Sheddable)
	fill("b", criticality.CriticalPlus)
	if _, err := enter(t, bs.Get("b", "/m"), criticality.CriticalPlus, clk.now()); !errors.Is(err, budget.ErrTooManyWaiting) {
		t.Fatalf("a full room of CRITICAL_PLUS: %v; want ErrTooManyWaiting", err)
	}
	fill("c", criticality.Sheddable)
	fill("d", criticality.Sheddable) // the set's bound: 4,096
	if _, err := enter(t, bs.Get("e", "/m"), criticality.CriticalPlus, clk.now()); !errors.Is(err, budget.ErrTooManyWaiting) {
		t.Fatalf("a full set: %v; want ErrTooManyWaiting (no eviction across backends)", err)
	}
	for i, w := range all {
		if _, _, err := w.Poll(); err != nil {
			t.Fatalf("waiter %d of %d: %v; want it still waiting", i, len(all), err)
		}
	}
	// Within a backend, a more critical retry takes a less critical one's
	// place (the Gate's criticality rule) even when the set is full.
	w, err := enter(t, bs.Get("a", "/m"), criticality.CriticalPlus, clk.now())
	if err != nil {
		t.Fatalf("a CRITICAL_PLUS retry in a room of SHEDDABLE: %v; want it to evict one", err)
	}
	all = append(all, w)
}

// Lookups, adds past the cap, forgetting, waits and States at once: the
// race detector's test, and no key lost while a call waits on it.
func TestBackendsConcurrent(t *testing.T) {
	bs, clk := newClockedBackends(t, deferring(4))
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 600 {
				target := fmt.Sprintf("w%d-t%d", w, i%400)
				g := bs.Get(target, fmt.Sprintf("/m%d", i%3))
				if s := bs.Slot(target, "/m0"); s != nil {
					s.Budget()
				}
				if i%50 == 0 {
					if wt, err := enter(t, g, criticality.Critical, clk.now()); err == nil {
						clk.advance(time.Minute)
						bs.States()
						if _, _, err := wt.Poll(); err != nil && !errors.Is(err, budget.ErrTooManyWaiting) {
							t.Error(err)
						}
						wt.Leave()
					}
				}
			}
		}()
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		for range 200 {
			clk.advance(10 * time.Second)
			bs.States()
		}
	}()
	wg.Wait()
	for _, st := range bs.States() {
		if st.Waiting != 0 {
			t.Fatalf("%s %s: %d waiting after every call left", st.Target, st.Method, st.Waiting)
		}
	}
}

// States is one moment's view: beside adds past the cap that forget the
// least recently used, it never shows more targets than the cap (nobody
// waits). It walked the shards one by one and could show both what an
// add forgot and what later adds put in (the soak saw 1,026).
func TestBackendsStatesOneMoment(t *testing.T) {
	bs, _ := newClockedBackends(t, deferring(4))
	limit := bs.Limits().Targets
	for i := range limit {
		bs.Get(fmt.Sprintf("t%d", i), "/m")
	}
	done := make(chan struct{})
	var wg sync.WaitGroup
	for w := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-done:
					return
				default:
				}
				bs.Get(fmt.Sprintf("w%d-%d", w, i), "/m")
			}
		}()
	}
	defer func() { close(done); wg.Wait() }()
	for range 300 {
		if n := len(targets(bs)); n > limit {
			t.Fatalf("States shows %d targets, past the cap of %d with nobody waiting", n, limit)
		}
	}
}

package budget

import (
	"context"
	"errors"
	"math"
	"sync/atomic"
	"testing"
	"time"

	tune "github.com/stagger-go/stagger/internal/gatetune"
)

// Each test here failed on the Gate before the defect it names was fixed
// (issue 55, read from outside: "a caller that left is charged", ...).

// countingBudget admits when open is set and counts what it was asked.
type countingBudget struct {
	open  atomic.Bool
	asked atomic.Int64
}

func (b *countingBudget) Record(Attempt) {}
func (b *countingBudget) Allow(Request) bool {
	b.asked.Add(1)
	return b.open.Load()
}
func (b *countingBudget) State() State { return State{Kind: "counting"} }

// A caller that left is neither admitted nor charged: Wait with a context
// already cancelled returns its error and asks the budget nothing (it
// used to return a probe the budget paid for).
func TestGateWaitCallerGoneTakesNothing(t *testing.T) {
	b := &countingBudget{}
	b.open.Store(true)
	g, err := Deferring(b, DeferSettings{})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	a, err := g.Wait(ctx, retry2, 0)
	if a != AdmitNone || !errors.Is(err, context.Canceled) {
		t.Fatalf("Wait with its caller gone = %v, %v; want none, context.Canceled", a, err)
	}
	if n := b.asked.Load(); n != 0 {
		t.Fatalf("the budget was asked %d times for a caller that left", n)
	}
	if st := g.State(); st.Waiting != 0 || st.DeferAdmitted != 0 {
		t.Fatalf("state after = %+v", st)
	}
}

// A waiter whose caller left between its admission and its asking gives
// the admission back: the next waiter takes the probe slot.
func TestGateCallerGoneGivesTheProbeBack(t *testing.T) {
	clk := &manualClock{now: t0}
	b := &countingBudget{}
	g := downServer(newGate(t, b, DeferSettings{}, clk))
	failures(g, tune.Evidence)
	gone, _ := g.Enter(retry2, 0, time.Time{})
	<-gone.Ready()
	if a, _ := gone.take(func() bool { return true }); a != AdmitNone {
		t.Fatalf("take of a waiter whose caller left = %v, want none", a)
	}
	gone.Leave()
	if b.asked.Load() != 0 {
		t.Fatal("the budget was asked for a caller that left")
	}
	next, _ := g.Enter(retry2, 0, time.Time{})
	defer next.Leave()
	poll(t, next, admitProbe)
}

// A guard that refuses frees nobody's probe slot: with an unguarded probe
// out, a guarded waiter whose guard is open neither takes the slot nor
// asks its guard, and a third waiter does not probe beside the probe out
// (it did: the refusal's give-back zeroed the slot).
func TestGateRefusedGuardKeepsAnotherProbesSlot(t *testing.T) {
	clk := &manualClock{now: t0}
	g := inOutage(t, clk, DeferSettings{})
	out, _ := g.Enter(retry2, 0, time.Time{})
	defer out.Leave()
	poll(t, out, admitProbe)
	guard := &refusingGuard{}
	r := retry2
	r.Guard = guard
	guarded, _ := g.Enter(r, 0, time.Time{})
	defer guarded.Leave()
	poll(t, guarded, AdmitNone)
	third, _ := g.Enter(retry2, 0, time.Time{})
	defer third.Leave()
	poll(t, third, AdmitNone)
	if guard.asked != 0 {
		t.Fatalf("the guard was asked %d times while the probe was out", guard.asked)
	}
}

// allowingGuard is open and allows every retry, counting them.
type allowingGuard struct{ asked int }

func (g *allowingGuard) Closed() bool { return false }
func (g *allowingGuard) AllowRetry() (bool, time.Time) {
	g.asked++
	return true, time.Time{}
}

// A hopeless retry is never the breaker's half-open probe: with 1 s left
// and attempts taking 2 s, the wait ends whether a guard is open or not
// (guarded, it was admitted as the probe).
func TestGateHopelessRetryIsNotTheGuardsProbe(t *testing.T) {
	for _, guarded := range []bool{false, true} {
		clk := &manualClock{now: t0}
		g := inOutage(t, clk, DeferSettings{})
		guard := &allowingGuard{}
		r := Request{Number: 2, Took: 2 * time.Second}
		if guarded {
			r.Guard = guard
		}
		w, err := g.Enter(r, 0, t0.Add(time.Second))
		if err != nil {
			t.Fatal(err)
		}
		a, _, err := w.Poll()
		w.Leave()
		if a != AdmitNone || !errors.Is(err, errWaitEnded) || guard.asked != 0 {
			t.Errorf("guarded %v: Poll = %v, %v, guard asked %d; want none, the wait ended, never asked", guarded, a, err, guard.asked)
		}
	}
}

// Giving back a release restores what it took: a call held through an
// outage, going back at the back pace before a credit accrued, creates none.
func TestGateGivingBackACreditlessReleaseMakesNoCredit(t *testing.T) {
	s := newGateState(t0, func() float64 { return 0.5 })
	s.phase = phaseRecovering
	s.pace.set(t0, 0.25)
	w := waiterView{}
	s.pace = s.pace.taken(t0, &w, admitRelease)
	s.pace = s.pace.given(admitRelease)
	if c := s.pace.credits(t0); math.Abs(c-0.25) > 1e-6 {
		t.Fatalf("credits after a release given back = %v, want 0.25", c)
	}
	s.pace.set(t0, 1)
	s.pace = s.pace.taken(t0, &w, admitRelease)
	s.pace = s.pace.given(admitRelease)
	if c := s.pace.credits(t0); c != 1 {
		t.Fatalf("credits after a credited release given back = %v, want 1", c)
	}
}

// An outage ages: a Gate left in an outage when its traffic stopped
// admits the first retry three idle hours later (Allow refused it, and a
// Wait failed at once with ErrOutageLasting), and its state is a new
// Gate's.
func TestGateOutageAges(t *testing.T) {
	clk := &manualClock{now: t0}
	b := &switchBudget{}
	g := downServer(newGate(t, b, DeferSettings{}, clk))
	failures(g, tune.Evidence)
	if g.health() != phaseOutage {
		t.Fatal("no outage")
	}
	clk.advance(3 * time.Hour)
	b.open.Store(true)
	if !g.Allow(retry2) {
		t.Fatal("three idle hours after an outage, Allow refused a retry")
	}
	if h := g.State().Health; h != "quiet" {
		t.Fatalf("health after three idle hours = %q, want quiet", h)
	}
	// Within the bound, the outage is kept.
	failures(g, tune.Evidence)
	g2 := inOutage(t, clk, DeferSettings{})
	clk.advance(tune.ProbeGapMax / 2)
	if g2.Allow(retry2) || g2.health() != phaseOutage {
		t.Fatal("the outage was forgotten within tune.ProbeGapMax")
	}
}

// A deadline centuries away overflows nothing: retries that begin to wait
// 200 ms into an outage wait (92 of 100 failed at once: the longest wait
// saturated and its float conversion went negative).
func TestGateDeadlineCenturiesAway(t *testing.T) {
	clk := &manualClock{now: t0}
	g := inOutage(t, clk, DeferSettings{})
	far := t0.AddDate(300, 0, 0)
	first, err := g.Enter(retry2, 0, far)
	if err != nil {
		t.Fatal(err)
	}
	defer first.Leave()
	clk.advance(200 * time.Millisecond)
	failed := 0
	for range 100 {
		w, err := g.Enter(retry2, 0, far)
		if err != nil {
			failed++
			continue
		}
		defer w.Leave()
	}
	if failed != 0 {
		t.Fatalf("%d of 100 retries failed at once 200 ms into the outage", failed)
	}
	// A pause near the longest Duration: its hold time, the pause plus its
	// slack, saturates instead of wrapping into the past.
	huge, err := g.Enter(retry2, math.MaxInt64-1, far)
	if err != nil {
		t.Fatal(err)
	}
	defer huge.Leave()
	if want := g.now().Add(math.MaxInt64); !huge.view.holdAt.Equal(want) {
		t.Fatalf("hold time of a pause near the longest Duration = %v, want %v", huge.view.holdAt, want)
	}
}

// A Gate over a Gate is refused (the outer one refunded tokens the inner
// one never took), and so is a typed nil budget (Record panicked later).
func TestDeferringRefusesWhatCannotWork(t *testing.T) {
	inner, err := New(DefaultSettings())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Deferring(inner, DeferSettings{}); err == nil {
		t.Error("Deferring of a Gate: no error")
	}
	var typedNil *countingBudget
	if _, err := Deferring(typedNil, DeferSettings{}); err == nil {
		t.Error("Deferring of a typed nil budget: no error")
	}
}

// panickingGuard panics when asked for a retry.
type panickingGuard struct{}

func (panickingGuard) Closed() bool                  { return false }
func (panickingGuard) AllowRetry() (bool, time.Time) { panic("guard") }

// A guard that panics inside Poll strands nothing: the admission goes
// back, and no waiter is left counted as asking (every waiter then
// re-polled each millisecond, and none could be evicted).
func TestGatePanickingGuardStrandsNothing(t *testing.T) {
	clk := &manualClock{now: t0}
	g := inOutage(t, clk, DeferSettings{})
	r := retry2
	r.Guard = panickingGuard{}
	w, _ := g.Enter(r, 0, time.Time{})
	func() {
		defer func() {
			if recover() == nil {
				t.Error("the guard's panic did not reach the caller")
			}
		}()
		w.Poll()
	}()
	w.Leave()
	g.mu.Lock()
	asking, slot := w.state != waitOut, g.st.pace.leased(clk.Now())
	g.mu.Unlock()
	if asking || slot {
		t.Fatalf("after a panicking guard: asking %v, probe slot held %v; want neither", asking, slot)
	}
}

// A probe holder that never reports keeps the slot tune.ProbeGapMax at
// most, not until its call's deadline (an hour away here) and a second.
func TestGateLostProbeSlotIsCapped(t *testing.T) {
	clk := &manualClock{now: t0}
	g := inOutage(t, clk, DeferSettings{})
	lost, _ := g.Enter(retry2, 0, t0.Add(time.Hour))
	poll(t, lost, admitProbe)
	lost.Leave()
	clk.advance(tune.ProbeGapMax + time.Millisecond)
	// With a deadline: one without would be turned away, its 10 s wait
	// ending before the return the outage's 30 s predict (the end rule).
	next, _ := g.Enter(retry2, 0, clk.Now().Add(time.Hour))
	defer next.Leave()
	if a, at, _ := next.Poll(); a != admitProbe {
		t.Fatalf("%v after a probe that never reported: Poll = %v (next %v), want a probe", tune.ProbeGapMax, a, at.Sub(clk.Now()))
	}
}

// Every end of a wait that the Gate gives names the rule of its wait
// contract that ended it (interceptor.Report.WaitEnd reads it).
func TestGateWaitEndsNameTheirRule(t *testing.T) {
	for err, rule := range map[error]string{errWaitEnded: "hold", errHopeless: "hopeless", errWaitLimit: "max-wait", errEvicted: "criticality"} {
		var r interface{ WaitRule() string }
		if !errors.As(err, &r) || r.WaitRule() != rule {
			t.Errorf("%v: rule %v, want %q", err, r, rule)
		}
	}
	if !errors.Is(errHopeless, errWaitEnded) || !errors.Is(errEvicted, ErrTooManyWaiting) {
		t.Error("errHopeless must wrap errWaitEnded, errEvicted ErrTooManyWaiting")
	}
	// The hopeless rule's end is told from the hold rule's.
	clk := &manualClock{now: t0}
	g := inOutage(t, clk, DeferSettings{})
	w, _ := g.Enter(Request{Number: 2, Took: 2 * time.Second}, 0, t0.Add(time.Second))
	defer w.Leave()
	if _, _, err := w.Poll(); err != errHopeless {
		t.Fatalf("Poll = %v, want errHopeless", err)
	}
}

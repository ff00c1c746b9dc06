package budget

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stagger-go/stagger/criticality"
)

// Issue 72's defects of the Gate and its guard, each read from outside and
// failing on the tree before its fix.

// settleAlone moves the clock to each time the gate names for w alone, no
// news coming, until the gate decides it: how it went, or how its wait
// ended, and when. A gate that names no time leaves it undecided.
func settleAlone(t *testing.T, clk *manualClock, w *Waiter) (Admission, time.Duration, error) {
	t.Helper()
	for range 1000 {
		a, next, err := w.Poll()
		if a != AdmitNone || err != nil || next.IsZero() {
			return a, clk.Now().Sub(t0), err
		}
		clk.set(next)
	}
	t.Fatal("undecided after 1,000 steps")
	return AdmitNone, 0, nil
}

// failingOnce is a gate whose server served, retries known not to heal
// (downServer), then failed one new call: failing, not down.
func failingOnce(t *testing.T, clk *manualClock) *Gate {
	t.Helper()
	g := downServer(newGate(t, &switchBudget{}, DeferSettings{}, clk))
	g.Record(Attempt{Number: 1, Outcome: Failure})
	return g
}

// Defect 1: a closed guard counts as no guard. A retry with a 100 ms pause
// behind a closed breaker is decided when and as the same retry without a
// guard (it waited MaxWait, 10 s: the closed guard refused the unpaid
// probe, which held every guarded waiter for news).
func TestGateClosedGuardIsNoGuard(t *testing.T) {
	got := closedGuardVerdicts(t, failingOnce, func(*Gate) {})
	if got[0] != got[1] || got[1].at > 110*time.Millisecond {
		t.Fatalf("without a guard %+v; behind a closed one %+v: want the same, by the hold time (110ms)", got[0], got[1])
	}
}

// verdict is how a wait went (a; or how it ended, err) and when, from t0.
type verdict struct {
	a   Admission
	err error
	at  time.Duration
}

// closedGuardVerdicts decides a retry with a 100 ms pause alone (settleAlone)
// at a gate made by gate, then changed by after, without a guard and
// behind a closed one.
func closedGuardVerdicts(t *testing.T, gate func(*testing.T, *manualClock) *Gate, after func(*Gate)) (got [2]verdict) {
	t.Helper()
	for i, guarded := range []bool{false, true} {
		clk := &manualClock{now: t0}
		g := gate(t, clk)
		r := retry2
		if guarded {
			r.Guard = closedGuard{}
		}
		w, err := g.Enter(r, 100*time.Millisecond, time.Time{})
		if err != nil {
			t.Fatal(err)
		}
		after(g)
		a, at, err := settleAlone(t, clk, w)
		w.Leave()
		got[i] = verdict{a, err, at}
	}
	return got
}

// Defect 2: at scale, a thousand retries behind a closed breaker are
// decided by their hold time, 110 ms, with no news: one goes as the probe,
// the others' waits end by the hold rule (they waited for news, and one
// success ended all of them at once).
func TestGateClosedGuardHoldsNoCrowd(t *testing.T) {
	for _, guarded := range []bool{false, true} {
		clk := &manualClock{now: t0}
		g := failingOnce(t, clk)
		r := retry2
		if guarded {
			r.Guard = closedGuard{}
		}
		ws := make([]*Waiter, 1000)
		for i := range ws {
			w, err := g.Enter(r, 100*time.Millisecond, time.Time{})
			if err != nil {
				t.Fatal(err)
			}
			defer w.Leave()
			ws[i] = w
		}
		admitted, ended := 0, 0
		taken := make([]bool, len(ws))
		for clk.Now().Before(t0.Add(111 * time.Millisecond)) {
			clk.advance(time.Millisecond)
			g.Tick()
			takeReady(ws, taken, func(_ int, a Admission, err error) {
				switch {
				case a != AdmitNone:
					admitted++
				case errors.Is(err, errWaitEnded):
					ended++
				case err != nil:
					t.Fatalf("guarded %v: a wait ended with %v", guarded, err)
				}
			})
		}
		if admitted != 1 || ended != len(ws)-1 {
			t.Errorf("guarded %v: by 111ms, %d went and %d waits ended by the hold rule; want 1 and %d", guarded, admitted, ended, len(ws)-1)
		}
	}
}

// Defect 3: a guard that panics in Wait strands nothing: the panic reaches
// Wait's caller, and nobody is left counted waiting, so that with
// MaxWaiting 1 the next retry waits (it was counted forever, and every
// later retry was turned away), and the probe slot is free.
func TestGateWaitPanickingGuardStrandsNothing(t *testing.T) {
	clk := &manualClock{now: t0}
	g := inOutage(t, clk, DeferSettings{MaxWaiting: 1})
	r := retry2
	r.Guard = panickingGuard{}
	func() {
		defer func() {
			if p := recover(); p != "guard" {
				t.Errorf("Wait's caller recovered %v, want the guard's panic", p)
			}
		}()
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		g.Wait(ctx, r, 0)
	}()
	if st := g.State(); st.Waiting != 0 || st.Deferred != st.DeferAdmitted+st.DeferGaveUp {
		t.Fatalf("after the guard panicked: %+v; want nobody waiting, every wait counted once", st)
	}
	g.mu.Lock()
	leased := g.st.pace.leased(clk.Now())
	g.mu.Unlock()
	if leased {
		t.Fatal("the probe slot is held after the guard panicked")
	}
	w, err := g.Enter(retry2, 0, time.Time{})
	if err != nil {
		t.Fatalf("the next retry: %v; want it to wait", err)
	}
	defer w.Leave()
	poll(t, w, admitProbe)
}

// returningGuard is an open guard that allows every retry, and the caller
// of the retry it allows leaves at once; it counts what it let go and what
// came back.
type returningGuard struct {
	left            *bool
	allowed, backed int
}

func (g *returningGuard) Closed() bool { return false }
func (g *returningGuard) AllowRetry() (bool, time.Time) {
	g.allowed++
	*g.left = true
	return true, time.Time{}
}
func (g *returningGuard) ReturnRetry() { g.backed++ }

// Defect 4 (the Gate's half; package breaker tests the breaker's): a
// caller that leaves after its guard said yes gives the yes back (the
// breaker's half-open slot stayed taken for a whole break), and the
// Gate's probe slot and waiting count with it.
func TestGateCallerLeavingAfterYesReturnsTheGuardsSlot(t *testing.T) {
	clk := &manualClock{now: t0}
	g := inOutage(t, clk, DeferSettings{})
	left := false
	guard := &returningGuard{left: &left}
	w, err := g.Enter(Request{Number: 2, Guard: guard}, 0, time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	g.Tick()
	<-w.Ready()
	if a, err := w.take(func() bool { return left }); a != AdmitNone || !errors.Is(err, context.Canceled) && err != nil {
		t.Fatalf("take for a caller that left = %v, %v; want none", a, err)
	}
	w.Leave()
	if guard.allowed != 1 || guard.backed != 1 {
		t.Fatalf("the guard let %d go and got %d back; want 1 and 1", guard.allowed, guard.backed)
	}
	if st := g.State(); st.Waiting != 0 {
		t.Fatalf("%d waiting after the caller left", st.Waiting)
	}
	next, _ := g.Enter(retry2, 0, time.Time{})
	defer next.Leave()
	poll(t, next, admitProbe)
}

// Defect 5: in an outage, a retry behind a closed breaker is decided as
// one without a guard, never by the hold rule, whose error says there is
// "no outage or overload to wait for" (the closed guard refused its
// probe after its hold time, and the hold rule ended it).
func TestGateClosedGuardInAnOutage(t *testing.T) {
	inAnOutage := func(t *testing.T, clk *manualClock) *Gate { return inOutage(t, clk, DeferSettings{}) }
	// The probe gap doubles: the probe is due past the hold time.
	got := closedGuardVerdicts(t, inAnOutage, func(g *Gate) { failures(g, 1) })
	for i, v := range got {
		if errors.Is(v.err, errWaitEnded) {
			t.Errorf("guarded %v: in an outage the wait ended with %q", i == 1, v.err)
		}
	}
	if got[0] != got[1] {
		t.Fatalf("in an outage, without a guard %+v; behind a closed one %+v: want the same", got[0], got[1])
	}
}

// Defect 6: the return after an outage ends once the calls held through
// it have gone, under steady load too: then a waiting retry heals again
// (the return lasted until a success found nobody waiting, so under a
// steady load of retries the heal rule stayed off for good).
func TestGateReturnEndsUnderSteadyLoad(t *testing.T) {
	clk := &manualClock{now: t0}
	g := downAfterServing(t, clk)
	const pause = 100 * time.Millisecond
	var held []*Waiter
	for range 6 {
		w, err := g.Enter(retry2, pause, time.Time{})
		if err != nil {
			t.Fatal(err)
		}
		defer w.Leave()
		held = append(held, w)
		clk.advance(time.Second) // past its hold time: held by the outage
		g.Tick()
	}
	if h := g.health(); h != phaseOutage {
		t.Fatalf("before the return: %v, want an outage", h)
	}
	g.Record(Attempt{Number: 1, Outcome: Success}) // the return
	// A steady load: a new retry waits at every step, and what goes is
	// served.
	var newer []*Waiter
	take := func(ws []*Waiter) (left int) {
		for _, w := range ws {
			select {
			case <-w.Ready():
			default:
				left++
				continue
			}
			if a, _ := w.Take(); a != AdmitNone {
				g.Record(Attempt{Number: 2, Outcome: Success, Admission: a, Took: 5 * time.Millisecond})
			}
		}
		return left
	}
	for step := 0; ; step++ {
		if step == 2000 {
			t.Fatal("the calls held through the outage never went")
		}
		w, err := g.Enter(retry2, pause, time.Time{})
		if err != nil {
			t.Fatal(err)
		}
		defer w.Leave()
		newer = append(newer, w)
		clk.advance(10 * time.Millisecond)
		g.Tick()
		left := take(held)
		take(newer)
		if left == 0 && step > 10 {
			break
		}
	}
	// Every call held through the outage went; newer ones still wait. The
	// next success ends the return, and a retry that waits now heals.
	g.Record(Attempt{Number: 1, Outcome: Success})
	w, err := g.Enter(Request{Number: 2, Criticality: criticality.CriticalPlus}, pause, time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Leave()
	if g.State().Waiting < 2 {
		t.Fatal("nobody else waits: the test shows nothing")
	}
	clk.advance(pause)
	if a, _, err := w.Poll(); a != admitHeal {
		g.mu.Lock()
		backAt := g.st.pace.backAt
		g.mu.Unlock()
		t.Fatalf("once the held calls went, a retry after its pause = %v, %v (return since %v); want it healed", a, err, backAt)
	}
}

// Defect 7: a guard's refusal keeps the waiter's place, oldest first: in a
// full room a more critical retry evicts the latest of the least critical,
// not the one its guard refused (it went to the back of its level). Both
// are guarded: the refusal holds the other for news.
func TestGateGuardRefusalKeepsThePlace(t *testing.T) {
	clk := &manualClock{now: t0}
	g := inOutage(t, clk, DeferSettings{MaxWaiting: 2})
	old, err := g.Enter(Request{Number: 2, Criticality: criticality.Sheddable, Guard: &refusingGuard{}}, 0, time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	defer old.Leave()
	latest, err := g.Enter(Request{Number: 2, Criticality: criticality.Sheddable, Guard: &refusingGuard{}}, 0, time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	defer latest.Leave()
	<-old.Ready()
	if a, err := old.Take(); a != AdmitNone || err != nil {
		t.Fatalf("Take of the refused = %v, %v; want it to wait again", a, err)
	}
	hi, err := g.Enter(Request{Number: 2, Criticality: criticality.Critical}, 0, time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	defer hi.Leave()
	if !errors.Is(latest.err(), errEvicted) || old.err() != nil {
		t.Fatalf("evicted: the latest %v, the oldest %v; want the latest only", latest.err(), old.err())
	}
}

// Defect 8: Take before Ready admits nothing and changes nothing: the
// waiter waits on, and goes when a rule lets it (it was admitted, counted
// gone, and its Ready closed, no rule having let it go).
func TestGateTakeBeforeReady(t *testing.T) {
	clk := &manualClock{now: t0}
	g := inOutage(t, clk, DeferSettings{})
	w, err := g.Enter(retry2, time.Second, time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Leave()
	if a, err := w.Take(); a != AdmitNone || err != nil {
		t.Fatalf("Take before Ready = %v, %v; want none, nil", a, err)
	}
	if st := g.State(); st.Waiting != 1 || st.DeferAdmitted != 0 {
		t.Fatalf("after Take before Ready: %d waiting, %d admitted; want 1 and 0", st.Waiting, st.DeferAdmitted)
	}
	select {
	case <-w.Ready():
		t.Fatal("Ready is closed with no verdict")
	default:
	}
	clk.advance(time.Second)
	if a, _ := settleAloneAdmission(t, clk, w); a != admitProbe {
		t.Fatalf("after its pause: %v, want the probe", a)
	}
}

func settleAloneAdmission(t *testing.T, clk *manualClock, w *Waiter) (Admission, error) {
	t.Helper()
	a, _, err := settleAlone(t, clk, w)
	return a, err
}

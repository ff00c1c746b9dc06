package budget

import (
	"context"
	"errors"
	"testing"
	"time"

	tune "github.com/stagger-go/stagger/internal/gatetune"
)

// Issue 62's defect 5: what a probe took ages with the rest. One 20 s
// probe, a success, three idle hours: the next outage's last chance goes
// tune.LastChanceLead before its deadline, as in a new process (it went
// at once when the last chance's lead was twice the old probe's 20 s; the
// attempt time it reads now ages with tune.OverloadHold).
func TestGateProbeDurationAges(t *testing.T) {
	clk := &manualClock{now: t0}
	g := inOutage(t, clk, DeferSettings{})
	w, _ := g.Enter(retry2, 0, time.Time{})
	poll(t, w, admitProbe)
	clk.advance(20 * time.Second)
	g.Record(Attempt{Number: 2, Outcome: Success, Admission: admitProbe, Took: 20 * time.Second})
	g.Record(Attempt{Number: 1, Outcome: Success})
	clk.advance(3 * time.Hour)
	downServer(g)
	failures(g, tune.Evidence)
	deadline := clk.Now().Add(10 * time.Second)
	last, _ := g.Enter(Request{Number: 2, Last: true}, 0, deadline)
	defer last.Leave()
	if next, want := poll(t, last, AdmitNone), deadline.Add(-tune.LastChanceLead); !next.Equal(want) {
		t.Fatalf("the last chance goes %v before the deadline, want %v", deadline.Sub(next), tune.LastChanceLead)
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.st.ev.runs > tune.Evidence || g.st.pace.since > tune.Evidence {
		t.Fatalf("after three idle hours: runs %.1f, failures since a probe %d", g.st.ev.runs, g.st.pace.since)
	}
}

// Issue 62's defect 7: two first lookups of a method on a known target
// that race (each built its Gate before it took the set's lock) get one
// Slot; the second's Gate is dropped, not orphaned beside the first's.
func TestBackendsRacingFirstLookupsShareAGate(t *testing.T) {
	bs, err := NewBackends(DefaultSettings())
	if err != nil {
		t.Fatal(err)
	}
	bs.Slot("t:1", "/s/A") // the target is known
	b := bs.target("t:1")
	g1, g2 := bs.newGate(b.tokens.b), bs.newGate(b.tokens.b)
	now := bs.now()
	bs.mu.Lock()
	s1, ok1 := bs.insertLocked(now, "t:1", "/s/B", b, nil, g1)
	s2, ok2 := bs.insertLocked(now, "t:1", "/s/B", b, nil, g2)
	bs.mu.Unlock()
	if !ok1 || !ok2 || s1 != s2 {
		t.Fatalf("two first lookups got %p and %p, want one Slot", s1, s2)
	}
	if s := bs.Slot("t:1", "/s/B"); s != s1 || s.b != Budget(g1) {
		t.Fatal("the set keeps another Gate than the one its callers got")
	}
}

// A guarded waiter held for news after its open guard refused, with no
// time named and no news coming (the load stopped), still ends by its own
// rules: MaxWait for a call without a deadline (the 10-minute soak, seed 2:
// two calls of small-room-breaker left waiting, counted, after the load
// stopped; the grant loop set no timer for a guard-held waiter's end).
func TestGateGuardHeldWaitStillEnds(t *testing.T) {
	clk := &manualClock{now: t0}
	g, err := Deferring(&switchBudget{}, DeferSettings{MaxWait: time.Second}, WithClock(clk.Now))
	if err != nil {
		t.Fatal(err)
	}
	downServer(g)
	failures(g, tune.Evidence)
	guard := &refusingGuard{}
	w, err := g.Enter(Request{Number: 2, Guard: guard}, 0, time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Leave()
	for i := 0; i < 100 && w.err() == nil; i++ {
		a, at, err := w.Poll()
		if a != AdmitNone || err != nil {
			break
		}
		if at.IsZero() {
			t.Fatalf("after %d steps, the gate asks for no time, its waiter undecided (guard asked %d times)", i, guard.asked)
		}
		clk.set(at)
	}
	if !errors.Is(w.err(), errWaitLimit) || clk.Now().Sub(t0) > 2*time.Second {
		t.Fatalf("wait ended with %v at %v, want the MaxWait limit at about 1s", w.err(), clk.Now().Sub(t0))
	}
}

// cancellingGuard refuses every retry, cancelling its caller's context as
// it does: the caller leaves while its guard is asked.
type cancellingGuard struct{ cancel context.CancelFunc }

func (g *cancellingGuard) Closed() bool { return false }
func (g *cancellingGuard) AllowRetry() (bool, time.Time) {
	g.cancel()
	return false, time.Time{}
}

// A guarded retry in a Gate that has heard no Record yet is asked for, not
// held for news (the guard hold's "no news since the refusal" read a
// fresh gate's zero counters as a refusal: with no deadline and no Record
// coming, the wait never ended); its caller leaving as the guard refuses
// leaves nobody counted waiting (the 10-minute soak, seed 2: a throttled
// call counted waiting after the load stopped).
func TestGateCallerLeavingAsItsGuardRefuses(t *testing.T) {
	g := newGateOnTime(t) // a fresh gate: the retry goes as the probe, and its guard is asked
	ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
	defer cancel()
	_, err := g.Wait(ctx, Request{Number: 2, Guard: &cancellingGuard{cancel}}, 0)
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("Wait = %v, want context.Canceled", err)
	}
	if st := g.State(); st.Waiting != 0 || st.Deferred != st.DeferAdmitted+st.DeferGaveUp {
		t.Fatalf("after the caller left: %+v, want nobody waiting and every wait counted once", st)
	}
}

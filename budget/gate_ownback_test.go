package budget

import (
	"testing"
	"time"

	tune "github.com/stagger-go/stagger/internal/gatetune"
)

// After an outage's return, an older held retry whose own back time (its
// pause after the return) has not come does not hold back the younger
// ones whose back time came: when successes bring the pace to now, the
// next of them goes at once, not at the time the pace named before (the
// grant loop decides only heads; issue 72's fleet regression).
func TestGateOwnBackTimeHoldsBackNobody(t *testing.T) {
	clk := &manualClock{now: t0}
	g := inOutage(t, clk, DeferSettings{})
	older, err := g.Enter(retry2, 2*time.Second, time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	var younger []*Waiter
	for range tune.BackMinHeld {
		w, err := g.Enter(retry2, 100*time.Millisecond, time.Time{})
		if err != nil {
			t.Fatal(err)
		}
		younger = append(younger, w)
	}
	all := append([]*Waiter{older}, younger...)
	ready := func() (n int) {
		for _, w := range all {
			select {
			case <-w.Ready():
				n++
			default:
			}
		}
		return n
	}
	// The outage: new calls keep failing, so no probe is due; every
	// retry is held through it.
	for range 150 {
		clk.advance(20 * time.Millisecond)
		g.Record(Attempt{Number: 1, Outcome: Failure})
		clk.set(clk.Now())
		g.Tick()
		if n := ready(); n > 0 {
			t.Fatalf("%d retries decided in the outage, want all held", n)
		}
	}
	// The return, then the younger ones' back time passes; the older
	// one's is still ahead.
	g.Record(Attempt{Number: 1, Outcome: Success})
	clk.advance(150 * time.Millisecond)
	g.Tick()
	if n := ready(); n > 0 {
		t.Skipf("%d went before the successes (the pace allowed them): nothing to test", n)
	}
	// New calls' successes bring the pace to now.
	for i := 0; ; i++ {
		g.mu.Lock()
		next := g.st.pace.next
		g.mu.Unlock()
		if !next.After(clk.Now()) {
			break
		}
		if i == 100 {
			t.Fatalf("100 successes left the pace at %v after now", next.Sub(clk.Now()))
		}
		g.Record(Attempt{Number: 1, Outcome: Success})
	}
	select {
	case <-older.Ready():
		t.Fatal("the older retry went before its back time")
	default:
	}
	if ready() == 0 {
		t.Fatal("no retry went once the pace came to now, want the younger (their back time passed)")
	}
}

// A retry out of the heads for its own time in an outage (its pause after
// the latest attempt that reached the backend) comes back when the server
// serves again: it goes by its back time after the return (with a
// deadline, at most releaseEvery after it), not at the outage's own
// time, which the return made moot.
func TestGateOwnTimeEndsWithTheOutage(t *testing.T) {
	clk := &manualClock{now: t0}
	g := inOutage(t, clk, DeferSettings{})
	const pause = 3 * time.Second
	w, err := g.Enter(retry2, pause, clk.Now().Add(20*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	// The outage outlasts the pause; new calls keep failing, so the
	// retry's own time stays ahead of it.
	for range 200 {
		clk.advance(20 * time.Millisecond)
		g.Record(Attempt{Number: 1, Outcome: Failure})
		g.Tick()
		select {
		case <-w.Ready():
			t.Fatalf("decided in the outage: %v", w.err())
		default:
		}
	}
	back := clk.Now()
	g.Record(Attempt{Number: 1, Outcome: Success})
	for !clk.Now().After(back.Add(pause)) {
		select {
		case <-w.Ready():
			if a, err := w.Take(); a != admitRelease || err != nil {
				t.Fatalf("%v, %v after the return; want a release", a, err)
			}
			if went := clk.Now().Sub(back); went > releaseEvery+10*time.Millisecond {
				t.Fatalf("went %v after the return, want within %v", went, releaseEvery)
			}
			return
		default:
		}
		clk.advance(10 * time.Millisecond)
		g.Record(Attempt{Number: 1, Outcome: Success})
		g.Tick()
	}
	t.Fatalf("not gone %v after the return (its own time in the outage was the latest attempt plus %v)", clk.Now().Sub(back), pause)
}

package budget

import (
	"context"
	"errors"
	tune "github.com/stagger-go/stagger/internal/gatetune"
	"sync"
	"testing"
	"time"

	"github.com/stagger-go/stagger/criticality"
)

// TestRealTimeGateLeaveRacesEviction makes a waiter leave while a more
// critical retry evicts it from a full waiting room (the criticality
// rule), on real goroutines, many rounds. Each waiter must be counted out
// once: the waiting count ends at 0, and -race sees no unlocked access to
// the waiter's state.
func TestRealTimeGateLeaveRacesEviction(t *testing.T) {
	rounds := 2000
	if testing.Short() {
		rounds = 200
	}
	for round := range rounds {
		g, err := Deferring(&switchBudget{}, DeferSettings{MaxWaiting: 1})
		if err != nil {
			t.Fatal(err)
		}
		w, err := g.Enter(retryAt(criticality.Sheddable), time.Hour, time.Time{})
		if err != nil {
			t.Fatal(err)
		}
		start := make(chan struct{})
		var wg sync.WaitGroup
		wg.Add(2)
		go func() {
			defer wg.Done()
			<-start
			w.Leave()
		}()
		go func() {
			defer wg.Done()
			<-start
			if v, err := g.Enter(retryAt(criticality.Critical), time.Hour, time.Time{}); err == nil {
				v.Leave()
			}
		}()
		close(start)
		wg.Wait()
		w.Leave() // a second Leave does nothing
		if st := g.State(); st.Waiting != 0 {
			t.Fatalf("round %d: %d waiting after every waiter left, want 0", round, st.Waiting)
		}
	}
}

// TestRealTimeGateWaitersGiveUpUnderEviction runs callers that wait in a
// small waiting room and give up at random moments, while more critical
// retries evict the less critical and records wake them all: at the end
// nobody waits, and every admission is settled.
func TestRealTimeGateWaitersGiveUpUnderEviction(t *testing.T) {
	g, err := Deferring(&switchBudget{}, DeferSettings{MaxWaiting: 2})
	if err != nil {
		t.Fatal(err)
	}
	levels := []criticality.Level{criticality.Sheddable, criticality.SheddablePlus, criticality.Critical, criticality.CriticalPlus}
	var wg sync.WaitGroup
	for i := range 64 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range 20 {
				ctx, cancel := context.WithTimeout(context.Background(), time.Duration(1+(i*7+j)%5)*time.Millisecond)
				a, err := g.Wait(ctx, retryAt(levels[(i+j)%4]), time.Duration((i+j)%3)*time.Millisecond)
				cancel()
				if err == nil {
					g.Record(Attempt{Number: 2, Outcome: Failure, Admission: a})
				}
			}
		}()
	}
	for range 200 {
		g.Record(Attempt{Number: 1, Outcome: Failure})
		time.Sleep(100 * time.Microsecond)
	}
	wg.Wait()
	if st := g.State(); st.Waiting != 0 {
		t.Fatalf("%d waiting after every caller returned, want 0", st.Waiting)
	}
}

// TestGateLateProbeKeepsTheNewProbesSlot: a probe that reports after its
// slot expired (the settling rule), while a newer probe is out, is counted
// as an outcome but does not free the newer probe's slot: two probes are
// never out at once.
func TestGateLateProbeKeepsTheNewProbesSlot(t *testing.T) {
	clk := &manualClock{now: t0}
	g := inOutage(t, clk, DeferSettings{})
	waitForProbe := func() *Waiter {
		t.Helper()
		failures(g, tune.FutileEvery) // the futility rule lets the lone waiter wait
		w, err := g.Enter(retry2, 0, time.Time{})
		if err != nil {
			t.Fatal(err)
		}
		for range 100 {
			a, next, _ := w.Poll()
			if a == admitProbe {
				return w
			}
			if a != AdmitNone || next.IsZero() {
				t.Fatalf("Poll = %v, %v; want a probe in time", a, next)
			}
			clk.set(next)
		}
		t.Fatal("no probe after 100 polls")
		return nil
	}
	first := waitForProbe()
	firstLeft := clk.Now()
	first.Leave()
	// The first probe's call has no deadline: its slot expires
	// tune.ProbeGapMax after it went, and a second probe goes.
	clk.advance(tune.ProbeGapMax)
	second := waitForProbe()
	second.Leave()
	secondLeft := clk.Now()
	// The first probe reports now, late: it left before the second.
	clk.advance(time.Second)
	g.Record(Attempt{Number: 2, Outcome: Failure, Admission: admitProbe, Took: clk.Now().Sub(firstLeft)})
	failures(g, tune.FutileEvery)
	slotHeld := func() bool {
		g.mu.Lock()
		defer g.mu.Unlock()
		return g.st.pace.leased(clk.Now())
	}
	if !slotHeld() {
		t.Fatal("the first probe's late report freed the second probe's slot")
	}
	// Beside the probe out, a new retry of the lasting outage fails at once.
	if _, err := g.Enter(retry2, 0, time.Time{}); !errors.Is(err, ErrOutageLasting) {
		t.Fatalf("beside the second probe: enter = %v, want ErrOutageLasting", err)
	}
	// The second probe reports: the slot is free.
	g.Record(Attempt{Number: 2, Outcome: Failure, Admission: admitProbe, Took: clk.Now().Sub(secondLeft)})
	if slotHeld() {
		t.Fatal("after the second probe reported, its slot is still held")
	}
}

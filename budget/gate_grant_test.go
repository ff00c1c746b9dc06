package budget_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stagger-go/stagger/budget"
	"github.com/stagger-go/stagger/criticality"
)

// What the callers of a stress saw of their waits.
type seen struct {
	admitted, ended, turnedAway, left atomic.Uint64
}

// classify counts one Wait's outcome: admitted; turned away at the door
// (the sentinels themselves: the room full, an outage lasting); or ended
// after it began to wait (a rule of the gate, an eviction, the caller).
func (s *seen) classify(a budget.Admission, err error) {
	switch {
	case a != budget.AdmitNone:
		s.admitted.Add(1)
	case err == budget.ErrTooManyWaiting || err == budget.ErrOutageLasting:
		s.turnedAway.Add(1)
	default:
		s.ended.Add(1)
		if errors.Is(err, context.Canceled) || err == context.DeadlineExceeded {
			s.left.Add(1) // the caller's context: maybe before it began to wait
		}
	}
}

// Issue 62's defects 1, 2 and 8 by construction: 32 goroutines wait on a
// Backends' Gates (two targets, three methods, rooms of four, so that
// more critical retries evict, and callers that cancel or whose deadline
// comes), while others record successes and failures. Every wait is
// counted once, as what its caller saw: Deferred = DeferAdmitted +
// DeferGaveUp + Waiting, DeferAdmitted what the callers were admitted,
// DeferGaveUp the waits that ended otherwise, DeferTurnedAway the retries
// refused at the door. (An evicted waiter was admitted, a give-up counted
// twice, and the door's refusals counted as given up: 10 of 10 runs
// disagreed.)
func TestGateCountsEachWaitOnce(t *testing.T) {
	s := budget.DefaultSettings()
	s.Defer.MaxWaiting = 4
	bs, err := budget.NewBackends(s)
	if err != nil {
		t.Fatal(err)
	}
	targets, methods := []string{"a:1", "b:1"}, []string{"/s/A", "/s/B", "/s/C"}
	levels := []criticality.Level{criticality.Sheddable, criticality.SheddablePlus, criticality.Critical, criticality.CriticalPlus}
	var (
		got  seen
		wg   sync.WaitGroup
		stop atomic.Bool
	)
	for i := range 32 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rnd := rand.New(rand.NewPCG(uint64(i), 62))
			for n := 0; n < 300 && !stop.Load(); n++ {
				b := bs.Get(targets[rnd.IntN(2)], methods[rnd.IntN(3)])
				if i%4 == 0 {
					// A recorder: the server fails or serves.
					o := budget.Failure
					if rnd.IntN(3) == 0 {
						o = budget.Success
					}
					b.Record(budget.Attempt{Number: 1 + rnd.IntN(2), Outcome: o})
					time.Sleep(time.Duration(rnd.IntN(500)) * time.Microsecond)
					continue
				}
				ctx, cancel := context.WithTimeout(context.Background(), time.Duration(1+rnd.IntN(20))*time.Millisecond)
				if rnd.IntN(4) == 0 {
					after := time.Duration(rnd.IntN(3000)) * time.Microsecond
					go func() {
						time.Sleep(after)
						cancel()
					}()
				}
				r := budget.Request{Number: 2, Criticality: levels[rnd.IntN(4)]}
				a, err := b.(budget.Deferrer).Wait(ctx, r, time.Duration(rnd.IntN(2000))*time.Microsecond)
				cancel()
				got.classify(a, err)
				if a != budget.AdmitNone {
					o := budget.Failure
					if rnd.IntN(2) == 0 {
						o = budget.Success
					}
					b.Record(budget.Attempt{Number: 2, Outcome: o, Admission: a})
				}
			}
		}()
	}
	wg.Wait()
	var sum budget.State
	for _, st := range bs.States() {
		if st.Method == "" {
			continue
		}
		if st.Deferred != st.DeferAdmitted+st.DeferGaveUp+uint64(st.Waiting) {
			t.Errorf("%s %s: deferred %d, admitted %d + gave up %d + waiting %d", st.Target, st.Method, st.Deferred, st.DeferAdmitted, st.DeferGaveUp, st.Waiting)
		}
		sum.Waiting += st.Waiting
		sum.DeferAdmitted += st.DeferAdmitted
		sum.DeferGaveUp += st.DeferGaveUp
		sum.DeferTurnedAway += st.DeferTurnedAway
	}
	// A caller whose context ended before Wait began to wait was never
	// deferred: the gates count each of the other ends once.
	want := fmt.Sprintf("waiting 0, admitted %d, turned away %d", got.admitted.Load(), got.turnedAway.Load())
	if have := fmt.Sprintf("waiting %d, admitted %d, turned away %d", sum.Waiting, sum.DeferAdmitted, sum.DeferTurnedAway); have != want {
		t.Errorf("the Gates counted %s; the callers saw %s", have, want)
	}
	if ended := got.ended.Load(); sum.DeferGaveUp > ended || sum.DeferGaveUp < ended-got.left.Load() {
		t.Errorf("the Gates counted %d waits given up; the callers saw %d end, %d of them by their context", sum.DeferGaveUp, ended, got.left.Load())
	}
	if got.admitted.Load() == 0 || got.ended.Load() == 0 || got.turnedAway.Load() == 0 {
		t.Errorf("the stress made no %s", want)
	}
}

// Issue 62's defect 3: nothing foreign runs under the gate's lock, the
// clock included. A clock that reads the gate's State (which takes the
// lock) deadlocks any path that reads it under the lock: Enter, the grant
// loop, Take, the one give-back path (a caller that left after its
// admission), Leave, Record, Allow.
func TestGateReadsTheClockUnlocked(t *testing.T) {
	var g *budget.Gate
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	clock := func() time.Time {
		if g != nil {
			g.State()
		}
		return now
	}
	tokens, err := budget.New(budget.Settings{Kind: budget.KindTokenBucket, Defer: budget.DeferSettings{Mode: budget.DeferOff}})
	if err != nil {
		t.Fatal(err)
	}
	g, err = budget.Deferring(tokens, budget.DeferSettings{}, budget.WithClock(clock))
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		g.Record(budget.Attempt{Number: 1, Outcome: budget.Failure})
		g.Allow(budget.Request{Number: 2})
		w, err := g.Enter(budget.Request{Number: 2}, 0, time.Time{})
		if err != nil {
			t.Error(err)
			return
		}
		g.Tick()
		w.Leave()
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		g.Wait(ctx, budget.Request{Number: 2}, 0)
		w, _ = g.Enter(budget.Request{Number: 2}, time.Millisecond, time.Time{})
		now = now.Add(time.Second)
		g.Tick()
		select {
		case <-w.Ready():
			w.Take()
		default:
			w.Leave()
		}
		g.Record(budget.Attempt{Number: 2, Outcome: budget.Success})
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("the gate read its clock under its lock: deadlock")
	}
}

// A stress that cannot fail says nothing: the classify rules, checked.
func TestSeenClassifies(t *testing.T) {
	var s seen
	s.classify(budget.AdmitBudget, nil)
	s.classify(budget.AdmitNone, budget.ErrTooManyWaiting)
	s.classify(budget.AdmitNone, fmt.Errorf("wrapped: %w", budget.ErrTooManyWaiting)) // an eviction
	s.classify(budget.AdmitNone, context.Canceled)
	if s.admitted.Load() != 1 || s.turnedAway.Load() != 1 || s.ended.Load() != 2 {
		t.Fatalf("classify: %d admitted, %d turned away, %d ended", s.admitted.Load(), s.turnedAway.Load(), s.ended.Load())
	}
}

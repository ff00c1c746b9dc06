//go:build go1.25

// synctest needs the Go 1.23 timer channels, and go.mod says go 1.22.
//
//go:debug asynctimerchan=0

package budget

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"
)

func TestGateWaitEnds(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		// A probe out, so nothing admits the waits below.
		g := outageProbed(t, DeferSettings{MaxWait: 3 * time.Second})

		start := time.Now()
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_, err := g.Wait(ctx, retry2, 0)
		var held interface{ HeldBy() string }
		if !errors.Is(err, context.DeadlineExceeded) || !errors.As(err, &held) || held.HeldBy() != heldOutage {
			// The end rule ends it at the deadline, as the context's
			// timer does: whichever comes first, the error says what held
			// the wait.
			t.Fatalf("Wait past the deadline: %v, want the deadline's end, held by the outage", err)
		}
		if d := time.Since(start); d != time.Second {
			t.Fatalf("Wait returned after %v, want %v (the deadline: no attempt of the method was timed)", d, time.Second)
		}

		start = time.Now()
		if _, err := g.Wait(context.Background(), retry2, 0); !errors.Is(err, errWaitLimit) {
			t.Fatalf("Wait without a deadline: %v", err)
		}
		if d := time.Since(start); d != 3*time.Second {
			t.Fatalf("Wait returned after %v, want MaxWait", d)
		}
		// MaxWait bounds a call's waits in all (issue 63): a call that
		// waited 2 s already waits 1 s more.
		g = outageProbed(t, DeferSettings{MaxWait: 3 * time.Second})
		start = time.Now()
		if _, err := g.Wait(context.Background(), Request{Number: 3, Waited: 2 * time.Second}, 0); !errors.Is(err, errWaitLimit) {
			t.Fatalf("Wait without a deadline, having waited 2s: %v", err)
		}
		if d := time.Since(start); d != time.Second {
			t.Fatalf("Wait, having waited 2s, returned after %v, want 1s (MaxWait in all)", d)
		}
		start = time.Now()
		if _, err := g.Wait(context.Background(), Request{Number: 3, Waited: time.Hour}, 0); !errors.Is(err, errWaitLimit) || time.Since(start) != 0 {
			t.Fatalf("Wait without a deadline, having waited an hour: %v after %v, want the limit at once", err, time.Since(start))
		}

		// A young outage (the futility rule fails new retries at once in
		// one that outlived their waits).
		g = outageProbed(t, DeferSettings{MaxWait: 3 * time.Second})
		ctx, cancel = context.WithCancel(context.Background())
		time.AfterFunc(50*time.Millisecond, cancel)
		start = time.Now()
		if _, err := g.Wait(ctx, retry2, 0); !errors.Is(err, context.Canceled) {
			t.Fatalf("Wait cancelled: %v", err)
		}
		if d := time.Since(start); d != 50*time.Millisecond {
			t.Fatalf("Wait returned %v after the cancel", d-50*time.Millisecond)
		}

		// News wakes a waiter: the probe's success brings releases.
		done := make(chan Admission)
		go func() {
			a, _ := g.Wait(context.Background(), retry2, 0)
			done <- a
		}()
		synctest.Wait()
		g.Record(Attempt{Number: 2, Outcome: Success, Admission: admitProbe})
		for range 3 {
			g.Record(Attempt{Number: 1, Outcome: Success})
		}
		if a := <-done; a != admitRelease {
			t.Fatalf("Wait = %v, want a release", a)
		}
		if st := g.State(); st.Waiting != 0 {
			t.Fatalf("%d still waiting", st.Waiting)
		}
	})
}

// A wait the gate does not hold ends at its pause and a tenth, or probes:
// a process whose server never served, and whose retry failed, sends its
// call's last attempt unpaid to learn whether retries heal (without it, a
// process whose budget refuses its retries never learns: issue 62's quiet
// process); once that probe failed, the next wait ends (the hold and
// hopeless rules).
func TestGateWaitNotHeld(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g, err := Deferring(&switchBudget{}, DeferSettings{})
		if err != nil {
			t.Fatal(err)
		}
		g.Record(Attempt{Number: 1, Outcome: Failure})
		g.Record(Attempt{Number: 2, Outcome: Failure})
		start := time.Now()
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		if a, err := g.Wait(ctx, Request{Number: 2, Last: true}, 100*time.Millisecond); a != admitProbe || err != nil {
			t.Fatalf("Wait: %v, %v; want the probe that learns", a, err)
		}
		if d := time.Since(start); d != 100*time.Millisecond {
			t.Fatalf("the probe went after %v, want its pause (a call's last attempt probes at once)", d)
		}
		g.Record(Attempt{Number: 2, Outcome: Failure, Admission: admitProbe, Final: true})
		start = time.Now()
		if _, err := g.Wait(ctx, retry2, 100*time.Millisecond); !errors.Is(err, errWaitEnded) {
			t.Fatalf("Wait: %v, want errWaitEnded", err)
		}
		if d := time.Since(start); d != 110*time.Millisecond {
			t.Fatalf("Wait returned after %v, want the pause and a tenth", d)
		}
		if st := g.State(); st.Waiting != 0 || st.DeferGaveUp != 1 || st.DeferAdmitted != 1 {
			t.Fatalf("State = %+v, want none waiting, 1 admitted, 1 given up", st)
		}
	})
}

// A fresh process, which no retry has told whether retrying heals, lets
// one waiting retry go as a probe at its pause, rather than end it at its
// pause and a tenth: otherwise a process whose first call's retry got an
// answer that is not retried would never learn (the probe and hold
// rules), and a first call refused with a pushback waited for its last
// chance.
func TestGateFreshProcessProbes(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g, err := Deferring(&switchBudget{}, DeferSettings{})
		if err != nil {
			t.Fatal(err)
		}
		g.Record(Attempt{Number: 1, Outcome: Failure})
		start := time.Now()
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		adm, err := g.Wait(ctx, retry2, 100*time.Millisecond)
		if err != nil || adm != admitProbe {
			t.Fatalf("Wait = %v, %v; want a probe", adm, err)
		}
		if d := time.Since(start); d != 100*time.Millisecond {
			t.Fatalf("Wait returned after %v, want the pause", d)
		}
		g.Record(Attempt{Number: 2, Outcome: Success, Admission: adm, Final: true})
		if st := g.State(); st.Waiting != 0 || st.DeferAdmitted != 1 {
			t.Fatalf("State = %+v, want none waiting, 1 admitted", st)
		}
	})
}

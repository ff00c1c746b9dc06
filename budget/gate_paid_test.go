package budget

import (
	"testing"
	"time"

	tune "github.com/stagger-go/stagger/internal/gatetune"
)

// A fresh process whose server fails first attempts: while the retry the
// budget paid for is out, another call's waiting retry sends no unpaid
// probe beside it (at p = 1 and a thousand processes, each sent such
// probes: `stagger sim failrate -p 1 -clients 1000` 1.104, the budget alone
// 1.100) but waits for what the paid retry tells: a success lets it go
// (the server serves retries); after a failure it goes as the probe that
// learns whether retries heal (no probe failed yet: else a process whose
// budget refuses its retries never learns it) once the backend gave no
// news for tune.QuietGapMax: a failed retry after failed first attempts is
// the evidence of an outage, and the wait is held meanwhile (the new
// calls' first attempts probe); once that probe fails, a wait no rule lets
// go ends at its hold time (TestGateAdmissions).
func TestGateWaitsForThePaidRetry(t *testing.T) {
	for _, tt := range []struct {
		name    string
		outcome Outcome
		want    Admission
	}{
		{"the paid retry succeeds: retries heal", Success, admitHeal},
		{"the paid retry fails: held, then the probe that learns", Failure, AdmitNone},
		{"the paid retry gets a non-retryable answer", Other, admitProbe},
	} {
		t.Run(tt.name, func(t *testing.T) {
			clk := &manualClock{now: t0}
			b := &switchBudget{}
			g := newGate(t, b, DeferSettings{}, clk)
			g.Record(Attempt{Number: 1, Outcome: Failure})
			b.open.Store(true)
			if !g.Allow(retry2) {
				t.Fatal("the budget's retry was refused")
			}
			b.open.Store(false)
			g.Record(Attempt{Number: 1, Outcome: Failure}) // another call's
			const pause = 100 * time.Millisecond
			w, err := g.Enter(retry2, pause, time.Time{})
			if err != nil {
				t.Fatal(err)
			}
			defer w.Leave()
			clk.advance(2 * pause) // past its hold time
			next := poll(t, w, AdmitNone)
			if w.err() != nil || next.IsZero() {
				t.Fatalf("the wait ended (%v) or waits for nothing while the paid retry is out", w.err())
			}
			g.Record(Attempt{Number: 2, Outcome: tt.outcome, Final: true})
			if tt.want == AdmitNone {
				answered := clk.Now()
				if next := poll(t, w, AdmitNone); w.err() != nil || !next.Equal(answered.Add(tune.QuietGapMax)) {
					t.Fatalf("after the paid retry failed: Err %v, next %v after its answer; want held, tune.QuietGapMax", w.err(), next.Sub(answered))
				}
				clk.set(answered.Add(tune.QuietGapMax))
				poll(t, w, admitProbe)
				return
			}
			select {
			case <-w.Ready():
			default:
				t.Fatal("the paid retry's answer did not wake the wait it changed")
			}
			poll(t, w, tt.want)
		})
	}
}

// A paid retry that never reports (its caller gave up before sending it)
// holds nothing for long: a second later the waiting retry probes.
func TestGatePaidRetryLostIsForgotten(t *testing.T) {
	clk := &manualClock{now: t0}
	b := &switchBudget{}
	g := newGate(t, b, DeferSettings{}, clk)
	g.Record(Attempt{Number: 1, Outcome: Failure})
	b.open.Store(true)
	g.Allow(retry2)
	b.open.Store(false)
	w, err := g.Enter(retry2, 0, time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Leave()
	next := poll(t, w, AdmitNone)
	if next.After(t0.Add(time.Second)) {
		t.Fatalf("asked again only at %v", next.Sub(t0))
	}
	clk.set(next)
	poll(t, w, admitProbe)
}

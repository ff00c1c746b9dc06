package budget

import (
	"math"
	"reflect"
	"testing"
	"time"

	tune "github.com/stagger-go/stagger/internal/gatetune"
)

// TestGateReportSteersTheReturn: the load report before an outage sets the
// return's pace (the room it left, by this process's share of the calls),
// the report on the answer that ends the outage does not replace it (an
// empty backend says nothing of the room its load will take), and the
// reports during the return cut the pace (one of a full backend halves the
// rate over a second).
func TestGateReportSteersTheReturn(t *testing.T) {
	const u0 = 0.4
	s := newGateState(t0, func() float64 { return 0 })
	s.observe(t0, Attempt{Number: 1, Outcome: Failure, Load: Load{Utilization: u0, Reported: true}}, false)
	// 8 calls held over a 10 s outage: one came each 1.25 s.
	s.phase, s.streak, s.streakAt, s.pace.entered, s.pace.down = phaseOutage, 2, t0, 8, true
	back := t0.Add(10 * time.Second)
	s.observe(back, Attempt{Number: 2, Outcome: Success, Admission: admitProbe, Load: Load{Utilization: 0.02, Reported: true}}, false)
	if s.pace.backAt != back || s.pace.util != 1+u0 {
		t.Fatalf("return at %v, report kept %v; want %v and %v", s.pace.backAt, s.pace.util, back, 1+u0)
	}
	const target = tune.TargetUtilization
	want := 1.25 * u0 / (target - u0) // seconds between releases
	if got := s.pace.every.Seconds(); math.Abs(got-want) > 1e-6 {
		t.Errorf("the return's pace: one each %.4f s, want %.4f s", got, want)
	}
	every := s.pace.every
	s.observe(back.Add(time.Second), Attempt{Number: 1, Outcome: Failure, Overload: true, Load: Load{Utilization: 1, Reported: true}}, false)
	if got := s.pace.every; got != 2*every {
		t.Errorf("after a report of a full backend a second on: one each %v, want %v", got, 2*every)
	}
}

// TestGateFastPathHearsReports: a settled Gate's lock-free Record of a
// success keeps its report for the next Record that locks.
func TestGateFastPathHearsReports(t *testing.T) {
	clk := &manualClock{now: t0}
	g := newGate(t, &switchBudget{}, DeferSettings{}, clk)
	for !g.settled.Load() {
		clk.advance(tune.Calm)
		g.Record(Attempt{Number: 1, Outcome: Success})
	}
	g.Record(Attempt{Number: 1, Outcome: Success, Load: Load{Utilization: 0.3, Reported: true}})
	g.Record(Attempt{Number: 1, Outcome: Failure})
	g.mu.Lock()
	defer g.mu.Unlock()
	if got := g.st.pace.util; got != 1.3 {
		t.Errorf("the report the fast path heard: %v, want 1.3", got-1)
	}
}

// TestGateMalformedReportChangesNothing: answers whose report could not be
// read leave a Gate exactly as answers without one do, through an outage
// and its return.
func TestGateMalformedReportChangesNothing(t *testing.T) {
	run := func(l Load) gateState {
		s := newGateState(t0, func() float64 { return 0.5 })
		now := t0
		for i := range 40 {
			now = now.Add(250 * time.Millisecond)
			a := Attempt{Number: 1, Outcome: Success, Load: l}
			switch {
			case i >= 8 && i < 24:
				a.Outcome = Failure
			case i >= 24 && i%3 == 0:
				a.Number, a.Admission = 2, admitRelease
			case i%5 == 0:
				a.Outcome, a.Overload = Failure, true
			}
			s.observe(now, a, false)
			if a.Outcome == Failure && a.Number == 1 {
				s.enter(now, 100*time.Millisecond, time.Second)
			}
		}
		s.rand = nil
		return s
	}
	if a, b := run(Load{}), run(Load{Malformed: true}); !reflect.DeepEqual(a, b) {
		t.Errorf("a malformed report changed the Gate:\n%+v\n%+v", a, b)
	}
}

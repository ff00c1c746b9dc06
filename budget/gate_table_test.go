package budget

import (
	"testing"
	"time"
)

// stateIn returns a gateState in phase p at t0, as the Gate's own
// transitions leave it: failing after one failure, an outage after
// outageStreak, recovering after an outage and a success.
func stateIn(p phase) gateState {
	s := newGateState(t0, func() float64 { return 0.5 })
	if p != phaseQuiet {
		// Retries are known not to heal: failures in a row are an outage.
		s.healN = healMinSamples
	}
	fail := Attempt{Number: 1, Outcome: Failure}
	switch p {
	case phaseFailing:
		s.observe(t0, fail)
	case phaseOutage:
		for range outageStreak {
			s.observe(t0, fail)
		}
	case phaseRecovering:
		for range outageStreak {
			s.observe(t0, fail)
		}
		s.observe(t0, Attempt{Number: 1, Outcome: Success})
	}
	if s.phase != p {
		panic("stateIn: could not reach " + p.String())
	}
	return s
}

// TestGateTransitions drives every phase through every event, with no
// goroutine and no clock but the times passed in.
func TestGateTransitions(t *testing.T) {
	success := Attempt{Number: 1, Outcome: Success}
	failure := Attempt{Number: 1, Outcome: Failure}
	other := Attempt{Number: 1, Outcome: Other}
	probeOK := Attempt{Number: 2, Outcome: Success, Admission: AdmitProbe}
	probeFailed := Attempt{Number: 2, Outcome: Failure, Admission: AdmitProbe}
	events := []struct {
		name string
		do   func(s *gateState)
	}{
		{"success", func(s *gateState) { s.observe(t0, success) }},
		{"failure", func(s *gateState) { s.observe(t0, failure) }},
		{"other", func(s *gateState) { s.observe(t0, other) }},
		{"probe succeeded", func(s *gateState) { s.observe(t0, probeOK) }},
		{"probe failed", func(s *gateState) { s.observe(t0, probeFailed) }},
		{"enter", func(s *gateState) { s.enter(t0, 100*time.Millisecond) }},
		{"forget", func(s *gateState) { s.forget(t0) }},
	}
	// want[from][event] is the phase after it.
	want := map[phase][]phase{
		//                success          failure       other            probe ok         probe failed  enter         forget
		phaseQuiet:      {phaseQuiet, phaseFailing, phaseQuiet, phaseQuiet, phaseFailing, phaseFailing, phaseQuiet},
		phaseFailing:    {phaseRecovering, phaseOutage, phaseFailing, phaseRecovering, phaseOutage, phaseFailing, phaseQuiet},
		phaseOutage:     {phaseRecovering, phaseOutage, phaseOutage, phaseRecovering, phaseOutage, phaseOutage, phaseQuiet},
		phaseRecovering: {phaseRecovering, phaseFailing, phaseRecovering, phaseRecovering, phaseFailing, phaseFailing, phaseQuiet},
	}
	for from, row := range want {
		for i, ev := range events {
			s := stateIn(from)
			ev.do(&s)
			if s.phase != row[i] {
				t.Errorf("%v, %s: phase %v, want %v", from, ev.name, s.phase, row[i])
			}
		}
	}
}

// The side effects that go with the phases: what an outage does to the
// credits, what a success after one gives, what forget keeps.
func TestGateTransitionEffects(t *testing.T) {
	s := stateIn(phaseOutage)
	if s.credits != 0 || s.streak != outageStreak {
		t.Fatalf("outage: credits %v, streak %d", s.credits, s.streak)
	}
	// A first attempt that finds the server back: a credit drawn at random.
	s.observe(t0, Attempt{Number: 1, Outcome: Success})
	if s.credits != 0.5+releaseGainStart {
		t.Fatalf("after an outage, credits %v, want the draw plus one success's gain", s.credits)
	}
	// A deferred retry that finds it back: a whole credit at once.
	s = stateIn(phaseOutage)
	s.probesOut = 1
	s.observe(t0, Attempt{Number: 2, Outcome: Success, Admission: AdmitProbe})
	if s.credits != 1 || s.probesOut != 0 || s.gain != 2*releaseGainStart {
		t.Fatalf("probe found the server back: credits %v, probes out %d, gain %v", s.credits, s.probesOut, s.gain)
	}
	// forget after an outage also draws the first credit.
	s = stateIn(phaseOutage)
	s.forget(t0.Add(time.Second))
	if s.credits != 0.5 || !s.creditAt.Equal(t0.Add(time.Second)) || s.streak != 0 || s.probeGap != 0 {
		t.Fatalf("forget after an outage: %+v", s)
	}
}

// Every admission a rule can give, from every phase, and the slot it takes.
func TestGateAdmissions(t *testing.T) {
	deadline := t0.Add(2 * time.Second)
	tests := []struct {
		name string
		s    gateState
		at   time.Time
		w    waiterView
		want Admission
		next time.Time
	}{
		{"quiet, credit due", withCredits(stateIn(phaseQuiet), 1), t0, waiterView{}, AdmitRelease, time.Time{}},
		{"recovering, half a credit", withCredits(stateIn(phaseRecovering), 0.5), t0, waiterView{}, AdmitNone, t0.Add(500 * time.Millisecond)},
		{"failing, before the quiet time", stateIn(phaseFailing), t0.Add(50 * time.Millisecond), waiterView{pause: 100 * time.Millisecond}, AdmitNone, t0.Add(100 * time.Millisecond)},
		{"failing, quiet time over", stateIn(phaseFailing), t0.Add(100 * time.Millisecond), waiterView{pause: 100 * time.Millisecond}, AdmitProbe, time.Time{}},
		{"outage, last attempt waits for its last chance", stateIn(phaseOutage), t0.Add(time.Second), waiterView{pause: 100 * time.Millisecond, deadline: deadline, last: true}, AdmitNone, deadline.Add(-lastChanceLead)},
		{"outage, last chance", stateIn(phaseOutage), deadline.Add(-lastChanceLead), waiterView{pause: 100 * time.Millisecond, deadline: deadline, last: true}, AdmitLast, time.Time{}},
		{"outage, probe out", withProbeOut(stateIn(phaseOutage), t0.Add(5*time.Second)), t0.Add(time.Second), waiterView{}, AdmitNone, t0.Add(5 * time.Second)},
		{"outage, probe slot expired", withProbeOut(stateIn(phaseOutage), t0.Add(5*time.Second)), t0.Add(5 * time.Second), waiterView{}, AdmitProbe, time.Time{}},
	}
	for _, tt := range tests {
		s := tt.s
		got, next := s.candidate(tt.at, tt.w)
		if got != tt.want || !next.Equal(tt.next) {
			t.Errorf("%s: candidate = %v, next %v; want %v, next %v", tt.name, got, next.Sub(t0), tt.want, tt.next.Sub(t0))
			continue
		}
		if got == AdmitNone {
			continue
		}
		credits := s.credits
		s.admit(tt.at, tt.w, got)
		switch {
		case got == AdmitRelease && s.credits != credits-1:
			t.Errorf("%s: a release left credits %v, want %v", tt.name, s.credits, credits-1)
		case got != AdmitRelease && s.probesOut != 1:
			t.Errorf("%s: a probe left %d out, want 1", tt.name, s.probesOut)
		}
	}
}

func withCredits(s gateState, c float64) gateState {
	s.credits, s.creditAt = c, t0
	return s
}

func withProbeOut(s gateState, until time.Time) gateState {
	s.probesOut, s.probeUntil = 1, until
	return s
}

// A probe whose attempt never reports (its caller abandoned it) frees its
// slot once its call's deadline has passed: the next outage gets probes.
func TestGateSettlesALostProbe(t *testing.T) {
	clk := &manualClock{now: t0}
	g := newGate(t, &switchBudget{}, DeferSettings{}, clk)
	deadline := t0.Add(time.Second)
	w, err := g.Enter(retry2, 0, deadline)
	if err != nil {
		t.Fatal(err)
	}
	poll(t, w, AdmitProbe)
	w.Leave() // and its attempt is never recorded

	// Much later, a new outage; a new call's retry waits.
	clk.advance(time.Minute)
	g.Record(Attempt{Number: 1, Outcome: Failure})
	g.Record(Attempt{Number: 1, Outcome: Failure})
	w2, err := g.Enter(retry2, 0, time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	defer w2.Leave()
	if a, _ := w2.Poll(); a != AdmitProbe {
		t.Fatalf("the new outage's retry: %v, want a probe (the lost one's slot expired)", a)
	}
}

// Rule 0: retries that heal go after their pause; a sign of overload, an
// outage, or a wait begun in an outage keeps them to the other rules.
func TestGateHeals(t *testing.T) {
	retryFailed := Attempt{Number: 2, Outcome: Failure}
	retryWon := Attempt{Number: 3, Outcome: Success}
	flaky := func() gateState {
		s := newGateState(t0, func() float64 { return 0.5 })
		s.learn(t0, retryFailed)
		s.learn(t0, retryWon)
		s.observe(t0, Attempt{Number: 1, Outcome: Failure})
		return s
	}
	s := flaky()
	// Two failures in a row are no outage while retries heal.
	s.observe(t0, Attempt{Number: 2, Outcome: Failure})
	if s.phase != phaseFailing {
		t.Fatalf("flaky server, two failures in a row: %v, want failing", s.phase)
	}
	w := waiterView{pause: 10 * time.Millisecond, deadline: t0.Add(2 * time.Second), last: true, healable: true}
	if a, _ := s.candidate(t0, w); a != AdmitHeal {
		t.Fatalf("flaky server: %v, want heal", a)
	}
	if a, _ := s.candidate(t0, waiterView{healable: false}); a == AdmitHeal {
		t.Fatal("a retry that began to wait in an outage was healed")
	}
	s = flaky()
	s.learn(t0, Attempt{Number: 1, Outcome: Failure, Overload: true})
	if a, _ := s.candidate(t0.Add(overloadHold-time.Millisecond), w); a == AdmitHeal {
		t.Fatal("healed within overloadHold of a sign of overload")
	}
	if a, _ := s.candidate(t0.Add(overloadHold), w); a != AdmitHeal {
		t.Fatalf("after overloadHold: %v, want heal", a)
	}
	// A down server: retries never succeed.
	s = newGateState(t0, func() float64 { return 0.5 })
	for range healWindow {
		s.learn(t0, retryFailed)
	}
	s.observe(t0, Attempt{Number: 1, Outcome: Failure})
	if a, _ := s.candidate(t0, w); a == AdmitHeal {
		t.Fatal("healed retries of a server whose retries all fail")
	}
	// Hedges and first attempts are no evidence.
	s = newGateState(t0, func() float64 { return 0.5 })
	s.learn(t0, Attempt{Number: 2, Outcome: Success, Hedge: true})
	s.learn(t0, Attempt{Number: 1, Outcome: Success})
	if s.healN != 0 {
		t.Fatalf("hedges and first attempts counted as retries: %d", s.healN)
	}
}

// Rule 5: after a sign of overload, a retry after a per-attempt timeout is
// refused for overloadHold (the interceptors let the slow attempt run on).
func TestGateRefusesTimeoutRetriesUnderOverload(t *testing.T) {
	clk := &manualClock{now: t0}
	open := &switchBudget{}
	open.open.Store(true)
	g := newGate(t, open, DeferSettings{}, clk)
	afterTimeout := Request{Number: 2, AfterTimeout: true}
	if !g.Allow(afterTimeout) {
		t.Fatal("refused a timeout retry with no sign of overload")
	}
	g.Record(Attempt{Number: 1, Outcome: Failure, Overload: true})
	if g.Allow(afterTimeout) {
		t.Fatal("admitted a timeout retry right after a sign of overload")
	}
	if !g.Allow(retry2) {
		t.Fatal("refused a retry after a plain failure")
	}
	clk.advance(overloadHold)
	if !g.Allow(afterTimeout) {
		t.Fatal("still refusing timeout retries overloadHold after the sign")
	}
	// A sign recorded on the fast path (an Other outcome) counts too.
	g.Record(Attempt{Number: 1, Outcome: Other, Overload: true})
	if g.Allow(afterTimeout) {
		t.Fatal("a sign of overload on the fast path was missed")
	}
}

// Failures in a row make an outage only once retries are known not to
// heal: a fresh process does not take a flaky server for a down one before
// a retry had its chance.
func TestGateOutageNeedsEvidence(t *testing.T) {
	s := newGateState(t0, func() float64 { return 0.5 })
	for range outageStreak + 1 {
		s.observe(t0, Attempt{Number: 1, Outcome: Failure})
	}
	if s.phase != phaseFailing {
		t.Fatalf("no retry recorded yet: %v, want failing", s.phase)
	}
	s.observe(t0, Attempt{Number: 2, Outcome: Failure})
	s.observe(t0, Attempt{Number: 3, Outcome: Failure})
	if s.phase != phaseOutage {
		t.Fatalf("two retries failed: %v, want outage", s.phase)
	}
}

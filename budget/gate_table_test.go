package budget

import (
	tune "github.com/stagger-go/stagger/internal/gatetune"
	"math"
	"reflect"
	"testing"
	"time"
)

// downState is a gateState at t0 whose server served for tune.Calm and
// whose latest calls that retried were none healed: failures in a row
// make an outage (the outage and overload rules).
func downState() gateState {
	s := newGateState(t0, func() float64 { return 0.5 })
	s.ev.calls, s.ev.seen, s.ev.lastFail = 1<<tune.HealWindow, true, t0.Add(-tune.Calm)
	return s
}

// stateIn returns a gateState in phase p at t0, as the Gate's own
// transitions leave it: failing after one failure, an outage after
// tune.Evidence, recovering after an outage and a success.
func stateIn(p phase) gateState {
	s := newGateState(t0, func() float64 { return 0.5 })
	if p != phaseQuiet {
		s = downState()
	}
	fail := Attempt{Number: 1, Outcome: Failure}
	switch p {
	case phaseFailing:
		s.observe(t0, fail, false)
	case phaseOutage:
		for range tune.Evidence {
			s.observe(t0, fail, false)
		}
	case phaseRecovering:
		for range tune.Evidence {
			s.observe(t0, fail, false)
		}
		s.observe(t0, Attempt{Number: 1, Outcome: Success}, false)
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
	probeOK := Attempt{Number: 2, Outcome: Success, Admission: admitProbe}
	probeFailed := Attempt{Number: 2, Outcome: Failure, Admission: admitProbe}
	events := []struct {
		name string
		do   func(s *gateState)
	}{
		{"success", func(s *gateState) { s.observe(t0, success, false) }},
		{"failure", func(s *gateState) { s.observe(t0, failure, false) }},
		{"other", func(s *gateState) { s.observe(t0, other, false) }},
		{"probe succeeded", func(s *gateState) { s.observe(t0, probeOK, false) }},
		{"probe failed", func(s *gateState) { s.observe(t0, probeFailed, false) }},
		{"enter", func(s *gateState) { s.enter(t0, 100*time.Millisecond, 0) }},
		{"forget", func(s *gateState) { s.observe(t0, Attempt{Number: 1, Outcome: Success}, true) }},
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
	if c := s.pace.credits(t0); !near(c, 0) || s.streak != tune.Evidence {
		t.Fatalf("outage: credits %v, streak %d", c, s.streak)
	}
	// A first attempt that finds the server back a second later: a credit
	// drawn at random, of the return's pace (four held: paced).
	s.pace.entered = tune.BackMinHeld
	s.observe(t0.Add(time.Second), Attempt{Number: 1, Outcome: Success}, false)
	if c := s.pace.credits(t0.Add(time.Second)); !near(c, 0.5+tune.ReleaseGainStart) || s.pace.backAt != t0.Add(time.Second) {
		t.Fatalf("after an outage, credits %v, want the draw plus one success's gain", c)
	}
	// A deferred retry that finds it back: a whole credit at once.
	s = stateIn(phaseOutage)
	s.pace.until = t0.Add(time.Hour)
	s.observe(t0, Attempt{Number: 2, Outcome: Success, Admission: admitProbe}, false)
	if c := s.pace.credits(t0); c != 1 || s.pace.leased(t0) || s.pace.gain != 2*tune.ReleaseGainStart {
		t.Fatalf("probe found the server back: credits %v, slot held %v, gain %v", c, s.pace.leased(t0), s.pace.gain)
	}
	// forget after an outage also draws the first credit.
	s = stateIn(phaseOutage)
	s.observe(t0.Add(time.Second), Attempt{Number: 1, Outcome: Success}, true)
	if c := s.pace.credits(t0.Add(time.Second)); !near(c, 0.5) || s.streak != 0 || s.pace.gap != 0 {
		t.Fatalf("forget after an outage: %+v", s)
	}
}

// waiting is the view of a retry that began to wait at t0 with pause.
func waiting(pause time.Duration, deadline time.Time, last bool) waiterView {
	return waiterView{Request: Request{Last: last}, pause: pause, deadline: deadline, holdAt: t0.Add(pause + time.Duration(tune.HoldSlack*float64(pause)))}
}

// began is w, begun to wait at since (its hold time as waiting set it).
func began(w waiterView, since time.Time) waiterView {
	w.since = since
	return w
}

// numbered is w, the retry number n.
func numbered(w waiterView, n int) waiterView {
	w.Number = n
	return w
}

// heldThrough is the view of a retry the gate held through an outage that
// ended at t0.
func heldThrough(pause time.Duration, deadline time.Time) waiterView {
	// Its share of the time left drawn as 0: back at its pause.
	return waiterView{pause: pause, deadline: deadline, holdAt: t0.Add(-time.Second), heldBy: heldOutage}
}

// The release rule, after an outage: a wait held through it whose call has a
// deadline goes back its pause after the recovery and then the share it
// drew of what its deadline leaves before its last chance, a second at
// most: the calls held together go back spread over that time, not
// together, and none long after the server's return.
func TestGateBackSpread(t *testing.T) {
	const pause = 100 * time.Millisecond
	deadline := t0.Add(2 * time.Second)
	s := stateIn(phaseRecovering) // back at t0; draws 0.5
	for _, tc := range []struct {
		w    waiterView
		want time.Time
	}{
		{heldThrough(pause, deadline), t0},
		{waiterView{pause: pause, deadline: deadline, holdAt: t0.Add(-time.Second), heldBy: heldOutage, spread: 0.5}, t0.Add(releaseEvery / 2)},
		{waiterView{pause: pause, deadline: deadline, holdAt: t0.Add(-time.Second), heldBy: heldOutage, spread: 0.999999}, t0.Add(releaseEvery)},
		// A short deadline: the share of what it leaves before its last chance.
		{waiterView{pause: pause, deadline: t0.Add(600 * time.Millisecond), holdAt: t0.Add(-time.Second), heldBy: heldOutage, spread: 0.999999}, t0.Add(600 * time.Millisecond).Add(-tune.LastChanceLead)},
	} {
		w := tc.w
		end, _ := s.endAt(t0, &w)
		if got := s.pace.backAfter(&w, end.Add(-tune.LastChanceLead)); got.Sub(tc.want).Abs() > 10*time.Microsecond {
			t.Errorf("spread %v: back at %v, want %v", w.spread, got.Sub(t0), tc.want.Sub(t0))
		}
		if how, _ := s.candidate(tc.want.Add(10*time.Microsecond), &w); how != admitRelease {
			t.Errorf("spread %v: at its time, candidate = %v, want a release", w.spread, how)
		}
	}
}

// Every admission a rule can give, from every phase, and the slot it takes;
// and what the hold and hopeless rules does with a wait past its hold time.
func TestGateAdmissions(t *testing.T) {
	deadline := t0.Add(2 * time.Second)
	const pause = 100 * time.Millisecond
	holdAt := t0.Add(110 * time.Millisecond)
	overloaded := stateIn(phaseFailing)
	for range overloadSigns {
		overloaded.ev.learn(t0, Attempt{Number: 1, Outcome: Failure, Overload: true})
	}
	fresh := newGateState(t0, func() float64 { return 0.5 })
	fresh.enter(t0, pause, 0)
	told := fresh
	told.ev.retryFails = 1
	knownToFail := told
	knownToFail.ev.retryFails = tune.Evidence
	learning := told
	learning.ev.learnNext, learning.ev.learnUntil = 3, t0.Add(time.Second)
	spreadHalf := heldThrough(pause, deadline)
	spreadHalf.spread = 0.5
	tests := []struct {
		name     string
		s        gateState
		at       time.Time
		w        waiterView
		want     Admission
		next     time.Time
		wantHeld bool
	}{
		{"quiet, credit due", withCredits(stateIn(phaseQuiet), 1), t0, waiting(pause, time.Time{}, false), admitRelease, time.Time{}, false},
		{"recovering, half a credit: asked again at its hold time", withCredits(stateIn(phaseRecovering), 0.5), t0, waiting(pause, time.Time{}, false), AdmitNone, holdAt, false},
		{"failing, before the quiet time", stateIn(phaseFailing), t0.Add(50 * time.Millisecond), waiting(pause, time.Time{}, false), AdmitNone, t0.Add(100 * time.Millisecond), false},
		{"failing, quiet time over", stateIn(phaseFailing), t0.Add(100 * time.Millisecond), waiting(pause, time.Time{}, false), admitProbe, time.Time{}, false},
		{"outage, last attempt waits for its last chance, held", stateIn(phaseOutage), t0.Add(time.Second), waiting(pause, deadline, true), AdmitNone, deadline.Add(-tune.LastChanceLead), true},
		{"outage, last chance", stateIn(phaseOutage), deadline.Add(-tune.LastChanceLead), waiting(pause, deadline, true), admitLast, time.Time{}, true},
		{"outage, probe out", withProbeOut(stateIn(phaseOutage), t0.Add(5*time.Second)), t0.Add(time.Second), waiting(0, time.Time{}, false), AdmitNone, t0.Add(5 * time.Second), true},
		{"outage, probe slot expired", withProbeOut(stateIn(phaseOutage), t0.Add(5*time.Second)), t0.Add(5 * time.Second), waiting(0, time.Time{}, false), admitProbe, time.Time{}, true},
		{"failing, past its hold time, the server served: a probe", withCredits(stateIn(phaseFailing), 0), holdAt, waiting(pause, deadline, true), admitProbe, time.Time{}, false},
		{"recovering, past its hold time, a probe out, began to wait in the outage: held through it, it goes at the return's pace", withProbeOut(stateIn(phaseRecovering), t0.Add(5*time.Second)), holdAt, began(waiting(pause, deadline, false), t0.Add(-time.Second)), admitRelease, time.Time{}, true},
		{"recovering, past its hold time, a probe out, began to wait in the outage, no deadline: held through it too, it goes at the return's pace", withProbeOut(stateIn(phaseRecovering), t0.Add(5*time.Second)), holdAt, began(waiting(pause, time.Time{}, false), t0.Add(-time.Second)), admitRelease, time.Time{}, true},
		{"recovering, past its hold time, a probe out, began to wait in the return: the wait ends", withProbeOut(stateIn(phaseRecovering), t0.Add(5*time.Second)), holdAt, began(waiting(pause, deadline, false), t0), admitEnd, time.Time{}, false},
		{"fresh process, past its hold time: no retry told it anything, it probes", fresh, holdAt, waiting(pause, time.Time{}, false), admitProbe, time.Time{}, false},
		{"retries failed, never served, past its hold time, no probe failed: held, the evidence of an outage", told, holdAt, waiting(pause, time.Time{}, false), AdmitNone, t0.Add(tune.QuietGapMax), true},
		{"retries failed, never served, no news for tune.QuietGapMax: it probes to learn", told, t0.Add(tune.QuietGapMax), waiting(pause, time.Time{}, false), admitProbe, time.Time{}, true},
		{"retries failed, never served, past its hold time, its call's last attempt: it probes to learn", told, holdAt, waiting(pause, time.Time{}, true), admitProbe, time.Time{}, false},
		{"retries known to fail, never served: the wait ends", knownToFail, holdAt, waiting(pause, time.Time{}, false), admitEnd, time.Time{}, false},
		{"another call is learning: the wait ends", learning, holdAt, waiting(pause, time.Time{}, false), admitEnd, time.Time{}, false},
		{"another call is learning, a call with a deadline: it waits tune.Calm for what that call tells", learning, holdAt, waiting(pause, deadline, false), AdmitNone, holdAt.Add(tune.Calm), false},
		{"the learning call's next retry: held until no news came for tune.QuietGapMax", learning, holdAt, numbered(waiting(pause, time.Time{}, false), 3), AdmitNone, t0.Add(tune.QuietGapMax), true},
		{"the learning call's last retry: it probes", learning, holdAt, numbered(waiting(pause, time.Time{}, true), 3), admitProbe, time.Time{}, false},
		{"overloaded, past its hold time: held, and probes", overloaded, holdAt, waiting(pause, time.Time{}, false), admitProbe, time.Time{}, true},
		{"after an outage, held with a deadline: back at its spread's share", stateIn(phaseRecovering), t0.Add(50 * time.Millisecond), spreadHalf, AdmitNone, t0.Add(releaseEvery / 2), true},
		{"after an outage, held with a deadline, its share's time come", stateIn(phaseRecovering), t0.Add(releaseEvery / 2), spreadHalf, admitRelease, time.Time{}, true},
	}
	for _, tt := range tests {
		s, w := tt.s, tt.w
		// decide changes nothing; apply does what it says.
		before, wBefore := s, w
		s.decide(tt.at, &w)
		if !sameState(s, before) || w != wBefore {
			t.Errorf("%s: decide changed the state or the wait", tt.name)
		}
		got, next := s.candidate(tt.at, &w)
		if got != tt.want || !next.Equal(tt.next) || (w.heldBy != "") != tt.wantHeld {
			t.Errorf("%s: candidate = %v, next %v, held %v; want %v, next %v, held %v", tt.name, got, next.Sub(t0), w.heldBy != "", tt.want, tt.next.Sub(t0), tt.wantHeld)
			continue
		}
		if got == AdmitNone || got == admitEnd {
			continue
		}
		credits := s.pace.credits(tt.at)
		s.pace = s.pace.taken(tt.at, &w, got)
		switch after := s.pace.credits(tt.at); {
		case got == admitRelease && credits < 1 && !near(after, credits):
			t.Errorf("%s: a release without a credit left credits %v, want %v", tt.name, after, credits)
		case got == admitRelease && credits >= 1 && !near(after, credits-1):
			t.Errorf("%s: a release left credits %v, want %v", tt.name, after, credits-1)
		case got != admitRelease && !s.pace.leased(tt.at):
			t.Errorf("%s: a probe left the slot free", tt.name)
		}
	}
}

// withCredits is s with c releases' credit at t0, at the release
// interval (no return under way).
func withCredits(s gateState, c float64) gateState {
	s.pace = s.pace.rested(0)
	s.pace.set(t0, c)
	return s
}

// near reports whether credits a and b differ by less than a nanosecond's
// accrual (the pace keeps them as a time).
func near(a, b float64) bool { return math.Abs(a-b) < 1e-8 }

func withProbeOut(s gateState, until time.Time) gateState {
	s.pace.until = until
	return s
}

// A probe whose attempt never reports (its caller abandoned it) frees its
// slot once its call's deadline has passed: the next outage gets probes.
func TestGateSettlesALostProbe(t *testing.T) {
	clk := &manualClock{now: t0}
	g := downServer(newGate(t, &switchBudget{}, DeferSettings{}, clk))
	g.Record(Attempt{Number: 1, Outcome: Failure})
	g.Record(Attempt{Number: 1, Outcome: Failure})
	deadline := t0.Add(time.Second)
	w, err := g.Enter(retry2, 0, deadline)
	if err != nil {
		t.Fatal(err)
	}
	poll(t, w, admitProbe)
	w.Leave() // and its attempt is never recorded

	// Much later, the outage goes on (tune.FutileEvery failures: the futility
	// rule lets the lone waiter wait); a new call's retry waits.
	clk.advance(time.Minute)
	for range tune.FutileEvery {
		g.Record(Attempt{Number: 1, Outcome: Failure})
	}
	w2, err := g.Enter(retry2, 0, time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	defer w2.Leave()
	if a, _, _ := w2.Poll(); a != admitProbe {
		t.Fatalf("the new outage's retry: %v, want a probe (the lost one's slot expired)", a)
	}
}

// The heal rule: retries that heal go after their pause; a failure for overload
// or an outage keeps them to the other rules. The evidence is the calls':
// a call whose second attempt fails and third succeeds was healed.
func TestGateHeals(t *testing.T) {
	secondFailed := Attempt{Number: 2, Outcome: Failure}
	thirdWon := Attempt{Number: 3, Outcome: Success}
	flaky := func() gateState {
		s := newGateState(t0, func() float64 { return 0.5 })
		s.ev.learn(t0, secondFailed)
		s.ev.learn(t0, thirdWon)
		s.observe(t0, Attempt{Number: 1, Outcome: Failure}, false)
		return s
	}
	s := flaky()
	if won := s.ev.healed(); won != 1 || s.ev.callsN() != 1 {
		t.Fatalf("one call healed on its third attempt: healed %d of %d, want 1 of 1", won, s.ev.callsN())
	}
	// Two failures in a row are no outage while retries heal.
	s.observe(t0, Attempt{Number: 2, Outcome: Failure}, false)
	if s.phase != phaseFailing {
		t.Fatalf("flaky server, two failures in a row: %v, want failing", s.phase)
	}
	w := waiting(10*time.Millisecond, t0.Add(time.Minute), true) // a deadline past the overload's hold
	if a, _ := s.candidate(t0, &w); a != admitHeal {
		t.Fatalf("flaky server: %v, want heal", a)
	}
	// Calls still retrying do not count against healing: second attempts
	// that failed (the gate let those go) leave the share whole.
	for range 2 * tune.HealWindow {
		s.ev.learn(t0, secondFailed)
	}
	if a, _ := s.candidate(t0, &w); a != admitHeal {
		t.Fatalf("after pending calls: %v, want heal", a)
	}
	// Not in an outage.
	o := stateIn(phaseOutage)
	o.ev.learn(t0, secondFailed)
	o.ev.learn(t0, thirdWon)
	for range 3 {
		o.ev.learn(t0, Attempt{Number: 2, Outcome: Success})
	}
	if !o.ev.heals(t0, false) {
		t.Fatal("four calls of the latest eight healed: retries should heal")
	}
	if a, _ := o.candidate(t0, &w); a == admitHeal {
		t.Fatal("healed in an outage")
	}
	// A failure for overload stops healing for tune.OverloadHold; a slow success
	// does not.
	s = flaky()
	s.ev.learn(t0, Attempt{Number: 1, Outcome: Success, Overload: true})
	if a, _ := s.candidate(t0, &w); a != admitHeal {
		t.Fatalf("after a slow success: %v, want heal", a)
	}
	s.ev.learn(t0, Attempt{Number: 1, Outcome: Failure, Overload: true, Pushback: true})
	w0 := w
	if a, _ := s.candidate(t0.Add(tune.OverloadHold-time.Millisecond), &w0); a == admitHeal || w0.heldBy != "" {
		t.Fatalf("within tune.OverloadHold of one failure for overload: %v, held %v; want no heal, not held (one sign of two attempts is not an overload)", a, w0.heldBy != "")
	}
	for range overloadSigns - 1 {
		s.ev.learn(t0, Attempt{Number: 1, Outcome: Failure, Overload: true})
	}
	w1, w2 := w, w
	if a, _ := s.candidate(t0.Add(tune.OverloadHold-time.Millisecond), &w1); a == admitHeal || w1.heldBy == "" {
		t.Fatalf("within tune.OverloadHold of failures for overload: %v, held %v; want no heal, and held", a, w1.heldBy != "")
	}
	if a, _ := s.candidate(t0.Add(tune.OverloadHold), &w2); a != admitHeal {
		t.Fatalf("after tune.OverloadHold: %v, want heal", a)
	}
	// A wait held through an overload or an outage goes back paced.
	if a, _ := s.candidate(t0.Add(tune.OverloadHold), &w1); a == admitHeal {
		t.Fatal("a held wait was healed")
	}
	// A down server: every call's final retry fails.
	s = newGateState(t0, func() float64 { return 0.5 })
	s.ev.seen = true
	for range tune.HealWindow {
		s.ev.learn(t0, Attempt{Number: 2, Outcome: Failure, Final: true})
	}
	s.observe(t0, Attempt{Number: 1, Outcome: Failure}, false)
	if a, _ := s.candidate(t0, &w); a == admitHeal {
		t.Fatal("healed retries of a server whose retries all fail")
	}
	// A call that failed its first retries and then its final one is one
	// unhealed call, not three.
	s = newGateState(t0, func() float64 { return 0.5 })
	s.ev.learn(t0, secondFailed)
	s.ev.learn(t0, Attempt{Number: 3, Outcome: Failure})
	s.ev.learn(t0, Attempt{Number: 4, Outcome: Failure, Final: true})
	if won := s.ev.healed(); won != 0 || s.ev.callsN() != 1 {
		t.Fatalf("one call failed three retries: healed %d of %d, want 0 of 1", won, s.ev.callsN())
	}
	// Hedges and first attempts are no evidence.
	s = newGateState(t0, func() float64 { return 0.5 })
	s.ev.learn(t0, Attempt{Number: 2, Outcome: Success, Hedge: true})
	s.ev.learn(t0, Attempt{Number: 1, Outcome: Success})
	if s.ev.callsN() != 0 {
		t.Fatalf("hedges and first attempts counted as retries: %d", s.ev.callsN())
	}
}

// Until calls say whether retries heal, they heal while the server has
// served and not two retries in a row failed since; the process knows once
// two calls ended, one healed, or two retries failed in a row.
func TestGateHealsBeforeCallsSay(t *testing.T) {
	w := waiting(10*time.Millisecond, time.Time{}, false)
	s := newGateState(t0, func() float64 { return 0.5 })
	s.enter(t0, 10*time.Millisecond, 0)
	if s.ev.heals(t0, false) || s.ev.known() {
		t.Fatal("a fresh process heals or knows")
	}
	s.observe(t0, Attempt{Number: 1, Outcome: Success}, false)
	s.observe(t0, Attempt{Number: 2, Outcome: Failure}, false)
	if !s.ev.heals(t0, false) || s.ev.known() {
		t.Fatalf("served, one retry failed: heals %v, known %v; want true, false", s.ev.heals(t0, false), s.ev.known())
	}
	if a, _ := s.candidate(t0, &w); a != admitHeal {
		t.Fatalf("served, one retry failed: %v, want heal", a)
	}
	s.observe(t0, Attempt{Number: 2, Outcome: Failure}, false)
	if s.ev.heals(t0, false) || !s.ev.known() {
		t.Fatalf("two retries in a row failed: heals %v, known %v; want false, true", s.ev.heals(t0, false), s.ev.known())
	}
	s.observe(t0, Attempt{Number: 1, Outcome: Success}, false)
	if !s.ev.heals(t0, false) || s.ev.known() {
		t.Fatal("a success after them: want retries to heal again, and the process not to know")
	}
}

// The outage and overload rules: after a failure for overload every retry is refused for
// tune.OverloadHold, and after a slow success a retry after a per-attempt
// timeout (the interceptors let the slow attempt run on).
func TestGateRefusesRetriesUnderOverload(t *testing.T) {
	clk := &manualClock{now: t0}
	open := &switchBudget{}
	open.open.Store(true)
	g := newGate(t, open, DeferSettings{}, clk)
	afterTimeout := Request{Number: 2, AfterTimeout: true}
	hedge := Request{Number: 2, Hedge: true}
	if !g.Allow(afterTimeout) || !g.Allow(retry2) {
		t.Fatal("refused a retry with no sign of overload")
	}
	g.Record(Attempt{Number: 1, Outcome: Failure, Overload: true, Pushback: true})
	if !g.Allow(retry2) {
		t.Fatal("refused a retry after one failure for overload with a pushback: one sign is not an overload")
	}
	for range overloadSigns - 1 {
		g.Record(Attempt{Number: 1, Outcome: Failure, Overload: true})
	}
	if g.Allow(afterTimeout) || g.Allow(retry2) {
		t.Fatal("admitted a retry right after failures for overload")
	}
	if !g.Allow(hedge) {
		t.Fatal("refused a hedge: the budget decides those")
	}
	clk.advance(tune.OverloadHold)
	if !g.Allow(afterTimeout) || !g.Allow(retry2) {
		t.Fatal("still refusing retries tune.OverloadHold after the sign")
	}
	// A sign recorded on the fast path (an Other outcome) counts too.
	for range overloadSigns - 1 {
		g.Record(Attempt{Number: 1, Outcome: Failure, Overload: true})
	}
	g.Record(Attempt{Number: 1, Outcome: Other, Overload: true})
	if g.Allow(afterTimeout) || g.Allow(retry2) {
		t.Fatal("a sign of overload on the fast path was missed")
	}
	// A slow success refuses timeout retries only.
	clk.advance(tune.OverloadHold)
	g.Record(Attempt{Number: 1, Outcome: Success, Overload: true})
	if g.Allow(afterTimeout) {
		t.Fatal("admitted a timeout retry right after a slow success")
	}
	if !g.Allow(retry2) {
		t.Fatal("refused a retry after a plain failure, after a slow success")
	}
}

// The outage and overload rules: failures in a row make an outage only when retries are known not
// to heal and the server looked healthy before them (a success, and a
// second without failures, counted from the first attempt), or failed for
// overload: a fresh process does not take a flaky server for a down one,
// nor does a process whose server failed a share of its attempts all along.
func TestGateOutageNeedsEvidence(t *testing.T) {
	fail := Attempt{Number: 1, Outcome: Failure}
	tests := []struct {
		name string
		s    func() gateState
		want phase
	}{
		{"no retry recorded", func() gateState {
			s := downState()
			s.ev.calls = 0
			return s
		}, phaseFailing},
		{"two retries failed", func() gateState {
			s := downState()
			s.ev.calls = 0
			s.observe(t0, Attempt{Number: 2, Outcome: Failure}, false)
			s.observe(t0, Attempt{Number: 3, Outcome: Failure}, false)
			return s
		}, phaseOutage},
		{"never served", func() gateState {
			s := downState()
			s.ev.seen = false
			return s
		}, phaseFailing},
		{"a failure within tune.Calm before", func() gateState {
			s := downState()
			s.ev.lastFail = t0.Add(-tune.Calm + time.Millisecond)
			s.ev.runs = s.ev.runsAfter(1)
			return s
		}, phaseFailing},
		{"retries heal a call of eight: not healing, not down", func() gateState {
			s := downState()
			s.ev.calls = 1<<tune.HealWindow | 1
			return s
		}, phaseFailing},
		{"and then two retries fail in a row", func() gateState {
			s := downState()
			s.ev.calls = 1<<tune.HealWindow | 1
			s.ev.learn(t0, Attempt{Number: 2, Outcome: Failure})
			s.ev.learn(t0, Attempt{Number: 2, Outcome: Failure})
			return s
		}, phaseOutage},
		// Overload does not stand for the calm (issue 88: a refusal for
		// overload never makes an outage, nor helps make one).
		{"a failure within tune.Calm, overloaded", func() gateState {
			s := downState()
			s.ev.lastFail = t0.Add(-tune.Calm + time.Millisecond)
			s.ev.runs = s.ev.runsAfter(1)
			for range overloadSigns {
				s.ev.learn(t0, Attempt{Number: 1, Outcome: Failure, Overload: true})
			}
			return s
		}, phaseFailing},
	}
	for _, tt := range tests {
		s := tt.s()
		for range tune.Evidence {
			s.observe(t0, fail, false)
		}
		if s.phase != tt.want {
			t.Errorf("%s: %v, want %v", tt.name, s.phase, tt.want)
		}
	}
}

// A server that served, then fails every call for longer than the calls'
// waits, retries included, is in an outage, however long the flaky runs
// before it were and whatever the calls before it said of healing (seed
// 810 of the property test: a server whose every first attempt failed
// went down, and its calls' retries went unpaid by the heal rule for 5 s).
// Not a server never seen serving (its probes find it back), not a streak
// of first attempts alone (overloaded or not: a refusal for overload
// helps make no outage, issue 88), not a streak shorter than the waits.
func TestGateOutageOutlastingTheWaits(t *testing.T) {
	wait := time.Second
	tests := []struct {
		name               string
		seen, retries, ovl bool
		lasted             time.Duration
		want               phase
	}{
		{"served, retries failed, lasted the waits", true, true, false, wait, phaseOutage},
		{"shorter than the waits", true, true, false, wait - time.Millisecond, phaseFailing},
		{"first attempts alone", true, false, false, wait, phaseFailing},
		{"first attempts alone, overloaded", true, false, true, wait, phaseFailing},
		{"never served", false, true, false, wait, phaseFailing},
	}
	for _, tt := range tests {
		s := downState()
		s.ev.seen = tt.seen
		s.ev.lastFail = t0.Add(-tune.Calm + time.Millisecond) // not after calm
		s.ev.runs = s.ev.runsAfter(11)                        // long flaky runs
		s.ev.calls = 1<<tune.HealWindow | 0xff                // retries healed
		for range overloadSigns {
			s.observe(t0, Attempt{Number: 1, Outcome: Failure, Overload: tt.ovl}, false)
		}
		s.enter(t0, 50*time.Millisecond, wait)
		// The streak is of failures not for overload (a refusal for
		// overload makes no outage: issue 88), from the first.
		for i := range 2 {
			a := Attempt{Number: 1, Outcome: Failure}
			if tt.retries {
				a.Number = i + 2
			}
			s.observe(t0.Add(time.Duration(i)*tt.lasted), a, false)
		}
		if s.phase != tt.want {
			t.Errorf("%s: %v, want %v", tt.name, s.phase, tt.want)
		}
	}
}

// A server that failed a share of its attempts all along (runs of one
// or two failures that successes ended) and then fails every attempt,
// retries included, is in an outage once the streak is beyond what its
// flakiness makes: twice its longest recent run, plus tune.Evidence (the
// outage rule), whatever the calls before it said of healing. A flaky
// server that went down got every call's every retry for its whole outage.
func TestGateOutageBeyondFlakyRuns(t *testing.T) {
	s := downState()
	s.ev.lastFail = t0.Add(-tune.Calm + time.Millisecond)
	s.ev.runs = s.ev.runsAfter(1)
	s.ev.runs = s.ev.runsAfter(2)
	s.ev.calls = 1<<tune.HealWindow | 0xff // the calls before said retries heal
	s.observe(t0, Attempt{Number: 2, Outcome: Failure}, false)
	s.observe(t0, Attempt{Number: 3, Outcome: Failure}, false)
	want := int(2*s.ev.runs) + tune.Evidence
	for i := 3; i <= want; i++ {
		s.observe(t0, Attempt{Number: 1, Outcome: Failure}, false)
		if got := s.phase == phaseOutage; got != (i >= want) {
			t.Fatalf("after %d failures in a row (runs %.1f): %v", i, s.ev.runs, s.phase)
		}
	}
	// Runs decay: an early unlucky run does not hide outages for long.
	s = downState()
	s.ev.runs = s.ev.runsAfter(6)
	for range 20 {
		s.ev.runs = s.ev.runsAfter(1)
	}
	if s.ev.runs > 1 {
		t.Errorf("runs %.2f after twenty runs of one, want 1", s.ev.runs)
	}
}

// admitEnd is candidate's answer for a wait that ends (decision.end).
const admitEnd Admission = 255

// candidate is what a waiter's Poll asks without a guard: the decision
// for w at now, applied.
func (s *gateState) candidate(now time.Time, w *waiterView) (Admission, time.Time) {
	d := s.decide(now, w)
	if d.end != nil {
		return admitEnd, time.Time{}
	}
	if w.heldBy == "" {
		w.heldBy = d.heldBy
	}
	return d.how, d.next
}

// sameState reports whether a and b hold the same state (their random
// sources aside, which cannot be compared).
func sameState(a, b gateState) bool {
	a.rand, b.rand = nil, nil
	return reflect.DeepEqual(a, b)
}

// overloadSigns is how many signs of overload in a row make an overload
// (the overload rule).
var overloadSigns = int(math.Floor(float64(tune.OverloadWindow)*tune.OverloadShare)) + 1

// The overload rule reads the share of attempts that are signs of
// overload, not one status: a backend refusing 30 % of attempts with
// RESOURCE_EXHAUSTED and a pushback, serving the rest, is not overloaded
// (issue 65's pricing), one refusing most is; a slow success is a sign
// too; a strain that lapsed leaves nothing behind; a refusal without a
// pushback holds retries by itself.
func TestGateOverloadIsAShare(t *testing.T) {
	refusing := func(t *testing.T, share float64, slowOK bool) (refused int) {
		clk := &manualClock{now: t0}
		open := &switchBudget{}
		open.open.Store(true)
		g := newGate(t, open, DeferSettings{}, clk)
		for i := range 200 {
			a := Attempt{Number: 1, Outcome: Success, Final: true, Overload: slowOK}
			if float64((i*7)%10) < 10*share { // spread: 0, 7, 4, 1, 8, 5, 2, 9, 6, 3
				a = Attempt{Number: 1, Outcome: Failure, Overload: true, Pushback: true}
			}
			g.Record(a)
			clk.advance(33 * time.Millisecond)
			if !g.Allow(retry2) {
				refused++
			}
		}
		return refused
	}
	if n := refusing(t, 0.3, false); n != 0 {
		t.Errorf("30 %% refused for overload, the rest served: %d retries of 200 refused, want 0", n)
	}
	// The first tune.OverloadWindow attempts judge nothing yet.
	if n := refusing(t, 0.7, false); n < 200-tune.OverloadWindow {
		t.Errorf("70 %% refused for overload: %d retries of 200 refused, want nearly all", n)
	}
	if n := refusing(t, 0.5, false); n != 0 {
		t.Errorf("50 %% refused for overload: %d retries of 200 refused, want none (more than 60 %% is an overload)", n)
	}
	if n := refusing(t, 0.3, true); n < 200-tune.OverloadWindow {
		t.Errorf("30 %% refused, the rest served slowly: %d retries of 200 refused, want nearly all", n)
	}

	clk := &manualClock{now: t0}
	open := &switchBudget{}
	open.open.Store(true)
	g := newGate(t, open, DeferSettings{}, clk)
	for range overloadSigns {
		g.Record(Attempt{Number: 1, Outcome: Failure, Overload: true, Pushback: true})
	}
	if g.Allow(retry2) {
		t.Fatal("refusals for overload in a row: admitted a retry")
	}
	clk.advance(tune.OverloadHold)
	g.Record(Attempt{Number: 1, Outcome: Failure, Overload: true, Pushback: true})
	if !g.Allow(retry2) {
		t.Fatal("one refusal after the strain lapsed: refused a retry (the lapsed strain's signs still counted)")
	}
	// A refusal for overload without a pushback holds retries by itself.
	g.Record(Attempt{Number: 1, Outcome: Failure, Overload: true})
	if g.Allow(retry2) {
		t.Fatal("a refusal for overload without a pushback: admitted a retry")
	}
	clk.advance(tune.OverloadHold)
	if !g.Allow(retry2) {
		t.Fatal("tune.OverloadHold after a refusal without a pushback: refused a retry")
	}
}

package budget

import (
	"testing"
	"time"
)

// TestGateAllowStraggler: Allow admits a straggler's retry after a
// per-attempt timeout (Request.Straggler) that the budget refuses, unpaid
// (admitHeal), while the heal rule holds and neither the outage rule nor
// the failure-for-overload part of the overload rule refuses; a slow
// success does not hold it back. Asking changes nothing of the gate.
func TestGateAllowStraggler(t *testing.T) {
	straggler := Request{Number: 2, AfterTimeout: true, Straggler: true}
	timeout := Request{Number: 2, AfterTimeout: true}
	served := Attempt{Number: 1, Outcome: Success, Final: true}
	tests := []struct {
		name    string
		budget  bool // the budget pays
		history []Attempt
		outage  bool
		r       Request
		want    Admission
		wantOK  bool
	}{
		{"fresh: nothing served, the heal rule does not hold", false, nil, false, straggler, AdmitNone, false},
		{"served: admitted unpaid", false, []Attempt{served}, false, straggler, admitHeal, true},
		{"the budget pays: paid", true, []Attempt{served}, false, straggler, AdmitNone, true},
		{"not a straggler: refused", false, []Attempt{served}, false, timeout, AdmitNone, false},
		{"a straggler without AfterTimeout is an ordinary retry", false, []Attempt{served}, false, Request{Number: 2, Straggler: true}, AdmitNone, false},
		{"after a slow success: a straggler's retry goes", false, []Attempt{{Number: 1, Outcome: Success, Overload: true, Final: true}}, false, straggler, admitHeal, true},
		{"after a slow success: another timeout retry is refused, paid or not", true, []Attempt{{Number: 1, Outcome: Success, Overload: true, Final: true}}, false, timeout, AdmitNone, false},
		{"overloaded (most attempts refused for overload): refused", true, overloadedHistory(served), false, straggler, AdmitNone, false},
		{"one failure for overload with a pushback among attempts served: the budget pays", true, []Attempt{served, {Number: 1, Outcome: Failure, Overload: true, Pushback: true}, served, served}, false, straggler, AdmitNone, true},
		{"two retries failed since the last success: refused", false, []Attempt{served, {Number: 2, Outcome: Failure}, {Number: 2, Outcome: Failure}}, false, straggler, AdmitNone, false},
		{"a healed call: admitted", false, []Attempt{served, {Number: 2, Outcome: Success, AfterTimeout: true, Admission: admitHeal, Final: true}}, false, straggler, admitHeal, true},
		{"in an outage: refused", true, []Attempt{served}, true, straggler, AdmitNone, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clk := &manualClock{now: time.Unix(1000, 0)}
			b := &switchBudget{}
			b.open.Store(tt.budget)
			g := newGate(t, b, DeferSettings{}, clk)
			for _, a := range tt.history {
				g.Record(a)
				clk.advance(time.Millisecond)
			}
			if tt.outage {
				g.mu.Lock()
				g.st.phase = phaseOutage
				g.settle(clk.Now())
				g.mu.Unlock()
			}
			g.mu.Lock()
			before := g.st
			g.mu.Unlock()
			adm, ok := g.Admit(tt.r)
			if adm != tt.want || ok != tt.wantOK {
				t.Errorf("allow = %v, %v; want %v, %v", adm, ok, tt.want, tt.wantOK)
			}
			if got := g.Allow(tt.r); got != tt.wantOK {
				t.Errorf("Allow = %v, want %v", got, tt.wantOK)
			}
			g.mu.Lock()
			after := g.st
			g.mu.Unlock()
			// A retry the budget paid marks a paid retry out (retryOut),
			// and nothing else.
			after.ev.retryOut = before.ev.retryOut
			if before.phase != after.phase || before.ev != after.ev || before.streak != after.streak {
				t.Errorf("asking changed the gate: %+v -> %+v", before, after)
			}
		})
	}
}

// overloadedHistory is served, then overloadSigns failures for overload.
func overloadedHistory(served Attempt) []Attempt {
	h := []Attempt{served}
	for range overloadSigns {
		h = append(h, Attempt{Number: 1, Outcome: Failure, Overload: true})
	}
	return h
}

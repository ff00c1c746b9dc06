package soak

import (
	"strings"
	"testing"
	"time"
)

// TestLedger: the ledger tells a write run twice, one acknowledged and
// never applied, and one that ended twice, and forgets ended writes after
// two rotations but not those still running.
func TestLedger(t *testing.T) {
	t0 := time.Unix(0, 0)
	tests := []struct {
		name string
		run  func(l *ledger)
		want string // "" when no invariant breaks
	}{
		{"applied once, acknowledged", func(l *ledger) { l.register(1); l.apply(1); l.end(1, true, t0) }, ""},
		{"never applied, failed", func(l *ledger) { l.register(1); l.end(1, false, t0) }, ""},
		{"applied, failed (a lost reply)", func(l *ledger) { l.register(1); l.apply(1); l.end(1, false, t0) }, ""},
		{"applied twice", func(l *ledger) { l.register(1); l.apply(1); l.apply(1) }, "applied 2 times"},
		{"acknowledged, never applied", func(l *ledger) { l.register(1); l.end(1, true, t0) }, "never applied"},
		{"ended twice", func(l *ledger) { l.register(1); l.end(1, false, t0); l.end(1, false, t0) }, "ended twice"},
		{"applied after it was forgotten", func(l *ledger) {
			l.register(1)
			l.apply(1)
			l.end(1, true, t0)
			l.register(2)
			l.end(2, false, t0.Add(ledgerHorizon)) // rotation: 1 is in the older generation
			l.register(3)
			l.end(3, false, t0.Add(2*ledgerHorizon)) // rotation: 1 is forgotten
			l.apply(1)
		}, "after its call ended"},
		{"settled: an ended write forgotten, a running one kept", func(l *ledger) {
			l.register(1)
			l.apply(1)
			l.end(1, true, t0)
			l.register(2)
			l.settle(t0.Add(ledgerHorizon))
			l.apply(2)
			l.end(2, true, t0.Add(ledgerHorizon))
			l.apply(1)
		}, "after its call ended"},
		{"running across rotations", func(l *ledger) {
			l.register(1)
			l.register(2)
			l.end(2, false, t0.Add(ledgerHorizon))
			l.register(3)
			l.end(3, false, t0.Add(2*ledgerHorizon))
			l.apply(1)
			l.end(1, true, t0.Add(2*ledgerHorizon))
		}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var got []string
			l := newLedger(t0, func(msg string) { got = append(got, msg) })
			tt.run(l)
			switch {
			case tt.want == "" && len(got) > 0:
				t.Fatalf("broken: %q, want nothing", got)
			case tt.want != "" && (len(got) != 1 || !strings.Contains(got[0], tt.want)):
				t.Fatalf("broken: %q, want one containing %q", got, tt.want)
			}
		})
	}
}

// TestLedgerSettle: settle keeps only the writes still running.
func TestLedgerSettle(t *testing.T) {
	t0 := time.Unix(0, 0)
	l := newLedger(t0, func(msg string) { t.Errorf("broken: %s", msg) })
	for id := range uint64(10) {
		l.register(id)
		if id%2 == 0 {
			l.apply(id)
			l.end(id, true, t0)
		}
	}
	l.settle(t0.Add(ledgerHorizon))
	if n := l.size(); n != 5 {
		t.Fatalf("%d writes kept after settle, want 5 (the running ones)", n)
	}
}

// TestHistory keeps the latest historyLines lines, oldest first.
func TestHistory(t *testing.T) {
	h := newHistory(time.Now())
	for i := range historyLines + 3 {
		h.addf("line %d", i)
	}
	lines := strings.Split(strings.TrimSuffix(h.String(), "\n"), "\n")
	if len(lines) != historyLines || !strings.HasSuffix(lines[0], "line 3") || !strings.HasSuffix(lines[len(lines)-1], "line 202") {
		t.Fatalf("%d lines, first %q, last %q; want %d, line 3 to line 202", len(lines), lines[0], lines[len(lines)-1], historyLines)
	}
}

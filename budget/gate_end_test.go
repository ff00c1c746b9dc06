package budget

import (
	"errors"
	"testing"
	"time"

	tune "github.com/stagger-go/stagger/internal/gatetune"
)

// The end rule at the door: a retry of a call without a deadline that
// begins to wait in an outage is turned away when its own wait would end
// before the backend's return, expected as far off as the outage has
// lasted (half as far when its attempt never left the client); a call
// that waited most of its MaxWait already has less to wait. It is its own
// end that counts, not the longest wait of the others: a call with an
// hour's deadline waiting beside it does not keep it waiting in vain.
func TestGateEndRuleAtTheDoor(t *testing.T) {
	for _, c := range []struct {
		name   string
		waited time.Duration
		unsent bool
		want   error
	}{
		{"3 s down, 10 s to wait: it waits", 0, false, nil},
		{"3 s down, 2 s left of its 10 s: turned away", 8 * time.Second, false, ErrOutageLasting},
		{"3 s down, 2 s left, unsent: the return 1.5 s off, it waits", 8 * time.Second, true, nil},
		{"3 s down, 1 s left, unsent: turned away", 9 * time.Second, true, ErrOutageLasting},
	} {
		t.Run(c.name, func(t *testing.T) {
			clk := &manualClock{now: t0}
			g := inOutage(t, clk, DeferSettings{})
			// Another call waits, with an hour's deadline.
			long, err := g.Enter(retry2, time.Hour, t0.Add(time.Hour))
			if err != nil {
				t.Fatal(err)
			}
			defer long.Leave()
			clk.advance(3 * time.Second)
			r := retry2
			r.Waited, r.Unsent = c.waited, c.unsent
			w, err := g.Enter(r, 0, time.Time{})
			if !errors.Is(err, c.want) || (err == nil) != (c.want == nil) {
				t.Fatalf("enter = %v, want %v", err, c.want)
			}
			if w != nil {
				w.Leave()
			}
		})
	}
}

// The end rule with a deadline: a call with one waits through an outage
// to its deadline (its last chance is its turn), less an attempt of its
// method when one was timed (hopeless), else to the deadline itself.
func TestGateEndRuleWithADeadline(t *testing.T) {
	for _, c := range []struct {
		name string
		took time.Duration
		want *waitEnd
	}{
		{"no attempt timed: at the deadline", 0, errDeadline},
		{"an attempt of 300ms: 300ms before it", 300 * time.Millisecond, errHopeless},
	} {
		t.Run(c.name, func(t *testing.T) {
			clk := &manualClock{now: t0}
			g := inOutage(t, clk, DeferSettings{})
			clk.advance(time.Minute) // an outage far longer than any wait
			deadline := clk.Now().Add(time.Second)
			w, err := g.Enter(Request{Number: 2, Last: true, Took: c.took}, time.Hour, deadline)
			if err != nil {
				t.Fatalf("enter = %v, want a wait to the deadline", err)
			}
			defer w.Leave()
			end, why := g.st.endAt(clk.Now(), &w.view)
			if want := deadline.Add(-c.took); !end.Equal(want) || why != c.want {
				t.Fatalf("endAt = %v (%v), want %v before the deadline (%v)", deadline.Sub(end), why, c.took, c.want)
			}
		})
	}
}

// The last chance is the end rule's other face: one number, the attempt
// time the hopeless end reads, places both, the last chance
// tune.LastChanceLead before that end. A method whose attempts take 400ms
// gets its last chance at 550ms of a 1 s deadline (it had none: its last
// chance, 50ms before the deadline, came after its hopeless end at
// 600ms), and a slow probe of another call moves neither (the last chance
// went twice the latest probe's time before the deadline).
func TestGateLastChanceIsTheEndRulesOtherFace(t *testing.T) {
	for _, c := range []struct {
		name        string
		took, probe time.Duration
	}{
		{"attempts of 400ms", 400 * time.Millisecond, 0},
		{"no attempt timed, a probe of 300ms", 0, 300 * time.Millisecond},
	} {
		t.Run(c.name, func(t *testing.T) {
			clk := &manualClock{now: t0}
			g := inOutage(t, clk, DeferSettings{})
			if c.probe > 0 {
				p, _ := g.Enter(retry2, 0, time.Time{})
				poll(t, p, admitProbe)
				p.Leave()
				clk.advance(c.probe)
				g.Record(Attempt{Number: 2, Outcome: Failure, Admission: admitProbe})
			}
			deadline := clk.Now().Add(time.Second)
			w, err := g.Enter(Request{Number: 2, Last: true, Took: c.took}, 0, deadline)
			if err != nil {
				t.Fatalf("enter = %v, want a wait to its last chance", err)
			}
			defer w.Leave()
			end, _ := g.st.endAt(clk.Now(), &w.view)
			want := end.Add(-tune.LastChanceLead)
			if next := poll(t, w, AdmitNone); !next.Equal(want) {
				t.Fatalf("asked again %v before the deadline, want its last chance %v before it", deadline.Sub(next), deadline.Sub(want))
			}
			clk.advance(want.Sub(clk.Now()))
			poll(t, w, admitLast)
		})
	}
}

package budget

import (
	"errors"
	"testing"
	"time"
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

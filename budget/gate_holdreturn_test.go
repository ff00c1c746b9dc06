package budget

import (
	"errors"
	"testing"
	"time"
)

// A call made in an outage's last moments: its retry's hold time comes
// during the return, while the pacer's lease is out (a probe that went in
// the outage has not answered yet), and its turn at the return's pace
// comes after that, well before its deadline. It began to wait in the
// outage: held through it, it goes back at the return's pace. The hold
// rule ended its wait at its hold time, "with no outage or overload to
// wait for", 390 ms before its deadline (lab ledger replay: 10 of 40 seed
// and attempt-delay runs lost such a call).
func TestGateHoldTimeInTheReturnWithTheLeaseOut(t *testing.T) {
	holdTimeInTheReturn(t, true)
}

// The same call without a deadline: held through the return as well, it
// goes back at the return's pace, its wait bounded by its MaxWait (the end
// rule). The hold rule ended its wait at its hold time, "with no outage or
// overload to wait for", with most of its MaxWait left.
func TestGateHoldTimeInTheReturnWithoutADeadline(t *testing.T) {
	holdTimeInTheReturn(t, false)
}

// holdTimeInTheReturn plays the call above, with its deadline 500 ms after
// its first wait began or, without one, its MaxWait (the default) after.
func holdTimeInTheReturn(t *testing.T, withDeadline bool) {
	t.Helper()
	clk := &manualClock{now: t0}
	g := downAfterServing(t, clk)

	// Retries held through the outage, one every 200 ms: the return's
	// pace starts from the pace they came at. The first goes as the
	// outage's probe and is still out: it holds the pacer's lease.
	var held []*Waiter
	for i := range 5 {
		h, err := g.Enter(retry2, 10*time.Millisecond, time.Time{})
		if err != nil {
			t.Fatal(err)
		}
		defer h.Leave()
		clk.advance(200 * time.Millisecond)
		g.Tick()
		if i == 0 {
			if a, err := h.Take(); a != admitProbe || err != nil {
				t.Fatalf("the outage's probe: %v, %v; want %v", a, err, admitProbe)
			}
			continue
		}
		held = append(held, h)
	}

	// A call made just before the return: its first attempt failed, its
	// retry waits with 500 ms before its deadline (or its MaxWait).
	const pause = 100 * time.Millisecond
	deadline, end := clk.Now().Add(500*time.Millisecond), clk.Now().Add(defaultMaxWait)
	if !withDeadline {
		deadline = time.Time{}
	} else {
		end = deadline
	}
	w, err := g.Enter(Request{Number: 2, Call: 7}, pause, deadline)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Leave()
	clk.advance(30 * time.Millisecond)
	g.Record(Attempt{Number: 1, Outcome: Success}) // the return
	// The other held calls' callers leave, and the return's first release
	// comes 150 ms after it (a share of its pace drawn at random; pinned):
	// after the retry's hold time, 80 ms after the return.
	for _, h := range held {
		h.Leave()
	}
	g.mu.Lock()
	g.st.pace.next = clk.Now().Add(150 * time.Millisecond)
	leased, back := g.st.pace.leased(clk.Now()), !g.st.pace.backAt.IsZero()
	g.mu.Unlock()
	if !leased || !back {
		t.Fatalf("leased %v, return under way %v; want both", leased, back)
	}

	a, _, err := settleAlone(t, clk, w)
	if errors.Is(err, errWaitEnded) && !errors.Is(err, errHopeless) {
		t.Fatalf("ended by the hold rule %v before its end: %v", end.Sub(clk.Now()), err)
	}
	if a != admitRelease || err != nil || !clk.Now().Before(end) {
		t.Fatalf("%v, %v, %v before its end; want it back at the return's pace (%v)", a, err, end.Sub(clk.Now()), admitRelease)
	}
}

package budget

import (
	"errors"
	tune "github.com/stagger-go/stagger/internal/gatetune"
	"testing"
	"time"
)

// The futility rule: once the outage has lasted as long as the longest wait
// of the retries that began to wait since the server last served, a retry
// of a call without a deadline fails at once while another waits; alone,
// it waits as the probe. Calls already waiting keep their chance, and a
// success ends the rule. (A call with a deadline waits: TestGateOutage
// WaitsToTheDeadline.)
// failures records n first attempts that failed.
func failures(g *Gate, n int) {
	for range n {
		g.Record(Attempt{Number: 1, Outcome: Failure})
	}
}

func TestGateFutility(t *testing.T) {
	clk := &manualClock{now: t0}
	const deadline = 2 * time.Second // MaxWait: the calls have none
	g := inOutage(t, clk, DeferSettings{MaxWait: deadline})
	// A probe is out past MaxWait: nothing lets it go first.
	g.mu.Lock()
	g.st.pace.until = clk.Now().Add(deadline)
	g.mu.Unlock()
	early, err := g.Enter(retry2, 0, time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	defer early.Leave()
	// Within the calls' longest wait, retries wait (the first ends by
	// MaxWait).
	clk.advance(deadline)
	if _, _, err := early.Poll(); !errors.Is(err, errWaitLimit) {
		t.Fatalf("the first wait at MaxWait: Err %v, want errWaitLimit", err)
	}
	early.Leave()
	g.mu.Lock()
	g.st.pace.until = time.Time{}                       // the probe's answer came, unrecorded
	g.st.streakAt = g.st.streakAt.Add(time.Millisecond) // the outage is a millisecond younger than MaxWait
	g.mu.Unlock()
	w, err := g.Enter(retry2, time.Millisecond, time.Time{})
	if err != nil {
		t.Fatalf("%v into the outage: enter = %v, want a wait", deadline-time.Millisecond, err)
	}
	defer w.Leave()
	// Past it, a retry fails at once while another waits.
	clk.advance(time.Millisecond)
	if _, err := g.Enter(retry2, 0, time.Time{}); !errors.Is(err, ErrOutageLasting) {
		t.Fatalf("%v into the outage, one waiting: enter = %v, want ErrOutageLasting", deadline, err)
	}
	// The wait keeps its chance: here, the probe.
	if a, _, _ := w.Poll(); a != admitProbe || w.err() != nil {
		t.Fatalf("the wait: Poll = %v, Err %v; want the probe", a, w.err())
	}
	w.Leave()
	g.mu.Lock()
	g.st.pace.until = time.Time{} // its answer came, unrecorded (without a deadline it holds the lease tune.ProbeGapMax)
	g.mu.Unlock()
	// Alone, a retry goes as the probe once tune.FutileEvery failures
	// were recorded since a deferred retry failed and nothing reached the
	// server for the probe gap; else it fails at once.
	if _, err := g.Enter(retry2, 0, time.Time{}); !errors.Is(err, ErrOutageLasting) {
		t.Fatalf("alone, too soon after the last probe: enter = %v, want ErrOutageLasting", err)
	}
	failures(g, tune.FutileEvery)
	clk.advance(tune.QuietGapMax)
	probe, err := g.Enter(retry2, 0, time.Time{})
	if err != nil {
		t.Fatalf("alone, after the probe gap: enter = %v, want a wait", err)
	}
	defer probe.Leave()
	poll(t, probe, admitProbe)
	if _, err := g.Enter(retry2, 0, time.Time{}); !errors.Is(err, ErrOutageLasting) {
		t.Fatalf("beside the probe: enter = %v, want ErrOutageLasting", err)
	}
	// A success (a new call's first attempt) ends the outage and the rule.
	g.Record(Attempt{Number: 1, Outcome: Success})
	w2, err := g.Enter(retry2, 0, time.Time{})
	if err != nil {
		t.Fatalf("after a success: enter = %v, want a wait", err)
	}
	w2.Leave()
	if st := g.State(); st.DeferTurnedAway != 3 {
		t.Fatalf("turned away %d, want the 3 failed at once", st.DeferTurnedAway)
	}
}

// The futility rule's lone probe goes at once, its pause waived, however
// fast new calls fail (each failure used to put it off, and it waited its
// deadline out: property-test seed 726), and lone probes are spaced by
// the probe gap, at least the calls' longest wait.
func TestGateFutilityLoneProbe(t *testing.T) {
	const pause, deadline = 200 * time.Millisecond, 2 * time.Second
	clk := &manualClock{now: t0}
	g := inOutage(t, clk, DeferSettings{MaxWait: deadline})
	early, err := g.Enter(retry2, 0, time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	early.Leave()
	clk.advance(deadline)
	failures(g, tune.FutileEvery)
	w, err := g.Enter(retry2, pause, time.Time{})
	if err != nil {
		t.Fatalf("alone: enter = %v, want the lone probe", err)
	}
	failures(g, 1) // a new call fails
	poll(t, w, admitProbe)
	w.Leave()
	g.Record(Attempt{Number: 2, Outcome: Failure, Admission: admitProbe})
	// The next lone probe: FutileEvery failures and the gap after it.
	failures(g, tune.FutileEvery)
	if _, err := g.Enter(retry2, pause, time.Time{}); !errors.Is(err, ErrOutageLasting) {
		t.Fatalf("within the probe gap of a failed probe: enter = %v, want ErrOutageLasting", err)
	}
	clk.advance(tune.ProbeGapMax)
	w, err = g.Enter(retry2, pause, time.Time{})
	if err != nil {
		t.Fatalf("the longest probe gap after the failed probe: enter = %v, want the lone probe", err)
	}
	w.Leave()
}

// A process whose calls have no deadline waits MaxWait at most: the
// futility rule counts that as their wait.
func TestGateFutilityWithoutDeadlines(t *testing.T) {
	clk := &manualClock{now: t0}
	g := inOutage(t, clk, DeferSettings{MaxWait: time.Second})
	w, err := g.Enter(retry2, 0, time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Leave()
	clk.advance(time.Second)
	if _, err := g.Enter(retry2, 0, time.Time{}); !errors.Is(err, ErrOutageLasting) {
		t.Fatalf("MaxWait into the outage: enter = %v, want ErrOutageLasting", err)
	}
}

// The release rule's back pace: the calls held through an outage go back
// no faster than tune.BackShare times the pace at which their retries began to
// wait, however their spread draws fall.
func TestGateBackPace(t *testing.T) {
	clk := &manualClock{now: t0}
	g := downServer(newGate(t, &switchBudget{}, DeferSettings{}, clk))
	g.st.rand = func() float64 { return 0 } // every spread at its earliest
	for range tune.Evidence {
		g.Record(Attempt{Number: 1, Outcome: Failure})
	}
	// 40 retries begin to wait over 2 s (20 a second), deadlines 10 s on.
	var ws []*Waiter
	for range 40 {
		w, err := g.Enter(retry2, 10*time.Millisecond, clk.Now().Add(10*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		defer w.Leave()
		ws = append(ws, w)
		clk.advance(50 * time.Millisecond)
		for _, w := range ws {
			if a, _, _ := w.Poll(); a != AdmitNone && a != admitProbe && a != admitLast {
				t.Fatalf("in the outage: Poll = %v", a)
			}
		}
	}
	// A new call's first attempt finds the server back.
	g.Record(Attempt{Number: 1, Outcome: Success})
	back := clk.Now()
	var went []time.Duration
	gone := map[*Waiter]bool{}
	for clk.Now().Before(back.Add(5 * time.Second)) {
		for _, w := range ws {
			if w.state == waitOut || gone[w] {
				continue
			}
			if a, _, _ := w.Poll(); a == admitRelease {
				went = append(went, clk.Now().Sub(back))
				gone[w] = true
			}
		}
		clk.advance(time.Millisecond)
	}
	if len(went) < 10 {
		t.Fatalf("%d went back in 5 s, want most of 40", len(went))
	}
	// In any second, at most tune.BackShare of the 20 a second they came at,
	// and one more for the release credits that accrue at a credit a
	// second (the probe's success brought none here).
	for i := range went {
		n := 0
		for _, at := range went[i:] {
			if at-went[i] < time.Second {
				n++
			}
		}
		if limit := int(tune.BackShare*20) + 2; n > limit {
			t.Fatalf("%d went back within a second of %v, want %d at most (tune.BackShare of the pace they came at, and credits)", n, went[i], limit)
		}
	}
}

// The back pace follows the recovered server, the return's estimate of
// its room: successes quicken it by tune.BackFaster until the first failure or
// refusal for overload halves it; one cut per attempt time (the refusals
// of attempts that met the same load cut once); after a cut successes grow
// the rate additively, per attempt time (the fastest success's: a
// refusal's quick answer is not one). Outside a return, answers leave the
// pace alone.
func TestPacerAnswered(t *testing.T) {
	p := pacer{every: 100 * time.Millisecond, backAt: t0}
	at := t0
	// After a cut: tune.ReleasePerSecond retries a second more per attempt time
	// (the fastest success's 20 ms, at least tune.LastChanceLead) since the
	// cut, one at most per success.
	additive := func(every, since time.Duration) time.Duration {
		at := max(20*time.Millisecond, tune.LastChanceLead)
		r := float64(time.Second)/float64(every) + tune.ReleasePerSecond*float64(min(since, at))/float64(at)
		return pacer{}.within(float64(time.Second) / r)
	}
	// Slow start: each success multiplies the interval by tune.BackFaster.
	faster := func(every time.Duration) time.Duration { return pacer{}.within(tune.BackFaster * float64(every)) }
	faster1 := faster(100 * time.Millisecond)
	faster2 := faster(faster1)
	faster3 := faster(faster2)
	halved := pacer{}.within(2 * float64(faster3))
	for _, tc := range []struct {
		after time.Duration // since the previous answer
		took  time.Duration
		ok    bool
		want  time.Duration
	}{
		{0, 20 * time.Millisecond, true, faster1},                                                   // the fastest yet: room
		{10 * time.Millisecond, 24 * time.Millisecond, true, faster2},                               // slow start: tune.BackFaster per success
		{10 * time.Millisecond, 60 * time.Millisecond, true, faster3},                               // queued, as fast or not
		{10 * time.Millisecond, time.Millisecond, false, halved},                                    // refused at once: halved
		{time.Millisecond, time.Millisecond, false, halved},                                         // within the attempt time of that cut: the same load
		{10 * time.Millisecond, 20 * time.Millisecond, true, additive(halved, 11*time.Millisecond)}, // additive now
	} {
		at = at.Add(tc.after)
		p = p.answeredIn(at, tc.took, tc.ok)
		if p.every != tc.want {
			t.Fatalf("after %v (ok %v): every %v, want %v", tc.took, tc.ok, p.every, tc.want)
		}
	}
	if p.fastest != 20*time.Millisecond {
		t.Fatalf("fastest %v after a refusal answered in 1 ms, want the fastest success's 20ms", p.fastest)
	}
	for range 20 {
		at = at.Add(time.Second)
		p = p.answeredIn(at, time.Second, false)
	}
	if p.every != releaseEvery {
		t.Fatalf("after failed answers: every %v, want at most %v", p.every, releaseEvery)
	}
	// Additive: 20 s of successes, each as fast as the fastest, 1 ms
	// apart: tune.ReleasePerSecond per attempt time, whatever the pace.
	r0 := float64(time.Second) / float64(p.every)
	for range 20000 {
		at = at.Add(time.Millisecond)
		p = p.answeredIn(at, 20*time.Millisecond, true)
	}
	grown := r0 + 20*tune.ReleasePerSecond/max(0.02, tune.LastChanceLead.Seconds())
	if want := time.Duration(float64(time.Second) / grown); p.every > want*11/10 || p.every < want*9/10 {
		t.Fatalf("after 20 s of fast successes past a cut: every %v, want about %v", p.every, want)
	}
	// Slow start, no cut: down to a microsecond at least.
	p = pacer{every: 100 * time.Millisecond, backAt: t0}
	for range 200 {
		p = p.answeredIn(t0, 20*time.Millisecond, true)
	}
	if p.every != time.Microsecond {
		t.Fatalf("after 200 fast answers: every %v, want a microsecond at least", p.every)
	}
	// No return under way: the release interval stays.
	q := newGateState(t0, nil).pace
	q = q.answeredIn(t0, time.Millisecond, true)
	q = q.answeredIn(t0.Add(time.Second), time.Second, false)
	if q.every != releaseEvery {
		t.Fatalf("no return: every %v, want %v", q.every, releaseEvery)
	}
}

// A retry whose attempt never left the client (Request.Unsent: its
// connection was failing to connect) is turned away by the futility rule
// only once the outage outlived tune.FutileUnsent times the longest wait:
// the connection reconnects on its own backoff after the server is back
// (lab refused: calls made just after the return failed at once).
func TestGateFutilityWaitsLongerForUnsent(t *testing.T) {
	clk := &manualClock{now: t0}
	const deadline = 2 * time.Second // MaxWait: the calls have none
	g := inOutage(t, clk, DeferSettings{MaxWait: deadline})
	first, err := g.Enter(retry2, time.Hour, time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	first.Leave()
	// Alone, with fewer than tune.FutileEvery failures since: no lone probe.
	unsent := retry2
	unsent.Unsent = true
	clk.advance(deadline + 100*time.Millisecond)
	if _, err := g.Enter(retry2, 0, time.Time{}); !errors.Is(err, ErrOutageLasting) {
		t.Fatalf("past the longest wait: enter = %v, want ErrOutageLasting", err)
	}
	w, err := g.Enter(unsent, 0, time.Time{})
	if err != nil {
		t.Fatalf("unsent, past the longest wait but within %v of it: enter = %v, want a wait", tune.FutileUnsent, err)
	}
	w.Leave()
	clk.advance(time.Duration((tune.FutileUnsent - 1) * float64(deadline)))
	if _, err := g.Enter(unsent, 0, time.Time{}); !errors.Is(err, ErrOutageLasting) {
		t.Fatalf("unsent, past %v times the longest wait: enter = %v, want ErrOutageLasting", tune.FutileUnsent, err)
	}
}

// A retry whose call has a deadline waits through an outage's first
// tune.FutileDeadlines of its deadlines, to its deadline, for the return may
// come first (lab migrate-outage: 3 s down, 1 s deadlines; the futility rule
// failed the calls made in its last second at once, and served none of the
// outage's calls, where a client without a Gate served a fifth); later it
// fails at once (issue 88: a 15 s outage failed every call at its deadline).
func TestGateOutageWaitsToTheDeadline(t *testing.T) {
	const deadline = time.Second
	clk := &manualClock{now: t0}
	g := inOutage(t, clk, DeferSettings{})
	early, err := g.Enter(retry2, 100*time.Millisecond, clk.Now().Add(deadline))
	if err != nil {
		t.Fatal(err)
	}
	early.Leave()
	// The outage outlives the calls' deadlines twice over.
	for range 20 {
		clk.advance(100 * time.Millisecond)
		failures(g, 1)
	}
	var ws []*Waiter
	for i := range 2 {
		w, err := g.Enter(retry2, 100*time.Millisecond, clk.Now().Add(deadline))
		if err != nil {
			t.Fatalf("2 s into the outage, retry %d with a 1 s deadline: enter = %v, want a wait", i+1, err)
		}
		defer w.Leave()
		ws = append(ws, w)
	}
	// The backend is back half a second later: a new call is served.
	for range 5 {
		clk.advance(100 * time.Millisecond)
		for _, w := range ws {
			if a, _, err := w.Poll(); a != AdmitNone || err != nil {
				t.Fatalf("in the outage: Poll = %v, %v; want a wait", a, err)
			}
		}
	}
	g.Record(Attempt{Number: 1, Outcome: Success, Took: time.Millisecond})
	for range 49 {
		clk.advance(10 * time.Millisecond)
		waiting := ws[:0]
		for _, w := range ws {
			a, _, err := w.Poll()
			switch {
			case err != nil:
				t.Fatalf("%v after the return: a wait ended: %v", clk.Now().Sub(t0.Add(3500*time.Millisecond)), err)
			case a == AdmitNone:
				waiting = append(waiting, w)
			default:
				g.Record(Attempt{Number: 2, Outcome: Success, Admission: a})
			}
		}
		if ws = waiting; len(ws) == 0 {
			return
		}
	}
	t.Fatalf("%d retries held through the outage did not go before their deadline", len(ws))
}

// Three of its deadlines into an outage, a call with a 1 s deadline fails
// at once; one with 2 s left waits, and so does one whose attempt never
// left the client (its turn half as far).
func TestGateOutageFailsAtOnceAfterThreeDeadlines(t *testing.T) {
	const deadline = time.Second
	clk := &manualClock{now: t0}
	g := inOutage(t, clk, DeferSettings{})
	early, err := g.Enter(retry2, 100*time.Millisecond, clk.Now().Add(deadline))
	if err != nil {
		t.Fatal(err)
	}
	early.Leave()
	// (Fewer than tune.FutileEvery failures: no lone probe.)
	for range 29 {
		clk.advance(100 * time.Millisecond)
		failures(g, 1)
	}
	clk.advance(100 * time.Millisecond)
	if _, err := g.Enter(retry2, 100*time.Millisecond, clk.Now().Add(deadline)); !errors.Is(err, ErrOutageLasting) {
		t.Fatalf("3 s into the outage, a retry with a 1 s deadline: enter = %v, want ErrOutageLasting", err)
	}
	unsent := retry2
	unsent.Unsent = true
	for _, tc := range []struct {
		r    Request
		left time.Duration
	}{{retry2, 2 * deadline}, {unsent, deadline}} {
		w, err := g.Enter(tc.r, 100*time.Millisecond, clk.Now().Add(tc.left))
		if err != nil {
			t.Fatalf("3 s into the outage, %+v with %v left: enter = %v, want a wait", tc.r, tc.left, err)
		}
		w.Leave()
	}
}

// In a long outage whose new calls keep failing, a call with a deadline
// waits to it (TestGateOutageWaitsToTheDeadline), and its last chance is a
// probe: once one failed in the outage, the next waits for the probe gap
// after the latest failure, which the new calls' failures, each sooner than
// the gap, keep moving: one retry goes in all (a last chance at each
// deadline, spaced only by the gap after the latest failed one, sent 3 for
// 50 calls here; property seed 2495, 5 retries for 9 calls).
func TestGateLongOutageLastChancesAreProbes(t *testing.T) {
	const deadline, every = 2 * time.Second, 400 * time.Millisecond
	clk := &manualClock{now: t0}
	g := inOutage(t, clk, DeferSettings{})
	type call struct {
		w  *Waiter
		at time.Time // its retry's attempt ends then (zero: none out)
	}
	var calls []*call
	retries := 0
	for step := range 2000 { // 20 s in steps of 10 ms
		if step%int(every/(10*time.Millisecond)) == 0 {
			// A new call's first attempt fails; its last attempt waits.
			failures(g, 1)
			w, err := g.Enter(Request{Number: 2, Last: true}, 10*time.Millisecond, clk.Now().Add(deadline))
			switch {
			case errors.Is(err, ErrOutageLasting) && clk.Now().Sub(t0) >= tune.FutileDeadlines*deadline:
				// Past three of its deadlines: it fails at once.
			case err != nil:
				t.Fatalf("%v into the outage: enter = %v, want a wait to the deadline", clk.Now().Sub(t0), err)
			default:
				calls = append(calls, &call{w: w})
			}
		}
		for _, c := range calls {
			switch {
			case c.w == nil && !c.at.IsZero() && !clk.Now().Before(c.at):
				g.Record(Attempt{Number: 2, Outcome: Failure, Final: true, Admission: admitLast, Took: 5 * time.Millisecond})
				c.at = time.Time{}
			case c.w != nil:
				a, _, err := c.w.Poll()
				if err != nil || a != AdmitNone {
					c.w = nil
				}
				if a != AdmitNone {
					retries++
					c.at = clk.Now().Add(5 * time.Millisecond)
				}
			}
		}
		clk.advance(10 * time.Millisecond)
	}
	for _, c := range calls {
		if c.w != nil {
			c.w.Leave()
		}
	}
	// Past three deadlines the futility rule fails the calls at once, but
	// for its lone probe, one per tune.FutileEvery failures at most.
	if lone := int(20*time.Second/every) / tune.FutileEvery; retries < 1 || retries > 1+lone {
		t.Errorf("a 20 s outage, a call every %v with a %v deadline: %d retries for %d calls waiting, want the one that found the outage, and %d lone probes at most", every, deadline, retries, len(calls), lone)
	}
}

// The futility rule's estimate is the outage's: the backend's return as
// far off as the outage has lasted. A refusal for overload is an answer of
// a backend that is up, so once one came lately the estimate gives a call
// already held no turn, and a retry whose call waited most of its MaxWait
// waits the rest of it
// (issue 72: in the fleet sim, held calls refused after the return were
// turned away a few hundred milliseconds before their bound).
func TestGateFutilityNotAfterARefusal(t *testing.T) {
	const maxWait = 2 * time.Second
	clk := &manualClock{now: t0}
	g := inOutage(t, clk, DeferSettings{MaxWait: maxWait})
	// A probe is out past MaxWait: nothing lets it go first.
	g.mu.Lock()
	g.st.pace.until = clk.Now().Add(maxWait)
	g.mu.Unlock()
	early, err := g.Enter(retry2, 0, time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	clk.advance(maxWait)
	if _, _, err := early.Poll(); !errors.Is(err, errWaitLimit) {
		t.Fatalf("the first wait at MaxWait: Err %v, want errWaitLimit", err)
	}
	early.Leave()
	g.mu.Lock()
	g.st.pace.until = time.Time{} // the probe's answer came, unrecorded
	g.mu.Unlock()
	// Without a refusal the rule turns a retry away (TestGateFutility).
	r := Request{Number: 3, Waited: maxWait - 100*time.Millisecond}
	if _, err := g.Enter(r, 0, time.Time{}); !errors.Is(err, ErrOutageLasting) {
		t.Fatalf("in the outage: enter = %v, want ErrOutageLasting", err)
	}
	// The backend answers again, refusing for overload; a probe is out
	// again, so that the retry waits.
	g.Record(Attempt{Number: 1, Outcome: Failure, Overload: true})
	g.mu.Lock()
	g.st.pace.until = clk.Now().Add(maxWait)
	g.mu.Unlock()
	w, err := g.Enter(r, 0, time.Time{})
	if err != nil {
		t.Fatalf("after a refusal for overload: enter = %v, want a wait to its MaxWait", err)
	}
	defer w.Leave()
	clk.advance(100*time.Millisecond - time.Nanosecond)
	if a, _, err := w.Poll(); err != nil {
		t.Fatalf("before its MaxWait: Poll = %v, Err %v, want a wait", a, err)
	}
	clk.advance(time.Nanosecond)
	if a, _, err := w.Poll(); !errors.Is(err, errWaitLimit) {
		t.Fatalf("at its MaxWait: Poll = %v, Err %v, want errWaitLimit", a, err)
	}
}

package budget

import (
	"context"
	"errors"
	tune "github.com/stagger-go/stagger/internal/gatetune"
	"sync"
	"testing"
	"time"

	"github.com/stagger-go/stagger/criticality"
)

// Shorter names for the table rows.
const (
	shed  = criticality.Sheddable
	shedP = criticality.SheddablePlus
	unset = criticality.Unset
	crit  = criticality.Critical
	critP = criticality.CriticalPlus
)

func retryAt(l criticality.Level) Request { return Request{Number: 2, Criticality: l} }

// The criticality rule, a full gate: the arrival evicts the least critical waiting
// retry below its level, the latest of that level to enter, or is refused
// when none is less critical. Unset counts as CRITICAL.
func TestGateEvictsTheLeastCritical(t *testing.T) {
	tests := []struct {
		name    string
		waiting []criticality.Level
		arrival criticality.Level
		evicted int // index into waiting; -1: the arrival is refused
	}{
		{"CRITICAL evicts SHEDDABLE", []criticality.Level{crit, shed, shedP}, crit, 1},
		{"the least critical goes first", []criticality.Level{shedP, shed, crit}, critP, 1},
		{"the latest of its level", []criticality.Level{shed, crit, shed}, crit, 2},
		{"SHEDDABLE_PLUS evicts SHEDDABLE", []criticality.Level{crit, shed, crit}, shedP, 1},
		{"Unset counts as CRITICAL", []criticality.Level{shedP, crit, crit}, unset, 0},
		{"Unset is not evicted by CRITICAL", []criticality.Level{unset, crit, unset}, crit, -1},
		{"nothing less critical", []criticality.Level{crit, critP, crit}, crit, -1},
		{"SHEDDABLE never evicts", []criticality.Level{shed, shed, shed}, shed, -1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clk := &manualClock{now: t0}
			g := newGate(t, &switchBudget{}, DeferSettings{MaxWaiting: len(tt.waiting)}, clk)
			ws := make([]*Waiter, len(tt.waiting))
			for i, l := range tt.waiting {
				w, err := g.Enter(retryAt(l), time.Second, time.Time{})
				if err != nil {
					t.Fatal(err)
				}
				defer w.Leave()
				ws[i] = w
			}
			w, err := g.Enter(retryAt(tt.arrival), time.Second, time.Time{})
			if tt.evicted < 0 {
				if !errors.Is(err, ErrTooManyWaiting) || errors.Is(err, errEvicted) {
					t.Fatalf("Enter = %v, want ErrTooManyWaiting", err)
				}
			} else {
				if err != nil {
					t.Fatalf("Enter: %v", err)
				}
				defer w.Leave()
				select {
				case <-ws[tt.evicted].Ready():
				default:
					t.Fatal("an eviction did not wake the waiter evicted")
				}
			}
			for i, v := range ws {
				err := v.err()
				if i == tt.evicted {
					if !errors.Is(err, errEvicted) || !errors.Is(err, ErrTooManyWaiting) {
						t.Errorf("waiter %d (%v): Err = %v, want errEvicted", i, tt.waiting[i], err)
					}
					if a, next, _ := v.Poll(); a != AdmitNone || !next.IsZero() {
						t.Errorf("evicted waiter: Poll = %v, %v", a, next)
					}
				} else if err != nil {
					t.Errorf("waiter %d (%v): Err = %v, want none", i, tt.waiting[i], err)
				}
			}
			st := g.State()
			if st.Waiting != len(tt.waiting) || st.DeferGaveUp != 1 {
				t.Fatalf("State: %d waiting, %d gave up; want %d and 1", st.Waiting, st.DeferGaveUp, len(tt.waiting))
			}
		})
	}
}

// The criticality rule, admissions: a release, a probe or a last chance that a less
// critical waiter's Poll finds due goes to the most critical waiter that
// may go now (the oldest of its level), which its own Poll then returns;
// a more critical waiter whose pause has not ended, or whose own last
// chance is not due, does not hold it back.
func TestGateHandsAdmissionsToTheMostCritical(t *testing.T) {
	deadline := t0.Add(2 * time.Second)
	type entry struct {
		level    criticality.Level
		pause    time.Duration
		last     bool // the call's last attempt, with a deadline
		deadline time.Time
	}
	tests := []struct {
		name    string
		phase   phase
		at      time.Time
		waiting []entry
		poller  int // the waiter that polls first
		want    int // the waiter admitted
		how     Admission
	}{
		{"release to CRITICAL_PLUS", phaseRecovering, t0, []entry{{level: shed}, {level: crit}, {level: critP}}, 0, 2, admitRelease},
		{"release, the oldest of the level", phaseRecovering, t0, []entry{{level: shed}, {level: crit}, {level: crit}}, 0, 1, admitRelease},
		{"release, Unset as CRITICAL", phaseRecovering, t0, []entry{{level: shedP}, {level: unset}}, 0, 1, admitRelease},
		{"release, no one more critical", phaseRecovering, t0, []entry{{level: crit}, {level: shed}}, 0, 0, admitRelease},
		{"release, same level keeps it", phaseRecovering, t0, []entry{{level: crit}, {level: crit}}, 1, 1, admitRelease},
		{"probe to CRITICAL", phaseOutage, t0, []entry{{level: shedP}, {level: crit}}, 0, 1, admitProbe},
		{"release, CRITICAL's pause not over", phaseRecovering, t0, []entry{{level: shedP}, {level: crit, pause: time.Second}}, 0, 0, admitRelease},
		{"last chance to CRITICAL", phaseOutage, deadline.Add(-tune.LastChanceLead), []entry{
			{level: shedP, last: true, deadline: deadline}, {level: crit, last: true, deadline: deadline}}, 0, 1, admitLast},
		{"last chance, CRITICAL's not due", phaseOutage, deadline.Add(-tune.LastChanceLead), []entry{
			{level: shedP, last: true, deadline: deadline}, {level: crit, last: true, deadline: deadline.Add(time.Second)}}, 0, 0, admitLast},
		{"probe over a last chance", phaseOutage, deadline.Add(-tune.LastChanceLead), []entry{
			{level: shedP, last: true, deadline: deadline}, {level: critP}}, 0, 1, admitProbe},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clk := &manualClock{now: t0}
			g := downServer(newGate(t, &switchBudget{}, DeferSettings{}, clk))
			ws := make([]*Waiter, len(tt.waiting))
			for i, e := range tt.waiting {
				r := retryAt(e.level)
				r.Last = e.last
				w, err := g.Enter(r, e.pause, e.deadline)
				if err != nil {
					t.Fatal(err)
				}
				defer w.Leave()
				ws[i] = w
			}
			g.mu.Lock()
			g.st.phase = tt.phase
			for _, w := range ws {
				// They waited through an outage: the gate holds them
				// (the hold and hopeless rules).
				w.view.held = true
			}
			if tt.phase == phaseRecovering {
				g.st.pace.set(tt.at, 1)
			}
			g.mu.Unlock()
			clk.set(tt.at)
			for i := range ws {
				// The first to poll, then the others in order.
				w := ws[(tt.poller+i)%len(ws)]
				idx := (tt.poller + i) % len(ws)
				a, _, _ := w.Poll()
				want := AdmitNone
				if idx == tt.want {
					want = tt.how
				}
				if a != want {
					t.Fatalf("waiter %d (%v): Poll = %v, want %v", idx, tt.waiting[idx].level, a, want)
				}
			}
			if st := g.State(); st.DeferAdmitted != 1 {
				t.Fatalf("%d admitted, want 1", st.DeferAdmitted)
			}
		})
	}
}

// An admission handed to a waiter that leaves without taking it (its
// caller gave up) is given back: the probe slot is free again.
func TestGateTakesBackAnUntakenHandOff(t *testing.T) {
	clk := &manualClock{now: t0}
	g := downServer(newGate(t, &switchBudget{}, DeferSettings{}, clk))
	for range tune.OutageStreak {
		g.Record(Attempt{Number: 1, Outcome: Failure})
	}
	low, _ := g.Enter(retryAt(shedP), 0, time.Time{})
	defer low.Leave()
	high, _ := g.Enter(retryAt(critP), 0, time.Time{})
	poll(t, low, AdmitNone) // handed to high
	high.Leave()            // which never polls
	if st := g.State(); st.DeferAdmitted != 0 {
		t.Fatalf("%d admitted after the hand-off was given back, want 0", st.DeferAdmitted)
	}
	poll(t, low, admitProbe)
}

// refusingGuard is a Guard that is not closed and refuses every retry.
type refusingGuard struct{ asked int }

func (g *refusingGuard) Closed() bool { return false }
func (g *refusingGuard) AllowRetry() (bool, time.Time) {
	g.asked++
	return false, time.Time{}
}

// The criticality rule with the guard rule: a more critical waiter with a
// guard gets no hand-off (its guard must be asked first, and is asked only
// by its own Poll); the less critical waiter takes the admission, and the
// guarded one's Poll asks its guard.
func TestGateHandOffSkipsAGuardedWaiter(t *testing.T) {
	clk := &manualClock{now: t0}
	g := downServer(newGate(t, &switchBudget{}, DeferSettings{}, clk))
	for range tune.OutageStreak {
		g.Record(Attempt{Number: 1, Outcome: Failure})
	}
	low, _ := g.Enter(retryAt(shedP), 0, time.Time{})
	defer low.Leave()
	guard := &refusingGuard{}
	r := retryAt(critP)
	r.Guard = guard
	high, _ := g.Enter(r, 0, time.Time{})
	defer high.Leave()
	poll(t, low, admitProbe)
	if guard.asked != 0 {
		t.Fatalf("the guard was asked %d times by another's Poll, want never", guard.asked)
	}
	poll(t, high, AdmitNone)
	if guard.asked != 0 {
		t.Fatalf("the guard was asked %d times while another's probe was out, want never", guard.asked)
	}
	g.Record(Attempt{Number: 2, Outcome: Failure, Admission: admitProbe})
	poll(t, high, AdmitNone)
	if guard.asked != 1 {
		t.Fatalf("the guard was asked %d times by its waiter's Poll once the probe reported, want once", guard.asked)
	}
}

// TestRealTimeGateReleasesTheMostCriticalFirst is
// TestGateReleasesTheMostCriticalFirst on the real clock (about two
// seconds): which waiting goroutine wakes first at each credit is up to
// the scheduler, and the release order must not depend on it.
func TestRealTimeGateReleasesTheMostCriticalFirst(t *testing.T) {
	if testing.Short() {
		t.Skip("real time: two seconds")
	}
	checkReleaseOrder(t)
}

// checkReleaseOrder: in an outage a probe goes out, three calls without
// a deadline (SHEDDABLE, CRITICAL_PLUS, CRITICAL) wait; the probe finds
// the server back (a whole
// credit at once, then one a second): they must be released CRITICAL_PLUS,
// CRITICAL, SHEDDABLE.
func checkReleaseOrder(t *testing.T) {
	g := outageProbed(t, DeferSettings{})
	got := make(chan criticality.Level, 3)
	for _, l := range []criticality.Level{shed, critP, crit} {
		go func() {
			// No deadline: a call with one that was held through the
			// outage goes back its own pause after it, without a credit
			// (the release rule).
			a, err := g.Wait(context.Background(), retryAt(l), 0)
			if err != nil || a != admitRelease {
				t.Errorf("%v: Wait = %v, %v; want a release", l, a, err)
			}
			got <- l
		}()
	}
	for i := 0; g.State().Waiting < 3; i++ {
		if i == 5000 {
			t.Fatalf("%d calls wait after 5 s, want 3", g.State().Waiting)
		}
		time.Sleep(time.Millisecond)
	}
	g.Record(Attempt{Number: 2, Outcome: Success, Admission: admitProbe})
	var order []criticality.Level
	for range 3 {
		order = append(order, <-got)
	}
	if want := []criticality.Level{critP, crit, shed}; !equalLevels(order, want) {
		t.Fatalf("released %v, want %v", order, want)
	}
}

// outageProbed returns a Gate on the time package's clock in an outage
// (so that it holds the waits, the hold and hopeless rules) whose probe went out and has not
// reported, so that nothing admits a wait until news comes.
func outageProbed(t *testing.T, s DeferSettings) *Gate {
	t.Helper()
	g, err := Deferring(&switchBudget{}, s)
	if err != nil {
		t.Fatal(err)
	}
	downServer(g)
	for range tune.OutageStreak {
		g.Record(Attempt{Number: 1, Outcome: Failure})
	}
	w, _ := g.Enter(retry2, 0, time.Time{})
	if a, _, _ := w.Poll(); a != admitProbe {
		t.Fatalf("first Poll = %v, want a probe", a)
	}
	w.Leave()
	return g
}

// TestGateEnterHeldBeforePoll: a retry with no pause that begins to wait
// in an outage is held from its entry, even when the news that ends the
// outage (the probe served) comes before its first decision: it goes back
// by the release rule (the probe's credit), not at once as a probe by the
// hold rule. Before the fix the wait was held only at its first Poll, and
// a goroutine preempted between entering and polling went as a probe
// (TestRealTimeGateReleasesTheMostCriticalFirst failed so in one CI run:
// "CRITICAL: Wait = probe").
func TestGateEnterHeldBeforePoll(t *testing.T) {
	g := outageProbed(t, DeferSettings{})
	w, err := g.Enter(retryAt(crit), 0, time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Leave()
	g.Record(Attempt{Number: 2, Outcome: Success, Admission: admitProbe})
	if a, _, _ := w.Poll(); a != admitRelease {
		t.Fatalf("first Poll after the probe was served = %v, want a release", a)
	}
}

// A probe handed to a more critical waiter takes no tokens: the budget is
// asked when the waiter's Poll takes it. One that leaves before it polls
// gives the probe slot back and leaves the tokens as they were; one that
// polls is paid for: every admission is settled.
func TestGateHandOffIsPaidWhenTaken(t *testing.T) {
	clk := &manualClock{now: t0}
	tb, err := newTokenBucket(DefaultSettings().TokenBucket)
	if err != nil {
		t.Fatal(err)
	}
	g := downServer(newGate(t, tb, DeferSettings{}, clk))
	for range tune.OutageStreak {
		g.Record(Attempt{Number: 1, Outcome: Failure})
	}
	before := tb.State().Level
	low, _ := g.Enter(retryAt(shedP), 0, time.Time{})
	defer low.Leave()
	high, _ := g.Enter(retryAt(critP), 0, time.Time{})
	poll(t, low, AdmitNone) // handed to high
	high.Leave()            // which never polls
	if got := tb.State().Level; got != before {
		t.Errorf("tokens %v after an untaken hand-off, want %v", got, before)
	}
	high, _ = g.Enter(retryAt(critP), 0, time.Time{})
	defer high.Leave()
	poll(t, low, AdmitNone) // the slot given back is handed to the new one
	poll(t, high, AdmitBudget)
	if got, want := tb.State().Level, before-DefaultSettings().TokenBucket.RetryCost; got != want {
		t.Errorf("tokens %v after the hand-off was taken, want %v", got, want)
	}
}

// reentrantGuard is a Guard whose every method calls back into the Gate
// (State; AllowRetry Changed too), as a guard that logs the gate's state would: it
// deadlocks if the gate asks it under its lock. It has one probe slot, as
// a half-open breaker has.
type reentrantGuard struct {
	g     *Gate
	mu    sync.Mutex
	out   int
	max   int
	asked int
}

func (r *reentrantGuard) Closed() bool {
	r.g.State()
	return false
}

func (r *reentrantGuard) AllowRetry() (bool, time.Time) {
	r.g.State()
	r.g.Allow(retry2)
	r.mu.Lock()
	defer r.mu.Unlock()
	r.asked++
	if r.out > 0 {
		return false, time.Time{}
	}
	r.out++
	r.max = max(r.max, r.out)
	return true, time.Time{}
}

func (r *reentrantGuard) done() {
	r.mu.Lock()
	r.out--
	r.mu.Unlock()
}

// reentrantBudget is a Budget whose Allow calls back into the Gate.
type reentrantBudget struct {
	switchBudget
	g *Gate
}

func (b *reentrantBudget) Allow(r Request) bool {
	b.g.State()
	return b.switchBudget.Allow(r)
}

// A guard and a budget that call back into the Gate while it admits a
// waiting retry: nothing foreign runs under the gate's lock, so neither
// deadlocks; the guard's probe slot is taken only by the retry that goes.
func TestGateAsksNothingForeignUnderItsLock(t *testing.T) {
	clk := &manualClock{now: t0}
	b := &reentrantBudget{}
	g := downServer(newGate(t, b, DeferSettings{MaxWait: time.Hour}, clk)) // waits past the minute below
	b.g = g
	for range tune.OutageStreak {
		g.Record(Attempt{Number: 1, Outcome: Failure})
	}
	guard := &reentrantGuard{g: g}
	done := make(chan struct{})
	go func() {
		defer close(done)
		r := retryAt(crit)
		r.Guard = guard
		w, _ := g.Enter(r, 0, time.Time{})
		defer w.Leave()
		plain, _ := g.Enter(retryAt(crit), 0, time.Time{})
		defer plain.Leave()
		if a, _, _ := w.Poll(); a != admitProbe {
			t.Errorf("guarded Poll = %v, want a probe", a)
		}
		b.open.Store(true)
		g.Record(Attempt{Number: 2, Outcome: Failure, Admission: admitProbe})
		clk.advance(time.Minute)
		if a, _, _ := plain.Poll(); a != AdmitBudget {
			t.Errorf("unguarded Poll with the budget open = %v, want a paid probe", a)
		}
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("deadlock: the Gate asked its guard or budget under its lock")
	}
	if guard.out != 1 || guard.asked != 1 {
		t.Errorf("guard: %d out, asked %d times; want 1 and 1", guard.out, guard.asked)
	}
}

// Goroutines of every criticality meet on one Gate and one guard's probe
// slot (under -race), the guard calling back into the gate: each enters,
// polls, and either sends what it was admitted (then reports it to the
// guard, as a breaker's Record frees its probe) or leaves at once. When
// all have left, the slot is free: the guard's slot went only to retries
// that were sent, never two at once.
func TestGateGuardSlotSettledUnderConcurrency(t *testing.T) {
	clk := &manualClock{now: t0}
	g := downServer(newGate(t, &switchBudget{}, DeferSettings{}, clk))
	for range tune.OutageStreak {
		g.Record(Attempt{Number: 1, Outcome: Failure})
	}
	guard := &reentrantGuard{g: g}
	levels := criticality.Levels()
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range 300 {
				r := retryAt(levels[(i+j)%len(levels)])
				r.Guard = guard
				w, err := g.Enter(r, 0, time.Time{})
				if err != nil {
					continue
				}
				if (i+j)%3 == 0 {
					w.Leave() // left at once: a hand-off it got is given back
					continue
				}
				clk.advance(time.Millisecond)
				if a, _, _ := w.Poll(); a != AdmitNone {
					w.Leave()
					guard.done() // the retry went, and reported
					g.Record(Attempt{Number: 2, Outcome: Failure, Admission: a})
					continue
				}
				w.Leave()
			}
		}()
	}
	wg.Wait()
	guard.mu.Lock()
	defer guard.mu.Unlock()
	if guard.out != 0 || guard.max > 1 {
		t.Errorf("guard's slot: %d out after every waiter left (at most %d at once); want 0, and never 2", guard.out, guard.max)
	}
}

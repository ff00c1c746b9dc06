package budget

import (
	"context"
	"errors"
	"github.com/stagger-go/stagger/internal/clock"
	tune "github.com/stagger-go/stagger/internal/gatetune"
	"math"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// manualClock is a clock the test moves by hand.
type manualClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *manualClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *manualClock) set(t time.Time) {
	c.mu.Lock()
	c.now = t
	c.mu.Unlock()
}

func (c *manualClock) advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

// switchBudget admits when open is set; it records nothing.
type switchBudget struct{ open atomic.Bool }

func (b *switchBudget) Record(Attempt)     {}
func (b *switchBudget) Allow(Request) bool { return b.open.Load() }
func (b *switchBudget) State() State       { return State{Kind: "switch"} }

// downServer gives g a server that served for tune.Calm and whose latest
// calls that retried were none healed (the heal rule), so that failures in a row
// make an outage (the outage and overload rules).
func downServer(g *Gate) *Gate {
	g.mu.Lock()
	g.st.ev.calls, g.st.ev.seen, g.st.ev.lastFail, g.st.ev.lastRetry = 1<<tune.HealWindow, true, g.now().Add(-tune.Calm), g.now()
	g.mu.Unlock()
	return g
}

// downAfterServing is a gate on clk whose server served, then, a calm
// 2*tune.Calm later and its retries known to fail (down, not
// flaky), failed tune.Evidence new calls in a row: an outage whose
// first success starts a return.
func downAfterServing(t *testing.T, clk *manualClock) *Gate {
	t.Helper()
	g := newGate(t, &switchBudget{}, DeferSettings{}, clk)
	g.Record(Attempt{Number: 1, Outcome: Success})
	clk.advance(2 * tune.Calm)
	g.mu.Lock()
	g.st.ev.retryFails = tune.Evidence
	g.mu.Unlock()
	failures(g, tune.Evidence)
	return g
}

// takeReady takes each waiter of ws whose Ready is closed and that taken
// does not mark yet, and passes its verdict to on; taken marks those
// admitted or ended (a guard's refusal leaves one waiting).
func takeReady(ws []*Waiter, taken []bool, on func(i int, a Admission, err error)) {
	for i, w := range ws {
		if taken[i] {
			continue
		}
		select {
		case <-w.Ready():
		default:
			continue
		}
		a, err := w.Take()
		taken[i] = a != AdmitNone || err != nil
		on(i, a, err)
	}
}

// inOutage is a gate of settings s on clk whose server served, then failed
// tune.Evidence new calls in a row (downServer): an outage.
func inOutage(t *testing.T, clk *manualClock, s DeferSettings) *Gate {
	t.Helper()
	g := downServer(newGate(t, &switchBudget{}, s, clk))
	failures(g, tune.Evidence)
	return g
}

func newGate(t *testing.T, b Budget, s DeferSettings, clk *manualClock) *Gate {
	t.Helper()
	g, err := Deferring(b, s, WithClock(clk.Now))
	if err != nil {
		t.Fatal(err)
	}
	return g
}

var retry2 = Request{Number: 2}

func poll(t *testing.T, w *Waiter, want Admission) time.Time {
	t.Helper()
	got, next, _ := w.Poll()
	if got != want {
		t.Fatalf("Poll = %v, want %v", got, want)
	}
	return next
}

// takeIfReady takes w's grant when it was let go (Ready), without
// blocking: AdmitNone when it was not.
func takeIfReady(w *Waiter) Admission {
	select {
	case <-w.Ready():
		a, _ := w.Take()
		return a
	default:
		return AdmitNone
	}
}

func TestGateProbesWhenQuiet(t *testing.T) {
	clk := &manualClock{now: t0}
	// Retries are known not to heal, and the server served: failures in
	// a row are an outage, and first attempts' failures are evidence too
	// (see TestGateProbesUntilRetriesAreKnown).
	g := inOutage(t, clk, DeferSettings{})
	const pause = 100 * time.Millisecond
	w, err := g.Enter(retry2, pause, time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Leave()
	// Never sooner than its pause.
	if next := poll(t, w, AdmitNone); !next.Equal(t0.Add(pause)) {
		t.Fatalf("next = %v, want the end of the pause", next.Sub(t0))
	}
	// Another call's attempt failed at 60ms: fresher evidence than the
	// retry would bring, and one more failure: the probe gap doubles from
	// the pause (200ms), and the probe is due that quiet time after it.
	// Before, at its pause and a tenth, the gate holds the wait (the hold and hopeless rules).
	clk.advance(60 * time.Millisecond)
	g.Record(Attempt{Number: 1, Outcome: Failure})
	clk.advance(40 * time.Millisecond)
	if next := poll(t, w, AdmitNone); !next.Equal(t0.Add(110 * time.Millisecond)) {
		t.Fatalf("next = %v, want the hold time, 110ms", next.Sub(t0))
	}
	clk.advance(10 * time.Millisecond)
	if next := poll(t, w, AdmitNone); !next.Equal(t0.Add(260 * time.Millisecond)) {
		t.Fatalf("held: next = %v, want 260ms", next.Sub(t0))
	}
	clk.advance(150 * time.Millisecond)
	poll(t, w, admitProbe)

	// One deferred retry out at a time.
	w2, err := g.Enter(retry2, 0, time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	defer w2.Leave()
	clk.advance(time.Second)
	// The probe's call has no deadline: its slot expires tune.ProbeGapMax after
	// it went, unless it reports (the settling rule); w2's own wait ends
	// sooner (DeferSettings.MaxWait).
	slotEnd, w2End := t0.Add(260*time.Millisecond+tune.ProbeGapMax), t0.Add(260*time.Millisecond+defaultMaxWait)
	if next := poll(t, w2, AdmitNone); !next.Equal(clock.Earlier(slotEnd, w2End)) {
		t.Fatalf("with a probe out, next = %v, want when the probe's slot expires or w2's wait ends", next.Sub(t0))
	}
	// The probe failed: the quiet time doubles (400ms).
	g.Record(Attempt{Number: 2, Outcome: Failure, Admission: admitProbe})
	if next := poll(t, w2, AdmitNone); !next.Equal(clk.Now().Add(400 * time.Millisecond)) {
		t.Fatalf("after a failed probe, next = %v from now, want 400ms", next.Sub(clk.Now()))
	}
	clk.advance(400 * time.Millisecond)
	poll(t, w2, admitProbe)
}

func TestGateReleasesAfterRecovery(t *testing.T) {
	clk := &manualClock{now: t0}
	const drawn = 0.25
	g, err := Deferring(&switchBudget{}, DeferSettings{}, WithClock(clk.Now))
	if err != nil {
		t.Fatal(err)
	}
	g.st.rand = func() float64 { return drawn }
	var ws []*Waiter
	for range 4 {
		w, err := g.Enter(retry2, time.Second, time.Time{})
		if err != nil {
			t.Fatal(err)
		}
		ws = append(ws, w)
	}
	defer func() {
		for _, w := range ws {
			w.Leave()
		}
	}()
	// An outage: tune.Evidence failures in a row. Each doubles the probe
	// gap from the pause (1s), up to tune.QuietGapMax.
	downServer(g)
	for range tune.Evidence {
		g.Record(Attempt{Number: 1, Outcome: Failure})
	}
	if g.Allow(retry2) {
		t.Fatal("Allow admitted a retry while calls wait during an outage")
	}
	// At their pause and a tenth, the gate holds the waits (the hold and hopeless rules).
	gap := min(time.Second<<tune.Evidence, tune.QuietGapMax)
	// The first is told when the probe is due; the others, held without
	// a deadline, hear of it from Ready when it is theirs (one waiter
	// sleeps to a paced time), else at their wait's end.
	clk.advance(1100 * time.Millisecond)
	for i, w := range ws {
		if next, want := poll(t, w, AdmitNone), t0.Add(gap); !next.Equal(want) { // the probe's time
			t.Fatalf("waiter %d: next %v, want %v", i, next, want)
		}
	}
	clk.set(t0.Add(gap))
	poll(t, ws[0], admitProbe)
	// The probe succeeds: the server is back. Fewer than tune.BackMinHeld
	// retries began to wait in the outage (these four began before it):
	// the calls held through it go back unpaced, each its pause after the
	// return (they have no deadline).
	g.Record(Attempt{Number: 2, Outcome: Success, Admission: admitProbe})
	if g.health() == phaseOutage {
		t.Fatal("the outage did not end with a success")
	}
	if next := poll(t, ws[1], AdmitNone); !next.Equal(clk.Now().Add(time.Second)) {
		t.Fatalf("next = %v from now, want its pause (1s)", next.Sub(clk.Now()))
	}
	clk.advance(time.Second)
	poll(t, ws[1], admitRelease)
	clk.advance(time.Microsecond) // the least pace
	poll(t, ws[2], admitRelease)
	// Successes halve the probe gap.
	for range 4 {
		g.Record(Attempt{Number: 1, Outcome: Success})
	}
	// A released retry that fails for overload: the backend is up, and
	// refuses (issue 88: a refusal for overload makes no failing phase nor
	// outage); the last goes as a release, at the pace the refusal slowed.
	g.Record(Attempt{Number: 2, Outcome: Failure, Admission: admitRelease, Overload: true})
	a, next, _ := ws[3].Poll()
	if a != AdmitNone || !next.After(clk.Now()) || next.After(clk.Now().Add(releaseEvery)) {
		t.Fatalf("Poll = %v, next %v from now; want none, within the release interval", a, next.Sub(clk.Now()))
	}
	clk.set(next)
	poll(t, ws[3], admitRelease)
	if st := g.State(); st.Waiting != 0 || st.Deferred != 4 || st.DeferAdmitted != 4 {
		t.Fatalf("State = %+v, want none waiting, 4 deferred, 4 admitted", st)
	}
}

// TestGateRandomFailuresKeepCredits: fewer than tune.Evidence failures in a
// row are a serving server's random failures: the credits stay, and Allow
// keeps asking the budget.
func TestGateRandomFailuresKeepCredits(t *testing.T) {
	clk := &manualClock{now: t0}
	sb := &switchBudget{}
	g := newGate(t, sb, DeferSettings{}, clk)
	// A call waits (a long pause: it is not asked again here), from after
	// an outage with half a credit.
	w, err := g.Enter(retry2, time.Minute, time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Leave()
	g.mu.Lock()
	g.st.phase = phaseRecovering
	g.st.pace.set(t0, 0.5)
	g.mu.Unlock()
	clk.advance(time.Second / 4)
	for range tune.Evidence - 1 {
		g.Record(Attempt{Number: 1, Outcome: Failure})
	}
	sb.open.Store(true)
	if !g.Allow(retry2) {
		t.Fatal("Allow refused after random failures")
	}
	g.Record(Attempt{Number: 1, Outcome: Success})
	// Half a credit and a quarter of a second's, in the interval the
	// success quickened (the room's pace), plus one success's gain.
	g.mu.Lock()
	credits := g.st.pace.credits(clk.Now())
	g.mu.Unlock()
	if want := 1 - (1-0.5-tune.ReleasePerSecond/4)/tune.BackFaster + tune.ReleaseGainStart; math.Abs(credits-want) > 1e-9 {
		t.Fatalf("credits %v, want %v", credits, want)
	}
}

// TestGateLastChance: a waiting retry that the quiet time would hold past
// its call's deadline goes as its last chance, tune.LastChanceLead before it;
// the last attempt of a call with a deadline never goes as a probe.
func TestGateLastChance(t *testing.T) {
	clk := &manualClock{now: t0}
	g := newGate(t, &switchBudget{}, DeferSettings{}, clk)
	downServer(g)
	for range tune.Evidence {
		g.Record(Attempt{Number: 1, Outcome: Failure})
	}
	deadline := t0.Add(time.Second)
	last := Request{Number: 5, Last: true}
	w, err := g.Enter(last, 100*time.Millisecond, deadline)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Leave()
	clk.advance(110 * time.Millisecond)
	if next := poll(t, w, AdmitNone); !next.Equal(deadline.Add(-tune.LastChanceLead)) {
		t.Fatalf("next = %v, want the last chance at %v", next.Sub(t0), (time.Second - tune.LastChanceLead))
	}
	clk.advance(time.Second - tune.LastChanceLead - 110*time.Millisecond)
	poll(t, w, admitLast)
	// It failed: the next last chance waits the doubled gap (200ms) after
	// it, though its deadline leaves less than that and its lead (a
	// deadline sooner still ends the wait first).
	g.Record(Attempt{Number: 5, Outcome: Failure, Admission: admitLast})
	// (An outage younger than three of its deadlines: it waits.)
	g.mu.Lock()
	g.st.streakAt = clk.Now().Add(-100 * time.Millisecond)
	g.mu.Unlock()
	w2, err := g.Enter(last, 0, clk.Now().Add(240*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer w2.Leave()
	if next := poll(t, w2, AdmitNone); !next.Equal(clk.Now().Add(200 * time.Millisecond)) {
		t.Fatalf("next = %v from now, want 200ms", next.Sub(clk.Now()))
	}
	// Without a deadline, a last attempt has no last chance: it probes
	// like any other.
	w3, err := g.Enter(last, 0, time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	defer w3.Leave()
	poll(t, w3, AdmitNone)
	clk.advance(time.Second)
	poll(t, w3, admitProbe)
}

// A probe asks the budget first: paid, it goes as AdmitBudget.
func TestGateAsksTheBudgetFirst(t *testing.T) {
	clk := &manualClock{now: t0}
	sb := &switchBudget{}
	g := downServer(newGate(t, sb, DeferSettings{}, clk))
	for range tune.Evidence {
		g.Record(Attempt{Number: 1, Outcome: Failure})
	}
	w, err := g.Enter(retry2, 10*time.Millisecond, time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Leave()
	sb.open.Store(true)
	poll(t, w, AdmitNone) // the pause first
	clk.advance(10 * time.Millisecond)
	poll(t, w, AdmitBudget)
}

func TestGateBoundsTheWaiting(t *testing.T) {
	clk := &manualClock{now: t0}
	g := newGate(t, &switchBudget{}, DeferSettings{MaxWaiting: 2}, clk)
	a, _ := g.Enter(retry2, time.Second, time.Time{})
	b, _ := g.Enter(retry2, time.Second, time.Time{})
	if _, err := g.Enter(retry2, time.Second, time.Time{}); !errors.Is(err, ErrTooManyWaiting) {
		t.Fatalf("third Enter: %v, want ErrTooManyWaiting", err)
	}
	a.Leave()
	a.Leave() // twice is harmless
	c, err := g.Enter(retry2, 0, time.Time{})
	if err != nil {
		t.Fatalf("Enter after a Leave: %v", err)
	}
	b.Leave()
	c.Leave()
	// Each Leave ended a wait (c's, granted at once, gave it back); the
	// third Enter never waited.
	if st := g.State(); st.Waiting != 0 || st.DeferGaveUp != 3 || st.DeferTurnedAway != 1 || st.Deferred != st.DeferAdmitted+st.DeferGaveUp {
		t.Fatalf("State = %+v, want none waiting, 3 given up, 1 turned away", st)
	}
}

func TestGateRecordCostsNothingWhenNobodyWaits(t *testing.T) {
	g, err := Deferring(&switchBudget{}, DeferSettings{})
	if err != nil {
		t.Fatal(err)
	}
	if n := testing.AllocsPerRun(100, func() {
		g.Record(Attempt{Number: 1, Outcome: Success})
		g.Record(Attempt{Number: 1, Outcome: Failure})
	}); n != 0 {
		t.Fatalf("Record allocates %v times", n)
	}
}

func TestNewDefers(t *testing.T) {
	for _, tt := range []struct {
		name string
		s    Settings
		want bool
	}{
		{"token bucket defers", Settings{Kind: KindTokenBucket}, true},
		{"ratio defers", Settings{Kind: KindRatio}, true},
		{"throttle refuses at once (gRFC A6)", Settings{Kind: KindThrottle, Throttle: ThrottleSettings{MaxTokens: 10, TokenRatio: 0.1}}, false},
		{"throttle that opts in", Settings{Kind: KindThrottle, Throttle: ThrottleSettings{MaxTokens: 10, TokenRatio: 0.1}, Defer: DeferSettings{Mode: DeferOn}}, true},
		{"token bucket that opts out", Settings{Kind: KindTokenBucket, Defer: DeferSettings{Mode: DeferOff}}, false},
		{"the default budget", DefaultSettings(), true},
	} {
		b, err := New(tt.s)
		if err != nil {
			t.Fatalf("%s: %v", tt.name, err)
		}
		if _, ok := b.(Deferrer); ok != tt.want {
			t.Errorf("%s: a Deferrer = %v, want %v", tt.name, ok, tt.want)
		}
	}
	for _, s := range []DeferSettings{{Mode: 9}, {MaxWaiting: -1}, {MaxWaiting: 2e6}, {MaxWait: time.Microsecond}, {MaxWait: 2 * time.Hour}} {
		var se *SettingsError
		if _, err := New(Settings{Kind: KindTokenBucket, Defer: s}); !errors.As(err, &se) {
			t.Errorf("New with %+v: %v, want a *SettingsError", s, err)
		}
	}
	if _, err := Deferring(nil, DeferSettings{}); err == nil {
		t.Error("Deferring(nil) did not fail")
	}
}

// TestGateDrawsTheFirstCredit: after an outage that a new call's success
// ends (not a deferred retry's), the first credit is drawn at random, so
// that processes that saw the recovery together do not release together.
func TestGateDrawsTheFirstCredit(t *testing.T) {
	clk := &manualClock{now: t0}
	const drawn = 0.75
	g, err := Deferring(&switchBudget{}, DeferSettings{}, WithClock(clk.Now))
	if err != nil {
		t.Fatal(err)
	}
	g.st.rand = func() float64 { return drawn }
	w, err := g.Enter(retry2, time.Second, time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Leave()
	downServer(g)
	for range tune.Evidence {
		g.Record(Attempt{Number: 1, Outcome: Failure})
	}
	// tune.BackMinHeld more begin to wait in it: the return is paced.
	for range tune.BackMinHeld {
		o, err := g.Enter(retry2, time.Second, time.Time{})
		if err != nil {
			t.Fatal(err)
		}
		defer o.Leave()
	}
	// Held in the outage (the hold and hopeless rules), its probe not due yet.
	clk.advance(1100 * time.Millisecond)
	poll(t, w, AdmitNone)
	g.Record(Attempt{Number: 1, Outcome: Success})
	// The pace of the return: the outage's length over tune.BackShare of
	// the tune.BackMinHeld that began to wait, a share 1-drawn of it, less
	// one success's gain.
	every := time.Duration(float64(clk.Now().Sub(t0)) / (tune.BackShare * tune.BackMinHeld))
	want := clk.Now().Add(time.Duration((1 - drawn - tune.ReleaseGainStart) * float64(every)))
	if next := poll(t, w, AdmitNone); !next.Equal(want) {
		t.Fatalf("next = %v from now, want %v", next.Sub(clk.Now()), want.Sub(clk.Now()))
	}
}

// Until the process knows whether retries heal, a call's last attempt
// probes, and new calls' first attempts failing do not hold it back: only a
// retry can tell. Once a retry has failed, other retries do not probe: a
// process whose server never served ends their waits at their pause and a
// tenth (the hold and hopeless rules).
func TestGateProbesUntilRetriesAreKnown(t *testing.T) {
	clk := &manualClock{now: t0}
	g := newGate(t, &switchBudget{}, DeferSettings{}, clk)
	g.Record(Attempt{Number: 2, Outcome: Failure}) // a retry told it something
	const pause = 100 * time.Millisecond
	w, err := g.Enter(Request{Number: 3, Last: true}, pause, t0.Add(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer w.Leave()
	other, err := g.Enter(retry2, pause, time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	defer other.Leave()
	clk.advance(60 * time.Millisecond)
	g.Record(Attempt{Number: 1, Outcome: Failure})
	clk.advance(40 * time.Millisecond)
	if next := poll(t, other, AdmitNone); !next.Equal(t0.Add(110 * time.Millisecond)) {
		t.Fatalf("another retry: next %v, want its hold time, 110ms", next.Sub(t0))
	}
	poll(t, w, admitProbe)
	clk.advance(10 * time.Millisecond)
	poll(t, other, AdmitNone)
	if !errors.Is(other.err(), errWaitEnded) {
		t.Fatal("the other retry's wait did not end at its hold time")
	}
}

// The hold and hopeless rules: a wait the gate does not hold ends at its pause and a tenth, or
// goes then as a probe when the server served; Wait returns errWaitEnded.
func TestGateHold(t *testing.T) {
	clk := &manualClock{now: t0}
	g := newGate(t, &switchBudget{}, DeferSettings{}, clk)
	g.Record(Attempt{Number: 1, Outcome: Success})
	// Served, then failing a share of the attempts (runs of two failures
	// in a row that successes end): no outage.
	for range 3 {
		clk.advance(10 * time.Millisecond)
		g.Record(Attempt{Number: 1, Outcome: Failure})
		g.Record(Attempt{Number: 1, Outcome: Failure})
		g.Record(Attempt{Number: 1, Outcome: Success})
	}
	clk.advance(100 * time.Millisecond)
	g.Record(Attempt{Number: 1, Outcome: Failure})
	g.Record(Attempt{Number: 2, Outcome: Failure})
	g.Record(Attempt{Number: 2, Outcome: Failure})
	const pause = 100 * time.Millisecond
	a, err := g.Enter(retry2, pause, time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Leave()
	b, err := g.Enter(retry2, pause, time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Leave()
	clk.advance(pause + pause/10)
	poll(t, a, admitProbe)
	poll(t, b, AdmitNone)
	if a.err() != nil || !errors.Is(b.err(), errWaitEnded) {
		t.Fatalf("ended: probe %v, other %v; want false, true", a.err() != nil, b.err() != nil)
	}
	if a, _, _ := b.Poll(); a != AdmitNone {
		t.Fatalf("an ended wait polled again: %v", a)
	}
	// An overload (most attempts refused for it) holds the waits.
	g.Record(Attempt{Number: 2, Outcome: Failure, Admission: admitProbe, Overload: true})
	for range overloadSigns - 1 {
		g.Record(Attempt{Number: 1, Outcome: Failure, Overload: true})
	}
	c, err := g.Enter(retry2, pause, time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Leave()
	clk.advance(pause + pause/10)
	poll(t, c, AdmitNone)
	if c.err() != nil {
		t.Fatal("a wait ended under overload")
	}
}

// The hold and hopeless rules: a wait that an attempt of its method (Request.Took), or the
// latest deferred retry that succeeded within five seconds
// (Attempt.Took), could not finish before its call's deadline ends at
// once, or when it comes to that: it is held in an outage or an overload
// otherwise, and would wait out its deadline only to fail.
func TestGateEndsHopelessWaits(t *testing.T) {
	clk := &manualClock{now: t0}
	g := inOutage(t, clk, DeferSettings{})
	if g.health() != phaseOutage {
		t.Fatal("no outage")
	}
	const pause = 100 * time.Millisecond
	deadline := t0.Add(time.Second)
	// Attempts of its method take 400ms: its wait ends at 600ms.
	// Both are their calls' last attempts, which do not probe (the probe rule).
	slow, err := g.Enter(Request{Number: 2, Last: true, Took: 400 * time.Millisecond}, pause, deadline)
	if err != nil {
		t.Fatal(err)
	}
	defer slow.Leave()
	// Nothing known: held to its last chance.
	unknown, err := g.Enter(Request{Number: 2, Last: true}, pause, deadline)
	if err != nil {
		t.Fatal(err)
	}
	defer unknown.Leave()
	clk.advance(pause)
	if next := poll(t, slow, AdmitNone); next.After(t0.Add(600*time.Millisecond + time.Millisecond)) {
		t.Fatalf("next poll at %v, want by 600ms, when the wait becomes hopeless", next.Sub(t0))
	}
	clk.advance(501 * time.Millisecond)
	poll(t, slow, AdmitNone)
	if !errors.Is(slow.err(), errWaitEnded) {
		t.Fatalf("at 601ms, 399ms from the deadline: Err %v, want errWaitEnded", slow.err())
	}
	poll(t, unknown, AdmitNone)
	if unknown.err() != nil {
		t.Fatalf("a wait whose method's latency is unknown ended: %v", unknown.err())
	}
	// A deferred retry that succeeded after 500ms: the other wait, 400ms
	// from its deadline, cannot end well either.
	g.Record(Attempt{Number: 2, Outcome: Success, Admission: admitProbe, Took: 500 * time.Millisecond})
	poll(t, unknown, AdmitNone)
	if !errors.Is(unknown.err(), errWaitEnded) {
		t.Fatalf("400ms left, a deferred retry took 500ms: Err %v, want errWaitEnded", unknown.err())
	}
	// Five seconds later that evidence is stale.
	clk.advance(tune.OverloadHold)
	late, err := g.Enter(Request{Number: 2, Last: true}, pause, clk.Now().Add(300*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer late.Leave()
	poll(t, late, AdmitNone)
	if late.err() != nil {
		t.Fatalf("stale evidence ended a wait: %v", late.err())
	}
}

// On the real clock, Wait ends a wait when it becomes hopeless (the hold and hopeless rules),
// not at its deadline: in an outage, with a probe out, a call's last
// attempt whose method's attempts take 300ms, 500ms before its deadline,
// returns errWaitEnded about 200ms in. The Wait's own timer against the
// deadline, repeated.
func TestRealTimeGateEndsHopelessWait(t *testing.T) {
	if testing.Short() {
		t.Skip("real time")
	}
	for i := range 20 {
		g := outageProbed(t, DeferSettings{})
		ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
		start := time.Now()
		_, err := g.Wait(ctx, Request{Number: 3, Last: true, Took: 300 * time.Millisecond}, 10*time.Millisecond)
		took := time.Since(start)
		cancel()
		if !errors.Is(err, errWaitEnded) || took < 190*time.Millisecond || took > 400*time.Millisecond {
			t.Fatalf("run %d: Wait = %v after %v; want errWaitEnded after about 200ms", i, err, took)
		}
	}
}

// health is g's phase, read under its lock.
func (g *Gate) health() phase {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.st.phase
}

// TestAdmissionString names each Admission, and "none" past the last.
func TestAdmissionString(t *testing.T) {
	names := []string{"none", "budget", "release", "probe", "last", "heal"}
	for a := range 256 {
		want := "none"
		if a < len(names) {
			want = names[a]
		}
		if got := Admission(a).String(); got != want {
			t.Errorf("Admission(%d).String() = %q, want %q", a, got, want)
		}
	}
}

package breaker

import (
	"context"
	"errors"
	"math"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stagger-go/stagger/budget"
	"github.com/stagger-go/stagger/criticality"
)

func newTestBreaker(t *testing.T, s Settings, clk *manualClock, changes *[]Change, opts ...Option) *Breaker {
	t.Helper()
	var mu sync.Mutex
	var b *Breaker
	b, err := New("t /svc/M", s, func(ch Change) {
		// Outside every lock: asking the breaker again must not deadlock.
		_ = b.Snapshot()
		mu.Lock()
		*changes = append(*changes, ch)
		mu.Unlock()
	}, append([]Option{WithClock(clk.Now)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func admitN(t *testing.T, b *Breaker, o budget.Outcome, n int) {
	t.Helper()
	for range n {
		if err := b.Admit(criticality.Unset, nil); err != nil {
			t.Fatalf("Admit: %v", err)
		}
		b.Record(o, true, criticality.Unset, nil)
	}
}

func wantRefusal(t *testing.T, err error, sentinel error, retry time.Time) {
	t.Helper()
	var r *Refusal
	if !errors.As(err, &r) || !errors.Is(err, sentinel) {
		t.Fatalf("Admit = %v, want a *Refusal wrapping %v", err, sentinel)
	}
	if !retry.IsZero() && !r.Retry.Equal(retry) {
		t.Fatalf("Refusal.Retry = %v, want %v", r.Retry, retry)
	}
	if !strings.Contains(err.Error(), "t /svc/M") {
		t.Fatalf("refusal %q does not name the breaker", err)
	}
}

func TestBreakerTripsOnRatioAfterMinimumThroughput(t *testing.T) {
	clk := &manualClock{now: t0}
	var changes []Change
	b := newTestBreaker(t, Settings{FailureRatio: 0.5, MinimumThroughput: 10, ConsecutiveFailures: 1e6, ProbeEvery: 1, BreakDuration: time.Second, MaxBreakDuration: 3 * time.Second}, clk, &changes)
	// Nine failures: below the minimum throughput, still closed.
	admitN(t, b, budget.Failure, 9)
	if !b.Closed() || len(changes) != 0 {
		t.Fatalf("opened before the minimum throughput: %v", changes)
	}
	// Ten answers, ratio 1: opens.
	admitN(t, b, budget.Failure, 1)
	if b.Closed() || len(changes) != 1 || changes[0].To != StateOpen || changes[0].Failures != 10 || changes[0].Break != time.Second {
		t.Fatalf("changes = %+v, want one to open after 10 failures", changes)
	}
	wantRefusal(t, b.Admit(criticality.Unset, nil), ErrOpen, t0.Add(time.Second))
	if ok, next := b.AllowRetry(criticality.Unset, nil); ok || !next.Equal(t0.Add(time.Second)) {
		t.Fatalf("AllowRetry while open = %v, %v", ok, next)
	}

	// The break ends: one probe (a first attempt), then refusals.
	clk.advance(time.Second)
	if err := b.Admit(criticality.Unset, nil); err != nil {
		t.Fatalf("probe refused: %v", err)
	}
	wantRefusal(t, b.Admit(criticality.Unset, nil), ErrOpen, time.Time{})
	if ok, _ := b.AllowRetry(criticality.Unset, nil); ok {
		t.Fatal("a retry went beside the probe")
	}
	// The probe fails: open for twice as long, and until the probe is one
	// in twice as many first attempts (one refused): the refusal says the
	// break's end. (Until issue 88 ProbeEvery counted the refusals before
	// the probe: two here, the first saying MaxBreakDuration.)
	b.Record(budget.Failure, true, criticality.Unset, nil)
	wantRefusal(t, b.Admit(criticality.Unset, nil), ErrOpen, clk.Now().Add(2*time.Second))
	wantRefusal(t, b.Admit(criticality.Unset, nil), ErrOpen, clk.Now().Add(2*time.Second))
	clk.advance(2 * time.Second)
	if ok, _ := b.AllowRetry(criticality.Unset, nil); !ok {
		t.Fatal("the waiting retry could not probe")
	}
	b.Record(budget.Failure, true, criticality.Unset, nil)
	// Doubling stops at MaxBreakDuration.
	if s := b.Snapshot(); s.State != StateOpen || s.Break != 3*time.Second || s.Opened != 3 {
		t.Fatalf("snapshot %+v, want open for 3s, opened 3 times", s)
	}
	clk.advance(3 * time.Second)
	if err := b.Admit(criticality.Unset, nil); err != nil {
		t.Fatal(err)
	}
	b.Record(budget.Success, true, criticality.Unset, nil)
	if !b.Closed() {
		t.Fatal("a successful probe did not close the breaker")
	}
	// Closing forgot the failures and the doubled break.
	admitN(t, b, budget.Failure, 9)
	if !b.Closed() {
		t.Fatal("the old failures counted after closing")
	}
	admitN(t, b, budget.Failure, 1)
	if s := b.Snapshot(); s.Break != time.Second {
		t.Fatalf("break after closing = %v, want the first again", s.Break)
	}
	var seq []string
	for _, ch := range changes {
		seq = append(seq, ch.From.String()+">"+ch.To.String())
	}
	got := strings.Join(seq, " ")
	want := "closed>open open>half-open half-open>open open>half-open half-open>open open>half-open half-open>closed closed>open"
	if got != want {
		t.Fatalf("changes\n got %s\nwant %s", got, want)
	}
}

func TestBreakerStaysClosedUnderTheRatio(t *testing.T) {
	clk := &manualClock{now: t0}
	var changes []Change
	b := newTestBreaker(t, Settings{}, clk, &changes)
	// 40 % failures, far past the minimum throughput, over a long run.
	for i := range 10000 {
		o := budget.Success
		if i%5 < 2 {
			o = budget.Failure
		}
		admitN(t, b, o, 1)
		clk.advance(time.Millisecond)
	}
	if len(changes) != 0 {
		t.Fatalf("opened under 40%% failures: %+v", changes[0])
	}
}

func TestBreakerWindowForgets(t *testing.T) {
	clk := &manualClock{now: t0}
	var changes []Change
	b := newTestBreaker(t, Settings{MinimumThroughput: 10, ConsecutiveFailures: 1e6, SamplingWindow: time.Second}, clk, &changes)
	admitN(t, b, budget.Failure, 9)
	clk.advance(1100 * time.Millisecond)
	admitN(t, b, budget.Failure, 9)
	if !b.Closed() {
		t.Fatal("failures older than the window counted")
	}
}

// A quiet client trips on failures in a row; only first attempts count,
// and a success of any attempt starts the count again.
func TestBreakerTripsOnConsecutiveFirstFailures(t *testing.T) {
	clk := &manualClock{now: t0}
	var changes []Change
	b := newTestBreaker(t, Settings{ConsecutiveFailures: 3, ProbeEvery: 1}, clk, &changes)
	admitN(t, b, budget.Failure, 2)
	for range 10 {
		b.Record(budget.Failure, false, criticality.Unset, nil) // retries: not counted
	}
	b.Record(budget.Success, false, criticality.Unset, nil) // a retry's success resets the count
	admitN(t, b, budget.Failure, 2)
	if !b.Closed() {
		t.Fatal("opened on failures that were not in a row")
	}
	admitN(t, b, budget.Failure, 1)
	if b.Closed() || changes[0].Failures != 5 || changes[0].Answered != 5 {
		t.Fatalf("3 first attempts failed in a row: changes %+v", changes)
	}
	// Half-open (after the break and one refused first attempt), a
	// retry's outcome decides too.
	wantRefusal(t, b.Admit(criticality.Unset, nil), ErrOpen, time.Time{})
	clk.advance(DefaultBreakDuration)
	if ok, _ := b.AllowRetry(criticality.Unset, nil); !ok {
		t.Fatal("no probe")
	}
	b.Record(budget.Success, false, criticality.Unset, nil)
	if !b.Closed() {
		t.Fatal("the retry probe's success did not close it")
	}
}

// The break lasts until the probe is one in ProbeEvery first attempts
// (doubled by a failed probe), or MaxBreakDuration. Until issue 88 the
// probe came after ProbeEvery refusals (one in ProbeEvery + 1): 3, then 6.
func TestBreakerProbesAtAShareOfTheCalls(t *testing.T) {
	clk := &manualClock{now: t0}
	var changes []Change
	b := newTestBreaker(t, Settings{MinimumThroughput: 1, ProbeEvery: 3, BreakDuration: time.Second, MaxBreakDuration: 10 * time.Second}, clk, &changes)
	admitN(t, b, budget.Failure, 1)
	clk.advance(2 * time.Second)
	for range 2 {
		wantRefusal(t, b.Admit(criticality.Unset, nil), ErrOpen, time.Time{})
	}
	if err := b.Admit(criticality.Unset, nil); err != nil {
		t.Fatalf("no probe at the 3rd first attempt after the break: %v", err)
	}
	b.Record(budget.Failure, true, criticality.Unset, nil)
	// Now the 6th first attempt and 2s.
	for range 5 {
		clk.advance(100 * time.Millisecond)
		wantRefusal(t, b.Admit(criticality.Unset, nil), ErrOpen, time.Time{})
	}
	clk.advance(1500 * time.Millisecond)
	if err := b.Admit(criticality.Unset, nil); err != nil {
		t.Fatalf("no probe at the 6th first attempt and 2s: %v", err)
	}
	b.Record(budget.Failure, true, criticality.Unset, nil)
	// A quiet client: no refusals, a probe at MaxBreakDuration.
	clk.advance(10*time.Second - time.Millisecond)
	if ok, _ := b.AllowRetry(criticality.Unset, nil); ok {
		t.Fatal("a retry probed before MaxBreakDuration with no refusals")
	}
	clk.advance(time.Millisecond)
	if ok, _ := b.AllowRetry(criticality.Unset, nil); !ok {
		t.Fatal("no probe at MaxBreakDuration")
	}
}

// At the defaults the first break is short and each failed probe doubles
// it up to MaxBreakDuration: a quiet client (8 first attempts a second, as
// each of the lab's 50 clients in its unavailable scenario) whose breaker
// opens as the outage ends sends its next call as the probe, where breaks
// of 1s from the first kept it out of the recovered server for up to a
// second (issue 88). Each row is one first attempt, 125 ms after the last.
func TestBreakerDefaultBreakGrowsWithFailedProbes(t *testing.T) {
	clk := &manualClock{now: t0}
	var changes []Change
	b := newTestBreaker(t, Settings{}, clk, &changes)
	admitN(t, b, budget.Failure, DefaultConsecutive)
	if b.Closed() {
		t.Fatal("did not open on 5 failures in a row")
	}
	// down: the server fails every attempt sent; want: the attempt is
	// let go (a probe).
	steps := []struct {
		down, want bool
	}{
		{true, true},   // +125ms: past the first break (100ms); fails: 200ms and the 2nd first attempt
		{true, false},  // +250ms
		{true, true},   // +375ms: 250ms, 2nd since the probe; fails: 400ms, 4th
		{true, false},  // +500ms
		{true, false},  // +625ms
		{true, false},  // +750ms
		{true, true},   // +875ms: 500ms, 4th since; fails: 800ms, 8th
		{true, false},  // +1000ms
		{true, false},  // +1125ms
		{true, false},  // +1250ms
		{true, false},  // +1375ms
		{true, false},  // +1500ms
		{true, false},  // +1625ms
		{false, false}, // +1750ms: the server is back; 7th since the probe
		{false, true},  // +1875ms: 8th (ProbeEvery doubled thrice): closed
		{false, true},  // +2000ms
	}
	for i, st := range steps {
		clk.advance(125 * time.Millisecond)
		err := b.Admit(criticality.Unset, nil)
		if (err == nil) != st.want {
			t.Fatalf("attempt %d (+%v): Admit = %v, want let go %v", i, time.Duration(i+1)*125*time.Millisecond, err, st.want)
		}
		if err != nil {
			continue
		}
		o := budget.Success
		if st.down {
			o = budget.Failure
		}
		b.Record(o, true, criticality.Unset, nil)
	}
	if !b.Closed() {
		t.Fatal("not closed after the server came back")
	}
	var breaks []time.Duration
	for _, ch := range changes {
		if ch.To == StateOpen {
			breaks = append(breaks, ch.Break)
		}
	}
	want := []time.Duration{100 * time.Millisecond, 200 * time.Millisecond, 400 * time.Millisecond, 800 * time.Millisecond}
	if len(breaks) != len(want) {
		t.Fatalf("breaks %v, want %v", breaks, want)
	}
	for i := range want {
		if breaks[i] != want[i] {
			t.Fatalf("breaks %v, want %v", breaks, want)
		}
	}
}

func TestBreakerLostProbeFreesItsSlot(t *testing.T) {
	clk := &manualClock{now: t0}
	var changes []Change
	b := newTestBreaker(t, Settings{MinimumThroughput: 1, ProbeEvery: 1, BreakDuration: time.Second}, clk, &changes)
	admitN(t, b, budget.Failure, 1)
	wantRefusal(t, b.Admit(criticality.Unset, nil), ErrOpen, t0.Add(time.Second))
	clk.advance(time.Second)
	if err := b.Admit(criticality.Unset, nil); err != nil {
		t.Fatal(err)
	}
	// The probe never reports; another may go one break later.
	clk.advance(999 * time.Millisecond)
	wantRefusal(t, b.Admit(criticality.Unset, nil), ErrOpen, t0.Add(2*time.Second))
	clk.advance(time.Millisecond)
	if err := b.Admit(criticality.Unset, nil); err != nil {
		t.Fatalf("the lost probe still holds the slot: %v", err)
	}
	// A probe ended by its caller (budget.Other) frees the slot at once.
	b.Record(budget.Other, true, criticality.Unset, nil)
	if err := b.Admit(criticality.Unset, nil); err != nil {
		t.Fatalf("a probe the caller ended still holds the slot: %v", err)
	}
}

func TestBreakerThrottlesFirstAttempts(t *testing.T) {
	clk := &manualClock{now: t0}
	var changes []Change
	u := 0.0
	b := newTestBreaker(t, Settings{NoTrip: true, ThrottleK: 2}, clk, &changes, WithRandom(func() float64 { return u }))
	// Every attempt accepted: never throttled, whatever the draw.
	admitN(t, b, budget.Success, 100)
	// Now every attempt fails: once requests pass 2 × accepts, first
	// attempts are rejected with the SRE probability.
	throttled := 0
	for range 400 {
		err := b.Admit(criticality.Unset, nil)
		if err == nil {
			b.Record(budget.Failure, true, criticality.Unset, nil)
			continue
		}
		wantRefusal(t, err, ErrThrottled, time.Time{})
		throttled++
	}
	s := b.Snapshot()
	wantP := math.Max(0, (float64(s.Requests)-2*float64(s.Accepts))/(float64(s.Requests)+1))
	if s.Requests != 500 || s.Accepts != 100 || math.Abs(s.ThrottleP-wantP) > 1e-12 {
		t.Fatalf("snapshot %+v, want 500 requests, 100 accepts, p %v", s, wantP)
	}
	// With u = 0 every draw under a positive p rejects: every request
	// that finds more than 2 × accepts (200) before it, from the 202nd on,
	// is throttled.
	if throttled != 299 || s.Throttled != 299 || len(changes) != 0 {
		t.Fatalf("throttled %d (snapshot %d), changes %v; want 299 and no trip", throttled, s.Throttled, changes)
	}
	// Retries are not throttled (the budget's to admit).
	if ok, _ := b.AllowRetry(criticality.Unset, nil); !ok {
		t.Fatal("throttling refused a retry")
	}
}

func TestSettingsValidate(t *testing.T) {
	for _, c := range []struct {
		s     Settings
		field string
	}{
		{Settings{FailureRatio: 1.5}, "FailureRatio"},
		{Settings{FailureRatio: -0.1}, "FailureRatio"},
		{Settings{FailureRatio: math.NaN()}, "FailureRatio"},
		{Settings{MinimumThroughput: -1}, "MinimumThroughput"},
		{Settings{MinimumThroughput: 2e6}, "MinimumThroughput"},
		{Settings{ConsecutiveFailures: -3}, "ConsecutiveFailures"},
		{Settings{ProbeEvery: 2e6}, "ProbeEvery"},
		{Settings{SamplingWindow: time.Millisecond}, "SamplingWindow"},
		{Settings{SamplingWindow: -time.Second}, "SamplingWindow"},
		{Settings{BreakDuration: 2 * time.Hour}, "BreakDuration"},
		{Settings{BreakDuration: 10 * time.Second, MaxBreakDuration: time.Second}, "MaxBreakDuration"},
		{Settings{ThrottleK: 0.5}, "ThrottleK"},
		{Settings{ThrottleK: math.Inf(1)}, "ThrottleK"},
		{Settings{Scope: 7}, "Scope"},
		{Settings{NoTrip: true}, "NoTrip"},
	} {
		err := c.s.Validate()
		var se *SettingsError
		if !errors.As(err, &se) || se.Field != c.field {
			t.Errorf("%+v: Validate = %v, want an error on %s", c.s, err, c.field)
		}
		if _, err := NewSet(c.s, nil); err == nil {
			t.Errorf("%+v: NewSet accepted it", c.s)
		}
	}
	if err := (Settings{}).Validate(); err != nil {
		t.Fatal(err)
	}
	if d := (Settings{BreakDuration: 2 * time.Minute}).WithDefaults(); d.MaxBreakDuration != 2*time.Minute {
		t.Fatalf("MaxBreakDuration default below a long break: %v", d.MaxBreakDuration)
	}
}

func TestBreakersScopeAndBound(t *testing.T) {
	bs, err := NewSet(Settings{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	a, b := bs.Get("t1", "/s/A"), bs.Get("t1", "/s/B")
	if a == b || bs.Get("t1", "/s/A") != a || bs.Get("t2", "/s/A") == a {
		t.Fatal("ScopeMethod: want one breaker per target and method")
	}
	if a.Key() != "t1 /s/A" {
		t.Fatalf("key %q", a.Key())
	}
	bt, _ := NewSet(Settings{Scope: ScopeTarget}, nil)
	if bt.Get("t1", "/s/A") != bt.Get("t1", "/s/B") || bt.Get("t1", "/s/A").Key() != "t1" {
		t.Fatal("ScopeTarget: want one breaker per target")
	}
	for i := range breakerCap + 10 {
		bs.Get("t", "/m/"+string(rune('a'+i%26))+strings.Repeat("x", i/26))
	}
	if n := len(bs.Snapshots()); n != breakerCap+1 {
		t.Fatalf("%d breakers kept, want the cap plus one overflow", n)
	}
}

func TestBreakerFastPathsDoNotAllocate(t *testing.T) {
	bs, _ := NewSet(Settings{}, nil)
	b := bs.Get("t", "/s/M")
	n := testing.AllocsPerRun(1000, func() {
		if bs.Get("t", "/s/M") != b || b.Admit(criticality.Unset, nil) != nil {
			t.Fatal("refused")
		}
		if ok, _ := b.AllowRetry(criticality.Unset, nil); !ok {
			t.Fatal("refused")
		}
		b.Record(budget.Success, true, criticality.Unset, nil)
	})
	if n != 0 {
		t.Fatalf("%v allocations per call, want 0", n)
	}
}

// The Gate lets a waiting retry of an open breaker go only as the
// breaker's probe, when its break is over, and a first attempt cannot
// probe beside it.
func TestGateWaitsForTheBreaker(t *testing.T) {
	clk := &manualClock{now: t0}
	var changes []Change
	br := newTestBreaker(t, Settings{MinimumThroughput: 2, ProbeEvery: 1, BreakDuration: time.Second}, clk, &changes)
	sb := &switchBudget{}
	sb.open.Store(true)
	g, err := budget.Deferring(sb, budget.DeferSettings{}, budget.WithClock(clk.Now))
	if err != nil {
		t.Fatal(err)
	}
	admitN(t, br, budget.Failure, 2)
	wantRefusal(t, br.Admit(criticality.Unset, nil), ErrOpen, t0.Add(time.Second))
	g.Record(budget.Attempt{Number: 1, Outcome: budget.Failure})
	w, err := g.Enter(budget.Request{Number: 2, Guard: br.Guard(criticality.Unset, nil)}, 100*time.Millisecond, time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Leave()
	// The gate would probe after its quiet time; the breaker says when.
	clk.advance(200 * time.Millisecond)
	g.Tick()
	<-w.Ready()
	if a, err := w.Take(); a != budget.AdmitNone || err != nil {
		t.Fatalf("Take = %v, %v; want none until the break's end", a, err)
	}
	if next := g.Tick(); !next.Equal(t0.Add(time.Second)) {
		t.Fatalf("the gate runs again at %v, want the break's end", next)
	}
	clk.advance(800 * time.Millisecond)
	g.Tick()
	<-w.Ready()
	if a, _ := w.Take(); a != budget.AdmitBudget {
		t.Fatalf("Take at the break's end = %v, want budget", a)
	}
	if err := br.Admit(criticality.Unset, nil); !errors.Is(err, ErrOpen) {
		t.Fatalf("a first attempt probed beside the waiting retry: %v", err)
	}
	br.Record(budget.Success, true, criticality.Unset, nil)
	if !br.Closed() {
		t.Fatal("the gate's probe did not close the breaker")
	}
}

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

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

func (c *manualClock) advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

// switchBudget admits when open is set; it records nothing.
type switchBudget struct{ open atomic.Bool }

func (b *switchBudget) Record(budget.Attempt)     {}
func (b *switchBudget) Allow(budget.Request) bool { return b.open.Load() }
func (b *switchBudget) State() budget.State       { return budget.State{Kind: "switch"} }

// TestGuardAllowRetry: a half-open breaker's probe slot, asked through its
// budget.Guard, goes to one retry at a time, and the asking tells the
// listener the state change it made.
func TestGuardAllowRetry(t *testing.T) {
	clk := &manualClock{now: t0}
	var changes []Change
	b := newTestBreaker(t, Settings{ConsecutiveFailures: 3, ProbeEvery: 1}, clk, &changes)
	admitN(t, b, budget.Failure, 3)
	wantRefusal(t, b.Admit(criticality.Unset, nil), ErrOpen, time.Time{})
	clk.advance(DefaultBreakDuration)
	var heard []Change
	g := b.Guard(criticality.Unset, listenerFunc(func(c Change) { heard = append(heard, c) }))
	if g.Closed() {
		t.Fatal("guard closed while the breaker is open")
	}
	if ok, _ := g.AllowRetry(); !ok {
		t.Fatal("no probe")
	}
	if ok, _ := g.AllowRetry(); ok {
		t.Fatal("two probes out at once")
	}
	if len(heard) != 1 || heard[0].To != StateHalfOpen {
		t.Errorf("the listener heard %v, want the change to half-open", heard)
	}
}

// listenerFunc is a Listener made of a function.
type listenerFunc func(Change)

func (f listenerFunc) BreakerChanged(c Change) { f(c) }

// Issue 72's defect 4: a retry's caller that leaves after the breaker's
// AllowRetry said yes gives the half-open slot back (the Gate returns the
// yes), so a first attempt can probe at once: it was refused for a whole
// break with nothing in flight.
func TestGateCallerLeavingAfterYesFreesTheProbe(t *testing.T) {
	clk := &manualClock{now: t0}
	var changes []Change
	br := newTestBreaker(t, Settings{ConsecutiveFailures: 2, ProbeEvery: 1, BreakDuration: time.Second}, clk, &changes)
	g, err := budget.Deferring(&switchBudget{}, budget.DeferSettings{}, budget.WithClock(clk.Now))
	if err != nil {
		t.Fatal(err)
	}
	admitN(t, br, budget.Failure, 2)
	g.Record(budget.Attempt{Number: 1, Outcome: budget.Failure})
	clk.advance(DefaultMaxBreakDuration) // the break is over: the next asking probes
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	// The caller leaves as the asking turns the breaker half-open, after
	// the breaker took the retry as its probe.
	leave := listenerFunc(func(c Change) {
		if c.To == StateHalfOpen {
			cancel()
		}
	})
	a, err := g.Wait(ctx, budget.Request{Number: 2, Guard: br.Guard(criticality.Unset, leave)}, 0)
	if a != budget.AdmitNone || !errors.Is(err, context.Canceled) {
		t.Fatalf("Wait = %v, %v; want none, context.Canceled", a, err)
	}
	if err := br.Admit(criticality.Unset, nil); err != nil {
		t.Fatalf("a first attempt after the retry's caller left: %v; want it to go as the probe", err)
	}
}

// A hook that panics as an asking turns the breaker half-open (the
// breaker tells its hooks unrecovered) does not keep the probe slot the
// asking took, a retry's (AllowRetry) or a first attempt's (Admit): the
// panic reaches the caller, and the next first attempt can probe at once
// (it was refused for a whole break with nothing in flight).
func TestAskingPanickingHookFreesTheProbe(t *testing.T) {
	panicking := listenerFunc(func(c Change) {
		if c.To == StateHalfOpen {
			panic("hook")
		}
	})
	for name, ask := range map[string]func(*Breaker){
		"AllowRetry": func(b *Breaker) { b.AllowRetry(criticality.Unset, panicking) },
		"Admit":      func(b *Breaker) { _ = b.Admit(criticality.Unset, panicking) },
	} {
		clk := &manualClock{now: t0}
		var changes []Change
		br := newTestBreaker(t, Settings{ConsecutiveFailures: 2, ProbeEvery: 1, BreakDuration: time.Second}, clk, &changes)
		admitN(t, br, budget.Failure, 2)
		clk.advance(DefaultMaxBreakDuration)
		func() {
			defer func() {
				if p := recover(); p != "hook" {
					t.Errorf("%s: recovered %v, want the hook's panic", name, p)
				}
			}()
			ask(br)
		}()
		if err := br.Admit(criticality.Unset, nil); err != nil {
			t.Errorf("%s: a first attempt after the hook panicked: %v; want it to go as the probe", name, err)
		}
	}
}

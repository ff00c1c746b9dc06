package budget

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stagger-go/stagger/criticality"
	"github.com/stagger-go/stagger/internal/clock"
	tune "github.com/stagger-go/stagger/internal/gatetune"
)

// The Gate's properties over random histories: one backend's Gate (the
// default budget's settings, its own tokens), driven on a virtual clock by
// calls of three attempts that arrive at random, with random deadlines,
// criticalities, pauses and gaps, through a random earlier history of
// outcomes (failures, non-retryable answers that end a call, failures for
// overload), then through one regime whose outcome is checked (the first
// two from the end of the overload rule's hold, which holds retries back
// on purpose, when the earlier history had overload):
//
//   - the backend serves every retry (first attempts may still fail):
//     retries go again, within a second or their own pause (of the
//     regime's first success, for a process that never saw the backend
//     serve: until then it cannot tell this from an outage);
//   - it serves every attempt: Allow admits a retry after a per-attempt
//     timeout (a straggler's) within a second of the first success, so
//     the timer cuts;
//   - it is down for longer than the calls' deadlines: at most one retry in
//     ten per call, and a failed call ends at once, but for the one in ten
//     that the futility rule keeps waiting by a draw;
//   - in all: when every caller has left, nobody waits and the probe slot
//     is free, or lapsed by the settling rule (a call that ended with its
//     attempt in flight never reports it: a lost attempt);
//   - with guards (a circuit breaker per call, drawn at random: closed,
//     refusing a few times then allowing, panicking, or allowing as its
//     caller leaves): a closed guard is no guard (its calls count in the
//     properties above), every yes of a guard is sent or given back, and
//     a panic strands nobody.
//
// A fixed point (a state the Gate never leaves) breaks the first two.
// Each seed is one history; the seeds are fixed, so the test is
// deterministic. With GATE_PROP_DIGEST=FILE it writes, per seed, a digest
// of what every call got (its end, when, its attempts) and of the gate's
// counters: run on two trees and diff, a refactor that must not change
// what the Gate decides leaves every line as it was (issue 62's writers
// refactor: seeds 1-3,000, every line).
func TestGateProperties(t *testing.T) {
	seeds := uint64(200)
	if raceOn {
		seeds = 50 // the histories have no goroutines to race
	}
	from := uint64(1)
	if env := os.Getenv("GATE_PROP_SEEDS"); env != "" {
		// GATE_PROP_SEEDS=3000: the wide sweep; =A-B: seeds A to B.
		lo, hi, ok := strings.Cut(env, "-")
		a, errA := strconv.ParseUint(lo, 10, 64)
		b, errB := strconv.ParseUint(hi, 10, 64)
		switch {
		case !ok && errA == nil:
			seeds = a
		case ok && errA == nil && errB == nil && a <= b:
			from, seeds = a, b-a+1
		default:
			t.Fatalf("GATE_PROP_SEEDS=%q: want N or A-B", env)
		}
	}
	// And seeds past them that once failed: 726 and 1889 (the futility
	// rule's lone waiter waited its deadline out while new calls failed
	// faster than its pause, no probe having failed yet), 810 (a flaky
	// server gone down had its retries healed unpaid until a streak
	// outgrew its flakiness), 816, 2410 and 2863 (Allow admitted a
	// per-attempt timer's retry 1.2 s after the first success, the heal
	// evidence going stale only a second after the latest retry, which the
	// recovered server served), 672, 1396 and 2023 (the history ended
	// before a call without a deadline did), 228 and 1190 (down all its
	// life, then serving retries: the process probed one call in ten, as
	// the down property asks, and took 3 s to see a success), 2495 (in a
	// long outage each held call with a deadline took its last chance at
	// it), 2593 (the backend back for retries, two first attempts failed
	// in a row: the outage's first last chance is what finds it).
	var digests *os.File
	if path := os.Getenv("GATE_PROP_DIGEST"); path != "" {
		f, err := os.Create(path)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		digests = f
	}
	for _, seed := range append(seqSeeds(from, seeds), 228, 672, 726, 810, 816, 1190, 1396, 1889, 2023, 2410, 2495, 2593, 2863) {
		h := newHistory(seed)
		h.run(t)
		if digests != nil {
			fmt.Fprintf(digests, "%d %s\n", seed, h.digest())
		}
		if t.Failed() {
			t.Logf("seed %d: %s", seed, h.describe())
			return
		}
	}
}

// seqSeeds returns n seeds from from on.
func seqSeeds(from, n uint64) []uint64 {
	out := make([]uint64, n)
	for i := range out {
		out[i] = from + uint64(i)
	}
	return out
}

// regime is what the backend does after the earlier history.
type regime uint8

const (
	servesRetries regime = iota // first attempts fail at random, retries are served
	servesAll                   // every attempt is served
	down                        // every attempt fails
)

func (r regime) String() string {
	return [...]string{"serves retries", "serves all", "down"}[r]
}

// history is one random run.
type history struct {
	seed uint64
	rnd  *rand.Rand
	clk  *manualClock
	g    *Gate
	// The earlier history: for earlier, each attempt fails with pFail
	// (first attempts with pFirst); then reg.
	earlier       time.Duration
	pFail, pFirst float64
	// In the earlier history, a failed attempt is a non-retryable answer
	// (Outcome Other: its call ends) with pOther, and says overload with
	// pOverload; drawn from extra, so that histories without them are
	// the ones they were before these were added.
	pOther, pOverload float64
	extra             *rand.Rand
	reg               regime
	// regimeFor is how long reg lasts; gap is the mean time between calls;
	// deadline the calls' deadline span (zero: some calls have none).
	regimeFor, gap, deadline time.Duration
	pause                    time.Duration
	calls                    []*propCall
	// okAt is the regime's first success; allowAt when Allow first
	// admitted a retry after a per-attempt timeout in it (servesAll);
	// servedEarlier, whether an attempt succeeded in the earlier history.
	okAt, allowAt time.Time
	servedEarlier bool
	// overloadAt is the earlier history's latest failure for overload:
	// the overload rule holds retries back tune.OverloadHold after it, on
	// purpose, so the first two properties count from its end.
	overloadAt time.Time
	// idle is a gap without new calls between the earlier history and the
	// regime (the ageing rule); a call's caller leaves at a random time
	// with pCancel. Both drawn from life, so that histories without them
	// are the ones they were before these were added.
	idle    time.Duration
	pCancel float64
	life    *rand.Rand
	// A call is guarded with pGuard, by a guard of a kind drawn from
	// guards, so that histories without guards are the ones they were
	// before guards were added.
	pGuard float64
	guards *rand.Rand
}

// guardKind is how a property test's guard behaves.
type guardKind uint8

const (
	guardClosed    guardKind = iota // closed: it lets every attempt go
	guardRefusing                   // open: refuses its first asks, then allows
	guardPanicking                  // open: panics when asked
	guardLeaving                    // open: allows, and its caller leaves as it does
)

// propGuard is one call's guard; it counts its yeses, those sent, and
// those given back.
type propGuard struct {
	kind                  guardKind
	clk                   *manualClock
	refusals              int
	allowed, sent, backed int
	left                  bool
}

func (g *propGuard) Closed() bool { return g.kind == guardClosed }
func (g *propGuard) AllowRetry() (bool, time.Time) {
	switch g.kind {
	case guardPanicking:
		panic("guard")
	case guardRefusing:
		if g.refusals > 0 {
			g.refusals--
			next := time.Time{}
			if g.refusals%2 == 0 {
				next = g.clk.Now().Add(50 * time.Millisecond)
			}
			return false, next
		}
	case guardLeaving:
		g.left = true
	}
	g.allowed++
	return true, time.Time{}
}
func (g *propGuard) ReturnRetry() { g.backed++ }

// propCall is one call's progress.
type propCall struct {
	start, deadline time.Time
	crit            criticality.Level
	// id names the call to the gate (Request.Call), as the interceptors do.
	id      uint64
	attempt int
	// at is when its next attempt ends (attempting) or its wait next
	// asks (w != nil); done when it ended.
	at        time.Time
	w         *Waiter
	adm       Admission
	sent      time.Time
	done      bool
	ok        bool
	retries   int
	endedAt   time.Time
	lastFail  time.Time
	attempted bool
	// waitLimit is when a wait ends without admission: the deadline, or
	// MaxWait after it began for a call without one (as Wait does).
	waitLimit time.Time
	// cancelAt is when its caller leaves (zero: never); cancelled, it did.
	cancelAt  time.Time
	cancelled bool
	// guard guards its retries (nil: none); panicked, its guard panicked
	// in Take, which its caller recovered.
	guard    *propGuard
	panicked bool
}

func newHistory(seed uint64) *history {
	rnd := rand.New(rand.NewPCG(seed, 0x5eed))
	h := &history{seed: seed, rnd: rnd, clk: &manualClock{now: t0}}
	h.earlier = time.Duration(rnd.IntN(20)) * 500 * time.Millisecond
	h.pFail = []float64{0, 0.2, 0.5, 1}[rnd.IntN(4)]
	h.pFirst = h.pFail
	if rnd.IntN(3) == 0 {
		h.pFirst = 1 // first attempts always fail in the earlier history too
	}
	h.extra = rand.New(rand.NewPCG(seed, 0x07e4))
	h.pOther = []float64{0, 0, 0.3, 1}[h.extra.IntN(4)]
	h.pOverload = []float64{0, 0, 0, 0.5}[h.extra.IntN(4)]
	h.life = rand.New(rand.NewPCG(seed, 0x11fe))
	h.idle = []time.Duration{0, 0, 40 * time.Second, 3 * time.Hour}[h.life.IntN(4)]
	h.pCancel = []float64{0, 0, 0.1, 0.3}[h.life.IntN(4)]
	h.guards = rand.New(rand.NewPCG(seed, 0x6a7d))
	h.pGuard = []float64{0, 0, 0.3, 1}[h.guards.IntN(4)]
	h.reg = regime(rnd.IntN(3))
	h.regimeFor = 10 * time.Second
	h.gap = []time.Duration{5, 20, 100, 400}[rnd.IntN(4)] * time.Millisecond
	h.deadline = []time.Duration{0, 300, 1000, 2000}[rnd.IntN(4)] * time.Millisecond
	h.pause = []time.Duration{1, 10, 50, 200}[rnd.IntN(4)] * time.Millisecond
	if h.reg == down && h.deadline == 0 {
		// Some calls have no deadline, and wait at most MaxWait: the
		// outage must outlive that.
		h.regimeFor = 2 * defaultMaxWait
	}
	b, err := newTokenBucket(DefaultSettings().TokenBucket)
	if err != nil {
		panic(err)
	}
	g, err := Deferring(b, DeferSettings{}, WithClock(h.clk.Now), WithRandom(rnd.Float64))
	if err != nil {
		panic(err)
	}
	h.g = g
	return h
}

// digest sums what every call got and the gate's counters (not State.At,
// the budget's own clock).
func (h *history) digest() string {
	d := sha256.New()
	for _, c := range h.calls {
		fmt.Fprintf(d, "%v %v %d %d %d %v|", c.done, c.ok, c.endedAt.UnixNano(), c.retries, c.attempt, c.cancelled)
	}
	st := h.g.State()
	st.At = time.Time{}
	fmt.Fprintf(d, "%+v %d", st, h.g.verdicts)
	return hex.EncodeToString(d.Sum(nil))
}

func (h *history) describe() string {
	return "earlier " + h.earlier.String() + " failing " + ftoa(h.pFail) + " (first attempts " + ftoa(h.pFirst) + "; non-retryable " + ftoa(h.pOther) + ", overload " + ftoa(h.pOverload) + "), idle " + h.idle.String() + ", then " + h.reg.String() +
		"; a call every " + h.gap.String() + ", deadline " + h.deadline.String() + ", pause " + h.pause.String() + ", callers leave " + ftoa(h.pCancel)
}

func ftoa(f float64) string { return strconv.FormatFloat(f, 'g', 3, 64) }

// serves says whether attempt n of a call ending at now succeeds.
func (h *history) serves(now time.Time, n int) bool {
	if now.Before(t0.Add(h.earlier + h.idle)) {
		p := h.pFail
		if n == 1 {
			p = h.pFirst
		}
		return h.rnd.Float64() >= p
	}
	switch h.reg {
	case servesRetries:
		return n > 1 || h.rnd.Float64() >= 0.5
	case servesAll:
		return true
	}
	return false
}

const (
	propAttempts = 3
	propTook     = 5 * time.Millisecond
	propStep     = time.Millisecond
)

func (h *history) run(t *testing.T) {
	t.Helper()
	end := t0.Add(h.earlier + h.idle + h.regimeFor)
	next := t0
	regimeAt := t0.Add(h.earlier + h.idle)
	idleFrom := t0.Add(h.earlier)
	// Past every lease, and until every call has ended: one without a
	// deadline may wait MaxWait before each of its retries.
	for now := t0; now.Before(end.Add(h.g.s.MaxWait+time.Second)) || h.pending() && now.Before(end.Add(propAttempts*h.g.s.MaxWait+time.Second)); now = now.Add(propStep) {
		if !now.Before(idleFrom) && now.Before(regimeAt) {
			if !h.pending() {
				now = regimeAt // nothing happens while nothing is called
			}
			next = regimeAt
		}
		h.clk.set(now)
		if now.Before(end) && !now.Before(next) {
			h.startCall(now)
			next = now.Add(time.Duration(h.rnd.ExpFloat64() * float64(h.gap)))
		}
		h.g.mu.Lock()
		due := !h.g.timerAt.IsZero() && !now.Before(h.g.timerAt)
		h.g.mu.Unlock()
		if due {
			h.g.Tick() // the gate's timer, at the time it asked for
		}
		for _, c := range h.calls {
			if !c.done {
				h.step(now, c)
			}
		}
		if h.reg == servesAll && !h.okAt.IsZero() && h.allowAt.IsZero() {
			if h.g.Allow(Request{Number: 2, AfterTimeout: true, Straggler: true}) {
				h.allowAt = now
			}
		}
	}
	h.check(t, regimeAt)
}

// pending reports whether a call has not ended.
func (h *history) pending() bool {
	for _, c := range h.calls {
		if !c.done {
			return true
		}
	}
	return false
}

func (h *history) startCall(now time.Time) {
	c := &propCall{start: now, crit: criticality.Level(h.rnd.IntN(4) + 1), id: uint64(len(h.calls) + 1)}
	if h.deadline > 0 {
		c.deadline = now.Add(h.deadline)
	} else if h.rnd.IntN(2) == 0 {
		c.deadline = now.Add(time.Second)
	}
	if h.pCancel > 0 && h.life.Float64() < h.pCancel {
		c.cancelAt = now.Add(time.Duration(h.life.Float64() * float64(2*time.Second)))
	}
	if h.pGuard > 0 && h.guards.Float64() < h.pGuard {
		c.guard = &propGuard{kind: guardKind(h.guards.IntN(4)), clk: h.clk, refusals: 1 + h.guards.IntN(3)}
	}
	h.calls = append(h.calls, c)
	h.send(now, c, AdmitNone)
}

func (h *history) send(now time.Time, c *propCall, adm Admission) {
	c.attempt++
	c.attempted = true
	c.adm, c.sent, c.at, c.w = adm, now, now.Add(propTook), nil
	if c.attempt > 1 {
		c.retries++
	}
	if adm != AdmitNone && c.guard != nil && c.guard.kind != guardClosed {
		c.guard.sent++
	}
}

func (h *history) end(now time.Time, c *propCall, ok bool) {
	c.done, c.ok, c.endedAt = true, ok, now
}

// step moves c at now: an attempt that ends, or a wait that asks.
func (h *history) step(now time.Time, c *propCall) {
	if !c.cancelAt.IsZero() && !now.Before(c.cancelAt) {
		// The caller leaves: a wait is left, an attempt in flight ends
		// as the caller's (Outcome Other), and the call ends.
		if c.w != nil {
			c.w.Leave()
			c.w = nil
		} else if now.Before(c.at) {
			h.g.Record(Attempt{Number: c.attempt, Call: c.id, Outcome: Other, Final: true, Admission: c.adm})
		}
		c.cancelled = true
		h.end(now, c, false)
		return
	}
	if !c.deadline.IsZero() && !now.Before(c.deadline) || c.w != nil && !now.Before(c.waitLimit) {
		if c.w != nil {
			c.w.Leave()
			c.w = nil
		}
		h.end(now, c, false)
		return
	}
	if c.w != nil {
		select {
		case <-c.w.Ready():
		default:
			return
		}
		a, err, panicked := h.take(c)
		if panicked || c.guard != nil && c.guard.left {
			// Its caller's goroutine died of the guard's panic, or its
			// caller left as the guard said yes.
			c.w, c.panicked, c.cancelled = nil, panicked, true
			h.end(now, c, false)
			return
		}
		if a != AdmitNone {
			h.send(now, c, a)
			return
		}
		if err != nil {
			c.w = nil
			h.end(now, c, false)
		}
		return
	}
	if now.Before(c.at) {
		return
	}
	ok := h.serves(now, c.attempt)
	nextAt := now.Add(h.pause)
	final := ok || c.attempt >= propAttempts || !c.deadline.IsZero() && !nextAt.Add(propTook).Before(c.deadline)
	a := Attempt{Number: c.attempt, Call: c.id, Outcome: Success, Final: final, Admission: c.adm}
	if c.adm != AdmitNone {
		a.Took = now.Sub(c.sent)
	}
	if !ok {
		a.Outcome = Failure
		if now.Before(t0.Add(h.earlier + h.idle)) {
			if h.pOther > 0 && h.extra.Float64() < h.pOther {
				a.Outcome, a.Final, final = Other, true, true
			}
			if a.Overload = h.pOverload > 0 && h.extra.Float64() < h.pOverload; a.Overload {
				h.overloadAt = now
			}
		}
	}
	h.g.Record(a)
	if ok && h.okAt.IsZero() && !now.Before(t0.Add(h.earlier+h.idle)) {
		h.okAt = now
	}
	h.servedEarlier = h.servedEarlier || ok && now.Before(t0.Add(h.earlier+h.idle))
	if ok || final {
		h.end(now, c, ok)
		return
	}
	c.lastFail = now
	r := Request{Number: c.attempt + 1, Call: c.id, Last: c.attempt+1 == propAttempts, Criticality: c.crit, Took: propTook}
	if c.guard != nil {
		r.Guard = c.guard
	}
	if h.g.Allow(r) {
		// Paid: the retry goes after its pause.
		h.send(nextAt, c, AdmitNone)
		return
	}
	deadline := c.deadline
	w, err := h.g.Enter(r, h.pause, deadline)
	if err != nil {
		h.end(now, c, false)
		return
	}
	c.w, c.at = w, now
	c.waitLimit = c.deadline
	if c.waitLimit.IsZero() {
		c.waitLimit = now.Add(h.g.s.MaxWait)
	}
}

// guarded reports whether c's retries have a guard that is not closed: the
// regimes' properties do not hold for it (its breaker decides).
func (c *propCall) guarded() bool { return c.guard != nil && c.guard.kind != guardClosed }

// take is c's Take, recovering a guard's panic as its caller would, and
// reading its caller's leaving from its guard.
func (h *history) take(c *propCall) (a Admission, err error, panicked bool) {
	defer func() {
		if p := recover(); p != nil {
			if p != "guard" || c.guard == nil || c.guard.kind != guardPanicking {
				panic(p)
			}
			a, err, panicked = AdmitNone, nil, true
		}
	}()
	a, err = c.w.take(func() bool { return c.guard != nil && c.guard.left })
	return a, err, false
}

func (h *history) check(t *testing.T, regimeAt time.Time) {
	t.Helper()
	for i, c := range h.calls {
		if g := c.guard; g != nil && g.allowed != g.sent+g.backed {
			t.Errorf("call %d's guard (kind %d) said yes %d times: %d sent, %d given back", i, g.kind, g.allowed, g.sent, g.backed)
		}
	}
	end := t0.Add(h.earlier + h.idle + h.regimeFor)
	if st := h.g.State(); st.Waiting != 0 {
		t.Errorf("%d still waiting after every caller left", st.Waiting)
	}
	h.g.mu.Lock()
	held := h.g.st.pace.leased(h.clk.Now())
	h.g.mu.Unlock()
	if held {
		t.Error("the probe slot is held after every caller left")
	}
	from := clock.Later(regimeAt, h.overloadAt.Add(tune.OverloadHold))
	settled := from.Add(time.Second + h.pause)
	switch h.reg {
	case servesRetries:
		// Calls that start once the regime has settled, and fail their
		// first attempt with time left for a retry, are retried. A
		// process that never saw the backend serve cannot tell this regime
		// from an outage until a retry or a first attempt succeeds: the
		// down property allows one retry in ten calls, which at a call
		// every 400 ms is one in 4 s (seeds 228 and 1190), so its second
		// counts from the regime's first success.
		if h.earlier > 0 && !h.servedEarlier {
			settled = clock.Later(from, h.okAt).Add(time.Second + h.pause)
		}
		var failedFirst, retried int
		for _, c := range h.calls {
			if c.start.Before(settled) || c.start.After(end.Add(-time.Second)) {
				continue
			}
			if c.retries == 0 && c.ok || c.cancelled || c.guarded() {
				continue
			}
			if !c.deadline.IsZero() && c.deadline.Sub(c.start) < 2*propTook+h.pause+h.pause/5 {
				continue
			}
			failedFirst++
			if c.retries > 0 {
				retried++
			}
		}
		if missed := failedFirst - retried; missed > 1 && float64(missed) > 0.1*float64(failedFirst) {
			t.Errorf("the backend serves every retry, yet %d of %d calls whose first attempt failed were retried", retried, failedFirst)
		}
	case servesAll:
		if h.allowAt.IsZero() || h.allowAt.Sub(clock.Later(h.okAt, from)) > time.Second+propStep {
			t.Errorf("the backend serves every attempt from %v (first success %v), yet Allow admitted a retry after a per-attempt timeout only at %v", regimeAt.Sub(t0), h.okAt.Sub(t0), h.allowAt.Sub(t0))
		}
	case down:
		// Calls that start once the outage has outlived the deadlines.
		span := h.deadline
		if span == 0 {
			span = defaultMaxWait
		}
		var calls, retries int
		var untimed, slow int
		for _, c := range h.calls {
			if c.start.Before(regimeAt.Add(span+time.Second)) || c.start.After(end) || c.cancelled || c.guarded() {
				continue
			}
			calls++
			retries += c.retries
			if !c.deadline.IsZero() {
				continue
			}
			untimed++
			if c.endedAt.Sub(c.lastFail) > h.pause+h.pause/5+propStep && c.endedAt.Sub(c.start) > 100*time.Millisecond {
				slow++
			}
		}
		// The calls the futility rule keeps waiting by its draw may take
		// their last chance: three deviations of that draw at most, as
		// below (a bound without them failed 1 to 3 seeds in 200 on other
		// draws of the Gate's generator, never beyond the spread).
		if calls > 0 && float64(retries) > 0.1*float64(calls)+3*math.Sqrt(0.09*float64(calls))+1 {
			t.Errorf("down for longer than the deadlines: %d retries for %d calls, want one in ten at most", retries, calls)
		}
		// Without a deadline, the futility rule keeps one waiting retry
		// in ten by a draw (the server's return then finds calls to
		// serve): three deviations of that draw at most. With one, a
		// call waits to its deadline, which the return may beat (the
		// futility rule spares it); what it costs is bounded above.
		if bound := 0.1*float64(untimed) + 3*math.Sqrt(0.09*float64(untimed)) + 1; float64(slow) > bound {
			t.Errorf("down for longer than the waits: %d of %d failed calls without a deadline waited past their pause, want one in ten at most (%.0f with the draw's spread)", slow, untimed, bound)
		}
	}
}

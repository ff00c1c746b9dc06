package interceptor

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/stagger-go/stagger/breaker"
	"github.com/stagger-go/stagger/budget"
	"github.com/stagger-go/stagger/internal/pace"
	"github.com/stagger-go/stagger/policy"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// timerCall is a call whose attempt n of 3 has a per-attempt timer of d
// and pauses 10ms before a retry.
func timerCall(n int, d time.Duration) *call {
	return &call{retryFacts: retryFacts{
		retryPlan: retryPlan{
			retrying:   true,
			pol:        &policy.Policy{MaxAttempts: 3, Backoff: policy.Backoff{Initial: 10 * time.Millisecond, Max: 10 * time.Millisecond, Multiplier: 1, Jitter: policy.JitterNone}, PerAttemptRecvTimeout: d},
			perAttempt: d,
			repeatable: true,
		},
		o:       &options{},
		ctx:     context.Background(),
		attempt: n,
		retry:   1,
	}}
}

// startTimer starts the per-attempt timer of c's attempt c.attempt, as
// the stream's nextAttempt does when it counts that attempt.
func startTimer(callCtx context.Context, c *call) *streamTimer {
	c.attempt--
	_, _, at := c.nextAttempt(callCtx)
	return at
}

func TestAttemptTimerFiredAndStoppedExclude(t *testing.T) {
	bg := context.Background()
	// Stopped first: the timer never fires, the attempt was not cut off.
	at := startTimer(bg, timerCall(1, time.Hour))
	if !at.stop() {
		t.Fatal("stop on an armed timer = false, want true")
	}
	if !at.stop() {
		t.Fatal("stop on a stopped timer = false, want true")
	}
	at.takeDue(at.due) // a late fire changes nothing
	if at.ctx.Err() != nil || !at.stop() {
		t.Fatalf("after stop then fire: ctx.Err() = %v, stop() = %v; want nil, true", at.ctx.Err(), at.stop())
	}
	at.cancel()

	// Fired, the policy would retry: the attempt runs on through the
	// retry's pause (its grace); stopped then, it was not cut off, and
	// nothing was spent on the retry.
	ask := &askBudget{allow: true}
	c := timerCall(1, time.Hour)
	c.budget = ask
	at = startTimer(bg, c)
	at.takeDue(at.due)
	if got := stateOf(at); got != timerGrace || at.ctx.Err() != nil {
		t.Fatalf("after fire: state %d, ctx.Err() = %v; want timerGrace (%d) and running on", got, at.ctx.Err(), timerGrace)
	}
	if !at.stop() || at.ctx.Err() != nil || ask.asked != 0 {
		t.Fatalf("stopped in the grace: stop() = false, ctx.Err() = %v, or the budget asked %d times; want true, nil, 0", at.ctx.Err(), ask.asked)
	}
	at.takeDue(at.graceEnd) // a late end of the grace changes nothing
	if !at.stop() || at.ctx.Err() != nil || ask.asked != 0 {
		t.Fatalf("after stop then cut: ctx.Err() = %v, budget asked %d times; want nil, 0", at.ctx.Err(), ask.asked)
	}
	at.cancel()

	// Fired, and the grace ended, a retry can go: the attempt's context is
	// cancelled, stop says so, and the call takes the retry the timer
	// admitted.
	c = timerCall(1, time.Hour)
	at = startTimer(bg, c)
	at.takeDue(at.due)
	at.takeDue(at.graceEnd)
	if at.stop() || at.ctx.Err() == nil {
		t.Fatalf("after fire: stop() = true or ctx.Err() = nil (%v); want false and cancelled", at.ctx.Err())
	}
	if !c.stopTimer(at) || !c.cut.verdict.Retry || c.cut.verdict.Pause != 10*time.Millisecond {
		t.Fatalf("stopTimer after fire: verdict %+v, want a retry after 10ms", c.cut.verdict)
	}
	at.cancel()

	// Fired first, no retry can go (the last attempt): the attempt runs on,
	// its context untouched, and it was not cut off.
	c = timerCall(3, time.Hour)
	at = startTimer(bg, c)
	at.takeDue(at.due)
	if !at.stop() || at.ctx.Err() != nil || c.stopTimer(at) {
		t.Fatalf("last attempt after fire: stop() = false or ctx.Err() = %v; want true and running on", at.ctx.Err())
	}
	at.cancel()

	// A nil timer (no per-attempt timeout) never cuts an attempt off.
	var none *streamTimer
	if !none.stop() {
		t.Fatal("nil timer stop() = false, want true")
	}

	// The timer is not a deadline: the server sees the parent's.
	parent, cancel := context.WithTimeout(bg, time.Hour)
	defer cancel()
	at = startTimer(parent, timerCall(1, time.Millisecond))
	defer at.cancel()
	want, _ := parent.Deadline()
	if got, ok := at.ctx.Deadline(); !ok || !got.Equal(want) {
		t.Fatalf("attempt deadline = %v, %v; want the caller's %v", got, ok, want)
	}
}

// askBudget counts what it is asked and answers allow.
type askBudget struct {
	asked, records int
	allow          bool
}

func (b *askBudget) Record(budget.Attempt)     { b.records++ }
func (b *askBudget) Allow(budget.Request) bool { b.asked++; return b.allow }
func (b *askBudget) State() budget.State       { return budget.State{Kind: "ask"} }

// TestTimeoutRetry: as the timer fires, a retry goes only when it can go
// now; otherwise the attempt runs on, and nothing is spent.
func TestTimeoutRetry(t *testing.T) {
	far := func() (context.Context, context.CancelFunc) {
		return context.WithTimeout(context.Background(), time.Hour)
	}
	tests := []struct {
		name    string
		attempt int
		allow   bool
		defers  bool
		breaker bool // an open breaker guards the call
		ctx     func() (context.Context, context.CancelFunc)
		want    bool
		asked   int // times the budget was asked
	}{
		{"attempts left, budget admits: goes", 1, true, false, false, far, true, 1},
		{"second of three: goes", 2, true, false, false, far, true, 1},
		{"maxAttempts reached: runs on", 3, true, false, false, far, false, 0},
		{"budget refuses: runs on", 1, false, false, false, far, false, 1},
		{"a deferring budget would defer: runs on", 1, false, true, false, far, false, 1},
		{"breaker open: runs on, budget not asked", 1, true, false, true, far, false, 0},
		{"pause would not end before the deadline: runs on", 1, true, false, false, func() (context.Context, context.CancelFunc) {
			return context.WithTimeout(context.Background(), 5*time.Millisecond)
		}, false, 0},
		{"caller cancelled: runs on (and ends)", 1, true, false, false, func() (context.Context, context.CancelFunc) {
			ctx, cancel := context.WithCancel(context.Background())
			cancel()
			return ctx, cancel
		}, false, 0},
		{"no deadline: goes", 1, true, false, false, func() (context.Context, context.CancelFunc) {
			return context.Background(), func() {}
		}, true, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx, cancel := tt.ctx()
			defer cancel()
			ask := &askBudget{allow: tt.allow}
			c := timerCall(tt.attempt, time.Second)
			c.budget = ask
			if tt.defers {
				g, err := budget.Deferring(ask, budget.DefaultSettings().Defer)
				if err != nil {
					t.Fatal(err)
				}
				c.budget = g
			}
			if tt.breaker {
				br, err := breaker.New("k", breaker.Settings{ConsecutiveFailures: 1}, nil)
				if err != nil {
					t.Fatal(err)
				}
				br.Record(budget.Failure, true, c.crit, c.o)
				if br.Closed() {
					t.Fatal("the breaker did not open")
				}
				c.br = br
			}
			q := question{kind: askVerdict, n: c.attempt, err: errAttemptTimeout, timedOut: true}
			v := c.shouldRetry(ctx, &q).verdict
			ok := v.Retry
			if ok {
				q.kind, q.verdict, q.given = askAdmit, v, true
				ok = c.shouldRetry(ctx, &q).verdict.Retry
			}
			if ok != tt.want {
				t.Errorf("askVerdict, askAdmit: %+v, %v; want %v", v, ok, tt.want)
			}
			if ask.asked != tt.asked {
				t.Errorf("the budget was asked %d times, want %d", ask.asked, tt.asked)
			}
			if ask.records != 0 {
				t.Errorf("the budget heard %d outcomes, want none: the attempt has not ended", ask.records)
			}
		})
	}
}

// TestAfterAttemptFollowsTimer: an attempt the timer cut off is retried as
// the timer decided, without asking the budget again (it paid already),
// and at once: the attempt ran on through the whole pause.
func TestAfterAttemptFollowsTimer(t *testing.T) {
	bg := context.Background()
	ask := &askBudget{allow: true}
	c := timerCall(1, time.Hour)
	c.budget = ask
	at := startTimer(bg, c)
	at.takeDue(at.due)
	at.takeDue(at.graceEnd) // the grace ends (its timer, stopped or not, finds it ended)
	err, timedOut := attemptOutcome(bg, status.Error(codes.Canceled, "cancelled"), c.stopTimer(at))
	at.cancel()
	if !timedOut {
		t.Fatal("not timed out")
	}
	if !c.cut.verdict.Retry || c.cut.verdict.Pause <= 0 {
		t.Fatalf("the timer's cut %+v, want a retry with a pause", c.cut)
	}
	retry, pause := c.afterAttempt(bg, err, nil, false, timedOut)
	if !retry || pause != 0 {
		t.Errorf("afterAttempt = %v, %v; want a retry at once (its pause ran out in the grace)", retry, pause)
	}
	if ask.asked != 1 || ask.records != 1 {
		t.Errorf("budget asked %d times, told %d outcomes; want 1 and 1", ask.asked, ask.records)
	}
}

// mkCtx makes a table row's caller context, fresh for each row; the row*
// functions are the callers the outcome tables (TestAttemptOutcome,
// TestRacedVerdict) draw from, and rowServer an attempt's own status.
type mkCtx func() (context.Context, context.CancelFunc)

func rowFar() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), time.Hour)
}

// rowNear's deadline is 500µs away, within callerDeadlineSlack by the time
// the row runs.
func rowNear() (context.Context, context.CancelFunc) {
	return context.WithDeadline(context.Background(), time.Now().Add(500*time.Microsecond))
}

func rowPassed() (context.Context, context.CancelFunc) {
	return context.WithDeadline(context.Background(), time.Now().Add(-time.Second))
}

func rowCancelled() (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	return ctx, cancel
}

func rowServer(c codes.Code) error { return status.Error(c, "from the server") }

func TestAttemptOutcome(t *testing.T) {
	// Each row gets a fresh context, so that a deadline 500µs away is still
	// ahead when the row runs (or, on a slow machine, just past: see racy).
	far, near, passed, cancelled, server := rowFar, rowNear, rowPassed, rowCancelled, rowServer
	tests := []struct {
		name       string
		ctx        mkCtx
		err        error
		cutOff     bool
		wantCode   codes.Code
		wantSame   bool // the attempt's own error comes back unchanged
		wantTimed  bool
		wantCaller bool
	}{
		{"success", far, nil, false, codes.OK, true, false, false},
		{"success after the timer fired is a success", far, nil, true, codes.OK, true, false, false},
		{"server status, deadline far", far, server(codes.Unavailable), false, codes.Unavailable, true, false, false},
		{"server DEADLINE_EXCEEDED, deadline far: the server's own", far, server(codes.DeadlineExceeded), false, codes.DeadlineExceeded, true, false, false},
		{"cut off by the timer", far, server(codes.Canceled), true, codes.DeadlineExceeded, false, true, false},
		{"server DEADLINE_EXCEEDED within 1 ms of the caller's deadline", near, server(codes.DeadlineExceeded), false, codes.DeadlineExceeded, true, false, true},
		{"CANCELED within 1 ms of the caller's deadline", near, server(codes.Canceled), false, codes.DeadlineExceeded, false, false, true},
		{"timer and deadline together: the caller's", near, server(codes.Canceled), true, codes.DeadlineExceeded, false, false, true},
		{"CANCELED after the deadline passed", passed, server(codes.Canceled), false, codes.DeadlineExceeded, false, false, true},
		{"server status as the deadline passed is kept", passed, server(codes.InvalidArgument), false, codes.InvalidArgument, true, false, true},
		{"the caller cancelled", cancelled, server(codes.Canceled), false, codes.Canceled, true, false, true},
		{"the caller cancelled during the timer", cancelled, server(codes.DeadlineExceeded), true, codes.Canceled, false, false, true},
		{"UNAVAILABLE within 1 ms of the deadline is the server's", near, server(codes.Unavailable), false, codes.Unavailable, true, false, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx, cancel := tt.ctx()
			defer cancel()
			err, timed := attemptOutcome(ctx, tt.err, tt.cutOff)
			if status.Code(err) != tt.wantCode || timed != tt.wantTimed {
				t.Errorf("attemptOutcome = %v, %v; want code %v, timed out %v", err, timed, tt.wantCode, tt.wantTimed)
			}
			if tt.wantSame && !errors.Is(err, tt.err) && err != tt.err {
				t.Errorf("attemptOutcome = %v, want the attempt's own %v", err, tt.err)
			}
			// A non-context code is the caller's only once its context is
			// done: a row whose 500µs passed while it ran says nothing.
			racy := !tt.wantCaller && ctx.Err() != nil
			if got := tt.err != nil && callerEnded(ctx, tt.err); got != tt.wantCaller && !racy {
				t.Errorf("callerEnded = %v, want %v", got, tt.wantCaller)
			}
		})
	}
}

func TestWireAmbiguous(t *testing.T) {
	ct := metadata.Pairs("content-type", "application/grpc")
	for _, tc := range []struct {
		name      string
		trailer   metadata.MD
		committed bool
		want      bool
	}{
		{"no stream: never left the client", nil, false, false},
		{"stream, transport ended it (empty trailer)", metadata.MD{}, false, true},
		{"stream, trailer of the server's own keys but no content-type", metadata.Pairs("x-server", "1"), false, true},
		{"Trailers-Only: the server wrote a status", ct, false, false},
		{"committed: final anyway", metadata.MD{}, true, false},
	} {
		if got := wireAmbiguous(tc.trailer, tc.committed); got != tc.want {
			t.Errorf("%s: wireAmbiguous = %v, want %v", tc.name, got, tc.want)
		}
	}
}

// timerLoop is a unary loop over c whose latest attempt has just left,
// its per-attempt timer armed (an hour: its event never comes here); beside
// says hedgeOnPerTryTimeout.
func timerLoop(t *testing.T, c *call, beside bool) *unaryLoop {
	t.Helper()
	bg := context.Background()
	l := &unaryLoop{hs: hedgeState{c: c}, callCtx: bg, beside: beside}
	n := 1 // one attempt at a time (unaryEngine)
	if beside {
		n = c.pol.MaxAttempts
	}
	l.goroutines(n, nil)
	c.attempt--
	l.cur, l.cancel = context.WithCancel(c.numberAttempt(l.hctx))
	l.timer.arm(c.attempt, time.Now(), c.perAttempt, c.pace)
	l.armTimer()
	t.Cleanup(func() { l.timer.stop(); l.cancel(); l.hcancel() })
	return l
}

// TestUnaryTimerBeside: under hedgeOnPerTryTimeout the loop's timer, as it
// fires, admits a retry that waits out its pause beside the attempt, which
// runs on; once the attempt ended from above it admits nothing.
func TestUnaryTimerBeside(t *testing.T) {
	ask := &askBudget{allow: true}
	c := timerCall(1, time.Hour)
	c.budget, c.hedgeOnTimeout = ask, true
	l := timerLoop(t, c, true)
	l.take()
	if l.timer.state != timerRanOn || l.cur.Err() != nil || l.dueT == nil || c.retry != 2 || ask.asked != 1 {
		t.Fatalf("after fire: state %d, ctx.Err() = %v, retry pending %v, retry %d, budget asked %d; want timerRanOn, running, a retry after its pause, 2, 1",
			l.timer.state, l.cur.Err(), l.dueT != nil, c.retry, ask.asked)
	}

	// No pause: the retry starts as the timer fires, with a timer of its
	// own, armed.
	c = timerCall(1, time.Hour)
	c.pol.Backoff.Initial, c.pol.Backoff.Max = 0, 0
	c.hedgeOnTimeout = true
	l = timerLoop(t, c, true)
	l.hc.inv.invoker = func(context.Context, string, any, any, *grpc.ClientConn, ...grpc.CallOption) error { return nil }
	l.take()
	if ev := <-l.hc.results; c.attempt != 2 || ev.n != 2 || l.timer.n != 2 || l.timer.state != timerArmed {
		t.Errorf("after fire with no pause: attempt %d (ended %d), timer of attempt %d in state %d; want attempt 2 started, its timer armed (%d)", c.attempt, ev.n, l.timer.n, l.timer.state, timerArmed)
	}

	c = timerCall(1, time.Hour)
	c.budget, c.hedgeOnTimeout = ask, true
	l = timerLoop(t, c, true)
	l.cancel()
	l.take()
	if l.dueT != nil || ask.asked != 1 {
		t.Errorf("a cancelled attempt's timer admitted a retry (pending %v) or asked the budget (%d times; want 1, before)", l.dueT != nil, ask.asked)
	}
}

// TestUnaryTimerEndBeforeDueIsItsOwn: an attempt that ended before the
// timer was due was not timed out, even when the loop took the timer's
// event first (the attempt's end was still on its way): the timer, with no
// pause to wait (no grace), cut the attempt off as it fired, and the end
// that then arrives, dated before the due time, is the attempt's own, and
// the retry the timer admitted does not go. One dated after it was cut
// off.
func TestUnaryTimerEndBeforeDueIsItsOwn(t *testing.T) {
	const d = time.Hour
	for _, tc := range []struct {
		name string
		end  time.Duration // after start
		cut  bool
	}{
		{"ended before the due time", d - time.Millisecond, false},
		{"ended at the due time", d, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ask := &askBudget{allow: true}
			c := timerCall(1, d)
			c.pol.Backoff.Initial, c.pol.Backoff.Max = 0, 0
			c.budget = ask
			l := timerLoop(t, c, false)
			l.handle(unaryEvent{kind: evTimer, n: 1, at: l.timer.due})
			if l.timer.state != timerFired || l.cur.Err() == nil || ask.asked != 1 {
				t.Fatalf("after the timer's event: state %d, ctx.Err() = %v, budget asked %d; want cut off (%d), cancelled, 1", l.timer.state, l.cur.Err(), ask.asked, timerFired)
			}
			if cut := l.endTimer(l.timer.start.Add(tc.end)); cut != tc.cut || c.cut.verdict.Retry != tc.cut {
				t.Errorf("cut %v, verdict %+v; want %v, a retry only when cut", cut, c.cut.verdict, tc.cut)
			}
		})
	}
}

// TestUnaryTimerEndBeforeDueFiredNothing: the pace evidence follows the
// loop's judgement of an attempt's end. When the loop took the timer's
// event first (cutting the attempt off, or letting it run on through the
// pause) but the attempt ended before the timer was due, the timer never
// fired on it: a later attempt's timer finds no earlier fire
// (pace.Evidence.Fire's answer, Straggler's prevFired). One that ended at
// the due time was fired on.
func TestUnaryTimerEndBeforeDueFiredNothing(t *testing.T) {
	const d = time.Hour
	for _, pause := range []time.Duration{0, 10 * time.Millisecond} {
		for _, tc := range []struct {
			name  string
			end   time.Duration // after start
			fired bool
		}{
			{"ended before the due time", d - time.Millisecond, false},
			{"ended at the due time", d, true},
		} {
			t.Run(fmt.Sprintf("pause %v, %s", pause, tc.name), func(t *testing.T) {
				c := timerCall(1, d)
				c.pol.Backoff.Initial, c.pol.Backoff.Max = pause, pause
				c.budget, c.pace = &askBudget{allow: true}, &pace.Evidence{}
				l := timerLoop(t, c, false)
				l.handle(unaryEvent{kind: evTimer, n: 1, at: l.timer.due})
				l.endTimer(l.timer.start.Add(tc.end))
				want := int64(0)
				if tc.fired {
					want = l.timer.start.UnixNano()
				}
				if prev := c.pace.Fire(l.timer.start.Add(2 * d)); prev != want {
					t.Errorf("a later timer's earlier fire: %d; want %d (the attempt's start: %d)", prev, want, l.timer.start.UnixNano())
				}
			})
		}
	}
}

// dueTimeCases are ends of an attempt of timerCall(1, dueTimeTimeout): its
// timer (an hour, so its own event never comes in a test) is due at
// start+1h, its grace (timerCall's pause, dueTimePause) ends 10ms later.
// Each end meets exactly the decisions due by then, taken at their due
// times, whichever driver (a unary call's loop, a stream's timer) takes
// them.
var dueTimeCases = []struct {
	name  string
	end   time.Duration // after start
	allow bool          // the budget's answer
	cut   bool
	asked int
	state int32
}{
	{"ended before the timer was due", dueTimeTimeout - time.Millisecond, true, false, 0, timerStopped},
	{"ended in the grace: its answer is the call's", dueTimeTimeout + dueTimePause - time.Millisecond, true, false, 0, timerStopped},
	{"ended as the grace ended: cut off", dueTimeTimeout + dueTimePause, true, true, 1, timerFired},
	{"ended long after: cut off", 3 * dueTimeTimeout, true, true, 1, timerFired},
	{"ended after, the budget refusing: ran on", dueTimeTimeout + dueTimePause, false, false, 1, timerRanOn},
}

const dueTimeTimeout, dueTimePause = time.Hour, 10 * time.Millisecond

// TestUnaryTimerDecidesAtDueTimes: the loop judges an attempt's end by
// when it ended (endTimer), not by which event came first (dueTimeCases).
func TestUnaryTimerDecidesAtDueTimes(t *testing.T) {
	const d, pause = dueTimeTimeout, dueTimePause
	for _, tc := range dueTimeCases {
		t.Run(tc.name, func(t *testing.T) {
			ask := &askBudget{allow: tc.allow}
			c := timerCall(1, d)
			c.budget = ask
			l := timerLoop(t, c, false)
			cut := l.endTimer(l.timer.start.Add(tc.end))
			if cut != tc.cut || ask.asked != tc.asked || l.timer.state != tc.state {
				t.Fatalf("cut %v, budget asked %d, state %d; want %v, %d, %d", cut, ask.asked, l.timer.state, tc.cut, tc.asked, tc.state)
			}
			if tm := &l.timer; tc.cut && (tm.due.Sub(tm.start) != d || tm.graceEnd.Sub(tm.due) != pause || !c.cut.verdict.Retry) {
				t.Errorf("fired after %v, grace %v, verdict %+v; want %v, %v, a retry", tm.due.Sub(tm.start), tm.graceEnd.Sub(tm.due), c.cut.verdict, d, pause)
			}
			if tc.cut != (l.cur.Err() != nil) {
				t.Errorf("ctx.Err() = %v with cut %v", l.cur.Err(), tc.cut)
			}
			// An event that arrives after the end changes nothing.
			l.handle(unaryEvent{kind: evTimer, n: 1, at: l.timer.due})
			if l.timer.state != tc.state || ask.asked != tc.asked {
				t.Errorf("a late event moved the timer to %d (budget asked %d)", l.timer.state, ask.asked)
			}
		})
	}
}

// TestAttemptTimerDecidesAtDueTimes: whether a stream's timer cut an
// attempt off depends on when the attempt ended (stopAnswered), not on whether
// the timer's goroutine ran first (dueTimeCases).
func TestAttemptTimerDecidesAtDueTimes(t *testing.T) {
	const d, pause = dueTimeTimeout, dueTimePause
	bg := context.Background()
	for _, tc := range dueTimeCases {
		t.Run(tc.name, func(t *testing.T) {
			ask := &askBudget{allow: tc.allow}
			c := timerCall(1, d)
			c.budget = ask
			at := startTimer(bg, c)
			defer at.cancel()
			if got := !at.stopAnswered(at.start.Add(tc.end)); got != tc.cut || ask.asked != tc.asked || stateOf(at) != tc.state {
				t.Fatalf("cut %v, budget asked %d, state %d; want %v, %d, %d", got, ask.asked, stateOf(at), tc.cut, tc.asked, tc.state)
			}
			if tc.cut && (at.due.Sub(at.start) != d || at.graceEnd.Sub(at.due) != pause || !at.verdict.Retry) {
				t.Errorf("fired after %v, grace %v, verdict %+v; want %v, %v, a retry", at.due.Sub(at.start), at.graceEnd.Sub(at.due), at.verdict, d, pause)
			}
			if tc.cut != (at.ctx.Err() != nil) {
				t.Errorf("ctx.Err() = %v with cut %v", at.ctx.Err(), tc.cut)
			}
		})
	}
}

// stateOf reads st's state under its lock: its goroutine may be deciding.
func stateOf(st *streamTimer) int32 {
	st.mu.Lock()
	defer st.mu.Unlock()
	return st.state
}

package interceptor

import (
	"context"
	"time"

	"github.com/stagger-go/stagger/budget"
	"github.com/stagger-go/stagger/internal/chain"
	"github.com/stagger-go/stagger/internal/quantile"
	"github.com/stagger-go/stagger/policy"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// hedges says whether c's hedging policy applies: a second attempt is
// allowed and the call may run twice (idempotent, or a unary call with an
// idempotency key: the server side de-duplicates unary calls only). When
// it may not, the hooks hear so once.
func (k *core) hedges(ctx context.Context, c *call, stream bool) bool {
	if c.hedged.Hedging.MaxAttempts < 2 {
		return false
	}
	if !k.idempotent(c.o, c.hedged, c.method) && (c.o.idemKey == "" || stream) {
		k.noticeUnapplied(ctx, c, policy.ReasonNotIdempotent)
		return false
	}
	return true
}

// newHedgeState readies hedging's start rule for c under h: the delay, and
// for an adaptive policy the histogram that learns it from the winners.
func (k *core) newHedgeState(c *call, h *policy.Hedging) hedgeState {
	s := hedgeState{c: c, h: h, delay: h.Delay}
	if h.Adaptive {
		if s.hist = k.latency(c.method); s.hist != nil {
			if d, ok := s.hist.Quantile(hedgeQuantile); ok {
				s.delay = d
			}
		}
	}
	return s
}

// hedgeState is hedging's start rule and judge, for a unary call and a
// stream alike; one goroutine uses it at a time.
type hedgeState struct {
	c     *call
	h     *policy.Hedging
	delay time.Duration // < 0: one attempt at a time (a reply not a proto.Message)
	hist  *quantile.Histogram

	sent, inFlight int
	lastSend       time.Time
	// due: the next attempt goes now; trigger: the non-fatal failure that
	// made it due; pushback: it waited out a pushback.
	due      bool
	trigger  error
	pushback bool
	// stopped is why no further hedge is sent (ReasonNone: none).
	stopped policy.Reason
	// held: the budget refused a hedge beside attempts in flight.
	held   bool
	timer  *time.Timer
	timerC <-chan time.Time
	// last is the last failure, lastN its attempt.
	last  error
	lastN int
	// waitedHedge is the hedge that waited in the Deferrer as a retry (0:
	// none), let go with waitedAdmission.
	waitedHedge     int
	waitedAdmission budget.Admission
}

// sendDue is hedging's one start rule, for a unary call and a stream: it
// starts the attempts due, each admitted by the call's decision, until
// hedging stops. wanted (nil: always) says before the asking whether one
// is still wanted; take readies attempt n and says when it went (false:
// not, its admission given back); run starts it.
func (s *hedgeState) sendDue(callCtx context.Context, wanted func() bool, take func(n int) (time.Time, bool), run func(n int)) {
	for s.due {
		s.due = false
		n := s.sent + 1
		switch {
		case s.stopped != policy.ReasonNone:
			return
		case n > s.h.MaxAttempts:
			s.stopped = policy.ReasonAttempts
			return
		case n > 1 && chain.RetriedRequest(callCtx):
			// Served for a caller that retries or hedges already.
			s.stop(callCtx, n, policy.ReasonRetriedRequest)
			return
		case wanted != nil && !wanted():
			return
		}
		if why := s.admitHedge(callCtx, n); why != policy.ReasonNone && !s.goOnRefused(callCtx, n, why) {
			return
		}
		at, ok := take(n)
		if !ok {
			return
		}
		s.launched(callCtx, n, at)
		run(n)
		s.schedule(callCtx, n)
	}
}

// admitHedge asks the call's decision whether hedge n goes (askHedge):
// ReasonNone or why not. The first was admitted as the call started.
func (s *hedgeState) admitHedge(callCtx context.Context, n int) policy.Reason {
	if n < 2 {
		return policy.ReasonNone
	}
	q := question{kind: askHedge, n: n}
	return s.c.shouldRetry(callCtx, &q).verdict.Reason
}

// goOnRefused reports whether hedge n, refused for why, goes after all
// (UnaryClientInterceptor's hedging rules): a breaker's refusal stops
// hedging; a budget's holds it beside attempts in flight (said once), and
// with none in flight the hedge is a retry: it waits in the Deferrer,
// which asks the breaker again, and is recorded as one (hedgeAttempt).
func (s *hedgeState) goOnRefused(callCtx context.Context, n int, why policy.Reason) bool {
	if why == policy.ReasonBreaker {
		s.stop(callCtx, n, why)
		return false
	}
	why = policy.ReasonBudget
	if _, ok := s.c.budget.(budget.Deferrer); ok && s.inFlight == 0 && n > 1 {
		s.c.emit(callCtx, Event{Kind: EventDeferred, Method: s.c.method, Attempt: n - 1, Hedging: true})
		req := budget.Request{Number: n, Call: s.c.callID(), Last: n == s.h.MaxAttempts, Criticality: s.c.crit}
		if s.c.br != nil {
			req.Guard = s.c.br.Guard(s.c.crit, s.c.o)
		}
		adm, ended := s.c.waitGate(callCtx, req, 0)
		switch {
		case ended == policy.ReasonNone:
			s.waitedHedge, s.waitedAdmission = n, adm
			return true
		case callCtx.Err() != nil:
			why = policy.ReasonCaller
		default:
			why = ended
		}
	}
	if why != policy.ReasonBudget || s.inFlight == 0 {
		s.stop(callCtx, n, why)
		return false
	}
	s.disarm()
	s.due = false
	if !s.held {
		s.held = true
		s.c.emit(callCtx, Event{Kind: EventHedgeStop, Method: s.c.method, Attempt: n, Reason: why, Hedging: true})
	}
	return false
}

// launched counts attempt n, sent at now, and tells the hooks of a hedge.
func (s *hedgeState) launched(callCtx context.Context, n int, now time.Time) {
	if n > 1 {
		e := Event{Kind: EventHedge, Method: s.c.method, Attempt: n, Pause: now.Sub(s.lastSend), Pushback: s.pushback, Hedging: true}
		if s.trigger != nil {
			e.Code, e.Err = status.Code(s.trigger), s.trigger
		}
		s.c.emit(callCtx, e)
	}
	s.sent, s.lastSend, s.trigger, s.pushback = n, now, nil, false
	s.inFlight++
}

// schedule makes the attempt after n due: none after the last, at once
// with delay 0, else after it.
func (s *hedgeState) schedule(callCtx context.Context, n int) {
	switch {
	case n == s.h.MaxAttempts:
		s.disarm()
	case s.delay < 0:
	case s.delay == 0:
		s.due = true
	default:
		s.arm(callCtx, s.delay, n+1)
	}
}

// arm schedules hedge n after d; one that could not start before the
// caller's deadline stops hedging.
func (s *hedgeState) arm(callCtx context.Context, d time.Duration, n int) {
	s.disarm()
	if dl, ok := callCtx.Deadline(); ok && time.Until(dl) <= d {
		s.stop(callCtx, n, policy.ReasonDeadline)
		return
	}
	if s.timer == nil {
		s.timer = time.NewTimer(d)
	} else {
		s.timer.Reset(d)
	}
	s.timerC = s.timer.C
}

func (s *hedgeState) disarm() {
	if s.timerC != nil {
		s.timer.Stop()
		s.timerC = nil
	}
}

// callerGone stops hedging as the caller leaves; with nothing in flight
// the call ends now (over), for why.
func (s *hedgeState) callerGone(callCtx context.Context) (why policy.Reason, over bool) {
	s.disarm()
	s.due, s.stopped = false, policy.ReasonCaller
	if s.inFlight > 0 {
		return policy.ReasonNone, false
	}
	if callCtx.Err() == context.Canceled {
		s.last, s.lastN = status.Error(codes.Canceled, context.Canceled.Error()), s.sent
		return policy.ReasonCaller, true
	}
	return policy.ReasonDeadline, true
}

// stop ends hedging (attempts in flight go on) and says so, once.
func (s *hedgeState) stop(callCtx context.Context, n int, why policy.Reason) {
	s.disarm()
	s.due = false
	if s.stopped != policy.ReasonNone {
		return
	}
	s.stopped = why
	if s.held && why == policy.ReasonBudget {
		return // said when the hedge was held
	}
	s.c.emit(callCtx, Event{Kind: EventHedgeStop, Method: s.c.method, Attempt: n, Reason: why, Hedging: true})
}

// learn teaches an adaptive delay a winner's time to answer, took.
func (s *hedgeState) learn(took time.Duration) {
	if s.hist != nil {
		s.hist.Observe(took)
	}
}

// won tells the hooks that attempt n won, when hedges were sent.
func (s *hedgeState) won(callCtx context.Context, n int) {
	if s.sent > 1 {
		s.c.emit(callCtx, Event{Kind: EventHedgeWon, Method: s.c.method, Attempt: n, Hedging: true})
	}
}

// judge is hedging's "retry or not" for attempt n, ended with err and
// trailer (committed: its headers had arrived, or the stream is its),
// through the call's decision (askRaced): ReasonNone when the next hedge
// may go (made due here), or why the call ends, s.last its error.
func (s *hedgeState) judge(callCtx context.Context, n int, err error, committed bool, trailer metadata.MD) policy.Reason {
	q := question{kind: askRaced, n: n, err: err, committed: committed, first: n == 1, rec: s.hedgeAttempt(n), nonFatal: s.h.NonFatalCodes}
	ans := s.c.shouldRetry(callCtx, &q)
	s.last, s.lastN = err, n
	if ans.callerEnd {
		s.last = callerErr(callCtx, err)
	}
	if ans.verdict.Reason != policy.ReasonNone {
		return ans.verdict.Reason
	}
	// Non-fatal: the next hedge is due at once, or after a valid pushback;
	// an invalid one, or one past policy.DefaultPushbackCeiling, stops
	// hedging.
	pb, res := policy.ParsePushback(trailer)
	if res == policy.PushbackNone {
		if st, ok := status.FromError(err); ok {
			pb, res = policy.RetryInfoDelay(st)
		}
	}
	switch {
	case s.stopped != policy.ReasonNone || s.sent >= s.h.MaxAttempts:
	case res == policy.PushbackInvalid || res == policy.PushbackValid && pb > policy.DefaultPushbackCeiling:
		s.stop(callCtx, s.sent+1, policy.ReasonPushback)
	case res == policy.PushbackValid:
		s.arm(callCtx, pb, s.sent+1)
		s.pushback = s.timerC != nil
	default:
		s.disarm()
		s.due, s.trigger = true, err
	}
	return policy.ReasonNone
}

// recordHedge records attempt n's end through the call's decision.
func (s *hedgeState) recordHedge(n int, budgetO, breakerO budget.Outcome) {
	q := question{kind: askSettled, first: n == 1, rec: s.hedgeAttempt(n), breakerO: breakerO}
	q.rec.Outcome = budgetO
	s.c.shouldRetry(context.Background(), &q) // askSettled reads no context
}

// hedgeAttempt is what the budget hears of attempt n, but its outcome.
func (s *hedgeState) hedgeAttempt(n int) budget.Attempt {
	a := budget.Attempt{Number: n, Hedge: n > 1}
	if n == s.waitedHedge {
		// A hedge that waited as a retry ends as one.
		a.Hedge, a.Admission = false, s.waitedAdmission
	}
	return a
}

// hedgeFailed ends a hedged call nobody won, for why: the others end
// before the hooks hear the give-up.
func (l *unaryLoop) hedgeFailed(why policy.Reason) error {
	l.drain()
	err, _ := l.end(l.lastOut, l.hs.giveUp(l.callCtx, why))
	return err
}

// giveUp ends a race nobody won, for why (ReasonNone: ReasonAttempts),
// and returns the call's error, of the last failure.
func (s *hedgeState) giveUp(callCtx context.Context, why policy.Reason) error {
	if why == policy.ReasonNone {
		why = policy.ReasonAttempts
	}
	s.c.reason = why
	s.c.emit(callCtx, Event{Kind: EventGiveUp, Method: s.c.method, Attempt: s.lastN, Code: status.Code(s.last), Err: s.last, Reason: why, Hedging: true})
	return s.c.failed(s.sent, s.last)
}

// latency returns method's histogram, made on first use (nil past
// methodCacheMax).
func (k *core) latency(method string) *quantile.Histogram {
	h, _ := k.latencies.Get(method, methodCacheMax, func() *quantile.Histogram { return new(quantile.Histogram) })
	return h
}

package interceptor

import (
	"context"
	"time"

	"github.com/stagger-go/stagger/budget"
	"github.com/stagger-go/stagger/internal/chain"
	"github.com/stagger-go/stagger/policy"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

// hedge runs a unary call of a method whose policy hedges on the call's
// loop, by the rules UnaryClientInterceptor gives (Hedging): hedgeState
// says when the next attempt starts and judges a failure. The hedging
// policy applies (k.hedges; unaryEngine runs one attempt otherwise).
func (k *core) hedge(callCtx context.Context, c *call, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, grpcOpts []grpc.CallOption) error {
	h := c.hedged.Hedging
	l := unaryLoop{shared: c, k: k, callCtx: callCtx, req: req, reply: reply, cc: cc, invoker: invoker}
	delay, hist := k.hedgeDelay(c.method, h)
	if m, ok := reply.(proto.Message); ok && m != nil {
		// The reply type, read before the first attempt writes into the
		// caller's reply: a hedge made later must not read that message
		// (grpc resets it to unmarshal, racing with ProtoReflect).
		l.replyType = m.ProtoReflect().Type()
	} else {
		// Concurrent attempts each need a reply of their own, and stagger
		// makes one only for a proto.Message: the attempts go one at a
		// time into the caller's reply, the next only after a non-fatal
		// failure (as grpc-go's retry would, with the hedging policy's
		// codes), and the logger and hooks hear why, once per method.
		k.noticeUnhedged(callCtx, c, policy.ReasonReplyType)
		delay, hist = -1, nil
	}
	l.goroutines(h.MaxAttempts, grpcOpts)
	l.hist = hist
	l.hedged, l.hs = true, hedgeState{c: c, h: h, delay: delay}
	l.hs.deadline, l.hs.hasDeadline = callCtx.Deadline()
	return l.run()
}

// hedges says whether c's hedging policy applies: it allows a second
// attempt and the call may run more than once (the method is known to be
// idempotent, or a unary call carries an idempotency key, which the server
// de-duplicates). When it may not, the logger and hooks hear so, once per
// method.
func (k *core) hedges(ctx context.Context, c *call, stream bool) bool {
	h := c.hedged.Hedging
	if h.MaxAttempts < 2 {
		return false
	}
	// The key counts for a unary call only: the server side (server.WithIdempotency)
	// does not de-duplicate streams.
	if !k.idempotent(c.o, c.hedged, c.method) && (c.o.idemKey == "" || stream) {
		k.noticeUnhedged(ctx, c, policy.ReasonNotIdempotent)
		return false
	}
	return true
}

// hedgeDelay returns the hedging delay of method under h: the policy's, or
// with an adaptive policy the 95th percentile of the method's latency once
// it has one, and then hist, the histogram that learns it (nil otherwise).
func (k *core) hedgeDelay(method string, h *policy.Hedging) (delay time.Duration, hist *latencyHistogram) {
	delay = h.Delay
	if h.Adaptive {
		if hist = k.latency(method); hist != nil {
			if d, ok := hist.quantile(hedgeQuantile); ok {
				delay = d
			}
		}
	}
	return delay, hist
}

// hedgeState is the hedging loop's state; only the call's goroutine uses it.
type hedgeState struct {
	c     *call
	h     *policy.Hedging
	delay time.Duration
	// delay < 0: no hedge is sent while an attempt is in flight (a unary
	// call whose reply is not a proto.Message: one reply, the caller's).

	deadline    time.Time
	hasDeadline bool

	sent, inFlight int
	lastSend       time.Time
	// due: the next attempt is to be sent now. trigger is the non-fatal
	// failure that made it due early, pushback that it waited a pushback.
	due      bool
	trigger  error
	pushback bool
	// stopped is why no further hedge is sent (ReasonNone: hedging goes on).
	stopped policy.Reason
	// held: the budget refused a hedge while attempts were in flight
	// (refused).
	held   bool
	timer  *time.Timer
	timerC <-chan time.Time
	// last is the last failure, lastN its attempt.
	last  error
	lastN int
}

// sendDue sends the attempts that are due: one, or all that are left when
// the delay is 0.
func (l *unaryLoop) sendDue() {
	s := &l.hs
	for s.due {
		n := s.next(l.callCtx)
		if n == 0 {
			return
		}
		if why := s.admitHedge(l.callCtx, n); why != policy.ReasonNone && !s.goOnRefused(l.callCtx, n, why) {
			return
		}
		s.launched(l.callCtx, n, time.Now())
		l.launch()
		s.schedule(l.callCtx, n)
	}
}

// next takes the attempt that is due and returns its number, or 0 when none
// is to be sent (hedging has stopped, and says why). The breaker and the
// budget are the caller's to ask (admitHedge), next to the launch.
func (s *hedgeState) next(callCtx context.Context) int {
	s.due = false
	if s.stopped != policy.ReasonNone {
		return 0
	}
	n := s.sent + 1
	if n > s.h.MaxAttempts {
		s.stopped = policy.ReasonAttempts
		return 0
	}
	if n > 1 && chain.RetriedRequest(callCtx) {
		// Served for a caller that is retrying or hedging already.
		s.stop(callCtx, n, policy.ReasonRetriedRequest)
		return 0
	}
	return n
}

// admitHedge asks the call's decision whether attempt n, which next took, goes
// (shouldRetry, askHedge: the breaker, then the budget), and returns
// ReasonNone, or why not (ReasonBreaker, ReasonBudget: goOnRefused). The
// first attempt is the breaker's to admit as the call starts (admitFirst).
func (s *hedgeState) admitHedge(callCtx context.Context, n int) policy.Reason {
	if n < 2 {
		return policy.ReasonNone
	}
	q := question{kind: askHedge, n: n}
	return s.c.shouldRetry(callCtx, &q).verdict.Reason
}

// goOnRefused handles hedge n, which admitHedge refused for why, and reports
// whether it goes after all. A breaker's refusal stops hedging. A budget's
// may wait as a retry (waitHedge); when that ends without the attempt, the
// hedge is refused (refused).
func (s *hedgeState) goOnRefused(callCtx context.Context, n int, why policy.Reason) bool {
	if why == policy.ReasonBreaker {
		s.stop(callCtx, n, why)
		return false
	}
	if why = s.waitHedge(callCtx, n); why != policy.ReasonNone {
		s.refused(callCtx, n, why)
		return false
	}
	return true
}

// waitHedge is a hedge (attempt n) the budget refused. With an attempt in
// flight it goes no further (ReasonBudget). With none, every earlier
// attempt failed and the hedge is a retry: it waits, as a retry would, in
// the budget's Deferrer (a Gate), which lets it go as a probe, at its
// call's last chance or when retries heal. It returns ReasonNone when the
// hedge may go now, or why not (budget, outage or deferred, as for a
// retry). The attempt it admits tells the budget how it went as a retry
// (recordHedge), so that a Gate settles its probe and learns whether
// retries heal. It blocks only the hedging loop, which has no attempt to
// watch meanwhile; the caller's context ends the wait.
func (s *hedgeState) waitHedge(callCtx context.Context, n int) policy.Reason {
	if _, ok := s.c.budget.(budget.Deferrer); !ok || s.inFlight > 0 || n < 2 {
		return policy.ReasonBudget
	}
	s.c.emit(callCtx, Event{Kind: EventDeferred, Method: s.c.method, Attempt: n - 1, Hedging: true})
	adm, err, switched := s.c.waitGate(callCtx, budget.Request{Number: n, Last: n == s.h.MaxAttempts, Criticality: s.c.crit}, 0)
	switch {
	case err == nil:
		s.c.waitedHedge, s.c.waitedAdmission = n, adm
		return policy.ReasonNone
	case callCtx.Err() != nil:
		return policy.ReasonCaller
	case switched:
		return policy.ReasonDisabled
	}
	return waitEnded(err)
}

// launched accounts for attempt n, sent at now, and tells the hooks of a
// hedge (with the non-fatal failure or the pushback that made it due).
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
// when the delay is 0, else after the delay.
func (s *hedgeState) schedule(callCtx context.Context, n int) {
	switch {
	case n == s.h.MaxAttempts:
		s.disarm()
	case s.delay < 0:
		// One at a time: the next goes after a non-fatal failure only.
	case s.delay == 0:
		s.due = true
	default:
		s.arm(callCtx, s.delay, n+1)
	}
}

// arm schedules the next hedge (number n) after d, replacing any scheduled
// one; a hedge that could not start before the caller's deadline is not
// scheduled and hedging stops.
func (s *hedgeState) arm(callCtx context.Context, d time.Duration, n int) {
	s.disarm()
	if s.hasDeadline && time.Until(s.deadline) <= d {
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

// callerGone stops hedging when the caller's context has ended. With
// attempts in flight, each derives from callCtx and ends on its own; with
// none (waiting out a pushback) over says the call ends now, for why.
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

// stop ends hedging (the attempts in flight go on) and says so, once.
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

// refused handles attempt n, which the budget (or, with nothing in flight,
// its Gate) refused, for why. With attempts in flight the hedge is held,
// not dropped: no hedge goes beside them any more (the hooks hear that
// hedging stopped, reason budget, once), but when the last of them fails
// non-fatally the next attempt is a retry and asks again, waiting as a
// retry does (waitHedge); so a late non-fatal failure ends the call only
// as it would have ended a retried call. Otherwise hedging stops.
func (s *hedgeState) refused(callCtx context.Context, n int, why policy.Reason) {
	if why != policy.ReasonBudget || s.inFlight == 0 {
		s.stop(callCtx, n, why)
		return
	}
	s.disarm()
	s.due = false
	if !s.held {
		s.held = true
		s.c.emit(callCtx, Event{Kind: EventHedgeStop, Method: s.c.method, Attempt: n, Reason: why, Hedging: true})
	}
}

// hedgeEnded judges the end of a hedged attempt: the first success wins;
// a failure is judged by the hedging policy (judge). over says the call is
// over, with err its result.
func (l *unaryLoop) hedgeEnded(ev unaryEvent) (err error, over bool) {
	s := &l.hs
	if ev.err == nil {
		s.c.recordHedge(ev.n, budget.Success, budget.Success)
		l.drain()
		l.hc.adopt(l.reply, ev.out)
		if l.hist != nil {
			l.hist.observe(ev.at.Sub(ev.start))
		}
		if s.sent > 1 {
			s.c.emit(l.callCtx, Event{Kind: EventHedgeWon, Method: s.c.method, Attempt: ev.n, Hedging: true})
		}
		l.hc.finished(nil)
		return nil, true
	}
	l.lastOut = ev.out
	// Headers arrived before the failure: the attempt had committed the
	// call (gRFC A6), as a retry would be refused.
	if why := s.judge(l.callCtx, ev.n, ev.err, ev.out.header != nil); why != policy.ReasonNone {
		return l.hedgeFailed(why), true
	}
	s.nonFatal(l.callCtx, ev.n, ev.err, ev.out.trailer)
	return nil, false
}

// judge is hedging's "retry or not", for a unary call and a stream alike:
// attempt n failed with err before any commit (committed: its response
// headers had arrived, which makes a unary call's failure final). The
// call's decision judges it and records it (shouldRetry, askRaced). judge
// makes err the last failure (the caller's status when the caller left as
// a non-fatal one came), and returns ReasonNone when the next hedge may go
// (nonFatal then schedules it), or why the call ends (the caller left, the
// attempt had committed, a fatal code), with s.last the call's error.
func (s *hedgeState) judge(callCtx context.Context, n int, err error, committed bool) policy.Reason {
	q := question{kind: askRaced, n: n, err: err, committed: committed, first: n == 1, rec: s.c.hedgeAttempt(n), nonFatal: s.h.NonFatalCodes}
	ans := s.c.shouldRetry(callCtx, &q)
	s.last, s.lastN = err, n
	if ans.callerEnd {
		s.last = callerErr(callCtx, err)
	}
	return ans.verdict.Reason
}

// nonFatal handles attempt n's non-fatal failure err, with its trailer: the
// next hedge is due at once, or after a valid pushback; an invalid pushback
// (or one past policy.DefaultPushbackCeiling) stops hedging.
func (s *hedgeState) nonFatal(callCtx context.Context, n int, err error, trailer metadata.MD) {
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
}

// recordHedge tells c's breaker and budget, through the call's decision
// (askSettled), how attempt n of a hedged call ended.
func (c *call) recordHedge(n int, budgetO, breakerO budget.Outcome) {
	q := question{kind: askSettled, first: n == 1, rec: c.hedgeAttempt(n), breakerO: breakerO}
	q.rec.Outcome = budgetO
	c.shouldRetry(nil, &q)
}

// hedgeAttempt is what c's budget hears of attempt n of a hedged call, but
// its outcome.
func (c *call) hedgeAttempt(n int) budget.Attempt {
	a := budget.Attempt{Number: n, Hedge: n > 1}
	if n == c.waitedHedge {
		// A hedge that waited as a retry (waitHedge) ends as one.
		a.Hedge, a.Admission = false, c.waitedAdmission
	}
	return a
}

// hedgeFailed ends a hedged call that failed: the last failure, with why
// (ReasonAttempts when nothing else stopped the hedges).
func (l *unaryLoop) hedgeFailed(why policy.Reason) error {
	s := &l.hs
	l.drain()
	l.hc.adoptMeta(l.lastOut)
	s.giveUp(l.callCtx, why)
	l.hc.finished(s.last)
	return s.c.failed(s.sent, s.last)
}

// giveUp tells the hooks that the call failed, with the last failure, for
// why (ReasonAttempts when nothing else stopped the hedges).
func (s *hedgeState) giveUp(callCtx context.Context, why policy.Reason) {
	if why == policy.ReasonNone {
		why = policy.ReasonAttempts
	}
	s.c.reason = why
	s.c.emit(callCtx, Event{Kind: EventGiveUp, Method: s.c.method, Attempt: s.lastN, Code: status.Code(s.last), Err: s.last, Reason: why, Hedging: true})
}

// latency returns method's latency histogram, made on first use; nil once
// methodCacheMax methods have one (a program that makes up method names
// cannot grow the set without end: the others keep the file's delay).
func (k *core) latency(method string) *latencyHistogram {
	if h, ok := k.hedgeLatency.Load(method); ok {
		return h.(*latencyHistogram)
	}
	if k.hedgeLatencyN.Load() >= methodCacheMax {
		return nil
	}
	h, loaded := k.hedgeLatency.LoadOrStore(method, new(latencyHistogram))
	if !loaded {
		k.hedgeLatencyN.Add(1)
	}
	return h.(*latencyHistogram)
}

// noticeUnhedged tells the logger and hooks, once per method and
// interceptor, that the method's hedging policy is not applied, and why
// (policy.ReasonNotIdempotent, ReasonReplyType). The stream engine calls it too, for a
// stream whose method hedges but may not run twice.
func (k *core) noticeUnhedged(ctx context.Context, c *call, why policy.Reason) {
	if k.firstOf(&k.noticed, c.method) {
		c.emit(ctx, Event{Kind: EventNotice, Method: c.method, Reason: why, Hedging: true})
	}
}

package interceptor

import (
	"context"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/stagger-go/stagger/budget"
	"github.com/stagger-go/stagger/policy"
)

// Maintainers: unaryLoop is the one owner of a unary call that may send
// more than one attempt. It runs on the caller's goroutine and alone
// decides: whether the next attempt goes (a retry, a hedge, a retry beside
// a timed-out attempt), the per-attempt timer's verdict, which attempt's
// answer the caller sees (the commit: adopt, adoptMeta) and the call's
// result, which runUnary then ends. Everything else only sends it events
// on one channel (hc.results):
//
//	an attempt's goroutine (hedgeCall.run)  {evEnded, n, err, outputs, start, endedAt}
//	the per-attempt timer (armTimer)        {evTimer, n, due}: it fired, or its grace ended
//	a retry's pause beside attempts          {evStart, due}  (hedgeOnPerTryTimeout)
//	hedging's start timer (hedgeState.arm)   its channel, taken as evStart
//	the caller's context                     its Done channel, taken as evCaller
//
// When nothing can fire during an attempt (no hedging, no per-attempt
// timer) the attempt runs inline, on the loop's goroutine, into the
// caller's reply and holders (unaryAttempt.prepare): no goroutine, no
// channel; the fast path's failed first attempt is that mode's first
// step. Otherwise each attempt runs on a goroutine of its own with
// outputs of its own (hedgeOutputs), and the caller's are filled from one
// of them before the call returns.
//
// Hedging is retry with a start timer (gRFC A6): hedgeState says when the
// next attempt starts and judges a failure by the hedging policy's codes.
// Under hedgeOnPerTryTimeout the timer's event starts a retry beside the
// attempt; under a plain per-attempt timeout the same event cuts the
// attempt off first. Whether the timer cut an attempt off is a comparison
// of times: an attempt that ended before a decision's due time was not
// timed out, whichever event the channel delivered first (endTimer).
type unaryLoop struct {
	// own is the call's state, held here, not pointed at: the loop's
	// content escapes (its goroutine modes hand it on), and a loop on its
	// caller's stack keeps the call there too. A hedged call's is shared
	// instead, on the heap: its hedgeState points at it.
	own     call
	shared  *call
	k       *core
	callCtx context.Context
	req     any
	reply   any
	cc      *grpc.ClientConn
	invoker grpc.UnaryInvoker

	// inline: attempts run on the loop's goroutine with attemptOpts,
	// grpc writing their header and trailer at headerAddr and trailerAddr;
	// first: the fast path's first attempt ended with firstErr, and the
	// loop has not taken it yet.
	inline                  bool
	attemptOpts             []grpc.CallOption
	headerAddr, trailerAddr *metadata.MD
	first                   bool
	firstErr                error

	// Attempts on goroutines: hc holds their outputs and the events;
	// hctx, which hcancel ends, is what they derive from (alone: one at a
	// time, the caller's context itself).
	hc      *hedgeCall
	hctx    context.Context
	hcancel context.CancelFunc
	alone   bool
	// replyType makes a reply for each attempt after the first; nil when
	// they go one at a time into the caller's reply.
	replyType protoreflect.MessageType
	// hs is hedging's start rule and judge when hedged (else a retry
	// policy's call), hist the method's latency histogram for an adaptive
	// delay.
	hedged bool
	hs     hedgeState
	hist   *latencyHistogram
	// beside: hedgeOnPerTryTimeout, a retry the timer admits goes beside
	// its attempt; pendingDue, when not zero, is when such a retry, waiting
	// out its pause, is due.
	beside     bool
	pendingDue time.Time
	inFlight   int
	// cur is the latest attempt's context and cancel (a plain per-attempt
	// timeout cuts it off), timer its per-attempt timer.
	cur    context.Context
	cancel context.CancelFunc
	timer  attemptTimer
	// last is the latest failure that decided nothing (beside); lastOut
	// the outputs of the last hedge that ended, whose metadata the caller
	// gets when the call fails (nil: none ended).
	last    error
	lastOut *hedgeOutputs
}

// c is the loop's call.
func (l *unaryLoop) c() *call {
	if l.shared != nil {
		return l.shared
	}
	return &l.own
}

// Kinds of unaryEvent.
const (
	evEnded uint8 = iota
	evTimer
	evStart
	evCaller
)

// unaryEvent is what the loop takes: an attempt ended, a timer is due, the
// next attempt is due, the caller left.
type unaryEvent struct {
	kind uint8
	n    int
	err  error
	out  *hedgeOutputs
	// start is when attempt n left, at when it ended (evEnded) or when the
	// timer was due (evTimer, evStart).
	start, at time.Time
	// admission is how the budget let attempt n go (beside: each attempt
	// tells the budget its own); done says its context had ended as it
	// ended (cancelled from above, or the caller's).
	admission budget.Admission
	done      bool
}

// goroutines readies l to run its attempts on goroutines of their own, at
// most maxAttempts, with the call's grpc options (the file's, then the
// caller's), from which the caller's holders and OnFinish are taken
// (callerOutputs.split): the loop fills and runs them itself.
func (l *unaryLoop) goroutines(maxAttempts int, grpcOpts []grpc.CallOption) {
	hc := getHedgeCall(maxAttempts)
	hc.method, hc.req, hc.cc, hc.invoker = l.c().method, l.req, l.cc, l.invoker
	hc.base = hc.split(hc.base, grpcOpts, &hc.onFinish)
	l.hc = hc
	if l.alone = maxAttempts == 1; l.alone {
		// One attempt at a time, each with a cancel of its own, which the
		// loop calls as it takes the attempt's end: nothing to drain.
		l.hctx, l.hcancel = l.callCtx, noCancel
		return
	}
	l.hctx, l.hcancel = context.WithCancel(l.callCtx)
}

// run runs the call's attempts until it ends, and returns its error.
func (l *unaryLoop) run() error {
	var done <-chan struct{}
	switch {
	case l.hedged:
		l.hs.due = true
		done = l.callCtx.Done()
		defer func() { l.c().attempt = l.hs.sent }()
	case !l.inline:
		done = l.callCtx.Done()
		l.launch()
	}
	if l.hc != nil {
		defer l.hcancel()
		defer putHedgeCall(l.hc)
		defer l.timer.stop()
	}
	for {
		var ev unaryEvent
		if hs := &l.hs; l.hedged {
			l.sendDue()
			if l.inFlight == 0 && hs.timerC == nil {
				return l.hedgeFailed(hs.stopped)
			}
		}
		if l.inline {
			ev = l.attemptInline()
		} else {
			var startC <-chan time.Time
			if l.hedged {
				startC = l.hs.timerC
			}
			select {
			case ev = <-l.hc.results:
			case <-startC:
				ev.kind = evStart
			case <-done:
				done, ev.kind = nil, evCaller
			}
		}
		if err, over := l.handle(ev); over {
			return err
		}
	}
}

// handle takes one event; over says the call is over, with err its
// result.
func (l *unaryLoop) handle(ev unaryEvent) (err error, over bool) {
	switch ev.kind {
	case evEnded:
		l.ended1()
		switch {
		case l.hedged:
			return l.hedgeEnded(ev)
		case l.beside:
			return l.besideEnded(ev)
		}
		return l.retryEnded(ev)
	case evTimer:
		l.timerDue(ev)
	case evStart:
		switch {
		case l.hedged:
			l.hs.timerC, l.hs.due = nil, true
		case !l.pendingDue.IsZero() && ev.at.Equal(l.pendingDue):
			l.pendingDue = time.Time{}
			l.launch()
		}
	case evCaller:
		return l.callerLeft()
	}
	return nil, false
}

// attemptInline runs the next attempt on the loop's goroutine and returns
// its end: the fast path's first attempt, which ran already, or a new one.
func (l *unaryLoop) attemptInline() unaryEvent {
	c := l.c()
	if l.first {
		l.first = false
		c.attempt = 1
		return unaryEvent{n: 1, err: l.firstErr}
	}
	ctx := c.numberAttempt(l.callCtx)
	retrying(c.attempt, l.attemptOpts)
	// grpc writes these only when the attempt got a stream; a stale value
	// from an earlier attempt must not count.
	*l.headerAddr, *l.trailerAddr = nil, nil
	err := l.invoker(ctx, c.method, l.req, l.reply, l.cc, l.attemptOpts...)
	return unaryEvent{n: c.attempt, err: err}
}

// launch starts the call's next attempt (a retry's) on a goroutine of its
// own, with its per-attempt timer when the call has one.
func (l *unaryLoop) launch() {
	c, hc := l.c(), l.hc
	out := &hc.first
	if c.attempt > 0 && l.replyType != nil {
		out = &hedgeOutputs{reply: l.replyType.New().Interface()}
	} else {
		out.reply = l.reply
	}
	hc.prepare(out)
	ctx := c.numberAttempt(l.hctx)
	l.cur, l.cancel = ctx, noCancel
	if c.perAttempt > 0 {
		if !l.beside {
			l.cur, l.cancel = context.WithCancel(ctx)
		}
		l.startTimer()
	}
	adm := budget.AdmitNone
	if l.beside {
		// The attempt carries its admission to its end: attempts overlap,
		// and the next retry's must not be recorded against this one.
		adm, c.admission = c.admission, budget.AdmitNone
	}
	l.inFlight++
	go hc.run(l.cur, c.attempt, adm, out)
}

// retryEnded judges the end of an attempt of a call that sends one at a
// time (inline, or with a plain per-attempt timer) by the retry policy
// (afterAttempt), and waits out the pause before the retry.
func (l *unaryLoop) retryEnded(ev unaryEvent) (error, bool) {
	c := l.c()
	timed := !l.inline && c.perAttempt > 0
	cut := false
	if timed {
		cut = l.endTimer(ev.at)
	} else {
		c.slow = false
	}
	err, timedOut := attemptOutcome(l.callCtx, ev.err, cut)
	if cut && !timedOut {
		// Answered, or the caller left, as the timer cut the attempt
		// off: the retry the timer admitted does not go.
		l.settleTimer()
		c.timerVerdict, c.timerAdmission = policy.Verdict{}, budget.AdmitNone
	}
	if err == nil && (timed || c.attempt > 1) {
		l.served(ev)
	}
	l.cancel()
	header, trailer := l.outputs(ev)
	// A Trailers-Only response leaves the header nil; headers that
	// arrived, even with no entries, leave it non-nil: committed. Except
	// for a call with an idempotency key: a unary call shows the
	// application nothing of an attempt before the call returns, so
	// commitment protects nothing there but the server from running the
	// request twice, and the key does that (the server replays the first
	// run's outcome). Such a call is retried after headers as before
	// them: a reset after the server ran it heals.
	return l.decided(ev, err, trailer, header != nil && c.o.idemKey == "", timedOut)
}

// decided applies the call's decision on the attempt that ended with ev
// (afterAttempt): the call ends with its error, or the retry goes after
// its pause.
func (l *unaryLoop) decided(ev unaryEvent, err error, trailer metadata.MD, committed, timedOut bool) (error, bool) {
	c := l.c()
	retry, pause := c.afterAttempt(l.callCtx, err, trailer, committed, timedOut)
	if !retry {
		return l.ended(ev.out, c.finish(err)), true
	}
	if perr := c.pause(l.callCtx, pause, err); perr != nil {
		return l.ended(ev.out, perr), true
	}
	if !l.inline {
		l.launch()
	}
	return nil, false
}

// outputs returns the header and trailer grpc wrote of the attempt that
// ended with ev.
func (l *unaryLoop) outputs(ev unaryEvent) (header, trailer metadata.MD) {
	if l.inline {
		return *l.headerAddr, *l.trailerAddr
	}
	return ev.out.header, ev.out.trailer
}

// ended gives the caller the outputs of out, the attempt whose outcome is
// the call's (nil: inline, grpc wrote the caller's own), runs its OnFinish
// functions and returns err, the call's result.
func (l *unaryLoop) ended(out *hedgeOutputs, err error) error {
	if l.hc != nil {
		l.hc.adoptMeta(out)
		l.hc.finished(err)
	}
	return err
}

// served notes that the attempt that ended with ev was served (see
// pace.answer): under a per-attempt timer unless it was cut off or ended
// from above; without one, only a retry is timed.
func (l *unaryLoop) served(ev unaryEvent) {
	c, t := l.c(), &l.timer
	switch {
	case c.perAttempt > 0 && !l.inline:
		if c.pace != nil && !ev.done && t.state != timerFired {
			c.pace.answer(ev.start, ev.at.Sub(ev.start), c.crit.Index())
		}
	default:
		c.served()
	}
}

// besideEnded judges the end of an attempt under hedgeOnPerTryTimeout: the
// first success wins; a failure while another attempt runs, or while a
// retry waits out its pause, is recorded and ends nothing; the last
// failure, with nothing else running, decides as usual (afterAttempt).
func (l *unaryLoop) besideEnded(ev unaryEvent) (error, bool) {
	c := l.c()
	if ev.n == l.timer.n {
		l.timer.stop()
	}
	err, _ := attemptOutcome(l.callCtx, ev.err, false)
	if err == nil && !ev.done && c.pace != nil && c.perAttempt > 0 {
		c.pace.answer(ev.start, ev.at.Sub(ev.start), c.crit.Index())
	}
	if err == nil {
		if !l.pendingDue.IsZero() {
			c.settleUnsent()
		}
		l.pendingDue = time.Time{}
		l.drain()
		l.hc.adopt(l.reply, ev.out)
		// The budget hears the attempt's own admission.
		c.admission = ev.admission
		c.afterAttempt(l.callCtx, nil, nil, false, false)
		l.hc.finished(nil)
		return nil, true
	}
	committed := ev.out.header != nil && c.o.idemKey == ""
	if l.inFlight > 0 || !l.pendingDue.IsZero() {
		// Another attempt may still succeed: this failure ends nothing.
		q := question{kind: askBeside, n: ev.n, err: err, trailer: ev.out.trailer, committed: committed, first: ev.n+c.before == 1,
			rec: budget.Attempt{Number: ev.n, Admission: ev.admission, Took: ev.took()}}
		c.shouldRetry(l.callCtx, &q)
		l.last = err
		return nil, false
	}
	c.admission = ev.admission
	return l.decided(ev, err, ev.out.trailer, committed, false)
}

// callerLeft takes the caller's leaving. The attempts in flight derive
// from callCtx and end on their own; what ends now is a wait with nothing
// in flight.
func (l *unaryLoop) callerLeft() (error, bool) {
	c := l.c()
	switch {
	case l.hedged:
		if why, over := l.hs.callerGone(l.callCtx); over {
			return l.hedgeFailed(why), true
		}
	case l.beside && !l.pendingDue.IsZero():
		c.settleUnsent()
		l.pendingDue = time.Time{}
		if l.inFlight == 0 {
			// Only the pause was left: end as a pause the caller ended
			// does.
			return l.ended(nil, c.pause(l.callCtx, 0, l.last)), true
		}
	}
	return nil, false
}

// ended1 counts an attempt that ended.
func (l *unaryLoop) ended1() {
	if l.inline {
		return
	}
	l.inFlight--
	if l.hedged {
		l.hs.inFlight--
	}
}

// drain cancels every attempt still in flight and waits for each to end,
// telling the budget and the breaker of each as of an attempt that lost:
// no goroutine outlives the call, and nothing writes a reply or holder
// once the call has returned.
func (l *unaryLoop) drain() {
	if l.hedged {
		l.hs.disarm()
	}
	l.hcancel()
	for l.inFlight > 0 {
		ev := <-l.hc.results
		if ev.kind != evEnded {
			continue
		}
		l.ended1()
		o := budget.Other
		if ev.err == nil {
			o = budget.Success
		}
		c := l.c()
		if l.hedged {
			c.recordHedge(ev.n, o, o)
			continue
		}
		// With the admission it went with: a probe's end frees the Gate's
		// probe lease.
		q := question{kind: askSettled, first: ev.n+c.before == 1, breakerO: o,
			rec: budget.Attempt{Number: ev.n, Outcome: o, Admission: ev.admission, Took: ev.took()}}
		c.shouldRetry(nil, &q)
	}
}

// retryBeside starts the retry the per-attempt timer admitted (verdict v,
// admission adm) beside its attempt, after the retry's pause.
func (l *unaryLoop) retryBeside(v policy.Verdict, adm budget.Admission) {
	l.c().retryBeside(l.callCtx, v, adm)
	if v.Pause <= 0 {
		l.launch()
		return
	}
	due := time.Now().Add(v.Pause)
	l.pendingDue = due
	l.sendAt(due, evStart, 0)
}

// sendAt sends the loop the event of kind (evTimer, evStart) due at due,
// of attempt n, unless the call has ended by then.
func (l *unaryLoop) sendAt(due time.Time, kind uint8, n int) *time.Timer {
	events, done := l.hc.results, l.hctx.Done()
	if l.alone {
		// The attempt's: its timer's events are the only ones sent.
		done = l.cur.Done()
	}
	// The closure builds the event, rather than hold a copy: it is
	// allocated for every timed attempt.
	return time.AfterFunc(time.Until(due), func() {
		select {
		case events <- unaryEvent{kind: kind, n: n, at: due}:
		case <-done:
		}
	})
}

// run is one attempt's goroutine: the attempt, then its end, sent to the
// loop, which receives every attempt's end before the call returns.
func (hc *hedgeCall) run(ctx context.Context, n int, adm budget.Admission, out *hedgeOutputs) {
	start := time.Now()
	err := hc.invoker(ctx, hc.method, hc.req, out.reply, hc.cc, out.opts...)
	hc.results <- unaryEvent{kind: evEnded, n: n, err: err, out: out, start: start, at: time.Now(), admission: adm, done: ctx.Err() != nil}
}

// retryBeside accounts for a retry the per-attempt timer admitted while its
// attempt runs on (hedgeOnPerTryTimeout): as afterAttempt does for a retry
// after an attempt cut off, but the attempt, still running, is recorded
// when it ends.
func (c *call) retryBeside(callCtx context.Context, v policy.Verdict, adm budget.Admission) {
	c.emit(callCtx, Event{Kind: EventRetry, Method: c.method, Attempt: c.attempt, Code: codes.DeadlineExceeded, Err: errAttemptTimeout, Pause: v.Pause})
	c.retry, c.prev = c.retry+1, v.Pause
	c.afterTimeout = true
	// The retry goes as the timer's admission let it: launch hands it to
	// the attempt.
	c.admission = adm
}

// settleUnsent tells the budget that the retry the timer admitted, which
// waits out its pause, will not be sent (the call ended first).
func (c *call) settleUnsent() {
	c.settle(c.admission)
	c.admission = budget.AdmitNone
}

// settle tells the budget that the retry after the current attempt, which
// it admitted with adm, will not be sent: the admission is settled (a
// Gate's probe lease freed), as an attempt that said nothing of the
// server. The breaker was not asked for it, and hears nothing.
func (c *call) settle(adm budget.Admission) {
	if c.budget != nil && adm != budget.AdmitNone {
		c.budget.Record(budget.Attempt{Number: c.attempt + 1, Outcome: budget.Other, Admission: adm})
	}
}

// took is how long the attempt that ended with ev took, for the budget
// (budget.Attempt.Took), when a Deferrer let it go.
func (ev *unaryEvent) took() time.Duration {
	if ev.admission == budget.AdmitNone {
		return 0
	}
	return ev.at.Sub(ev.start)
}

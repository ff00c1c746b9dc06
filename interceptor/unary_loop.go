package interceptor

import (
	"context"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/stagger-go/stagger/budget"
	"github.com/stagger-go/stagger/policy"
)

// unaryLoop is the one owner of a unary call, on the caller's goroutine:
// it alone decides whether the next attempt goes, the per-attempt timer's
// verdict, which attempt's answer the caller sees (adopt) and the result.
// The others send it events (hc.results); docs/architecture.md, "Who
// decides a unary call", draws them, their senders and the loop's modes.
// An attempt's end takes one path in every mode (attemptEnded), and the
// loop ends in one place (end).
//
// The loop waits in its select alone, but in a Deferrer's Wait (which
// blocks by its contract), entered with nothing in flight and no timer
// armed, so that no event comes meanwhile.
type unaryLoop struct {
	// own is the call, by value so that it stays on the caller's stack; a
	// hedged call's is its hedgeState's (hs.c).
	own     call
	callCtx context.Context
	inv     invocation
	reply   any

	// inline: each attempt passes attemptOpts, grpc writing into ua's
	// holders (nil: one attempt, into the caller's); firstErr (nil: none):
	// the fast path's first attempt ended with it and is yet to be taken.
	inline      bool
	attemptOpts []grpc.CallOption
	ua          *unaryAttempt
	firstErr    error

	// Attempts on goroutines derive from hctx (alone: the caller's).
	hc      *hedgeCall
	hctx    context.Context
	hcancel context.CancelFunc
	alone   bool
	// replyType makes a reply for each attempt after the first (nil: they
	// share the caller's).
	replyType protoreflect.MessageType
	hedged    bool
	// hs.inFlight counts the attempts on goroutines in every mode.
	hs     hedgeState
	beside bool // hedgeOnPerTryTimeout
	// dueT sends evStart when the next attempt may go: after the pause
	// begun at pauseFrom (not zero: pausing), else (beside: pending) when
	// the retry admitted beside its attempt goes. One timer per pause: a
	// stopped one's late tick stays in its own channel.
	dueT      *time.Timer
	pauseFrom time.Time
	// cur and cancel: the latest attempt's context (a plain timer cuts it).
	cur    context.Context
	cancel context.CancelFunc
	timer  attemptTimer
	// last is the latest failure that decided nothing, or the one a pause
	// follows; lastOut its outputs, or the last hedge's (nil: none).
	last    error
	lastOut *attemptOutputs
}

func (l *unaryLoop) c() *call {
	if l.hs.c != nil {
		return l.hs.c
	}
	return &l.own
}

const (
	evEnded uint8 = iota
	evTimer
	evStart
	evCaller
)

type unaryEvent struct {
	kind uint8
	n    int
	err  error
	out  *attemptOutputs
	// start is when attempt n left; at when it ended or the timer was due;
	// admission how the budget let it go (beside: each attempt carries its
	// own); done: its context had ended as it ended.
	start, at time.Time
	admission budget.Admission
	done      bool
}

// goroutines readies l to run up to maxAttempts attempts at once on
// goroutines, with grpcOpts less the caller's holders and OnFinish.
func (l *unaryLoop) goroutines(maxAttempts int, grpcOpts []grpc.CallOption) {
	hc := hedgeCalls.Get().(*hedgeCall)
	hc.inv = l.inv
	hc.base = hc.split(hc.base, grpcOpts)
	l.hc = hc
	// The channel is not pooled: it belongs to its testing/synctest bubble.
	if l.alone = maxAttempts == 1; l.alone {
		// One at a time: the loop cancels each as it takes its end;
		// unbuffered, the channel is one allocation.
		hc.results = make(chan unaryEvent)
		l.hctx, l.hcancel = l.callCtx, noCancel
		return
	}
	hc.results = make(chan unaryEvent, min(maxAttempts, hedgeResultsRoom))
	l.hctx, l.hcancel = context.WithCancel(l.callCtx)
}

func (l *unaryLoop) run() error {
	done := l.callCtx.Done()
	switch {
	case l.hedged:
		l.hs.due = true // launch numbers each attempt: c.attempt is hs.sent
	case !l.inline:
		l.launch()
	}
	var results chan unaryEvent
	if l.hc != nil {
		results = l.hc.results
		defer l.release()
	}
	for {
		var ev unaryEvent
		if hs := &l.hs; l.hedged {
			hs.sendDue(l.callCtx, nil, func(int) (time.Time, bool) { return time.Now(), true }, func(int) { l.launch() })
			if hs.inFlight == 0 && hs.timerC == nil {
				return l.hedgeFailed(hs.stopped)
			}
		}
		if l.inline && l.dueT == nil {
			ev = l.attemptInline()
		} else {
			var startC <-chan time.Time
			switch {
			case l.hedged:
				startC = l.hs.timerC
			case l.dueT != nil:
				startC = l.dueT.C
			}
			select {
			case ev = <-results:
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

// release ends what the loop started, also when a panic ends the loop:
// hc goes back to its pool only once no attempt holds it.
func (l *unaryLoop) release() {
	l.timer.stop()
	l.drain()
	putHedgeCall(l.hc)
}

// handle takes one event; over: the call is over, with err.
func (l *unaryLoop) handle(ev unaryEvent) (err error, over bool) {
	switch ev.kind {
	case evEnded:
		return l.attemptEnded(ev)
	case evTimer:
		// Unless the timer moved on since.
		if due, ok := l.timer.dueAt(); ok && ev.n == l.timer.n && ev.at.Equal(due) {
			l.take()
		}
	case evStart:
		switch {
		case l.hedged:
			l.hs.timerC, l.hs.due = nil, true
		case !l.pauseFrom.IsZero():
			return l.pauseOver()
		default: // the retry pending beside its attempt
			l.dueT = nil
			l.launch()
		}
	case evCaller:
		return l.callerLeft()
	}
	return nil, false
}

// attemptInline runs the next attempt on the loop's goroutine, or takes
// the fast path's first.
func (l *unaryLoop) attemptInline() unaryEvent {
	c := l.c()
	if err := l.firstErr; err != nil {
		l.firstErr = nil
		c.attempt = 1
		return unaryEvent{n: 1, err: err}
	}
	ctx := c.numberAttempt(l.callCtx)
	if l.ua != nil {
		l.ua.clean(l.ua.callerPeer != nil)
	}
	err := l.inv.invoke(ctx, l.reply, l.attemptOpts)
	return unaryEvent{n: c.attempt, err: err}
}

func (l *unaryLoop) launch() {
	c, hc := l.c(), l.hc
	out := &hc.first
	if c.attempt > 0 && l.replyType != nil {
		out = &attemptOutputs{reply: l.replyType.New().Interface()}
	} else {
		out.reply = l.reply
	}
	// Its options: the call's, then its own holders.
	out.clean(true)
	out.opts = out.holders(append(out.opts[:0], hc.base...), hc.callerPeer != nil)
	ctx := c.numberAttempt(l.hctx)
	l.cur, l.cancel = ctx, noCancel
	if c.perAttempt > 0 {
		if !l.beside {
			l.cur, l.cancel = context.WithCancel(ctx)
		}
		l.timer.stop()
		l.timer.arm(c.attempt, time.Now(), c.perAttempt, c.pace)
		l.armTimer()
	}
	adm := budget.AdmitNone
	if l.beside {
		// The attempt carries its admission to its end: attempts overlap.
		adm, c.admission = c.admission, budget.AdmitNone
	}
	if !l.hedged {
		l.hs.inFlight++
	}
	go hc.run(l.cur, c.attempt, adm, out)
}

// attemptEnded takes the end of attempt ev.n, in every mode: the timer's
// part (whether it cut the attempt off: endTimer, one at a time; beside,
// the timed attempt's end stops it; without a timer nothing ran slow), a
// success's answer time (served), then the verdict: a hedged failure is
// hedging's (hedgeState.judge); beside another attempt or a pending retry
// a failure decides nothing (askBeside); else the call's decision
// (decided). Beside, a success wins once the others ended (drain).
func (l *unaryLoop) attemptEnded(ev unaryEvent) (error, bool) {
	c, cut := l.c(), false
	if !l.inline {
		l.hs.inFlight--
	}
	switch {
	case l.beside:
		if ev.n == l.timer.n {
			l.timer.stop()
		}
	case !l.inline && c.perAttempt > 0:
		cut = l.endTimer(ev.at)
	default:
		c.slow = false
	}
	err, timedOut := attemptOutcome(l.callCtx, ev.err, cut)
	if err == nil {
		l.served(ev)
	}
	l.cancel()
	var header, trailer metadata.MD
	switch {
	case ev.out != nil:
		header, trailer = ev.out.header, ev.out.trailer
	case l.ua != nil:
		header, trailer = l.ua.header, l.ua.trailer
	}
	committed := c.commits(header)
	switch {
	case l.hedged && err == nil:
		l.hs.recordHedge(ev.n, budget.Success, budget.Success)
		l.hs.won(l.callCtx, ev.n)
		return l.end(ev.out, nil)
	case l.hedged:
		// Headers before the failure commit the call (gRFC A6) as they
		// commit a retried one (call.commits): not when it carries a key.
		l.lastOut = ev.out
		if why := l.hs.judge(l.callCtx, ev.n, ev.err, committed, trailer); why != policy.ReasonNone {
			return l.hedgeFailed(why), true
		}
		return nil, false
	case !l.beside:
	case err == nil:
		l.dropPending()
		l.drain()
	case l.hs.inFlight > 0 || l.dueT != nil:
		q := question{kind: askBeside, n: ev.n, err: err, trailer: trailer, committed: committed, first: ev.n+c.before == 1,
			rec: budget.Attempt{Number: ev.n, Admission: ev.admission, Took: took(ev.admission, ev.at.Sub(ev.start))}}
		c.shouldRetry(l.callCtx, &q)
		l.last = err
		return nil, false
	}
	if l.beside {
		// Attempts overlap: each carries its admission to its end.
		c.admission = ev.admission
	}
	return l.decided(ev, err, trailer, committed, timedOut)
}

// commits reports whether a unary attempt whose response header is header
// committed the call: headers that arrived (a Trailers-Only response leaves
// header nil) commit it, but for a call with an idempotency key: the server
// replays the first run's outcome, and the application saw nothing.
func (c *call) commits(header metadata.MD) bool { return header != nil && c.o.idemKey == "" }

func (l *unaryLoop) decided(ev unaryEvent, err error, trailer metadata.MD, committed, timedOut bool) (error, bool) {
	c := l.c()
	retry, pause := c.afterAttempt(l.callCtx, err, trailer, committed, timedOut)
	if !retry {
		return l.end(ev.out, c.finish(err))
	}
	l.last, l.lastOut = err, ev.out
	if c.deferReq != nil {
		// The Gate's wait, with nothing in flight (unaryLoop says why).
		if werr := c.waitDeferred(l.callCtx, pause, err); werr != nil {
			return l.end(ev.out, werr)
		}
		l.next()
		return nil, false
	}
	if pause > 0 {
		l.pauseFrom = time.Now()
		if l.callCtx.Err() == nil {
			l.dueT = time.NewTimer(pause)
			return nil, false
		}
	}
	return l.pauseOver()
}

// pauseOver ends the call's pause (if any, counted): the next attempt
// goes unless the caller left (pauseEnded).
func (l *unaryLoop) pauseOver() (error, bool) {
	c := l.c()
	if !l.pauseFrom.IsZero() {
		c.paused(time.Since(l.pauseFrom))
		l.pauseFrom = time.Time{}
	}
	l.stopDue()
	if err := c.pauseEnded(l.callCtx, l.last); err != nil {
		return l.end(l.lastOut, err)
	}
	l.next()
	return nil, false
}

// next sends the next attempt; an inline one runs as the loop goes round.
func (l *unaryLoop) next() {
	if !l.inline {
		l.launch()
	}
}

func (l *unaryLoop) stopDue() {
	if l.dueT != nil {
		l.dueT.Stop()
		l.dueT = nil
	}
}

// end is the loop's one end: a retry admitted and not sent gives back
// its admission and its breaker probe (giveBack); every attempt in flight
// ends (drain); the caller gets out's reply and holders (adopt), and
// OnFinish runs with err. An inline loop's grpc wrote the caller's own
// (runUnary gives them).
func (l *unaryLoop) end(out *attemptOutputs, err error) (error, bool) {
	l.stopDue()
	l.c().giveBack() // nothing when every retry admitted went
	if l.hc != nil {
		l.drain()
		l.adopt(out, err == nil)
		l.hc.finished(err)
	}
	return err, true
}

// adopt is the unary call's commit: the caller gets out's headers,
// trailer and peer (nil: none), and, won, its reply (the first attempt's
// is the caller's already).
func (l *unaryLoop) adopt(out *attemptOutputs, won bool) {
	hc := l.hc
	if out == nil {
		out = &attemptOutputs{}
	}
	if won && out != &hc.first {
		reply := l.reply.(proto.Message)
		proto.Reset(reply)
		proto.Merge(reply, out.reply.(proto.Message))
	}
	hc.give(out.header, out.trailer, &out.peer)
}

// served notes that ev's attempt was served (pace.Evidence.Answer): under
// a timer unless cut off or ended from above; without one, a retry alone;
// a hedged attempt teaches its start rule instead (learn).
func (l *unaryLoop) served(ev unaryEvent) {
	c, t := l.c(), &l.timer
	switch {
	case l.hedged:
		l.hs.learn(ev.at.Sub(ev.start))
	case c.perAttempt > 0 && !l.inline:
		if c.pace != nil && !ev.done && t.state != timerFired {
			c.pace.Answer(ev.start, ev.at.Sub(ev.start), c.crit.Index())
		}
	default:
		c.served()
	}
}

// dropPending gives back the admission of the retry pending beside
// attempts in flight (dueT): it will not be sent.
func (l *unaryLoop) dropPending() {
	if l.dueT != nil {
		c := l.c()
		c.settle(c.admission)
		c.admission = budget.AdmitNone
		l.stopDue()
	}
}

// callerLeft takes the caller's leaving: attempts in flight end on their
// own; a wait with nothing in flight ends now.
func (l *unaryLoop) callerLeft() (error, bool) {
	switch {
	case l.hedged:
		if why, over := l.hs.callerGone(l.callCtx); over {
			return l.hedgeFailed(why), true
		}
	case !l.pauseFrom.IsZero():
		return l.pauseOver()
	case l.beside && l.dueT != nil:
		l.dropPending()
		if l.hs.inFlight == 0 {
			return l.end(nil, l.c().pauseEnded(l.callCtx, l.last))
		}
	}
	return nil, false
}

// drain cancels every attempt in flight and records each as a loser once
// it ended: nothing outlives the call or writes to it after it returned.
func (l *unaryLoop) drain() {
	l.hs.disarm() // hedging's start timer, if any
	l.hcancel()
	for l.hs.inFlight > 0 {
		ev := <-l.hc.results
		if ev.kind != evEnded {
			continue
		}
		l.hs.inFlight--
		o := loserOutcome(ev.err == nil)
		if l.hedged {
			l.hs.recordHedge(ev.n, o, o)
			continue
		}
		c := l.c()
		// A probe's end frees the Gate's probe lease.
		q := question{kind: askSettled, first: ev.n+c.before == 1, breakerO: o,
			rec: budget.Attempt{Number: ev.n, Outcome: o, Admission: ev.admission, Took: took(ev.admission, ev.at.Sub(ev.start))}}
		c.shouldRetry(context.Background(), &q) // askSettled reads no context
	}
}

// loserOutcome is what the breaker and the budget hear of an attempt that
// lost: ok (it answered OK), a success for its backend whoever won; else
// Other, its end being the cancel's or not known.
func loserOutcome(ok bool) budget.Outcome {
	if ok {
		return budget.Success
	}
	return budget.Other
}

// run is one attempt's goroutine.
func (hc *hedgeCall) run(ctx context.Context, n int, adm budget.Admission, out *attemptOutputs) {
	start := time.Now()
	err := hc.inv.invoke(ctx, out.reply, out.opts)
	hc.results <- unaryEvent{kind: evEnded, n: n, err: err, out: out, start: start, at: time.Now(), admission: adm, done: ctx.Err() != nil}
}

// settle tells the budget that the retry it admitted with adm will not be
// sent (a Gate's probe lease freed); the breaker was not asked.
func (c *call) settle(adm budget.Admission) {
	if c.budget != nil && adm != budget.AdmitNone {
		c.budget.Record(budget.Attempt{Number: c.attempt + 1, Outcome: budget.Other, Admission: adm})
	}
}

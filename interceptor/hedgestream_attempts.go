package interceptor

import (
	"io"
	"slices"
	"time"

	"github.com/stagger-go/stagger/budget"
	"github.com/stagger-go/stagger/policy"
	"google.golang.org/grpc"
	"google.golang.org/grpc/status"
)

// watch is an open attempt's goroutine: it waits for the attempt's response
// headers, or for its end, and reports to the driver, which decides.
func (s *retryStream) watch(a *streamAttempt, cs grpc.ClientStream) {
	ev := streamEvent{a: a}
	if md, _ := cs.Header(); md != nil {
		ev.headers, ev.took = true, time.Since(a.start)
		close(a.watched)
		s.race.events <- ev
		return
	}
	// The attempt ended without headers (grpc-go's Header says nil, nil):
	// no message can come, so RecvMsg reads only the status.
	err := cs.RecvMsg(nil)
	if err == io.EOF {
		err = nil
	}
	a.ended, a.endErr = true, err
	ev.err, ev.trailer = err, cs.Trailer()
	close(a.watched)
	s.race.events <- ev
}

// join replays the messages sent so far on a, whose stream is cs, and
// CloseSend if the application called it (replayOn), then makes a live; it
// wakes the driver, which commits to a, when the stream is to commit to the
// next attempt. It returns errHedgeLost when the stream committed to
// another attempt or failed meanwhile, or the error grpc refused a message
// with (not io.EOF: an attempt that died still goes live, its Header and
// RecvMsg tell how).
//
// It runs beside the application's SendMsg, not under sendMu: a send may
// wait for the attempt's server (connect-go sends a server stream's request
// and waits for its response headers inside Send), and an attempt whose
// server is slow must not hold back the hedge that would answer. SendMsg
// keeps a message and reads the attempts live in one step under mu, and
// join goes live in the step that finds it has sent every message kept, so
// each message reaches a once, in order.
func (s *retryStream) join(a *streamAttempt, cs grpc.ClientStream) error {
	next := false
	lost := func() bool { return s.committed || s.race.failed }
	err := replayOn(&s.mu, &s.buf, &s.closeSent, cs, lost, func() {
		a.cs = cs
		s.race.live = append(s.race.live, a)
		next = s.commitNext
	})
	if next {
		// The driver commits to it (serve).
		select {
		case s.race.poke <- struct{}{}:
		default:
		}
	}
	return err
}

// commitToLocked commits the stream to w (commitLocked): the others are
// cancelled (those still opening too: one waiting for a connection ends
// now), the asks are answered, and RecvMsg and Header go on with w. The
// driver alone calls it, and launches no attempt after it.
//
// It returns the attempts sent: the driver then calls committedTo,
// without mu.
func (s *retryStream) commitToLocked(w *streamAttempt) (sent int) {
	r := s.race
	s.cur, s.commitNext = w, false
	s.commitLocked()
	s.answerLocked(w)
	for _, a := range r.sent {
		if a != w {
			a.cancel()
		}
	}
	clear(r.live)
	r.live = r.live[:0]
	return s.c.attempt
}

// committedTo ends a commit to w, after commitToLocked, outside mu: the
// hooks hear that w won (when hedges were sent), then RecvMsg and Header go
// on.
func (s *retryStream) committedTo(w *streamAttempt, sent int) {
	if sent > 1 {
		s.c.emit(s.callCtx, Event{Kind: EventHedgeWon, Method: s.c.method, Attempt: w.n, Hedging: true})
	}
	close(s.race.ready)
}

// ended handles the end of one attempt's race before the stream committed,
// as hedge.go's ended does for a unary attempt; true when the driver is
// done.
func (s *retryStream) ended(st *hedgeState, ev streamEvent) bool {
	a := ev.a
	s.mu.Lock()
	if ev.headers && s.callCtx.Err() != nil {
		// The caller gave up before the driver heard of the headers: the
		// attempt ends with the caller's status, as grpc-go's own stream
		// ends when its reader finds the context done with nothing
		// received. Committing would give the caller a reply the cancelled
		// stream got only because its cancel had not yet reached the
		// transport: grpc-go's interop case cancel_after_begin under
		// hedging, on a loaded machine, got OK from CloseAndRecv (the
		// server answered the CloseSend sent after the cancel, and RecvMsg
		// waits for the commit).
		ev.headers = false
		ev.err = status.FromContextError(s.callCtx.Err()).Err()
		a.ended, a.endErr = true, ev.err
	}
	if ev.headers || ev.err == nil {
		// Its headers arrived, or it ended OK without any.
		sent := s.commitToLocked(a)
		s.mu.Unlock()
		if ev.headers && s.race.hist != nil {
			s.race.hist.observe(ev.took)
		}
		s.committedTo(a, sent)
		s.afterCommit(st, a)
		return true
	}
	r := s.race
	if i := slices.Index(r.live, a); i >= 0 {
		r.live = slices.Delete(r.live, i, i+1)
	}
	r.last = a
	s.mu.Unlock()
	// A stream's headers commit it (in watch), so a failure here came
	// without any.
	if why := st.judge(s.callCtx, a.n, ev.err, false); why != policy.ReasonNone {
		s.fail(st, why)
		return true
	}
	st.nonFatal(s.callCtx, a.n, ev.err, ev.trailer)
	return false
}

// afterCommit ends the driver once it committed the stream to w: no
// further hedge, and every other attempt (cancelled at the commit) is
// waited for and told to the budget. The winner's own end is the
// application's to see.
func (s *retryStream) afterCommit(st *hedgeState, w *streamAttempt) {
	st.disarm()
	for st.inFlight > 1 || st.inFlight == 1 && w.reported {
		ev := <-s.race.events
		st.inFlight--
		ev.a.reported = true
		if ev.a == w {
			continue
		}
		o := budget.Other
		if !ev.headers && ev.err == nil {
			o = budget.Success
		}
		s.c.recordHedge(ev.a.n, o, o)
	}
}

// fail ends a stream that did not commit: every attempt is cancelled and
// waited for, and the stream ends with the last failure, for why
// (ReasonAttempts when nothing else stopped the hedges), shown the last
// attempt that ended.
func (s *retryStream) fail(st *hedgeState, why policy.Reason) {
	r := s.race
	st.disarm()
	s.mu.Lock()
	r.failed = true
	s.answerLocked(nil)
	clear(r.live)
	r.live = r.live[:0]
	s.buf.release()
	if r.last != nil {
		s.cur = r.last
	}
	s.mu.Unlock()
	// Every attempt was sent by the driver, which sends no more: r.sent
	// is final.
	for _, a := range r.sent {
		a.cancel()
	}
	for ; st.inFlight > 0; st.inFlight-- {
		ev := <-r.events
		s.c.recordHedge(ev.a.n, budget.Other, budget.Other)
	}
	st.giveUp(s.callCtx, why)
	// Everything the application may read is written before ready closes.
	s.finishStream(s.c.failed(s.c.attempt, st.last), false)
	close(r.ready)
}

// raceWon ends a hedged stream with the end of its winner w, err (nil:
// success): settle's, under endMu, for the attempt the race committed to.
// A failure after the commit is final (gRFC A6).
func (s *retryStream) raceWon(w *streamAttempt, err error, abandoned bool) error {
	if err == nil {
		s.c.recordHedge(w.n, budget.Success, budget.Success)
		s.c.reason = policy.ReasonSuccess
	} else {
		why := policy.ReasonCommitted
		if callerEnded(s.callCtx, err) {
			why, err = policy.ReasonCaller, callerErr(s.callCtx, err)
		}
		s.c.recordHedge(w.n, budget.Other, breakerOutcome(s.callCtx, err, false))
		s.c.reason = why
		s.c.emit(s.callCtx, Event{Kind: EventGiveUp, Method: s.c.method, Attempt: w.n, Code: status.Code(err), Err: err, Reason: why, Hedging: true})
		err = s.c.failed(s.c.attempt, err)
	}
	return s.finishStream(err, abandoned)
}

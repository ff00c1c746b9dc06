package interceptor

import (
	"context"
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
func (s *hedgedStream) watch(a *streamHedgeAttempt, cs grpc.ClientStream) {
	ev := streamHedgeEvent{a: a}
	if md, _ := cs.Header(); md != nil {
		ev.headers, ev.took = true, time.Since(a.start)
		close(a.watched)
		s.events <- ev
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
	s.events <- ev
}

// join replays the messages sent so far on a, whose stream is cs, and
// CloseSend if the application called it (replayOn), then makes a live; it
// wakes the driver, which commits to a, when the stream is to commit to the
// next attempt. It returns
// errHedgeLost when the stream committed to another attempt or failed
// meanwhile, or the error grpc refused a message with (not io.EOF: an
// attempt that died still goes live, its Header and RecvMsg tell how).
//
// It runs beside the application's SendMsg, not under sendMu: a send may
// wait for the attempt's server (connect-go sends a server stream's request
// and waits for its response headers inside Send), and an attempt whose
// server is slow must not hold back the hedge that would answer. SendMsg
// keeps a message and reads the attempts live in one step under mu, and
// join goes live in the step that finds it has sent every message kept, so
// each message reaches a once, in order.
func (s *hedgedStream) join(a *streamHedgeAttempt, cs grpc.ClientStream) error {
	next := false
	lost := func() bool { return s.winner != nil || s.failed }
	err := replayOn(&s.mu, &s.buf, &s.closeSent, cs, lost, func() {
		a.cs = cs
		s.live = append(s.live, a)
		next = s.commitNext
	})
	if next {
		// The driver commits to it (serve).
		select {
		case s.poke <- struct{}{}:
		default:
		}
	}
	return err
}

// commitLocked commits the stream to w: the others are cancelled (those
// still opening too: one waiting for a connection ends now), the buffer is
// given back, the asks are answered, and RecvMsg and Header go on with w.
// The driver alone calls it, and launches no attempt after it.
//
// It returns the attempts sent: the driver then calls committedTo,
// without mu.
func (s *hedgedStream) commitLocked(w *streamHedgeAttempt) (sent int) {
	s.winner, s.commitNext = w, false
	s.answerLocked(w)
	for _, a := range s.sent {
		if a != w {
			a.cancel()
		}
	}
	clear(s.live)
	s.live = s.live[:0]
	s.buf.release()
	return s.c.attempt
}

// committedTo ends a commit to w, after commitLocked, outside mu: the
// hooks hear that w won (when hedges were sent), then RecvMsg and Header go
// on.
func (s *hedgedStream) committedTo(w *streamHedgeAttempt, sent int) {
	if sent > 1 {
		s.c.emit(s.callCtx, Event{Kind: EventHedgeWon, Method: s.c.method, Attempt: w.n, Hedging: true})
	}
	close(s.ready)
}

// ended handles the end of one attempt's race before the stream committed,
// as hedge.go's ended does for a unary attempt; true when the driver is
// done.
func (s *hedgedStream) ended(st *hedgeState, ev streamHedgeEvent) bool {
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
		sent := s.commitLocked(a)
		s.mu.Unlock()
		if ev.headers && s.hist != nil {
			s.hist.observe(ev.took)
		}
		s.committedTo(a, sent)
		s.afterCommit(st, a)
		return true
	}
	if i := slices.Index(s.live, a); i >= 0 {
		s.live = slices.Delete(s.live, i, i+1)
	}
	s.last = a
	s.mu.Unlock()
	// A stream's headers commit it (in watch), so a failure here came
	// without any.
	if why := st.judge(s.callCtx, a.n, ev.err, false); why != policy.ReasonNone {
		s.c.recordHedge(a.n, budget.Other, breakerOutcome(s.callCtx, ev.err, false))
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
func (s *hedgedStream) afterCommit(st *hedgeState, w *streamHedgeAttempt) {
	st.disarm()
	for st.inFlight > 1 || st.inFlight == 1 && w.reported {
		ev := <-s.events
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
// (ReasonAttempts when nothing else stopped the hedges).
func (s *hedgedStream) fail(st *hedgeState, why policy.Reason) {
	st.disarm()
	s.mu.Lock()
	s.failed = true
	s.answerLocked(nil)
	clear(s.live)
	s.live = s.live[:0]
	s.buf.release()
	last := s.last
	s.mu.Unlock()
	s.hcancel()
	for ; st.inFlight > 0; st.inFlight-- {
		ev := <-s.events
		s.c.recordHedge(ev.a.n, budget.Other, budget.Other)
	}
	st.giveUp(s.callCtx, why)
	err := s.c.failed(s.c.attempt, st.last)
	// Everything the application may read is written before ready closes.
	s.end(last, err, false)
	close(s.ready)
}

// end ends the stream with err (nil: success), from attempt a (nil: none
// opened): streamEnd.finish fills the caller's holders from a (not its
// trailer when abandoned: its reader may be in RecvMsg on it), runs
// OnFinish and reports the call's end.
//
// Its callers are one at a time: fail, before ready closes, and winnerEnded,
// after it, under endMu. done is set last: a RecvMsg that finds it returns
// at once, and its caller may then read the holders and the Report.
func (s *hedgedStream) end(a *streamHedgeAttempt, err error, abandoned bool) {
	var cs grpc.ClientStream
	if a != nil {
		cs = a.cs
	}
	s.hcancel()
	s.endOnce(&s.mu, s.c, s.cc, cs, abandoned, err, s.cancel)
}

// watchAbandon settles the stream when its caller's context ends (a cancel
// or the deadline) and nobody reads it to its end: grpc-go lets a caller
// end a stream by its context alone, and the winner's attempt, which may
// hold the breaker's probe, would then never reach the budget or the
// breaker. Before the commit the driver settles every attempt itself
// (callerGone, fail); after it, the watch ends the winner with the
// caller's status, without reading its headers or trailer (the reader may
// still be in RecvMsg on it).
func (s *hedgedStream) watchAbandon() {
	s.stopAbandon = context.AfterFunc(s.callCtx, func() {
		<-s.ready
		s.mu.Lock()
		w := s.winner
		s.mu.Unlock()
		if w != nil {
			s.winnerEnded(w, status.FromContextError(s.callCtx.Err()).Err(), true)
		}
	})
}

// winnerEnded ends the stream with the end of its winner w, err (io.EOF:
// success), and returns what RecvMsg returns. abandoned: the caller's
// context ended with nobody reading (watchAbandon); w's trailer is not read.
func (s *hedgedStream) winnerEnded(w *streamHedgeAttempt, err error, abandoned bool) error {
	if err == io.EOF {
		err = nil
	}
	s.endMu.Lock()
	defer s.endMu.Unlock()
	s.mu.Lock()
	over := s.done
	s.mu.Unlock()
	if !over {
		if err == nil {
			s.c.recordHedge(w.n, budget.Success, budget.Success)
			s.c.reason = policy.ReasonSuccess
		} else {
			// A failure after the commit is final (gRFC A6).
			why := policy.ReasonCommitted
			if callerEnded(s.callCtx, err) {
				why, err = policy.ReasonCaller, callerErr(s.callCtx, err)
			}
			s.c.recordHedge(w.n, budget.Other, breakerOutcome(s.callCtx, err, false))
			s.c.reason = why
			s.c.emit(s.callCtx, Event{Kind: EventGiveUp, Method: s.c.method, Attempt: w.n, Code: status.Code(err), Err: err, Reason: why, Hedging: true})
			err = s.c.failed(s.c.attempt, err)
		}
		s.end(w, err, abandoned)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.final
}

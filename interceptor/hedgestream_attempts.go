package interceptor

import (
	"context"
	"io"
	"slices"
	"time"

	"github.com/stagger-go/stagger/policy"
	"google.golang.org/grpc/status"
)

// watch is an open attempt's goroutine: it reports the attempt's response
// headers, or its end, to the driver, which decides.
func (s *retryStream) watch(a *streamAttempt) {
	cs := a.cs
	if md, _ := cs.Header(); md != nil {
		a.headers, a.took = true, time.Since(a.start)
	} else {
		// Ended without headers: no message can come; read the status.
		err := cs.RecvMsg(nil)
		if err == io.EOF {
			err = nil
		}
		a.ended, a.endErr, a.trailer = true, err, cs.Trailer()
	}
	close(a.watched)
	s.race.events <- a.n
}

// commitToLocked commits the stream to w and ends the race under mu
// (endRaceLocked lets it go); then it tells the hooks, lets RecvMsg and
// Header go on, and waits for every other attempt to end (settleOthers).
func (s *retryStream) commitToLocked(st *hedgeState, w *streamAttempt) {
	s.cur, s.commitNext = w, false
	s.commitLocked()
	s.endRaceLocked(st, w)
	st.won(s.callCtx, w.n)
	close(s.race.ready)
	s.settleOthers(st, w)
}

// endRaceLocked ends the race with w (nil: nobody won), under mu, which it
// lets go: it answers the asks, cancels every other attempt (those still
// opening too) and stops the hedging timer.
func (s *retryStream) endRaceLocked(st *hedgeState, w *streamAttempt) {
	r := s.race
	s.answerLocked(w)
	for _, a := range r.sent {
		if a != w {
			a.cancel()
		}
	}
	clear(r.live)
	r.live = r.live[:0]
	s.mu.Unlock()
	st.disarm()
}

// ended handles one attempt's event before the stream committed, as
// attemptEnded does for a unary attempt; true when the driver is done.
func (s *retryStream) ended(st *hedgeState, a *streamAttempt) bool {
	s.mu.Lock()
	if a.headers && s.callCtx.Err() != nil {
		// The caller gave up before the driver heard of the headers: the
		// attempt ends with the caller's status, as grpc-go's stream does
		// when its reader finds the context done; a commit would give a
		// cancelled caller OK (grpc-go's interop case cancel_after_begin).
		a.headers = false
		a.ended, a.endErr = true, status.FromContextError(s.callCtx.Err()).Err()
	}
	if a.headers || a.endErr == nil {
		if a.headers {
			st.learn(a.took)
		}
		s.commitToLocked(st, a)
		return true
	}
	r := s.race
	if i := slices.Index(r.live, a); i >= 0 {
		r.live = slices.Delete(r.live, i, i+1)
	}
	r.last = a
	s.mu.Unlock()
	// Headers commit, so a failure here came without any.
	if why := st.judge(s.callCtx, a.n, a.endErr, false, a.trailer); why != policy.ReasonNone {
		s.fail(st, why)
		return true
	}
	return false
}

// settleOthers waits for every attempt in flight but w (nil: the race
// failed) and tells each to the breaker and the budget as one that lost
// (loserOutcome): one that ended OK without headers as a success, whether
// the stream committed or failed. One whose headers came is Other: its end
// is not known.
func (s *retryStream) settleOthers(st *hedgeState, w *streamAttempt) {
	for st.inFlight > 1 || st.inFlight == 1 && (w == nil || w.reported) {
		a := s.race.heard(<-s.race.events)
		if a == w {
			continue
		}
		o := loserOutcome(!a.headers && a.endErr == nil)
		st.recordHedge(a.n, o, o)
	}
}

// fail ends a stream that did not commit, for why, with the last failure,
// once every attempt is cancelled and waited for.
func (s *retryStream) fail(st *hedgeState, why policy.Reason) {
	r := s.race
	s.mu.Lock()
	r.failed = true
	s.buf.release()
	if r.last != nil {
		s.cur = r.last
	}
	s.endRaceLocked(st, nil)
	s.settleOthers(st, nil)
	s.finishStream(st.giveUp(s.callCtx, why), false)
	close(r.ready)
}

// raceWon ends a hedged stream with the end of its winner w, err (nil:
// success; endAttempt's outcome, as a retried attempt's): settle's, under
// endMu. The call's decision judges it as committed (judge), so a failure
// is final, and it ends as a race nobody won does (giveUp).
func (s *retryStream) raceWon(w *streamAttempt, err error, abandoned bool) error {
	st := &s.race.st
	why := st.judge(s.callCtx, w.n, err, true, nil)
	if err != nil {
		err = st.giveUp(s.callCtx, why)
	} else {
		s.c.reason = why
	}
	return s.finishStream(err, abandoned)
}

// oldestOpenLocked returns the oldest live attempt not seen to end (nil:
// none): a commit to an ended attempt would make its failure, which the
// next hedge may still answer, the stream's.
func (s *retryStream) oldestOpenLocked() *streamAttempt {
	for _, a := range s.race.live {
		select {
		case <-a.watched:
			if a.ended {
				continue
			}
		default:
		}
		return a
	}
	return nil
}

// raceContext is Context before a hedged stream commits: it has the driver
// commit to the oldest attempt open (ask) and returns its context; with
// none open, the call's, and the next attempt to open wins (commitNext,
// which serve sets too when the attempt ended before the driver heard).
func (s *retryStream) raceContext() context.Context {
	switch {
	case s.race.failed:
	case s.oldestOpenLocked() == nil:
		s.commitNext = true
	default:
		if w := s.ask(); w != nil {
			return w.cs.Context()
		}
	}
	return s.callCtx
}

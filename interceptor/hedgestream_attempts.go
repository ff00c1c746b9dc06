package interceptor

import (
	"io"
	"slices"
	"time"

	"github.com/stagger-go/stagger/policy"
	"google.golang.org/grpc/status"
)

// watch runs once dial returned err (nil: a is live), on the
// attempt's goroutine (the caller's for a first attempt that failed): it
// reports a's response headers, or its end (a failure to open or to replay
// too), to the driver, which decides.
func (s *retryStream) watch(a *streamAttempt, err error) {
	if err != nil {
		a.cancel()
		a.cs = unopened{ctx: a.ctx, err: err}
		a.ended, a.endErr = true, err
	} else if md, _ := a.cs.Header(); md != nil {
		a.headers, a.took = true, time.Since(a.start)
	} else {
		// Ended without headers: no message can come; read the status.
		if err = a.cs.RecvMsg(nil); err == io.EOF {
			err = nil
		}
		a.ended, a.endErr, a.trailer = true, err, a.cs.Trailer()
	}
	close(a.watched)
	s.race.events <- a.n
}

// endRace ends the race, under mu, which it lets go: it commits the
// stream to w or, with w nil, fails it, for why, with the last failure. It
// answers the asks, cancels every other attempt (those still opening too),
// stops the hedging timer and waits for every other attempt to end
// (settleOthers). RecvMsg and Header go on (ready) once the hooks heard of
// the commit, or once the stream that failed has ended.
func (s *retryStream) endRace(st *hedgeState, w *streamAttempt, why policy.Reason) {
	r := s.race
	if w != nil {
		s.cur, s.commitNext = w, false
		s.commitLocked()
	} else {
		r.failed = true
		s.buf.release()
		s.cur = r.last // nil before: a race shows no attempt until it ends
	}
	s.answerLocked(w)
	for _, a := range r.sent {
		if a != w {
			a.cancel()
		}
	}
	clear(s.live)
	s.live = s.live[:0]
	if w != nil {
		s.live = append(s.live, w) // a race of one
	}
	s.mu.Unlock()
	st.disarm()
	if w != nil {
		st.won(s.callCtx, w.n)
		close(r.ready)
		s.settleOthers(st, w)
		return
	}
	s.settleOthers(st, nil)
	s.finishStream(st.giveUp(s.callCtx, why), false)
	close(r.ready)
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
		s.endRace(st, a, policy.ReasonNone)
		return true
	}
	if i := slices.Index(s.live, a); i >= 0 {
		s.live = slices.Delete(s.live, i, i+1)
	}
	s.race.last = a
	s.mu.Unlock()
	// Headers commit, so a failure here came without any.
	if why := st.judge(s.callCtx, a.n, a.endErr, false, a.trailer); why != policy.ReasonNone {
		s.mu.Lock()
		s.endRace(st, nil, why)
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

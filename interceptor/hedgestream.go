package interceptor

import (
	"context"
	"io"
	"slices"
	"time"

	"github.com/stagger-go/stagger/budget"
	"github.com/stagger-go/stagger/policy"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// errHedgeLost ends an attempt that was still opening when the stream
// committed to another (or ended): it is cancelled before it is used.
var errHedgeLost = status.Error(codes.Canceled, "interceptor: hedge cancelled: the stream committed to another attempt")

// hedgeRace is what a hedged stream keeps beside the retryStream it is,
// until it commits; then the stream runs as a committed retryStream. The
// driver (drive) alone launches attempts and ends the race (endRace), so
// no hedge can go after the commit; who sends it which event is drawn in
// docs/architecture.md ("Who decides a stream"). The stream's mu guards
// the fields below ready.
type hedgeRace struct {
	// st is the driver's, then settle's to judge the winner's end.
	st hedgeState
	// events has room for every attempt's one event, its number; poke wakes
	// the driver for asks and commitNext; ready closes once the stream
	// committed or failed.
	events chan int
	poke   chan struct{}
	ready  chan struct{}

	// sent are the attempts sent, in order (the stream's live: those open).
	sent    []*streamAttempt
	last    *streamAttempt        // the last to end before any commit
	asks    []chan *streamAttempt // answered in serve
	failed  bool
	sentArr [raceInline]*streamAttempt
}

// raceInline: the first attempt and two hedges without an allocation.
const raceInline = 3

// heard returns the attempt whose event is n, no longer in flight; the
// driver's, which alone appends to sent.
func (r *hedgeRace) heard(n int) *streamAttempt {
	a := r.sent[n-1]
	r.st.inFlight--
	a.reported = true
	return a
}

// hedgeStream makes s a hedged stream and starts its driver. The first
// attempt is opened here, as grpc-go opens a stream in NewStream.
func (k *core) hedgeStream(s *retryStream) {
	h := s.c.hedged.Hedging
	r := &hedgeRace{
		events: make(chan int, h.MaxAttempts),
		poke:   make(chan struct{}, 1),
		ready:  make(chan struct{}),
	}
	r.sent = r.sentArr[:0]
	s.race = r
	s.watchAbandon() // before the driver, whose end stops it
	r.st = k.newHedgeState(&s.c, h)
	st := &r.st
	s.mu.Lock()
	a := s.launchLocked(1)
	s.mu.Unlock()
	st.launched(s.callCtx, 1, a.start)
	st.schedule(s.callCtx, 1)
	s.goroutines.Add(2) // the driver, a's watch
	go s.drive(st)
	if err := s.dial(a); err != nil {
		s.watch(a, err)
	} else {
		go s.watch(a, nil)
	}
}

// drive is the hedging loop: it ends when the stream has committed and
// every other attempt has ended, or when the stream has failed.
func (s *retryStream) drive(st *hedgeState) {
	r := s.race
	done := s.callCtx.Done()
	for {
		// The events already in go first when a hedge may be due, so that
		// headers that arrived as the hedging delay ran out commit before a
		// hedge goes (select picks at random). The driver alone receives.
		if st.due && st.sent > 0 && len(r.events) > 0 {
			if s.ended(st, r.heard(<-r.events)) {
				return
			}
			continue
		}
		if s.serve(st) {
			return
		}
		st.sendDue(s.callCtx, s.wantsHedge, s.takeHedge, s.runHedge)
		if st.inFlight == 0 && st.timerC == nil {
			s.mu.Lock()
			s.endRace(st, nil, st.stopped)
			return
		}
		select {
		case n := <-r.events:
			if s.ended(st, r.heard(n)) {
				return
			}
		case <-st.timerC:
			st.timerC, st.due = nil, true
		case <-r.poke: // serve, above
		case <-done:
			done = nil
			if why, over := st.callerGone(s.callCtx); over {
				s.mu.Lock()
				s.endRace(st, nil, why)
				return
			}
		}
	}
}

// serve commits the stream to its oldest attempt open when asked to (an
// ask, or commitNext) and answers the asks; true when it committed.
func (s *retryStream) serve(st *hedgeState) bool {
	s.mu.Lock()
	if len(s.race.asks) == 0 && !s.commitNext {
		s.mu.Unlock()
		return false
	}
	w := s.oldestOpenLocked()
	if w == nil {
		// None open: the next attempt to go live wins.
		if len(s.race.asks) > 0 {
			s.commitNext = true
		}
		s.answerLocked(nil)
		s.mu.Unlock()
		return false
	}
	s.endRace(st, w, policy.ReasonNone)
	return true
}

func (s *retryStream) answerLocked(w *streamAttempt) {
	r := s.race
	for _, q := range r.asks {
		q <- w
	}
	clear(r.asks)
	r.asks = r.asks[:0]
}

// wake pokes the driver (serve), unless a poke waits already.
func (r *hedgeRace) wake() {
	select {
	case r.poke <- struct{}{}:
	default:
	}
}

// ask has the driver commit the stream to its oldest attempt open, and
// returns the winner (nil: none open any more, or failed). mu is held, and
// held again on return; the caller saw an attempt open, so the driver is
// not waiting in the Gate and answers.
func (s *retryStream) ask() *streamAttempt {
	q := make(chan *streamAttempt, 1)
	s.race.asks = append(s.race.asks, q)
	s.mu.Unlock()
	s.race.wake()
	w := <-q
	s.mu.Lock()
	return w
}

func (s *retryStream) wantsHedge() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return !s.committingLocked()
}

// takeHedge launches hedge n, which the breaker and the budget admitted
// outside mu, unless the application's Context or an overflow asked for a
// commit meanwhile: then an attempt in flight wins, and the hedge is told to
// the breaker and the budget as one cancelled (a probe slot is free again).
func (s *retryStream) takeHedge(n int) (time.Time, bool) {
	s.mu.Lock()
	if s.committingLocked() {
		s.mu.Unlock()
		s.race.st.recordHedge(n, budget.Other, budget.Other)
		return time.Time{}, false
	}
	a := s.launchLocked(n)
	s.mu.Unlock()
	return a.start, true
}

func (s *retryStream) runHedge(n int) {
	a := s.race.sent[n-1]
	s.goroutines.Add(1)
	go func() { s.watch(a, s.dial(a)) }()
}

// committingLocked: an ask or commitNext waits, and an attempt in flight
// will answer it. mu is held.
func (s *retryStream) committingLocked() bool {
	return (s.commitNext || len(s.race.asks) > 0) && s.race.st.inFlight > 0
}

// launchLocked makes attempt n, which a commit cancels; mu is held.
func (s *retryStream) launchLocked(n int) *streamAttempt {
	a := &s.first
	if n > 1 {
		a = new(streamAttempt)
	}
	a.n, a.start, a.watched = n, time.Now(), make(chan struct{})
	// No per-attempt timer: a hedged method has no retry policy.
	a.ctx, a.cancel = context.WithCancel(s.c.numberAttempt(s.callCtx))
	s.race.sent = append(s.race.sent, a)
	return a
}

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
		a.took = time.Since(a.start)
	} else {
		// Ended without headers: no message can come; read the status.
		if err = a.cs.RecvMsg(nil); err == io.EOF {
			err = nil
		}
		a.ended, a.endErr, a.trailer = true, err, a.cs.Trailer()
	}
	close(a.watched)
	s.race.events <- a.n
	s.goroutines.Done()
}

// endRace ends the race, under mu, which it lets go: it commits the
// stream to w or, with w nil, fails it, for why, with the last failure;
// every other attempt is cancelled (those still opening too) and waited
// for. It is the driver's last step. RecvMsg and Header go on (ready) once
// the hooks heard of the commit, or once the stream that failed has ended.
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
	}
	s.settleOthers(st, w)
	// The driver's last step: the end it runs waits for the others alone.
	s.goroutines.Done()
	if w == nil {
		s.finishStream(st.giveUp(s.callCtx, why), false)
		close(r.ready)
	}
}

// ended handles one attempt's event before the stream committed, as
// attemptEnded does for a unary attempt; true when the driver is done.
func (s *retryStream) ended(st *hedgeState, a *streamAttempt) bool {
	s.mu.Lock()
	if !a.ended && s.callCtx.Err() != nil {
		// The caller gave up before the driver heard of the headers: the
		// attempt ends with the caller's status, as grpc-go's stream does
		// when its reader finds the context done; a commit would give a
		// cancelled caller OK (grpc-go's interop case cancel_after_begin).
		a.ended, a.endErr = true, status.FromContextError(s.callCtx.Err()).Err()
	}
	if a.endErr == nil { // headers, or an end OK without any
		if !a.ended {
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
		o := loserOutcome(a.ended && a.endErr == nil)
		st.recordHedge(a.n, o, o)
	}
}

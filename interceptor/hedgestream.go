package interceptor

import (
	"context"
	"sync"
	"time"

	"github.com/stagger-go/stagger/policy"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// Maintainers: a stream whose c.hedged is set goes to k.hedgeStream (below),
// which drives hedge.go's hedgeState (its timer, stops and decisions: next,
// schedule, nonFatal, callerGone, giveUp) on a goroutine of its own until
// the stream commits, or leaves the stream to run once for a method that
// may not run twice (k.hedges says which, after k.noticeUnhedged(ctx, &c,
// policy.ReasonNotIdempotent)).

// errHedgeLost ends an attempt that was still opening when the stream
// committed to another (or ended): it is cancelled before it is used.
var errHedgeLost = status.Error(codes.Canceled, "interceptor: hedge cancelled: the stream committed to another attempt")

// hedgeRace is what a hedged stream (gRFC A6 hedging until commit) keeps
// beside the retryStream it is, until it commits: hedging is retry with a
// start timer, so once the race has a winner the stream is the winner's
// and runs as a committed retryStream (RecvMsg, Header, Trailer, the end).
// Attempts race until one commits: the first whose response headers arrive
// (or that ends OK without any), the oldest in flight when Context is
// called or the replay buffer overflows. The others are cancelled.
//
// Three kinds of goroutine share the race. The driver (drive) owns the
// stream until it commits or fails: it alone launches the attempts, on
// the hedging delay, and it alone commits (commitToLocked), so no hedge
// can go after the commit; after a commit it waits for the losers to end,
// telling the budget of each. Each attempt's goroutine opens the attempt's grpc stream
// and replays the messages sent so far (openRaced, join), then waits for
// its response headers or its end and reports once on events (watch); the
// first attempt is opened on the caller's goroutine, in hedgeStream, and
// only watched on its own. The application's goroutines call the
// grpc.ClientStream methods: before the commit, SendMsg and CloseSend keep
// the message for replay and send it to every attempt open, and RecvMsg
// and Header wait for the commit; Context, and a message that overflows
// the buffer, ask the driver to commit (ask).
//
// sendMu orders the application's SendMsg and CloseSend before the commit;
// each attempt's replay (join) runs beside them, and the stream's mu
// decides which of the two sends a message to an attempt, so every attempt
// gets every message once, in order. The fields below sendMu are guarded
// by the stream's mu, which is never held while blocked in grpc.
type hedgeRace struct {
	// st is the hedging loop's state (hedge.go), the driver's alone.
	st   hedgeState
	hist *latencyHistogram
	// events has room for every attempt: each attempt's goroutine sends
	// once and ends, whether or not the driver still listens.
	events chan streamEvent
	// poke wakes the driver to answer asks or commitNext (room for one:
	// a poke already waiting says it all).
	poke chan struct{}
	// ready is closed when the stream commits or fails before committing.
	ready chan struct{}

	sendMu sync.Mutex
	// targets is SendMsg's and CloseSend's copy of live; sendMu guards it.
	targets []*streamAttempt

	// sent are the attempts sent, live those open, replayed and not known
	// to have ended, in the order they were sent.
	sent, live []*streamAttempt
	// last is the last attempt that ended before any commit.
	last *streamAttempt
	// asks are the application's Context and SendMsg calls that want the
	// stream committed to its oldest attempt open now: the driver answers
	// each (serve) with the winner, or nil when none was open.
	asks []chan *streamAttempt
	// failed: the stream failed before committing (the driver ended it).
	failed bool
	// What sent, live and targets start in: most streams send one or two
	// attempts, and a slice grown from nil is an allocation each.
	sentArr, liveArr, targetsArr [raceInline]*streamAttempt
}

// raceInline is how many attempts a hedged stream keeps track of without
// an allocation: the first and two hedges.
const raceInline = 3

// streamEvent is how one attempt's race ended, sent by its goroutine.
type streamEvent struct {
	a *streamAttempt
	// headers: response headers arrived, took after the attempt was sent.
	headers bool
	took    time.Duration
	// Otherwise the attempt ended without headers, with err (nil: OK), and
	// trailer (nil when the attempt got no transport stream).
	err     error
	trailer metadata.MD
}

// hedgeStream makes s, the stream k.stream started, whose options are
// built, a hedged one (k.stream asked k.hedges first) and starts its
// driver. The first attempt is opened here, as grpc-go opens a stream in
// NewStream, while the driver runs the hedging delay from its start.
func (k *core) hedgeStream(s *retryStream) {
	h := s.c.hedged.Hedging
	r := &hedgeRace{
		events: make(chan streamEvent, h.MaxAttempts),
		poke:   make(chan struct{}, 1),
		ready:  make(chan struct{}),
	}
	r.sent, r.live, r.targets = r.sentArr[:0], r.liveArr[:0], r.targetsArr[:0]
	s.race = r
	// Before the driver starts: the end, which the driver may reach,
	// stops the watch.
	s.watchAbandon()
	st := &r.st
	st.c, st.h = &s.c, h
	st.delay, r.hist = k.hedgeDelay(s.method, h)
	st.deadline, st.hasDeadline = s.callCtx.Deadline()
	a := s.launch(st, 1)
	if st.delay == 0 {
		st.due = true
	} else {
		st.arm(s.callCtx, st.delay, 2)
	}
	go s.drive(st)
	if cs, err := s.openRaced(a); err == nil {
		go s.watch(a, cs)
	}
}

// drive is the hedging loop (hedge.go's, for a stream): it ends when the
// stream has committed and every other attempt has ended, or when the
// stream has failed. It alone launches and commits; what it takes:
// attempts' events (watch, openRaced), the hedging delay's timer, pokes (an
// ask, or an attempt gone live after commitNext) and the caller's Done.
func (s *retryStream) drive(st *hedgeState) {
	r := s.race
	done := s.callCtx.Done()
	for {
		if st.due && st.sent > 0 && s.takeEvents(st) {
			return
		}
		if w := s.serve(); w != nil {
			s.afterCommit(st, w)
			return
		}
		s.sendDue(st)
		if st.inFlight == 0 && st.timerC == nil {
			s.fail(st, st.stopped)
			return
		}
		select {
		case ev := <-r.events:
			st.inFlight--
			ev.a.reported = true
			if s.ended(st, ev) {
				return
			}
		case <-st.timerC:
			st.timerC, st.due = nil, true
		case <-r.poke:
			// An ask, or commitNext met an attempt: serve, above.
		case <-done:
			done = nil
			if why, over := st.callerGone(s.callCtx); over {
				s.fail(st, why)
				return
			}
		}
	}
}

// takeEvents handles the attempts' events already in, without waiting: an
// attempt whose headers arrived as the hedging delay ran out commits
// before a hedge is sent (select would pick between the two at random, and
// a busy machine delays the event by a hop between goroutines). True when
// the driver is done.
func (s *retryStream) takeEvents(st *hedgeState) bool {
	for {
		select {
		case ev := <-s.race.events:
			st.inFlight--
			ev.a.reported = true
			if s.ended(st, ev) {
				return true
			}
		default:
			return false
		}
	}
}

// serve commits the stream when it is to commit to its oldest attempt
// open (an ask, or commitNext) and one is, and answers the asks; it
// returns the winner when it committed. The driver's.
func (s *retryStream) serve() *streamAttempt {
	s.mu.Lock()
	if len(s.race.asks) == 0 && !s.commitNext {
		s.mu.Unlock()
		return nil
	}
	w := s.oldestOpenLocked()
	if w == nil {
		// None open: the next attempt to go live wins.
		if len(s.race.asks) > 0 {
			s.commitNext = true
		}
		s.answerLocked(nil)
		s.mu.Unlock()
		return nil
	}
	sent := s.commitToLocked(w)
	s.mu.Unlock()
	s.committedTo(w, sent)
	return w
}

// answerLocked answers every ask with w (nil: none open, or the stream
// failed). mu is held.
func (s *retryStream) answerLocked(w *streamAttempt) {
	r := s.race
	for _, q := range r.asks {
		q <- w
	}
	clear(r.asks)
	r.asks = r.asks[:0]
}

// ask has the driver commit the stream to its oldest attempt open, for
// Context and a message that overflows the buffer, and returns the winner,
// or nil when none was open (the next attempt to go live wins) or the
// stream failed. mu is held, and held again on return; the caller saw an
// attempt open, so the driver is in flight and answers.
func (s *retryStream) ask() *streamAttempt {
	q := make(chan *streamAttempt, 1)
	s.race.asks = append(s.race.asks, q)
	s.mu.Unlock()
	select {
	case s.race.poke <- struct{}{}:
	default:
	}
	w := <-q
	s.mu.Lock()
	return w
}

// sendDue launches the attempts that are due, as hedge.go's sendDue does
// for a unary call, with the same hedgeState steps (next, launched,
// schedule). The driver alone launches and commits, so no attempt goes
// after the commit.
func (s *retryStream) sendDue(st *hedgeState) {
	for st.due {
		n := st.next(s.callCtx)
		if n == 0 {
			return
		}
		s.mu.Lock()
		if s.commitNext && st.inFlight > 0 {
			// About to commit: an attempt in flight will win.
			s.mu.Unlock()
			return
		}
		// Under mu, with the launch: the application's Context or an
		// overflow may set commitNext as soon as mu goes, and a hedge
		// admitted then would be paid for and cancelled.
		var a *streamAttempt
		why := st.admitHedge(s.callCtx, n)
		if why == policy.ReasonNone {
			a = s.launchLocked(n)
		}
		s.mu.Unlock()
		if why != policy.ReasonNone {
			// Outside mu: goOnRefused may wait, and with nothing in flight
			// nothing can commit meanwhile.
			if !st.goOnRefused(s.callCtx, n, why) {
				return
			}
			s.mu.Lock()
			a = s.launchLocked(n)
			s.mu.Unlock()
		}
		st.launched(s.callCtx, n, a.start)
		go func() {
			if cs, err := s.openRaced(a); err == nil {
				s.watch(a, cs)
			}
		}()
		st.schedule(s.callCtx, n)
	}
}

// launch numbers attempt n and accounts for it (the caller opens it): the
// caller's goroutine, for the first attempt, before the driver starts.
func (s *retryStream) launch(st *hedgeState, n int) *streamAttempt {
	s.mu.Lock()
	a := s.launchLocked(n)
	s.mu.Unlock()
	st.launched(s.callCtx, n, a.start)
	return a
}

// launchLocked makes attempt n, numbered by numberAttempt (where the
// application reads c.attempt after the commit), and adds it to the
// attempts sent, which a commit cancels. mu is held.
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

// openRaced opens a's grpc stream and replays what was sent on it (join).
// When that fails, a has ended: openRaced reports it to the driver.
func (s *retryStream) openRaced(a *streamAttempt) (grpc.ClientStream, error) {
	cs, err := s.streamer(a.ctx, s.desc, s.cc, s.method, s.opts...)
	if err == nil {
		// Committed to another attempt meanwhile, or grpc refused a
		// message it took before (a local error): the attempt ends with
		// it.
		if err = s.join(a, cs); err == nil {
			return cs, nil
		}
	}
	a.cancel()
	a.cs = unopened{ctx: a.ctx, err: err}
	a.ended, a.endErr = true, err
	close(a.watched)
	s.race.events <- streamEvent{a: a, err: err}
	return nil, err
}

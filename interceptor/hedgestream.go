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
// the stream commits, or returns nil for a method that may not run twice
// (k.hedges says which, after k.noticeUnhedged(ctx, &c,
// policy.ReasonNotIdempotent)).

// errHedgeLost ends an attempt that was still opening when the stream
// committed to another (or ended): it is cancelled before it is used.
var errHedgeLost = status.Error(codes.Canceled, "interceptor: hedge cancelled: the stream committed to another attempt")

// hedgedStream is the grpc.ClientStream of a streaming call whose method
// hedges (gRFC A6 hedging until commit). Attempts race until one commits:
// the first whose response headers arrive (or that ends OK without any),
// the oldest in flight when Context is called or the replay buffer
// overflows. The others are cancelled; from then on the stream is the
// winner's.
//
// Three kinds of goroutine share it. The driver (drive) owns the stream
// until it commits or fails: it alone launches the attempts, on the
// hedging delay, and it alone commits (commitLocked), so no hedge can go
// after the commit; after a commit it waits for the losers to end,
// telling the budget of each. Each attempt's goroutine opens the attempt's
// grpc stream and replays the messages sent so far (open, join), then
// waits for its response headers or its end and reports once on events
// (watch); the first attempt is opened on the caller's goroutine, in
// hedgeStream, and only watched on its own. The application's goroutines
// call the grpc.ClientStream methods: before the commit, SendMsg and
// CloseSend keep the message for replay and send it to every attempt
// open, and RecvMsg and Header wait for the commit; Context, and a
// message that overflows the buffer, ask the driver to commit (ask).
//
// sendMu orders the application's SendMsg and CloseSend before the commit;
// each attempt's replay (join) runs beside them, and mu decides which of
// the two sends a message to an attempt, so every attempt gets every
// message once, in order. mu guards the fields below it and is never held
// while blocked in grpc.
type hedgedStream struct {
	k *core
	// c is the call k.stream started, in the retryStream it made, shared
	// rather than copied: one call, whichever engine runs it.
	c        *call
	h        *policy.Hedging
	callCtx  context.Context
	cancel   context.CancelFunc
	hctx     context.Context
	hcancel  context.CancelFunc
	desc     *grpc.StreamDesc
	cc       *grpc.ClientConn
	method   string
	streamer grpc.Streamer
	opts     []grpc.CallOption
	hist     *latencyHistogram

	// The caller's holders and OnFinish, which end fills from the winner
	// (or the last attempt) and runs, and the end (done, final) RecvMsg
	// returns.
	streamEnd

	// events has room for every attempt: each attempt's goroutine sends
	// once and ends, whether or not the driver still listens.
	events chan streamHedgeEvent
	// poke wakes the driver to answer asks or commitNext (room for one:
	// a poke already waiting says it all).
	poke chan struct{}
	// ready is closed when the stream commits or fails before committing.
	ready chan struct{}

	sendMu sync.Mutex
	// targets is SendMsg's and CloseSend's copy of live; sendMu guards it.
	targets []*streamHedgeAttempt

	mu sync.Mutex
	// sent are the attempts sent, live those open, replayed and not known
	// to have ended, in the order they were sent.
	sent, live []*streamHedgeAttempt
	// winner is the attempt the stream committed to; last the last attempt
	// that ended before any commit.
	winner, last *streamHedgeAttempt
	buf          replayBuffer
	closeSent    bool
	// commitNext: Context was called, or the buffer overflowed, while no
	// attempt was open: the next attempt to open wins.
	commitNext bool
	// asks are the application's Context and SendMsg calls that want the
	// stream committed to its oldest attempt open now: the driver answers
	// each (serveLocked) with the winner, or nil when none was open.
	asks []chan *streamHedgeAttempt
	// failed: the stream failed before committing (the driver ended it).
	failed bool
	// endMu orders the two who may report the winner's end (RecvMsg, and
	// the watch on an abandoned stream): the second waits for the first's
	// report, and returns its final error.
	endMu sync.Mutex
}

// streamHedgeAttempt is one attempt of a hedged stream.
type streamHedgeAttempt struct {
	n      int
	ctx    context.Context
	cancel context.CancelFunc
	start  time.Time
	// cs is set once the attempt's grpc stream is open (before it is live).
	cs grpc.ClientStream
	// watched is closed when the attempt's goroutine is done with cs's
	// receiving side: its headers arrived, or it ended without any, with
	// endErr (nil: OK), or it never opened (cs nil).
	watched chan struct{}
	ended   bool
	endErr  error
	// reported: the driver has its event (only the driver uses it).
	reported bool
}

// streamHedgeEvent is how one attempt's race ended, sent by its goroutine.
type streamHedgeEvent struct {
	a *streamHedgeAttempt
	// headers: response headers arrived, took after the attempt was sent.
	headers bool
	took    time.Duration
	// Otherwise the attempt ended without headers, with err (nil: OK), and
	// trailer (nil when the attempt got no transport stream).
	err     error
	trailer metadata.MD
}

// hedgeStream starts the hedged stream of rs's call when its method may run
// more than once, and returns nil otherwise (after telling the hooks, once
// per method): the caller then runs the stream once. grpcOpts are the
// caller's options without stagger's.
func (k *core) hedgeStream(ctx context.Context, rs *retryStream, grpcOpts []grpc.CallOption) grpc.ClientStream {
	if !k.hedges(ctx, &rs.c, true) {
		return nil
	}
	h := rs.c.hedged.Hedging
	s := &hedgedStream{
		k: k, c: &rs.c, h: h, callCtx: rs.callCtx, cancel: rs.cancel,
		desc: rs.desc, cc: rs.cc, method: rs.method, streamer: rs.streamer,
		events: make(chan streamHedgeEvent, h.MaxAttempts),
		poke:   make(chan struct{}, 1),
		ready:  make(chan struct{}),
	}
	s.hctx, s.hcancel = context.WithCancel(s.callCtx)
	// Before the driver starts: end, which the driver may call, stops it.
	s.watchAbandon()
	s.buf.init(s.c.o.replaySize, s.c.o.replayLimit)
	// As for retried streams: stagger's buffer replaces grpc-go's, first so
	// that a caller's own setting wins; then the file's options, then the
	// caller's.
	s.opts = make([]grpc.CallOption, 0, 1+len(s.c.fileOpts)+len(grpcOpts))
	s.opts = append(s.opts, grpc.MaxRetryRPCBufferSize(0))
	s.opts = append(s.opts, s.c.fileOpts...)
	s.opts = s.split(s.opts, grpcOpts, &s.onFinish)
	if len(s.onFinish) > 0 {
		s.watchCaller(s.callCtx)
	}
	st := &hedgeState{c: s.c, h: h}
	st.delay, s.hist = k.hedgeDelay(s.method, h)
	st.deadline, st.hasDeadline = s.callCtx.Deadline()
	// The first attempt is opened here, as grpc-go opens a stream in
	// NewStream, while the driver runs the hedging delay from its start.
	a := s.launch(st, 1)
	if st.delay == 0 {
		st.due = true
	} else {
		st.arm(s.callCtx, st.delay, 2)
	}
	go s.drive(st)
	if cs, err := s.open(a); err == nil {
		go s.watch(a, cs)
	}
	return s
}

// drive is the hedging loop (hedge.go's, for a stream): it ends when the
// stream has committed and every other attempt has ended, or when the
// stream has failed. It alone launches and commits; what it takes:
// attempts' events (watch, open), the hedging delay's timer, pokes (an
// ask, or an attempt gone live after commitNext) and the caller's Done.
func (s *hedgedStream) drive(st *hedgeState) {
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
		case ev := <-s.events:
			st.inFlight--
			ev.a.reported = true
			if s.ended(st, ev) {
				return
			}
		case <-st.timerC:
			st.timerC, st.due = nil, true
		case <-s.poke:
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
func (s *hedgedStream) takeEvents(st *hedgeState) bool {
	for {
		select {
		case ev := <-s.events:
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
func (s *hedgedStream) serve() *streamHedgeAttempt {
	s.mu.Lock()
	if len(s.asks) == 0 && !s.commitNext {
		s.mu.Unlock()
		return nil
	}
	w := s.oldestOpenLocked()
	if w == nil {
		// None open: the next attempt to go live wins.
		if len(s.asks) > 0 {
			s.commitNext = true
		}
		s.answerLocked(nil)
		s.mu.Unlock()
		return nil
	}
	sent := s.commitLocked(w)
	s.mu.Unlock()
	s.committedTo(w, sent)
	return w
}

// answerLocked answers every ask with w (nil: none open, or the stream
// failed). mu is held.
func (s *hedgedStream) answerLocked(w *streamHedgeAttempt) {
	for _, q := range s.asks {
		q <- w
	}
	clear(s.asks)
	s.asks = s.asks[:0]
}

// ask has the driver commit the stream to its oldest attempt open, for
// Context and a message that overflows the buffer, and returns the winner,
// or nil when none was open (the next attempt to go live wins) or the
// stream failed. mu is held, and held again on return; the caller saw an
// attempt open, so the driver is in flight and answers.
func (s *hedgedStream) ask() *streamHedgeAttempt {
	q := make(chan *streamHedgeAttempt, 1)
	s.asks = append(s.asks, q)
	s.mu.Unlock()
	select {
	case s.poke <- struct{}{}:
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
func (s *hedgedStream) sendDue(st *hedgeState) {
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
		var a *streamHedgeAttempt
		allowed := s.c.allowHedge(n)
		if allowed {
			a = s.launchLocked(n)
		}
		s.mu.Unlock()
		if !allowed {
			// Outside mu: waitHedge may wait, and with nothing in flight
			// nothing can commit meanwhile.
			if why := st.waitHedge(s.callCtx, n); why != policy.ReasonNone {
				st.refused(s.callCtx, n, why)
				return
			}
			s.mu.Lock()
			a = s.launchLocked(n)
			s.mu.Unlock()
		}
		st.launched(s.callCtx, n, a.start)
		go func() {
			if cs, err := s.open(a); err == nil {
				s.watch(a, cs)
			}
		}()
		st.schedule(s.callCtx, n)
	}
}

// launch numbers attempt n and accounts for it (the caller opens it): the
// caller's goroutine, for the first attempt, before the driver starts.
func (s *hedgedStream) launch(st *hedgeState, n int) *streamHedgeAttempt {
	s.mu.Lock()
	a := s.launchLocked(n)
	s.mu.Unlock()
	st.launched(s.callCtx, n, a.start)
	return a
}

// launchLocked makes attempt n, numbered by numberAttempt (where the
// application reads c.attempt after the commit), and adds it to the
// attempts sent, which a commit cancels. mu is held.
func (s *hedgedStream) launchLocked(n int) *streamHedgeAttempt {
	a := &streamHedgeAttempt{n: n, start: time.Now(), watched: make(chan struct{})}
	// No per-attempt timer: a hedged method has no retry policy.
	a.ctx, a.cancel = context.WithCancel(s.c.numberAttempt(s.hctx))
	s.sent = append(s.sent, a)
	return a
}

// open opens a's grpc stream and replays what was sent on it (join). When
// that fails, a has ended: open reports it to the driver.
func (s *hedgedStream) open(a *streamHedgeAttempt) (grpc.ClientStream, error) {
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
	a.ended, a.endErr = true, err
	close(a.watched)
	s.events <- streamHedgeEvent{a: a, err: err}
	return nil, err
}

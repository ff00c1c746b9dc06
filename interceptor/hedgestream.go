package interceptor

import (
	"context"
	"io"
	"slices"
	"sync"
	"time"

	"github.com/stagger-go/stagger/budget"
	"github.com/stagger-go/stagger/policy"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
)

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
// Three kinds of goroutine share it. The driver (drive) runs the hedging
// loop of hedge.go's hedgeState until the stream commits or fails: it
// launches the attempts on the hedging delay, hears how each ends, and
// after a commit waits for the losers to end, telling the budget of each.
// Each attempt's goroutine (runAttempt) opens the attempt's grpc stream,
// replays the messages sent so far, then waits for its response headers or
// its end, and reports once on events. The application's goroutines call
// the grpc.ClientStream methods: before the commit, SendMsg and CloseSend
// keep the message for replay and send it to every attempt open, and
// RecvMsg and Header wait for the commit.
//
// sendMu orders everything sent on attempts: the application's SendMsg and
// CloseSend before the commit and each attempt's replay, so every attempt
// gets every message once, in order. mu guards the fields below it and is
// never held while blocked in grpc.
type hedgedStream struct {
	k        *core
	c        call
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

	// The caller's Header, Trailer and Peer holders and OnFinish functions,
	// taken out of the attempts' options: the stream fills the holders from
	// the winner (or the last attempt) when it ends, and runs OnFinish once.
	callerOutputs
	onFinishOnce

	// events has room for every attempt: each attempt's goroutine sends
	// once and ends, whether or not the driver still listens.
	events chan streamHedgeEvent
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
	// failed: the stream failed before committing (the driver ended it).
	failed bool
	// done: the application has been given the stream's end, final (io.EOF
	// after success).
	done  bool
	final error
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
	if !k.hedges(ctx, &rs.c) {
		return nil
	}
	h := rs.c.hedged.Hedging
	s := &hedgedStream{
		k: k, c: rs.c, h: h, callCtx: rs.callCtx, cancel: rs.cancel,
		desc: rs.desc, cc: rs.cc, method: rs.method, streamer: rs.streamer,
		events: make(chan streamHedgeEvent, h.MaxAttempts),
		ready:  make(chan struct{}),
	}
	s.hctx, s.hcancel = context.WithCancel(s.callCtx)
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
	st := &hedgeState{k: k, c: &s.c, h: h, hctx: s.hctx, hcancel: s.hcancel}
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
// stream has failed.
func (s *hedgedStream) drive(st *hedgeState) {
	done := s.callCtx.Done()
	for {
		if st.due && st.sent > 0 && s.takeEvents(st) {
			return
		}
		s.sendDue(st)
		if s.committed() {
			s.afterCommit(st, nil)
			return
		}
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
		case <-s.ready:
			// Committed by Context, or by an overflow of the buffer.
			s.afterCommit(st, nil)
			return
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

func (s *hedgedStream) committed() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.winner != nil
}

// sendDue launches the attempts that are due, as hedge.go's sendDue does
// for a unary call, with the same hedgeState steps (next, launched,
// schedule); the budget is asked under mu, once no commit is near.
func (s *hedgedStream) sendDue(st *hedgeState) {
	for st.due {
		n := st.next(s.callCtx)
		if n == 0 {
			return
		}
		// Under mu: no attempt is sent once the stream has committed, and
		// nextAttempt numbers it where the application reads c.attempt
		// after the commit.
		s.mu.Lock()
		if s.winner != nil || s.commitNext && st.inFlight > 0 {
			// Committed, or about to: an attempt in flight will win.
			s.mu.Unlock()
			return
		}
		if !s.c.allowHedge(n) {
			s.mu.Unlock()
			st.stop(s.callCtx, n, policy.ReasonBudget)
			return
		}
		s.mu.Unlock()
		a := s.launch(st, n)
		go func() {
			if cs, err := s.open(a); err == nil {
				s.watch(a, cs)
			}
		}()
		st.schedule(s.callCtx, n)
	}
}

// launch numbers attempt n and accounts for it (the caller opens it): the
// driver, or the caller's goroutine for the first attempt, before the
// driver starts.
func (s *hedgedStream) launch(st *hedgeState, n int) *streamHedgeAttempt {
	now := time.Now()
	a := &streamHedgeAttempt{n: n, start: now, watched: make(chan struct{})}
	// Under mu: nextAttempt numbers the attempt where the application
	// reads c.attempt after the commit, and a commit cancels every attempt
	// sent.
	s.mu.Lock()
	actx, _, _ := s.c.nextAttempt(s.hctx)
	a.ctx, a.cancel = context.WithCancel(actx)
	s.sent = append(s.sent, a)
	s.mu.Unlock()
	st.launched(s.callCtx, n, now)
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

// watch is an open attempt's goroutine: it waits for the attempt's response
// headers, which commit the stream to it unless it committed already, or
// for its end, and reports to the driver.
func (s *hedgedStream) watch(a *streamHedgeAttempt, cs grpc.ClientStream) {
	ev := streamHedgeEvent{a: a}
	if md, _ := cs.Header(); md != nil {
		ev.headers, ev.took = true, time.Since(a.start)
		// Committed here rather than by the driver: the application's
		// RecvMsg waits for it, and a hop between goroutines less is
		// latency less.
		s.mu.Lock()
		sent, won := 0, s.winner == nil && !s.failed
		if won {
			sent = s.commitLocked(a)
		}
		s.mu.Unlock()
		if won {
			if s.hist != nil {
				s.hist.observe(ev.took)
			}
			s.committedTo(a, sent)
		}
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
// CloseSend if the application called it, then makes a live; it commits
// to a when the stream is to commit to the next attempt. It returns
// errHedgeLost when the stream committed to another attempt or failed
// meanwhile, or the error grpc refused a message with (not io.EOF: an
// attempt that died still goes live, its Header and RecvMsg tell how).
func (s *hedgedStream) join(a *streamHedgeAttempt, cs grpc.ClientStream) error {
	s.sendMu.Lock()
	defer s.sendMu.Unlock()
	// Only SendMsg and CloseSend add to the buffer, under sendMu: it does
	// not grow while the replay runs. A commit may release it (under mu).
	for i := 0; ; i++ {
		s.mu.Lock()
		if s.winner != nil || s.failed {
			s.mu.Unlock()
			return errHedgeLost
		}
		if i >= len(s.buf.msgs) {
			s.mu.Unlock()
			break
		}
		m := s.buf.msgs[i]
		s.mu.Unlock()
		if err := cs.SendMsg(m); err != nil {
			if err != io.EOF {
				return err
			}
			break
		}
	}
	s.mu.Lock()
	closeSent := s.closeSent
	s.mu.Unlock()
	if closeSent {
		_ = cs.CloseSend() // grpc-go's CloseSend always returns nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.winner != nil || s.failed {
		return errHedgeLost
	}
	a.cs = cs
	s.live = append(s.live, a)
	if s.commitNext {
		sent := s.commitLocked(a)
		s.mu.Unlock()
		s.committedTo(a, sent)
		s.mu.Lock()
	}
	return nil
}

// commitLocked commits the stream to w: the others are cancelled (those
// still opening too: one waiting for a connection ends now), the buffer is
// given back, and RecvMsg and Header go on with w.
//
// It returns the attempts sent: the committer then calls committedTo,
// without mu.
func (s *hedgedStream) commitLocked(w *streamHedgeAttempt) (sent int) {
	s.winner, s.commitNext = w, false
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
		s.c.o.emit(s.callCtx, Event{Kind: EventHedgeWon, Method: s.c.method, Attempt: w.n, Hedging: true})
	}
	close(s.ready)
}

// ended handles the end of one attempt's race before the stream committed,
// as hedge.go's ended does for a unary attempt; true when the driver is
// done.
func (s *hedgedStream) ended(st *hedgeState, ev streamHedgeEvent) bool {
	a := ev.a
	s.mu.Lock()
	if s.winner != nil {
		// Committed meanwhile (Context, an overflow): a is the winner or a
		// loser.
		s.mu.Unlock()
		s.afterCommit(st, &ev)
		return true
	}
	if ev.err == nil {
		// OK without headers (headers commit in watch).
		sent := s.commitLocked(a)
		s.mu.Unlock()
		s.committedTo(a, sent)
		s.afterCommit(st, nil)
		return true
	}
	if i := slices.Index(s.live, a); i >= 0 {
		s.live = slices.Delete(s.live, i, i+1)
	}
	s.last = a
	s.mu.Unlock()
	st.last, st.lastN = ev.err, a.n
	var why policy.Reason
	switch {
	case s.callCtx.Err() != nil:
		why = policy.ReasonCaller
	case !st.h.NonFatalCodes.Has(status.Code(ev.err)):
		why = policy.ReasonNotRetryable
	}
	if why != policy.ReasonNone {
		s.c.recordHedge(a.n, budget.Other, breakerOutcome(s.callCtx, ev.err, false))
		s.fail(st, why)
		return true
	}
	st.nonFatal(s.callCtx, a.n, ev.err, ev.trailer)
	return false
}

// afterCommit ends the driver once the stream has committed: no further
// hedge, and every other attempt (cancelled at the commit) is waited for and
// told to the budget. ev is an event the driver took already, if any. The
// winner's own end is the application's to see.
func (s *hedgedStream) afterCommit(st *hedgeState, ev *streamHedgeEvent) {
	st.disarm()
	s.mu.Lock()
	w := s.winner
	s.mu.Unlock()
	lost := func(ev streamHedgeEvent) {
		if ev.a == w {
			return
		}
		o := budget.Other
		if !ev.headers && ev.err == nil {
			o = budget.Success
		}
		s.c.recordHedge(ev.a.n, o, o)
	}
	if ev != nil {
		lost(*ev)
	}
	for st.inFlight > 1 || st.inFlight == 1 && w.reported {
		ev := <-s.events
		st.inFlight--
		ev.a.reported = true
		lost(ev)
	}
}

// fail ends a stream that did not commit: every attempt is cancelled and
// waited for, and the stream ends with the last failure, for why
// (ReasonAttempts when nothing else stopped the hedges).
func (s *hedgedStream) fail(st *hedgeState, why policy.Reason) {
	st.disarm()
	s.mu.Lock()
	if s.winner != nil {
		// An attempt committed as the last one ended: the stream is its.
		s.mu.Unlock()
		s.afterCommit(st, nil)
		return
	}
	s.failed = true
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
	s.end(last, err)
	close(s.ready)
}

// end ends the stream with err (nil: success), from attempt a (nil: none
// opened): it fills the caller's holders from a, runs OnFinish and reports
// the call's end.
func (s *hedgedStream) end(a *streamHedgeAttempt, err error) {
	s.mu.Lock()
	if s.done {
		s.mu.Unlock()
		return
	}
	s.done, s.final = true, err
	if err == nil {
		s.final = io.EOF
	}
	s.mu.Unlock()
	var cs grpc.ClientStream
	if a != nil {
		cs = a.cs
	}
	if s.callerHeader != nil {
		*s.callerHeader = nil
		if cs != nil {
			*s.callerHeader, _ = cs.Header()
		}
	}
	if s.callerTrailer != nil {
		*s.callerTrailer = nil
		if cs != nil {
			*s.callerTrailer = cs.Trailer()
		}
	}
	if s.callerPeer != nil && cs != nil {
		if p, ok := peer.FromContext(cs.Context()); ok {
			*s.callerPeer = *p
		}
	}
	s.finishOnce(err)
	s.hcancel()
	s.cancel()
	s.c.end(s.cc, err)
}

// winnerEnded ends the stream with the end of its winner w, err (io.EOF:
// success), and returns what RecvMsg returns.
func (s *hedgedStream) winnerEnded(w *streamHedgeAttempt, err error) error {
	if err == io.EOF {
		err = nil
	}
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
			s.c.o.emit(s.callCtx, Event{Kind: EventGiveUp, Method: s.c.method, Attempt: w.n, Code: status.Code(err), Err: err, Reason: why, Hedging: true})
			err = s.c.failed(s.c.attempt, err)
		}
		s.end(w, err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.final
}

// SendMsg sends m on every attempt open and, until the stream commits,
// keeps it for the attempts still to come. Before the commit it returns nil
// whatever became of the attempts (RecvMsg tells the outcome), unless grpc
// refused the message itself; a message that does not fit in the replay
// buffer commits the stream to the oldest attempt open.
func (s *hedgedStream) SendMsg(m any) error {
	s.mu.Lock()
	if w := s.winner; w != nil {
		s.mu.Unlock()
		return w.cs.SendMsg(m)
	}
	s.mu.Unlock()
	s.sendMu.Lock()
	defer s.sendMu.Unlock()
	s.mu.Lock()
	switch {
	case s.winner != nil:
		w := s.winner
		s.mu.Unlock()
		return w.cs.SendMsg(m)
	case s.failed:
		s.mu.Unlock()
		return sendOnEnded(s.desc)
	case s.closeSent:
		s.mu.Unlock()
		return errSendAfterClose
	}
	if !s.buf.add(m) {
		if len(s.live) > 0 {
			w := s.live[0]
			sent := s.commitLocked(w)
			s.mu.Unlock()
			s.committedTo(w, sent)
			return w.cs.SendMsg(m)
		}
		// No attempt open: the next one gets it in its replay and wins.
		s.buf.force(m)
		s.commitNext = true
		s.mu.Unlock()
		return nil
	}
	kept := len(s.buf.msgs)
	s.targets = append(s.targets[:0], s.live...)
	s.mu.Unlock()
	for i, a := range s.targets {
		if err := a.cs.SendMsg(m); err != nil && err != io.EOF && i == 0 {
			// grpc refused the message (too large, cannot marshal): it is
			// not part of the stream.
			s.mu.Lock()
			s.buf.dropLast(kept)
			s.mu.Unlock()
			clear(s.targets)
			return err
		}
	}
	clear(s.targets)
	return nil
}

// CloseSend closes the sending side of every attempt open and, until the
// stream commits, of the attempts still to come.
func (s *hedgedStream) CloseSend() error {
	s.mu.Lock()
	if w := s.winner; w != nil {
		s.mu.Unlock()
		return w.cs.CloseSend()
	}
	s.mu.Unlock()
	s.sendMu.Lock()
	defer s.sendMu.Unlock()
	s.mu.Lock()
	if w := s.winner; w != nil {
		s.mu.Unlock()
		return w.cs.CloseSend()
	}
	s.closeSent = true
	s.targets = append(s.targets[:0], s.live...)
	s.mu.Unlock()
	for _, a := range s.targets {
		_ = a.cs.CloseSend()
	}
	clear(s.targets)
	return nil
}

// RecvMsg waits for the stream to commit, then receives from the winner.
// A stream that failed before committing returns its final error.
func (s *hedgedStream) RecvMsg(m any) error {
	<-s.ready
	s.mu.Lock()
	if s.done {
		err := s.final
		s.mu.Unlock()
		return err
	}
	w := s.winner
	s.mu.Unlock()
	// The attempt's goroutine may be reading its status (it ended without
	// headers); once it is done, the stream is the application's alone.
	<-w.watched
	var err error
	if w.ended {
		err = w.endErr
		if err == nil {
			err = io.EOF
		}
	} else {
		err = w.cs.RecvMsg(m)
	}
	if err == nil {
		if !s.desc.ServerStreams {
			// grpc-go has read the status too: the call succeeded.
			s.winnerEnded(w, nil)
		}
		return nil
	}
	return s.winnerEnded(w, err)
}

// Header waits for the stream to commit and returns the winner's response
// headers (nil, nil when it ended without any, as grpc-go's); after a
// failure before any commit, the last attempt's.
func (s *hedgedStream) Header() (metadata.MD, error) {
	<-s.ready
	cs := s.current()
	if cs == nil {
		return nil, nil
	}
	return cs.Header()
}

// Trailer returns the trailer of the winner, or before a commit of the last
// attempt that ended; call it after RecvMsg returned an error.
func (s *hedgedStream) Trailer() metadata.MD {
	cs := s.current()
	if cs == nil {
		return nil
	}
	return cs.Trailer()
}

// current returns the grpc stream of the winner or, before a commit, of the
// last attempt that ended; nil when that attempt never opened, or when
// none has ended.
func (s *hedgedStream) current() grpc.ClientStream {
	s.mu.Lock()
	a := s.winner
	if a == nil {
		a = s.last
	}
	s.mu.Unlock()
	if a == nil {
		return nil
	}
	return a.cs
}

// Context commits the stream, as grpc-go's does, to the oldest attempt open
// (the others are cancelled), and returns that attempt's context. With none
// open it returns the call's context and the next attempt to open wins.
func (s *hedgedStream) Context() context.Context {
	s.mu.Lock()
	w := s.winner
	switch {
	case w == nil && !s.failed && len(s.live) == 0:
		s.commitNext = true
	case w == nil && !s.failed:
		w = s.live[0]
		sent := s.commitLocked(w)
		s.mu.Unlock()
		s.committedTo(w, sent)
		return w.cs.Context()
	}
	s.mu.Unlock()
	if w == nil {
		return s.callCtx
	}
	return w.cs.Context()
}

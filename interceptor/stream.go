package interceptor

import (
	"cmp"
	"context"
	"io"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/stagger-go/stagger/policy"
)

// StreamClientInterceptor returns the retrying stream client interceptor, for
// server-streaming, client-streaming and bidi methods. It takes
// UnaryClientInterceptor's options and decides by its rules.
//
// Replay. Until the stream commits, every message the application sends (and
// its CloseSend) is kept, by reference, in a replay buffer bounded in bytes
// (WithReplayBufferSize, WithReplayBufferLimit), and sent again, in order, to
// a new attempt before anything else. The application must not modify a
// message after SendMsg (grpc-go requires it too). grpc-go's own retry buffer
// is turned off for these streams (grpc.MaxRetryRPCBufferSize(0) before the
// caller's options), so a stream holds one bounded copy; grpc-go's
// transparent retry of a stream that never reached the server still happens
// before the first message.
//
// Commit. The stream commits, never retries again and releases the buffer,
// when a response message arrives, when response headers arrive (seen by
// Header, or after a failure: an interceptor cannot watch them arrive, so a
// failed attempt with headers is final and a Trailers-Only one may be
// retried), when the next message would overflow the buffer, or when the
// application calls Context, as grpc-go's does, so that no later retry
// cancels the context it holds. A message the application received is never
// delivered again. A server stream with a resume function (WithResume) is
// reopened past its commit. Header returns nil, nil when the call ends
// without headers; the caller sees one attempt's (the package doc).
//
// Decisions happen inside the application's calls: an attempt's failure
// surfaces on RecvMsg (CloseAndRecv for a client stream), which pauses, opens
// the next attempt, replays and reads on, so the caller sees only the next
// message or the final status. Until the stream commits, SendMsg on an
// attempt that has died returns nil (RecvMsg tells the outcome), and a
// failure to create the stream is retried inside the interceptor.
//
// The per-attempt timeout (perAttemptRecvTimeout) follows the unary rules
// and stops at the commit (the package doc); an idempotency key does not
// let it apply.
//
// Hedging. Streams are hedged until they commit, by the unary call's rules
// (gRFC A6): the attempts race until one commits: the first whose response
// headers arrive (or that ends OK without any), or, when the application
// calls Context or a message overflows the replay buffer, the oldest attempt
// open. The others are cancelled and the stream is the winner's, its failure
// final. Every message sent before the commit (and CloseSend) goes to every
// attempt open and is replayed to each later hedge, so a message waits for the
// slowest open attempt's flow control. SendMsg returns before any attempt
// answers; RecvMsg and Header wait for the commit. A hedged stream runs one
// goroutine of its own until it commits and the others ended (hooks hear
// its hedge events there) and one per attempt until the attempt's headers
// arrive or it ends; the stream's end waits for each. The adaptive delay
// learns from the winners' times to commit.
//
// The returned streams follow grpc.ClientStream's rules: one goroutine may
// send (SendMsg, CloseSend) while another receives.
func StreamClientInterceptor(opts ...Option) grpc.StreamClientInterceptor {
	k := newCore(opts)
	return func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, callOpts ...grpc.CallOption) (grpc.ClientStream, error) {
		return k.stream(ctx, desc, cc, method, streamer, callOpts)
	}
}

func (k *core) stream(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts []grpc.CallOption) (grpc.ClientStream, error) {
	s := &retryStream{desc: desc, cc: cc, method: method, streamer: streamer}
	s.live = s.liveArr[:0]
	callCtx, cancel, grpcOpts, run := k.start(ctx, cc, method, opts, &s.c)
	if !run {
		return streamer(callCtx, desc, cc, method, grpcOpts...)
	}
	s.callCtx, s.cancel = callCtx, cancel
	if s.c.byKey && s.c.perAttempt > 0 {
		// A key de-duplicates a unary call, not a stream.
		s.c.perAttempt = 0
		k.noticeUnapplied(ctx, &s.c, policy.ReasonNotIdempotent)
	}
	// A resume function (WithResume: a server stream's) says the request
	// may be sent again.
	if fn := s.c.o.resume[method]; fn != nil && s.c.retrying && desc.ServerStreams && !desc.ClientStreams {
		s.res, s.c.repeatable = &resumeState{fn: fn}, true
	}
	hedged := s.c.hedged != nil && k.hedges(ctx, &s.c, true)
	// Each attempt's options: grpc-go's retry buffer off, the file's, then
	// the caller's, which win, as in grpc-go; the caller's holders and
	// OnFinish are finishStream's, as grpc would fill them after the stream
	// announced its end.
	if s.c.retrying || hedged {
		s.buf.init(s.c.o.replaySize, s.c.o.replayLimit)
		s.opts = append(make([]grpc.CallOption, 0, 1+len(s.c.fileOpts)+len(grpcOpts)), grpc.MaxRetryRPCBufferSize(0))
	} else {
		s.committed = true // one attempt: nothing to keep
	}
	if s.opts == nil && len(s.c.fileOpts) == 0 && !carriesOutputs(grpcOpts) {
		s.opts = grpcOpts
	} else {
		s.opts = s.split(append(s.opts, s.c.fileOpts...), grpcOpts)
	}
	if err := s.c.admitFirst(callCtx, cc, grpcOpts); err != nil {
		return nil, s.finishStream(err, false)
	}
	if hedged {
		k.hedgeStream(s)
		return s, nil
	}
	if timedOut, err := s.open(&s.first); err != nil {
		if _, final := s.retryAfter(err, nil, false, timedOut); final != nil {
			return nil, final
		}
	}
	s.watchAbandon()
	return s, nil
}

type streamAttempt struct {
	cs      grpc.ClientStream
	ctx     context.Context
	cancel  context.CancelFunc
	timer   *streamTimer // the per-attempt timeout (nil: none)
	settled bool         // under endMu

	// A hedged stream's: n is the attempt's number, start when it was
	// sent. watched closes when watch is done with the receiving side:
	// headers arrived (took after start), or it ended without any (ended),
	// with endErr (nil: OK) and trailer. reported: the driver has its event.
	n        int
	start    time.Time
	took     time.Duration
	watched  chan struct{}
	ended    bool
	endErr   error
	trailer  metadata.MD
	reported bool
}

// recv is RecvMsg on the attempt's grpc stream, after a hedged attempt's
// watch is done with it (an end it saw is returned: io.EOF for OK).
func (a *streamAttempt) recv(m any) error {
	if a.watched != nil {
		<-a.watched
		if a.ended {
			return cmp.Or(a.endErr, io.EOF)
		}
	}
	return a.cs.RecvMsg(m)
}

// endAttempt is every end of attempt a, whose last operation returned err
// (nil: success), under endMu or before the stream is returned: its timer
// hands the call its verdict (stopTimer) before anything judges a.
func (s *retryStream) endAttempt(a *streamAttempt, err error) (cutOff, timedOut bool, outcome error) {
	a.settled = true
	cutOff = s.c.stopTimer(a.timer)
	outcome, timedOut = attemptOutcome(s.callCtx, err, cutOff)
	a.cancel()
	return cutOff, timedOut, outcome
}

// retryStream is the grpc.ClientStream the application holds, retried or
// hedged (race, until it commits). mu guards the fields below it and is
// never held while blocked in grpc.
type retryStream struct {
	c        call
	callCtx  context.Context
	cancel   context.CancelFunc
	desc     *grpc.StreamDesc
	cc       *grpc.ClientConn
	method   string
	streamer grpc.Streamer
	opts     []grpc.CallOption
	first    streamAttempt
	// recvMu is held by RecvMsg, and by Header while it reads the status
	// of an attempt that ended without headers. sendMu is held by SendMsg
	// and CloseSend: a new attempt's replay (dial) runs beside them, and
	// mu decides which of the two sends a message to the attempt, so it
	// gets every message once, in order.
	recvMu, sendMu sync.Mutex
	streamEnd
	// endMu makes settle one at a time: the reader and the abandon watch
	// may both report an attempt's end.
	endMu sync.Mutex

	mu sync.Mutex
	// cur is the attempt that answers SendMsg, Header, Trailer and Context:
	// the running one, then the committed or the last one; during a retry,
	// the ended one until the replay is done.
	cur       *streamAttempt
	committed bool
	// live are the attempts open, replayed and not known to have ended,
	// oldest first, that a message sent before the commit goes to: a
	// retried stream's one (none while a retry is between deciding and the
	// end of its replay) or a race's; once a race commits, its winner.
	live []*streamAttempt
	// commitNext: the stream is to commit with no attempt live, for a
	// message that overflowed the buffer (keepBeforeCommit) or for Context:
	// the next attempt to go live wins, and a failure meanwhile is final.
	commitNext bool
	closeSent  bool
	// targets holds sendKept's copy of the attempts open, the sender's.
	targets, liveArr [raceInline]*streamAttempt
	buf              replayBuffer
	res              *resumeState
	race             *hedgeRace
	// sendWait closes when an attempt goes live (nil: nobody waits).
	sendWait chan struct{}
}

// open starts a, the next attempt (dial). When it fails, a has ended, and
// open returns why and whether the per-attempt timer was the cause.
func (s *retryStream) open(a *streamAttempt) (timedOut bool, err error) {
	base := s.callCtx
	if s.res != nil && s.res.ctx != nil {
		base = s.res.ctx // with ResumeHeader
	}
	a.ctx, a.cancel, a.timer = s.c.nextAttempt(base)
	if err = s.dial(a); err == nil {
		return false, nil
	}
	_, timedOut, err = s.endAttempt(a, err)
	s.mu.Lock()
	s.cur = a // the caller sees it, if the call ends here
	s.mu.Unlock()
	return timedOut, err
}

// dial opens a's grpc stream, replays on it and makes it live, as
// docs/architecture.md draws ("Who decides a stream"); nil when a went
// live. A send's io.EOF does not end the replay: the stream below may
// re-open its request unseen (the Connect front end re-sends what the
// attempt was given), which needs every message and the end; another
// error is grpc refusing a message.
//
// A race's replay runs beside the application's SendMsg, not under
// sendMu: a send may wait for its attempt's server (connect-go's Send of a
// server stream's request waits for the response headers), and a slow
// server must not hold back the hedge that would answer.
func (s *retryStream) dial(a *streamAttempt) error {
	cs, err := s.streamer(a.ctx, s.desc, s.cc, s.method, s.opts...)
	if err != nil {
		a.cs = unopened{ctx: a.ctx, err: err}
		return err
	}
	a.cs = cs
	if t := a.timer; t != nil {
		s.goroutines.Add(1)
		go func() {
			defer s.goroutines.Done()
			// The first response header stops the timer and tells the pace
			// (pace.Evidence.Answer) the server served the attempt, unless
			// the timer cut it off or it ended from above.
			md, _ := cs.Header()
			if md != nil && t.stopAnswered(time.Now()) && t.f.pace != nil && t.ctx.Err() == nil {
				t.f.pace.Answer(t.start, time.Since(t.start), t.f.crit.Index())
			}
		}()
	}
	closed := false
	for i := 0; ; {
		s.mu.Lock()
		if s.race != nil && (s.committed || s.race.failed) {
			s.mu.Unlock()
			return errHedgeLost
		}
		if i < len(s.buf.msgs) {
			m := s.buf.msgs[i]
			s.mu.Unlock()
			i++
			if err := cs.SendMsg(m); err != nil && err != io.EOF {
				return err
			}
			continue
		}
		if s.closeSent && !closed {
			s.mu.Unlock()
			closed = true
			_ = cs.CloseSend() // grpc-go's CloseSend always returns nil
			continue
		}
		// a goes live. A commit asked for while none was (commitNext) is
		// to it: a race's by its driver (serve).
		if s.race == nil {
			s.cur, s.live = a, s.live[:0]
		}
		s.live = append(s.live, a)
		if s.sendWait != nil {
			close(s.sendWait)
			s.sendWait = nil
		}
		switch {
		case !s.commitNext:
		case s.race == nil:
			s.commitLocked()
		default:
			s.race.wake()
		}
		s.mu.Unlock()
		return nil
	}
}

// retryAfter decides from the end of an attempt that ended with err (nil:
// success) until a new attempt is open and replayed, which it returns, or
// ends the stream (finishStream) and returns what RecvMsg returns from then on.
func (s *retryStream) retryAfter(err error, trailer metadata.MD, committed, timedOut bool) (*streamAttempt, error) {
	for {
		retry, pause := s.c.afterAttempt(s.callCtx, err, trailer, committed, timedOut)
		if !retry {
			return nil, s.finishStream(s.c.finish(err), false)
		}
		if final := s.prepareResume(err); final != nil {
			return nil, s.finishStream(final, false)
		}
		if final := s.c.pause(s.callCtx, pause, err); final != nil {
			return nil, s.finishStream(final, false)
		}
		s.c.resume = false
		trailer = nil
		next := new(streamAttempt)
		if timedOut, err = s.open(next); err == nil {
			return next, nil
		}
		s.mu.Lock()
		committed = s.commitNext
		s.mu.Unlock()
	}
}

// unopened is the grpc stream of an attempt the streamer failed to open.
type unopened struct {
	grpc.ClientStream
	ctx context.Context
	err error
}

func (u unopened) Header() (metadata.MD, error) { return nil, nil }
func (u unopened) Trailer() metadata.MD         { return nil }
func (u unopened) CloseSend() error             { return nil }
func (u unopened) Context() context.Context     { return u.ctx }
func (u unopened) SendMsg(any) error            { return io.EOF }
func (u unopened) RecvMsg(any) error            { return u.err }

// liveWait returns the channel that closes when an attempt goes live.
func (s *retryStream) liveWait() <-chan struct{} {
	if s.sendWait == nil {
		s.sendWait = make(chan struct{})
	}
	return s.sendWait
}

func (s *retryStream) commitLocked() {
	s.committed = true
	s.buf.release()
}

// shownLocked is the grpc stream of the attempt the caller sees, nil while
// there is none (a hedged stream before its commit or first end).
func (s *retryStream) shownLocked() grpc.ClientStream {
	if s.cur == nil {
		return nil
	}
	return s.cur.cs
}

// watchAbandon settles the stream when its caller's context ends and
// nobody reads it to its end (grpc-go lets a caller end a stream so): the
// attempt out would otherwise never reach the budget, the breaker or the
// Gate, whose probe it may hold. stopAbandon is set under mu: a done
// context may finish the stream before AfterFunc returns.
func (s *retryStream) watchAbandon() {
	stop := context.AfterFunc(s.callCtx, func() {
		if s.race != nil {
			<-s.race.ready // before it, the driver settles (callerGone)
		}
		s.endMu.Lock()
		s.mu.Lock()
		a, done := s.cur, s.done
		s.mu.Unlock()
		s.endMu.Unlock()
		if done || a == nil || a.cs == nil {
			return
		}
		s.settle(a, status.FromContextError(s.callCtx.Err()).Err(), true)
	})
	s.mu.Lock()
	s.stopAbandon = stop
	s.mu.Unlock()
}

// settle handles the end of attempt a, whose last operation returned err
// (io.EOF: success): it returns the next attempt, replayed, or ends the
// stream and returns its final error. abandoned: the caller's context
// ended, and the stream's reader may still be using a.
func (s *retryStream) settle(a *streamAttempt, err error, abandoned bool) (next *streamAttempt, final error) {
	s.endMu.Lock()
	defer s.endMu.Unlock()
	if a.settled {
		s.mu.Lock()
		defer s.mu.Unlock()
		if s.done {
			return nil, s.final
		}
		return s.cur, nil
	}
	if err == io.EOF {
		err = nil
	}
	cutOff, timedOut, outcome := s.endAttempt(a, err)
	if s.race != nil {
		// The race's winner: the call's decision judges its end as
		// committed (judge), so a failure is final, and it ends as a race
		// nobody won does (giveUp).
		st := &s.race.st
		why := st.judge(s.callCtx, a.n, outcome, true, nil)
		if outcome != nil {
			outcome = st.giveUp(s.callCtx, why)
		} else {
			s.c.reason = why
		}
		return nil, s.finishStream(outcome, abandoned)
	}
	s.mu.Lock()
	committed := s.committed || s.commitNext
	if err != nil && !committed && !abandoned {
		s.live = s.live[:0] // until the next attempt goes live
	}
	s.mu.Unlock()
	if abandoned {
		// afterAttempt never retries a call whose context is done; a's
		// headers and trailer stay unread (the reader may be using a).
		s.c.afterAttempt(s.callCtx, outcome, nil, committed, timedOut)
		return nil, s.finishStream(s.c.finish(outcome), true)
	}
	if err != nil && !committed && !cutOff {
		// Ended, so Header does not block: headers before the failure
		// commit; a Trailers-Only failure may be retried.
		if md, _ := a.cs.Header(); md != nil {
			committed = true
		}
	}
	if committed && s.resuming(err) {
		committed = false
	}
	return s.retryAfter(outcome, a.cs.Trailer(), committed, timedOut) // a success's too: its load report
}

// sendKept is SendMsg (closing: a hedged stream's CloseSend) before the
// stream commits, m kept, to every attempt live (none between attempts:
// the replay takes m); mu is held, and let go here. An error is the
// caller's when grpc refused m (m is not kept), or when the stream
// committed meanwhile to the attempt that failed; any other is an
// attempt's end, which RecvMsg tells.
func (s *retryStream) sendKept(m any, closing bool) error {
	kept := len(s.buf.msgs)
	to := append(s.targets[:0], s.live...)
	s.mu.Unlock()
	defer clear(to)
	for i, a := range to {
		if closing {
			_ = a.cs.CloseSend()
			continue
		}
		err := a.cs.SendMsg(m)
		if err == nil {
			continue
		}
		s.mu.Lock()
		mine := s.committed && s.cur == a
		refused := !mine && i == 0 && err != io.EOF && a.ctx.Err() == nil
		if refused {
			s.buf.dropLast(kept)
		}
		s.mu.Unlock()
		if mine || refused {
			return err
		}
	}
	return nil
}

// oldestOpenLocked returns the oldest live attempt not seen to end (nil:
// none): a commit to an ended attempt would make its failure, which the
// next hedge may still answer, the stream's. A retried stream's attempt
// has no watch: it is open while live.
func (s *retryStream) oldestOpenLocked() *streamAttempt {
	for _, a := range s.live {
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

// sendOnEnded is what SendMsg returns on an ended stream: io.EOF (RecvMsg
// has the status), but nil, as grpc-go does, for a method whose client
// sends one message: its generated code would return that io.EOF in place
// of the stream's status.
func sendOnEnded(desc *grpc.StreamDesc) error {
	if !desc.ClientStreams {
		return nil
	}
	return io.EOF
}

package interceptor

import (
	"context"
	"io"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// StreamClientInterceptor returns the retrying stream client interceptor, for
// server-streaming, client-streaming and bidi methods. It takes the same
// options, per-call options, hooks, budget and policy as the unary one and
// runs the same decision loop (call_attempt.go, call_retry.go): the same
// attempt count, pauses, pushback, deadline awareness, cancellation and
// budget.
//
// Replay. Until the stream commits, every message the application sends (and
// its CloseSend) is kept, by reference, in a replay buffer bounded in bytes
// (DefaultReplayBufferSize per stream, WithReplayBufferSize; optionally a cap
// shared by many streams, WithReplayBufferLimit), and a new attempt is sent
// them again, in order, before anything else. Messages are counted at their
// proto.Size; a message that is not a proto.Message (another codec) cannot be
// sized and commits the stream. The application must not modify a message
// after SendMsg (grpc-go requires it too). grpc-go's own retry buffer, which
// it keeps even with its retries off, is turned off for these streams
// (grpc.MaxRetryRPCBufferSize(0) before the caller's options), so one stream
// holds at most one bounded copy; grpc-go's transparent retry of a stream
// that never reached the server still happens before the first message.
//
// Commit. The stream commits, never retries again and releases the buffer,
// when a response message arrives, when response headers arrive (seen by
// Header, or after a failure: an interceptor cannot watch them arrive, so a
// failed attempt with headers is final and a Trailers-Only one may be
// retried), or when the next message would overflow the buffer. A message the
// application received is never delivered again. A server stream with a
// resume function (WithResume, resume.go) is reopened after a failure past
// its commit with the request that continues it, under the same rules (see
// WithResume).
//
// Decisions happen inside the application's calls, with no goroutine of
// their own: an attempt's failure surfaces on RecvMsg (CloseAndRecv for a
// client stream), which then pauses, opens the next attempt, replays and
// reads on, so the caller sees only the next message or the final status.
// Until the stream commits, SendMsg on an attempt that has died returns nil
// (the message is kept for the next attempt; RecvMsg tells the outcome), and
// a failure to create the stream is retried inside the interceptor.
//
// The per-attempt timeout (perAttemptRecvTimeout, idempotent methods only:
// an idempotency key does not count for a stream, see WithIdempotencyKey)
// has grpc C-core's meaning for streams: it stops at the first response
// header or message. When it fires it cuts the attempt off and retries it if
// a retry can go, by the same rules as for unary calls (the grace of the
// retry's pause, a server slow for every attempt: see
// UnaryClientInterceptor); otherwise the attempt runs on and the stream is
// its.
//
// What the caller sees is one attempt's (the package doc, "What the caller
// sees"): Header returns the headers of the attempt the stream commits to,
// or nil, nil when the call ends without any; Trailer, after RecvMsg
// returned an error, is the final attempt's; the messages are the
// committed attempt's only. Context commits the stream, as grpc-go's
// does: an application that holds the stream's context (to watch it, or to
// read the peer) must not see it cancelled by a later retry, so there is
// none. The interop module runs grpc-go's own
// interop cases through these streams, with failures injected.
//
// Hedging. Streams (server, client and bidi) are hedged until they commit,
// each attempt on a goroutine of its own, as gRFC A6 says: hedges start every hedgingDelay, up to maxAttempts, and race
// until one commits: the first whose response headers arrive (or that ends
// OK without any), or, when the application calls Context (which commits,
// as in grpc-go) or a message overflows the replay buffer, the oldest
// attempt open. The others are cancelled and the stream is then the
// winner's: its messages, headers, trailer and peer, and its failure, which
// is final. Before the commit the rules are the unary call's: a non-fatal
// code sends the next hedge at once (or after a valid pushback), a fatal
// one ends the stream with it, the budget is asked before every hedge, and
// a stream whose attempts all failed ends with the last status; a hedge
// the budget refuses while no attempt is in flight (or beside attempts
// that have all failed since) is a retry, and waits as one in a Gate (see
// UnaryClientInterceptor). Every
// message sent before the commit (and CloseSend) is kept in the replay
// buffer (Replay, above) and sent to every attempt: to those
// open as it is sent, in turn, and to each later hedge when it starts, in
// order, before anything else; so a message waits for the slowest open
// attempt's flow control, as an unhedged stream waits for its one. SendMsg
// returns before any attempt answers; RecvMsg and Header wait for the
// commit. A hedged stream runs one goroutine of its own until it commits
// (hooks hear its hedge events there) and one per attempt until the
// attempt's headers arrive or it ends; none outlives the stream. The
// adaptive delay learns from the winners' times to commit.
//
// The returned streams follow grpc.ClientStream's rules: one goroutine may
// send (SendMsg, CloseSend) while another receives.
func StreamClientInterceptor(opts ...Option) grpc.StreamClientInterceptor {
	k := newCore(opts)
	return func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, callOpts ...grpc.CallOption) (grpc.ClientStream, error) {
		return k.stream(ctx, desc, cc, method, streamer, callOpts)
	}
}

// errSendAfterClose is grpc-go's own answer to a SendMsg after CloseSend.
var errSendAfterClose = status.Error(codes.Internal, "SendMsg called after CloseSend")

func (k *core) stream(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts []grpc.CallOption) (grpc.ClientStream, error) {
	s := &retryStream{desc: desc, cc: cc, method: method, streamer: streamer}
	callCtx, cancel, grpcOpts, run := k.start(ctx, cc, method, opts, &s.c)
	if !run {
		return streamer(callCtx, desc, cc, method, grpcOpts...)
	}
	if err := s.c.admitFirst(callCtx, cc, grpcOpts); err != nil {
		cancel()
		s.c.end(cc, err)
		return nil, err
	}
	s.callCtx, s.cancel = callCtx, cancel
	if s.c.byKey && s.c.perAttempt > 0 {
		// An idempotency key makes a unary call safe to cut off and retry
		// (the server side de-duplicates it), not a stream: server.WithIdempotency
		// runs a keyed stream as it would without the option.
		s.c.perAttempt = 0
		k.noticeNoTimer(ctx, &s.c)
	}
	if s.c.retrying {
		// A resumable server stream (resume.go): its resume function says
		// the request may be sent again.
		if s.res = newResume(s.c.o, method, desc.ServerStreams, desc.ClientStreams); s.res != nil {
			s.c.repeatable = true
		}
	}
	// Hedged until commit (hedgestream.go) when the method may run more
	// than once; otherwise the stream runs once.
	hedged := s.c.hedged != nil && k.hedges(ctx, &s.c, true)
	// Each attempt's options: the file's, then the caller's, so the
	// caller's win, as in grpc-go. The caller's Header, Trailer and Peer
	// holders and OnFinish functions are taken out (callerOutputs.split):
	// grpc would write them when it finishes an attempt, on a goroutine of
	// its own when the context ends, after the stream announced its end.
	// The stream fills them, and runs OnFinish once, in finishStream.
	if s.c.retrying || hedged {
		s.buf.init(s.c.o.replaySize, s.c.o.replayLimit)
		// grpc-go keeps its own copy of every sent message until it commits,
		// even with its retries off (for its transparent retries); stagger's
		// buffer replaces it, so a stream holds one copy, not two. First, so
		// that a caller's own setting wins.
		s.opts = make([]grpc.CallOption, 0, 1+len(s.c.fileOpts)+len(grpcOpts))
		s.opts = append(s.opts, grpc.MaxRetryRPCBufferSize(0))
	} else {
		// One attempt: nothing to keep; the stream is only watched so the
		// budget hears of its success.
		s.committed = true
	}
	if s.opts == nil && len(s.c.fileOpts) == 0 && !carriesOutputs(grpcOpts) {
		s.opts = grpcOpts
	} else {
		s.opts = s.split(append(s.opts, s.c.fileOpts...), grpcOpts, &s.onFinish)
		if len(s.onFinish) > 0 {
			s.watchCaller(s.callCtx)
		}
	}
	if hedged {
		k.hedgeStream(s)
		return s, nil
	}
	timedOut, err := s.open(&s.first)
	if err == nil {
		s.cur = &s.first
		s.watchAbandon()
		return s, nil
	}
	s.cur = &s.first
	if over, final := s.retryAfter(err, nil, false, timedOut); over {
		s.finishStream(final, false)
		return nil, final
	}
	s.watchAbandon()
	return s, nil
}

// streamAttempt is one attempt: its grpc stream and context.
type streamAttempt struct {
	cs     grpc.ClientStream
	ctx    context.Context
	cancel context.CancelFunc
	// timer is the per-attempt timeout, nil when none applies. It stops at
	// the first response header or message (grpc C-core's meaning), which a
	// context deadline cannot do; a header or message that finds it fired
	// belongs to an attempt already cut off and is never delivered.
	timer *streamTimer
	// settled: attemptEnded has judged this attempt (under the stream's
	// endMu); a second report of its end changes nothing.
	settled bool

	// A hedged stream's attempts (hedgestream.go): n is the attempt's
	// number, start when it was sent. watched is closed when the
	// attempt's goroutine is done with its receiving side: its headers
	// arrived, or it ended without any, with endErr (nil: OK), or it never
	// opened. reported: the driver has its event (the driver's alone).
	n        int
	start    time.Time
	watched  chan struct{}
	ended    bool
	endErr   error
	reported bool
}

// recv is RecvMsg on the attempt's grpc stream; for a hedged attempt, once
// its goroutine is done with it: an attempt that goroutine saw end returns
// that end (io.EOF for OK).
func (a *streamAttempt) recv(m any) error {
	if a.watched != nil {
		<-a.watched
		if a.ended {
			if a.endErr == nil {
				return io.EOF
			}
			return a.endErr
		}
	}
	return a.cs.RecvMsg(m)
}

func (a *streamAttempt) end() {
	a.timer.stop()
	a.cancel()
}

// watchHeader stops the per-attempt timer when response headers arrive. It
// runs in its own goroutine, which ends when the headers arrive or the
// attempt's stream ends (its context is cancelled when the attempt ends).
func (a *streamAttempt) watchHeader() {
	if md, _ := a.cs.Header(); md != nil {
		a.timer.stopAnswered(time.Now())
		if a.timer != nil {
			a.timer.served(time.Since(a.timer.start))
		}
	}
}

// retryStream is the grpc.ClientStream the application holds, retried or
// hedged: it runs the attempts one after another, or, for a hedged method,
// races them until one commits (race, hedgestream.go), keeps sent messages
// for replay until it commits, and decides after each attempt ends.
//
// As grpc.ClientStream requires: one goroutine may call SendMsg (and
// CloseSend) while another calls RecvMsg; Header, Trailer and Context may be
// called from either. Retries are driven by RecvMsg (and by the interceptor
// itself when an attempt cannot even start): the pause between attempts and
// the replay run inside that call, with no goroutine of their own. mu guards
// the fields below it and is never held while blocked in grpc.
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
	// of an attempt that ended without headers: grpc-go's RecvMsg is not
	// for two goroutines at once.
	recvMu sync.Mutex
	// The caller's holders and OnFinish, which finishStream fills and
	// runs, and the end (done, final) RecvMsg returns.
	streamEnd
	// endMu makes attemptEnded one at a time: the reader's goroutine and
	// the watch on an abandoned stream (watchAbandon) may both report an
	// attempt's end.
	endMu sync.Mutex

	mu sync.Mutex
	// cur is the attempt that answers SendMsg, Header, Trailer and Context:
	// the running one, then the committed or the last one. During a retry
	// it stays on the ended attempt until the replay is done.
	cur *streamAttempt
	// committed: never retry again (a response header or message arrived,
	// the buffer overflowed, or the call has no retry policy).
	committed bool
	// switching: a retry is between deciding and the end of its replay
	// (no attempt is live for SendMsg).
	switching bool
	// commitNext: a message overflowed the buffer during a switch
	// (replayBuffer.keepBeforeCommit): it is kept past the bound, the next
	// attempt to go live wins, and a failure meanwhile is final.
	commitNext bool
	// ctxCommit: Context was called during a switch; commit to the new
	// attempt once it is open.
	ctxCommit bool
	closeSent bool
	buf       replayBuffer
	// res is a resumable stream's state (resume.go), nil for the others.
	res *resumeState
	// race is a hedged stream's state until it commits (hedgestream.go),
	// nil for the others: hedging is retry with a start timer, and once
	// the race has a winner (cur, committed) the stream runs as any
	// committed one.
	race *hedgeRace
}

// open starts a (with the next attempt number) and its grpc stream. When the
// stream cannot be created, it returns why, and whether the per-attempt
// timer was the cause.
func (s *retryStream) open(a *streamAttempt) (timedOut bool, err error) {
	a.ctx, a.cancel, a.timer = s.c.nextAttempt(s.attemptBase())
	cs, err := s.streamer(a.ctx, s.desc, s.cc, s.method, s.opts...)
	if err != nil {
		err, timedOut = attemptOutcome(s.callCtx, err, s.c.stopTimer(a.timer))
		a.end()
		a.cs = unopened{ctx: a.ctx, err: err}
		return timedOut, err
	}
	a.cs = cs
	if a.timer != nil {
		go a.watchHeader()
	}
	return false, nil
}

// retryAfter runs the shared decision loop from the end of an attempt that
// ended with err (nil: success) until a new attempt is open with the buffer
// replayed on it (over false), or the call is over with final (nil after
// success).
func (s *retryStream) retryAfter(err error, trailer metadata.MD, committed, timedOut bool) (over bool, final error) {
	// last is the attempt that ended last here, nil while it is the one
	// the caller saw end.
	var last *streamAttempt
	for {
		retry, pause := s.c.afterAttempt(s.callCtx, err, trailer, committed, timedOut)
		if !retry {
			return s.over(last, s.c.finish(err))
		}
		if rerr := s.prepareResume(err); rerr != nil {
			return s.over(last, rerr)
		}
		if perr := s.c.pause(s.callCtx, pause, err); perr != nil {
			return s.over(last, perr)
		}
		s.c.resume = false
		a := new(streamAttempt)
		last, trailer = a, nil
		if timedOut, err = s.open(a); err != nil {
			committed = s.overflowing()
			continue
		}
		if err = s.replay(a); err == nil {
			return false, nil
		}
		// grpc refused a message it took before (a local error): the
		// attempt counts, and the loop decides on that error.
		timedOut = false
		committed = s.overflowing()
		a.end()
	}
}

// over ends retryAfter's loop with final; last, when not nil, is the
// attempt that ended last there, whose failure to open or to replay ends
// the call: it becomes the one the caller sees (Header, Trailer and the
// caller's holders, filled in finishStream), not the attempt before it.
func (s *retryStream) over(last *streamAttempt, final error) (bool, error) {
	if last != nil {
		s.mu.Lock()
		s.cur = last
		s.mu.Unlock()
	}
	return true, final
}

// unopened stands for the grpc stream of an attempt that did not open
// (the streamer failed with err): it has no headers, no trailer and no
// messages.
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

func (s *retryStream) overflowing() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.commitNext
}

// replay sends the kept messages, and CloseSend if the application called
// it, on a (replayOn), then makes a the current attempt. Messages the
// application sends meanwhile are kept and sent here too, in order, so
// SendMsg never runs on a concurrently with the replay.
func (s *retryStream) replay(a *streamAttempt) error {
	return replayOn(&s.mu, &s.buf, &s.closeSent, a.cs, nil, func() { s.useLocked(a) })
}

func (s *retryStream) useLocked(a *streamAttempt) {
	s.cur, s.switching = a, false
	if s.commitNext || s.ctxCommit {
		s.commitLocked()
	}
}

// commitLocked ends retrying for the stream and gives the buffer back.
func (s *retryStream) commitLocked() {
	s.committed = true
	s.buf.release()
}

// finishStream ends the stream with final (nil: success). Its callers are
// one at a time (settle's, under endMu, or the stream's opening, before
// anyone else holds the stream). Everything the caller may read after the
// end (OnFinish, the Report, the hooks' EventEnd) is done before done is
// set: a RecvMsg that finds done returns at once, and its caller may read
// the Report then.
//
// abandoned: the caller's context ended with nobody reading (watchAbandon);
// the shown attempt's trailer is not read, as its reader may still be in
// RecvMsg on it.
func (s *retryStream) finishStream(final error, abandoned bool) error {
	s.mu.Lock()
	cs := s.shownLocked()
	s.mu.Unlock()
	final = s.endOnce(&s.mu, &s.c, s.cc, cs, abandoned, final, s.cancel)
	s.mu.Lock()
	s.switching = false
	s.buf.release()
	s.mu.Unlock()
	return final
}

// shownLocked is the grpc stream of the attempt the caller sees (cur), nil
// while there is none (a hedged stream whose attempts race, or that failed
// before any ended). Under mu.
func (s *retryStream) shownLocked() grpc.ClientStream {
	if s.cur == nil {
		return nil
	}
	return s.cur.cs
}

// attemptEnded handles the end of attempt a, whose last operation returned
// err (io.EOF: success): it decides, through the shared loop, and either
// returns the next attempt, replayed, or ends the stream and returns its
// final error.
func (s *retryStream) attemptEnded(a *streamAttempt, err error) (next *streamAttempt, final error) {
	return s.settle(a, err, false)
}

// watchAbandon settles the stream when its caller's context ends first and
// nobody reads the stream to its end: grpc-go lets a caller end a stream by
// cancelling its context alone, and the attempt out then would never reach
// the budget, the breaker or the Gate, whose probe it may hold. The watch
// ends the attempt with the caller's status, without reading its headers or
// trailer (the reader may still be in RecvMsg on it).
func (s *retryStream) watchAbandon() {
	// stopAbandon is written and read under mu: a context already done
	// runs the watch at once on its own goroutine, which may finish the
	// stream (and read stopAbandon) before AfterFunc has returned.
	stop := context.AfterFunc(s.callCtx, func() {
		if s.race != nil {
			// Before the commit the driver settles every attempt
			// itself (callerGone, fail).
			<-s.race.ready
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

// settle is attemptEnded; abandoned says that the caller's context ended
// and the stream's reader may still be using a.
func (s *retryStream) settle(a *streamAttempt, err error, abandoned bool) (next *streamAttempt, final error) {
	s.endMu.Lock()
	defer s.endMu.Unlock()
	if a.settled {
		// Judged already, by the other of the two who may report it.
		s.mu.Lock()
		defer s.mu.Unlock()
		if s.done {
			return nil, s.final
		}
		return s.cur, nil
	}
	a.settled = true
	if err == io.EOF {
		err = nil
	}
	if s.race != nil {
		return nil, s.raceWon(a, err, abandoned)
	}
	// Stop the timer before judging: once it fired, the attempt was cut
	// off, whatever arrived after.
	cutOff := s.c.stopTimer(a.timer)
	s.mu.Lock()
	committed := s.committed || s.commitNext
	if err != nil && !committed && !abandoned {
		s.switching = true
	}
	s.mu.Unlock()
	if abandoned {
		return s.abandon(a, err, committed, cutOff)
	}
	if err != nil && !committed && !cutOff {
		// The attempt has ended, so Header no longer blocks: non-nil means
		// headers arrived before the failure (committed); a Trailers-Only
		// failure has none and may be retried. Headers that came after the
		// timer fired do not count: the timer stops at the first header.
		if md, _ := a.cs.Header(); md != nil {
			committed = true
		}
	}
	if committed && s.resuming(err) {
		committed = false
	}
	var trailer metadata.MD
	if err != nil {
		trailer = a.cs.Trailer()
	}
	err, timedOut := attemptOutcome(s.callCtx, err, cutOff)
	a.end()
	over, final := s.retryAfter(err, trailer, committed, timedOut)
	if over {
		return nil, s.finishStream(final, false)
	}
	s.mu.Lock()
	next = s.cur
	s.mu.Unlock()
	return next, nil
}

// abandon ends the stream on the abandon watch's event: the caller's
// context ended with a, the current attempt, not read to its end. The
// stream ends here, whatever the attempt came to; the attempt is judged
// once all the same (afterAttempt), so the budget, the breaker and the
// hooks hear of it, and that judgement never retries (policy.Decide's
// caller rule: the caller's context is done). Its headers and trailer are
// not read: the reader may still be in RecvMsg on a. endMu is held.
func (s *retryStream) abandon(a *streamAttempt, err error, committed, cutOff bool) (next *streamAttempt, final error) {
	err, timedOut := attemptOutcome(s.callCtx, err, cutOff)
	a.end()
	s.c.afterAttempt(s.callCtx, err, nil, committed, timedOut)
	return nil, s.finishStream(s.c.finish(err), true)
}

// sendOnEnded is what SendMsg returns on a stream that has ended: io.EOF
// (RecvMsg has the status), but nil for a method whose client sends one
// message, as grpc-go does: its generated code returns SendMsg's error from
// the call itself, so an io.EOF there would reach the application in place
// of the stream's status (an already cancelled caller read "EOF", not
// CANCELED).
func sendOnEnded(desc *grpc.StreamDesc) error {
	if !desc.ClientStreams {
		return nil
	}
	return io.EOF
}

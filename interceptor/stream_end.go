package interceptor

import (
	"context"
	"io"
	"sync"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
)

// streamEnd is what finishStream does once before it announces the end:
// the caller's holders and OnFinish functions (callerOutputs.split), and
// the end RecvMsg returns from then on.
type streamEnd struct {
	callerOutputs
	stopWatch func() bool // watchCaller's
	// onFinishRan makes a second runner wait until the first has run the
	// OnFinish functions, so the end is announced after they returned.
	onFinishRan sync.Once
	// done: the application has been given the stream's end, final
	// (io.EOF after success). The stream's mu guards the three.
	done        bool
	final       error
	stopAbandon func() bool
}

// finishStream ends the stream once, with final (nil: success), and
// returns what RecvMsg returns from then on (the first end's when the
// stream had ended already). Everything the caller may read after the end
// (the holders, OnFinish's effects, the Report) is written before done is
// set, so a RecvMsg that finds done may read them. Its callers are one at
// a time (settle and retryAfter, under endMu or at the stream's opening;
// the driver's endRace).
// abandoned: nobody reads the stream (watchAbandon); the shown attempt's
// trailer is not read, as its reader may still be in RecvMsg on it.
func (s *retryStream) finishStream(final error, abandoned bool) error {
	s.mu.Lock()
	done, shown, stop := s.done, s.shownLocked(), s.stopAbandon
	s.mu.Unlock()
	if !done {
		if stop != nil {
			stop()
		}
		s.cancel()
		// A retry admitted and not sent (the caller left in the pause)
		// gives back its admission and its breaker probe.
		s.c.giveBack()
		s.fill(shown, !abandoned)
		s.finishOnce(final)
		s.c.end(s.cc, final)
		if final == nil {
			final = io.EOF
		}
	}
	s.mu.Lock()
	if done {
		final = s.final
	}
	s.done, s.final = true, final
	s.buf.release()
	s.mu.Unlock()
	return final
}

// carriesOutputs says whether opts hold what callerOutputs.split takes.
func carriesOutputs(opts []grpc.CallOption) bool {
	for _, o := range opts {
		switch o.(type) {
		case grpc.HeaderCallOption, grpc.TrailerCallOption, grpc.PeerCallOption, grpc.OnFinishCallOption:
			return true
		}
	}
	return false
}

// fill gives the caller's holders the headers, trailer (unless
// withTrailer is false) and peer of cs, the grpc stream of the attempt the
// caller sees (nil: none, the holders stay empty).
func (o *callerOutputs) fill(cs grpc.ClientStream, withTrailer bool) {
	var header, trailer metadata.MD
	var p peer.Peer
	if cs != nil {
		more := len(o.more) > 0
		if o.callerHeader != nil || more {
			header, _ = cs.Header()
		}
		if withTrailer && (o.callerTrailer != nil || more) {
			trailer = cs.Trailer()
		}
		if o.callerPeer != nil || more {
			if q, ok := peer.FromContext(cs.Context()); ok {
				p = *q
			}
		}
	}
	o.give(header, trailer, &p)
}

// watchCaller runs the caller's OnFinish functions when ctx, the caller's,
// ends before the stream does, as grpc does for a stream the caller
// abandons (grpc would run them once per attempt). The watch never reads
// stopWatch: when ctx has already ended, context.AfterFunc starts it before
// stopWatch is assigned.
func (e *streamEnd) watchCaller(ctx context.Context) {
	e.stopWatch = context.AfterFunc(ctx, func() {
		e.onFinishRan.Do(func() { e.finished(status.FromContextError(ctx.Err()).Err()) })
	})
}

// finishOnce stops the watch and runs the caller's OnFinish functions, the
// first time only (onFinishRan). The stream calls it after watchCaller returned.
func (e *streamEnd) finishOnce(err error) {
	if len(e.onFinish) == 0 {
		return
	}
	e.stopWatch()
	e.onFinishRan.Do(func() { e.finished(err) })
}

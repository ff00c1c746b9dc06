package interceptor

import (
	"io"
	"sync"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
)

// streamEnd is what the stream's end (finishStream) does once before it
// announces the end: the caller's holders and OnFinish functions
// (callerOutputs.split), and the end RecvMsg returns from then on.
type streamEnd struct {
	callerOutputs
	// goroutines counts the stream's own goroutines (the hedge driver, a
	// hedged attempt's watch, a timed attempt's header watch): the end
	// waits for them.
	goroutines sync.WaitGroup
	// done: the application has been given the stream's end, final
	// (io.EOF after success). The stream's mu guards the three.
	done        bool
	final       error
	stopAbandon func() bool
}

// finishStream is the stream's one end, however it ended (an attempt, the
// caller's context, the breaker, a resume refused, the hedge race), with
// final (nil: success); it returns what RecvMsg returns from then on (the
// first end's). It stops the abandon watch, cancels what runs and waits
// for the stream's goroutines, then writes the holders, OnFinish's effects
// and the Report, all before done is set. Its callers are one at a time
// (settle and retryAfter, under endMu or at the opening; the driver of a
// race that failed, whom RecvMsg, Header and the abandon watch wait for).
// abandoned: nobody reads the stream (watchAbandon); the shown attempt's
// trailer is not read, as its reader may still be in RecvMsg on it.
func (s *retryStream) finishStream(final error, abandoned bool) error {
	s.mu.Lock()
	if s.done {
		defer s.mu.Unlock()
		return s.final
	}
	stop, shown := s.stopAbandon, s.shownLocked()
	s.mu.Unlock()
	if stop != nil {
		stop()
	}
	s.cancel()
	s.goroutines.Wait()
	// A retry admitted and not sent (the caller left in the pause)
	// gives back its admission and its breaker probe.
	s.c.giveBack()
	s.fill(shown, !abandoned)
	s.finished(final)
	s.c.end(s.cc, final)
	if final == nil {
		final = io.EOF
	}
	s.mu.Lock()
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

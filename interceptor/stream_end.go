package interceptor

import (
	"io"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
)

// streamEnd is what finishStream does once before it announces the end:
// the caller's holders and OnFinish functions (callerOutputs.split), and
// the end RecvMsg returns from then on.
type streamEnd struct {
	callerOutputs
	onFinishOnce
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
// a time (settle's, under endMu; the driver's fail; the stream's opening).
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
	s.done, s.final, s.switching = true, final, false
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

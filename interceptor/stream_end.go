package interceptor

import (
	"io"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
)

// streamEnd is what a stream does once, at its end (finishStream), before
// it announces it: the caller's Header, Trailer and Peer holders and
// OnFinish functions, taken out of the attempts' options
// (callerOutputs.split), and the end RecvMsg returns from then on.
type streamEnd struct {
	callerOutputs
	onFinishOnce
	// done: the application has been given the stream's end, final
	// (io.EOF after success); stopAbandon stops the watch on an abandoned
	// stream. The stream's mu guards the three.
	done        bool
	final       error
	stopAbandon func() bool
}

// finishStream ends the stream once, with final (nil: success), and
// returns what RecvMsg returns from then on (io.EOF after success; the
// first end's when the stream had ended already). Everything the caller
// may read after the end is written before done is set: the holders filled
// from the attempt the caller sees (shownLocked), OnFinish run, the call's
// end reported (call.end: the Report, EventEnd, the budget's and the Gate's
// settling); a RecvMsg that finds done returns at once, and its caller may
// read the Report then. Its callers are one at a time (settle's, under
// endMu; the driver's fail; the stream's opening).
//
// abandoned: the caller's context ended with nobody reading (watchAbandon);
// the shown attempt's trailer is not read, as its reader may still be in
// RecvMsg on it.
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

// carriesOutputs says whether opts hold a caller's Header, Trailer or Peer
// holder or an OnFinish function, which a stream takes out of its
// attempts' options (callerOutputs.split) and fills or runs itself.
func carriesOutputs(opts []grpc.CallOption) bool {
	for _, o := range opts {
		switch o.(type) {
		case grpc.HeaderCallOption, grpc.TrailerCallOption, grpc.PeerCallOption, grpc.OnFinishCallOption:
			return true
		}
	}
	return false
}

// fill gives the caller's holders the headers, trailer and peer of cs, the
// grpc stream of the attempt the caller sees, before the stream announces
// its end; cs nil (no attempt to show) leaves them empty. withTrailer false
// leaves the trailer empty: the stream was abandoned, and its reader may
// still be in RecvMsg on cs (grpc's Trailer is for after RecvMsg failed).
// Header and Context may be called beside RecvMsg.
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

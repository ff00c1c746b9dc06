package interceptor

import (
	"context"
	"io"
	"sync"

	"google.golang.org/grpc"
	"google.golang.org/grpc/peer"
)

// streamEnd is what a stream, retried or hedged, does once, at its end,
// before it announces it (set done, which RecvMsg returns at once after): the
// caller's Header, Trailer and Peer holders and OnFinish functions, taken
// out of the attempts' options (callerOutputs.split), are filled from the
// attempt the caller sees and run, then the call's end is reported
// (call.end: the Report, the hooks' EventEnd, the budget's and the Gate's
// settling). A caller that reads the stream's status and then its Report
// or holders reads what was written before.
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

// endOnce ends the stream once, with err (nil: success), shown the grpc
// stream of the attempt the caller sees (nil: none opened): it stops the
// abandon watch, cancels the call (cancel), then finishes (finish) and
// sets done last. It returns what RecvMsg returns from then on, the first
// end's when the stream had ended already. mu is the stream's; the
// callers are one at a time.
func (e *streamEnd) endOnce(mu *sync.Mutex, c *call, cc *grpc.ClientConn, shown grpc.ClientStream, abandoned bool, err error, cancel context.CancelFunc) error {
	mu.Lock()
	done, final, stop := e.done, e.final, e.stopAbandon
	mu.Unlock()
	if done {
		return final
	}
	if stop != nil {
		stop()
	}
	cancel()
	final = e.finish(c, cc, shown, abandoned, err)
	mu.Lock()
	e.done, e.final = true, final
	mu.Unlock()
	return final
}

// finish ends the call with err (nil: success), shown the grpc stream of
// the attempt the caller sees (nil: none opened), whose context must be
// done or whose end must have been read. abandoned: the caller's context
// ended with nobody reading the stream to its end (its trailer is not
// read). It returns what RecvMsg returns from then on: err, or io.EOF
// after success. Its callers are one at a time.
func (e *streamEnd) finish(c *call, cc *grpc.ClientConn, shown grpc.ClientStream, abandoned bool, err error) error {
	e.fill(shown, !abandoned)
	e.finishOnce(err)
	c.end(cc, err)
	if err == nil {
		return io.EOF
	}
	return err
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
	if o.callerHeader != nil {
		*o.callerHeader = nil
		if cs != nil {
			*o.callerHeader, _ = cs.Header()
		}
	}
	if o.callerTrailer != nil {
		*o.callerTrailer = nil
		if cs != nil && withTrailer {
			*o.callerTrailer = cs.Trailer()
		}
	}
	if o.callerPeer != nil {
		*o.callerPeer = peer.Peer{}
		if cs != nil {
			if p, ok := peer.FromContext(cs.Context()); ok {
				*o.callerPeer = *p
			}
		}
	}
}

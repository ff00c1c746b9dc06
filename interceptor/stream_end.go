package interceptor

import (
	"google.golang.org/grpc"
	"google.golang.org/grpc/peer"
)

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

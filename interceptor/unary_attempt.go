package interceptor

import (
	"sync"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
)

// unaryAttempt holds what each attempt hands to grpc to learn of headers
// and trailers: the addresses escape into grpc, and the success path must
// not allocate, so each method keeps one (methodInfo.attempt) and a pool
// serves the calls that find it held. own holds grpc.Header and
// grpc.Trailer pointing at header and trailer, built once per value, so
// that a call without options of its own passes own as is.
//
// A call that may retry gives the caller one attempt's answer and one end,
// as grpc-go's own retry does: prepare takes the caller's grpc.OnFinish
// functions out of the attempts' options (grpc would run them once per
// attempt; finished runs them once, with the call's error), and each retry
// empties the caller's grpc.Peer holder before it goes (retrying: grpc
// writes it only for an attempt that opened a stream, so the caller sees
// the last attempt's peer, or none).
type unaryAttempt struct {
	header, trailer metadata.MD
	own             [2]grpc.CallOption
	opts            []grpc.CallOption
	onFinish        []func(error)
}

var unaryAttempts = sync.Pool{New: func() any {
	ua := new(unaryAttempt)
	ua.init()
	return ua
}}

// takeAttempt returns a unaryAttempt for a call of mi's method that may
// retry: the method's own (mi.attempt) when no other call holds it, else
// the pool's. giveAttempt gives it back.
func (mi *methodInfo) takeAttempt() *unaryAttempt {
	if ua := mi.ownAttempt(); ua != nil {
		return ua
	}
	return unaryAttempts.Get().(*unaryAttempt)
}

// ownAttempt is takeAttempt when no other call holds mi.attempt, else nil;
// it inlines, takeAttempt does not.
func (mi *methodInfo) ownAttempt() *unaryAttempt {
	if mi.attemptHeld.Load() == 0 && mi.attemptHeld.CompareAndSwap(0, 1) {
		return &mi.attempt
	}
	return nil
}

// giveAttempt gives back ua, which takeAttempt returned, holding nothing
// of the call.
func (mi *methodInfo) giveAttempt(ua *unaryAttempt) {
	if mi.giveOwnClean(ua) {
		return
	}
	ua.reset()
	if ua != &mi.attempt {
		unaryAttempts.Put(ua)
		return
	}
	mi.attemptHeld.Store(0)
}

// giveOwnClean is giveAttempt for mi.attempt when it holds nothing of the
// call (no caller's options, no header or trailer): it reports whether ua
// was that, and it inlines.
func (mi *methodInfo) giveOwnClean(ua *unaryAttempt) bool {
	if ua != &mi.attempt || ua.header != nil || ua.trailer != nil || len(ua.opts) > 0 {
		return false
	}
	mi.attemptHeld.Store(0)
	return true
}

// reset makes ua hold nothing of the call that used it.
func (ua *unaryAttempt) reset() {
	clear(ua.opts)
	ua.opts = ua.opts[:0]
	ua.header, ua.trailer = nil, nil
	if len(ua.onFinish) > 0 {
		clear(ua.onFinish)
		ua.onFinish = ua.onFinish[:0]
	}
}

// finished runs the caller's grpc.OnFinish functions that prepare took out
// of the attempts' options, once, with the call's error err.
func (ua *unaryAttempt) finished(err error) {
	for _, f := range ua.onFinish {
		f(err)
	}
}

// retrying empties the caller's Peer holder among attemptOpts before
// attempt n goes, for n > 1: grpc writes it only when the attempt opens a
// stream, and one that does not must not show the attempt before's. Found
// here, on a retry, not in prepare: the success path does not look for it.
func retrying(n int, attemptOpts []grpc.CallOption) {
	if n < 2 {
		return
	}
	for _, opt := range attemptOpts {
		if p, ok := opt.(grpc.PeerCallOption); ok {
			*p.PeerAddr = peer.Peer{}
		}
	}
}

// init makes ua ready to use: own points at its header and
// trailer.
func (ua *unaryAttempt) init() {
	ua.own = [2]grpc.CallOption{grpc.Header(&ua.header), grpc.Trailer(&ua.trailer)}
}

// prepare returns the options every attempt of a call that may retry
// passes: the file's (fileOpts), then the caller's (grpcOpts), then ua's
// Header and Trailer unless the caller passed its own; and where grpc
// writes each attempt's header and trailer.
//
// Why every attempt pays for them, even one that succeeds: the header is
// the only sign, in grpc-go's API, that an attempt was committed (a
// Trailers-Only failure leaves it nil), and the trailer carries
// grpc-retry-pushback-ms; neither can be asked for after the attempt,
// only before, and grpc's HeaderCallOption and TrailerCallOption copy the
// stream's metadata (metadata.MD.Copy) whatever the outcome. A
// CallOption with methods of its own cannot be written outside grpc
// (unexported methods), OnFinish hears only the error, and a
// stats.Handler's InHeader copies the header too and needs a dial
// option. So a successful call over a real connection costs the copies
// of its header and trailer: with a grpc-go server, 3 and 1 allocations.
func (ua *unaryAttempt) prepare(fileOpts, grpcOpts []grpc.CallOption) (attemptOpts []grpc.CallOption, headerAddr, trailerAddr *metadata.MD) {
	// The caller's own Header and Trailer options serve when it passed
	// them (grpc fills them per attempt, so the caller ends with the last
	// attempt's).
	headerAddr, trailerAddr = &ua.header, &ua.trailer
	finishing := false
	for _, opt := range grpcOpts {
		switch o := opt.(type) {
		case grpc.HeaderCallOption:
			headerAddr = o.HeaderAddr
		case grpc.TrailerCallOption:
			trailerAddr = o.TrailerAddr
		case grpc.OnFinishCallOption:
			finishing = true
		}
	}
	if len(fileOpts)+len(grpcOpts) == 0 {
		return ua.own[:], headerAddr, trailerAddr
	}
	ua.opts = append(ua.opts, fileOpts...)
	if !finishing {
		ua.opts = append(ua.opts, grpcOpts...)
	} else {
		for _, opt := range grpcOpts {
			if f, ok := opt.(grpc.OnFinishCallOption); ok {
				ua.onFinish = append(ua.onFinish, f.OnFinish)
			} else {
				ua.opts = append(ua.opts, opt)
			}
		}
	}
	if headerAddr == &ua.header {
		ua.opts = append(ua.opts, ua.own[0])
	}
	if trailerAddr == &ua.trailer {
		ua.opts = append(ua.opts, ua.own[1])
	}
	return ua.opts, headerAddr, trailerAddr
}

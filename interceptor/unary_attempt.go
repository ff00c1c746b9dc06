package interceptor

import (
	"sync"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
)

// unaryAttempt holds what each attempt hands grpc to learn of headers and
// trailers: the addresses escape into grpc, and the success path must not
// allocate, so each method keeps one (methodInfo.attempt) and a pool serves
// the calls that find it held. own holds grpc.Header and grpc.Trailer,
// built once. A call that may retry gives the caller one attempt's answer
// and one end, as grpc-go's retry does: prepare takes the caller's
// grpc.OnFinish out of the attempts' options (finished runs them once), and
// each retry empties the caller's grpc.Peer holder (retrying).
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

// ownAttempt returns the method's own unaryAttempt when no other call
// holds it (else nil: take the pool's); giveAttempt gives it back.
func (mi *methodInfo) ownAttempt() *unaryAttempt {
	if mi.attemptHeld.Load() == 0 && mi.attemptHeld.CompareAndSwap(0, 1) {
		return &mi.attempt
	}
	return nil
}

// giveAttempt gives back ua, holding nothing of the call.
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

// giveOwnClean is giveAttempt for a clean mi.attempt, and reports whether
// ua was one; it inlines.
func (mi *methodInfo) giveOwnClean(ua *unaryAttempt) bool {
	if ua != &mi.attempt || ua.header != nil || ua.trailer != nil || len(ua.opts) > 0 {
		return false
	}
	mi.attemptHeld.Store(0)
	return true
}

func (ua *unaryAttempt) reset() {
	clear(ua.opts)
	ua.opts = ua.opts[:0]
	ua.header, ua.trailer = nil, nil
	if len(ua.onFinish) > 0 {
		clear(ua.onFinish)
		ua.onFinish = ua.onFinish[:0]
	}
}

// finished runs the caller's OnFinish functions once, with the call's
// error.
func (ua *unaryAttempt) finished(err error) { runOnFinish(ua.onFinish, err) }

// runOnFinish runs the caller's grpc.OnFinish functions fs with err.
func runOnFinish(fs []func(error), err error) {
	for _, f := range fs {
		f(err)
	}
}

// retrying empties the caller's Peer holder before attempt n > 1 goes: grpc
// writes it only for an attempt that opens a stream. Looked for on a retry
// only, not on the success path.
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

func (ua *unaryAttempt) init() {
	ua.own = [2]grpc.CallOption{grpc.Header(&ua.header), grpc.Trailer(&ua.trailer)}
}

// prepare returns the options every attempt of a call that may retry
// passes: the file's, the caller's, then ua's Header and Trailer unless the
// caller passed its own; and where grpc writes them. Every attempt pays for
// them: the header is the only sign in grpc-go's API that an attempt
// committed, the trailer carries the pushback, and neither can be asked
// for after the attempt (a stats.Handler copies them too, and needs a
// dial option).
func (ua *unaryAttempt) prepare(fileOpts, grpcOpts []grpc.CallOption) (attemptOpts []grpc.CallOption, headerAddr, trailerAddr *metadata.MD) {
	// The caller's own Header and Trailer serve when it passed them.
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

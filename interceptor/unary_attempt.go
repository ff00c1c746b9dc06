package interceptor

import (
	"sync"

	"google.golang.org/grpc"
	"google.golang.org/grpc/peer"
)

// unaryAttempt holds what each inline attempt hands grpc to learn of
// headers, trailers and the peer: the addresses escape into grpc, and the
// success path must not allocate, so each method keeps one
// (methodInfo.attempt) and a pool serves the calls that find it held. own
// is grpc.Header and grpc.Trailer, built once. The caller's holders and
// OnFinish (callerOutputs) get the last attempt's (finished).
type unaryAttempt struct {
	attemptMeta
	own [2]grpc.CallOption
	callerOutputs
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

// giveOwnClean is giveAttempt for a clean mi.attempt (reports whether ua
// was one); it inlines.
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
	ua.header, ua.trailer, ua.peer = nil, nil, peer.Peer{}
	clear(ua.onFinish)
	ua.callerOutputs = callerOutputs{onFinish: ua.onFinish[:0]}
}

// finished gives the caller the last attempt's headers, trailer and peer,
// then runs its OnFinish functions once, with the call's error.
func (ua *unaryAttempt) finished(err error) {
	ua.give(ua.header, ua.trailer, &ua.peer)
	ua.callerOutputs.finished(err)
}

func (ua *unaryAttempt) init() {
	ua.holders(ua.own[:0], false) // in place: own has room for both
}

// prepare returns the options of every attempt of a call that may retry:
// the file's, the caller's but its holders and OnFinish, then ua's own.
func (ua *unaryAttempt) prepare(fileOpts, grpcOpts []grpc.CallOption) []grpc.CallOption {
	if len(fileOpts)+len(grpcOpts) == 0 {
		return ua.own[:]
	}
	ua.opts = ua.holders(ua.split(append(ua.opts, fileOpts...), grpcOpts), ua.callerPeer != nil)
	return ua.opts
}

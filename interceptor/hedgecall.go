package interceptor

import (
	"context"
	"sync"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"

	"github.com/stagger-go/stagger/internal/fence"
)

// attemptOutputs is what grpc writes for one attempt on a goroutine: its
// reply (the first attempt's is the caller's; a later one's its own) and
// its attemptMeta.
type attemptOutputs struct {
	reply any
	attemptMeta
}

// attemptMeta is the header, trailer and peer grpc writes for one attempt
// through opts. The caller's holders get one attempt's (unaryLoop.adopt;
// inline, the last: unaryAttempt.finished).
type attemptMeta struct {
	header, trailer metadata.MD
	peer            peer.Peer
	opts            []grpc.CallOption
}

// clean empties out's holders before an attempt (the peer when peerToo):
// grpc writes them only for an attempt that got a stream.
func (out *attemptMeta) clean(peerToo bool) {
	out.header, out.trailer = nil, nil
	if peerToo {
		out.peer = peer.Peer{}
	}
}

// hedgeCall is what a loop's attempts on goroutines share. Pooled: a
// hedged call that wins at once costs little more than another.
type hedgeCall struct {
	// results has room for hedgeResultsRoom events at most (none one at a
	// time): a goroutine that finds it full waits; the loop receives every
	// attempt's end before it returns.
	results chan unaryEvent
	first   attemptOutputs
	inv     invocation

	// The caller's outputs, taken out of the attempts' options.
	base []grpc.CallOption
	callerOutputs
}

var hedgeCalls = sync.Pool{New: func() any { return new(hedgeCall) }}

// putHedgeCall returns hc to the pool once every attempt has ended.
func putHedgeCall(hc *hedgeCall) {
	clear(hc.first.opts)
	clear(hc.base)
	opts, base := hc.first.opts[:0], hc.base[:0]
	*hc = hedgeCall{base: base}
	hc.first.opts = opts
	hedgeCalls.Put(hc)
}

// callerOutputs are the caller's Header, Trailer and Peer holders and
// OnFinish functions, taken out of the options of a call that may send
// more than one attempt (unaryAttempt, hedgeCall, a stream's streamEnd):
// the holders get the attempt the caller sees, and OnFinish runs once.
type callerOutputs struct {
	callerHeader, callerTrailer *metadata.MD
	callerPeer                  *peer.Peer
	more                        []grpc.CallOption // a second holder of a kind: grpc fills every one
	onFinish                    []func(error)
}

// split moves the caller's holders and OnFinish functions into o, and
// appends every other option to base.
func (o *callerOutputs) split(base, opts []grpc.CallOption) []grpc.CallOption {
	for _, opt := range opts {
		switch v := opt.(type) {
		case grpc.HeaderCallOption:
			hold(o, &o.callerHeader, v.HeaderAddr, opt)
		case grpc.TrailerCallOption:
			hold(o, &o.callerTrailer, v.TrailerAddr, opt)
		case grpc.PeerCallOption:
			hold(o, &o.callerPeer, v.PeerAddr, opt)
		case grpc.OnFinishCallOption:
			o.onFinish = append(o.onFinish, v.OnFinish)
		default:
			base = append(base, opt)
		}
	}
	return base
}

// holders appends to opts the options through which grpc writes m's
// header and trailer, and its peer when peerToo (the caller asked for one).
func (m *attemptMeta) holders(opts []grpc.CallOption, peerToo bool) []grpc.CallOption {
	opts = append(opts, grpc.Header(&m.header), grpc.Trailer(&m.trailer))
	if peerToo {
		opts = append(opts, grpc.Peer(&m.peer))
	}
	return opts
}

// invocation is what every attempt of a unary call passes its invoker but
// the reply and the options; attempts on goroutines read a copy
// (hedgeCall.inv): the loop lives on the caller's stack.
type invocation struct {
	method  string
	req     any
	cc      *grpc.ClientConn
	invoker grpc.UnaryInvoker
}

// invoke runs one attempt of the call into reply, with opts.
func (v *invocation) invoke(ctx context.Context, reply any, opts []grpc.CallOption) error {
	return v.invoker(ctx, v.method, v.req, reply, v.cc, opts...)
}

// give fills the caller's holders with one attempt's.
func (o *callerOutputs) give(header, trailer metadata.MD, p *peer.Peer) {
	if o.callerHeader != nil {
		*o.callerHeader = header
	}
	if o.callerTrailer != nil {
		*o.callerTrailer = trailer
	}
	if o.callerPeer != nil {
		*o.callerPeer = *p
	}
	for _, opt := range o.more {
		switch v := opt.(type) {
		case grpc.HeaderCallOption:
			*v.HeaderAddr = header
		case grpc.TrailerCallOption:
			*v.TrailerAddr = trailer
		case grpc.PeerCallOption:
			*v.PeerAddr = *p
		}
	}
}

// hold keeps the caller's holder addr in *first, or in more after one.
func hold[T any](o *callerOutputs, first **T, addr *T, opt grpc.CallOption) {
	if *first == nil {
		*first = addr
		return
	}
	o.more = append(o.more, opt)
}

// finished runs the caller's OnFinish functions with the call's error err.
func (o *callerOutputs) finished(err error) {
	for _, f := range o.onFinish {
		fence.Run(fence.OnFinish, func() { f(err) })
	}
}

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

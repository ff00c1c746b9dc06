package interceptor

import (
	"sync"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/protobuf/proto"
)

// The attempts of a unary call whose loop runs them on goroutines
// (unary_loop.go) and what the caller sees of them: one attempt's reply,
// headers, trailer and peer.

// hedgeOutputs is what grpc writes for one attempt. The first attempt writes
// into the caller's own reply (nothing to copy when it wins, the common
// case), every hedge into its own; every attempt writes its headers,
// trailer and peer into holders of its own. The caller's reply and holders
// are filled from one attempt only, after every other attempt has ended:
// the winner's (adopt), or the one whose failure is the call's (adoptMeta).
type hedgeOutputs struct {
	reply           any
	header, trailer metadata.MD
	peer            peer.Peer
	headerAddr      *metadata.MD
	trailerAddr     *metadata.MD
	opts            []grpc.CallOption
}

// hedgeCall is one hedged call's shared state. Pooled: a hedged call that
// wins on its first attempt should cost little more than an unhedged one.
type hedgeCall struct {
	// results has room for hedgeResultsRoom results (fewer when the policy
	// allows fewer attempts, none when they go one at a time), so that
	// memory per call does not grow with maxAttempts: an attempt goroutine
	// that finds it full waits, and the call's goroutine receives every
	// attempt's result before it returns (drain), so none waits for ever.
	results chan unaryEvent
	first   hedgeOutputs

	method  string
	req     any
	cc      *grpc.ClientConn
	invoker grpc.UnaryInvoker

	// The caller's per-call outputs, taken out of the attempts' options.
	base []grpc.CallOption
	callerOutputs
	onFinish []func(error)
}

var hedgeCalls = sync.Pool{New: func() any { return new(hedgeCall) }}

// getHedgeCall returns a hedgeCall for a call that runs at most
// maxAttempts attempts at once.
func getHedgeCall(maxAttempts int) *hedgeCall {
	hc := hedgeCalls.Get().(*hedgeCall)
	// Not pooled: a channel belongs to the testing/synctest bubble that made
	// it, and a pooled one would cross bubbles. One attempt at a time
	// needs no room: its loop waits for its end (and an unbuffered
	// channel is one allocation, where a buffer of events is a second).
	room := min(maxAttempts, hedgeResultsRoom)
	if maxAttempts == 1 {
		room = 0
	}
	hc.results = make(chan unaryEvent, room)
	return hc
}

// putHedgeCall returns hc to the pool. Every attempt has sent its result.
func putHedgeCall(hc *hedgeCall) {
	clear(hc.first.opts)
	clear(hc.base)
	opts, base := hc.first.opts[:0], hc.base[:0]
	*hc = hedgeCall{base: base}
	hc.first.opts = opts
	hedgeCalls.Put(hc)
}

// callerOutputs are the caller's Header, Trailer and Peer holders, taken
// out of a hedged call's options (unary or stream): each attempt gets
// holders of its own, and the call fills the caller's from the attempt
// whose outcome it returns.
type callerOutputs struct {
	callerHeader, callerTrailer *metadata.MD
	callerPeer                  *peer.Peer
}

// split takes the caller's Header, Trailer and Peer options out of opts
// into o, and its OnFinish functions into onFinish (the call runs them
// once); it appends every other option to base and returns it.
func (o *callerOutputs) split(base, opts []grpc.CallOption, onFinish *[]func(error)) []grpc.CallOption {
	for _, opt := range opts {
		switch v := opt.(type) {
		case grpc.HeaderCallOption:
			o.callerHeader = v.HeaderAddr
		case grpc.TrailerCallOption:
			o.callerTrailer = v.TrailerAddr
		case grpc.PeerCallOption:
			o.callerPeer = v.PeerAddr
		case grpc.OnFinishCallOption:
			*onFinish = append(*onFinish, v.OnFinish)
		default:
			base = append(base, opt)
		}
	}
	return base
}

// prepare sets out's options: the call's, and holders of out's own for its
// headers, trailer and peer (the peer only when the caller asked for it).
func (hc *hedgeCall) prepare(out *hedgeOutputs) {
	// grpc writes the holders only when the attempt got a stream; a stale
	// value from an attempt before must not count as headers.
	out.header, out.trailer, out.peer = nil, nil, peer.Peer{}
	out.headerAddr, out.trailerAddr = &out.header, &out.trailer
	out.opts = append(out.opts[:0], hc.base...)
	out.opts = append(out.opts, grpc.Header(out.headerAddr), grpc.Trailer(out.trailerAddr))
	if hc.callerPeer != nil {
		out.opts = append(out.opts, grpc.Peer(&out.peer))
	}
}

// adopt copies the winner's outputs into the caller's reply and holders.
// Every attempt has ended: nothing writes them any more.
func (hc *hedgeCall) adopt(reply any, out *hedgeOutputs) {
	if out != &hc.first {
		proto.Reset(reply.(proto.Message))
		proto.Merge(reply.(proto.Message), out.reply.(proto.Message))
	}
	hc.adoptMeta(out)
}

// adoptMeta gives the caller the headers, trailer and peer of out, the
// attempt whose outcome is the call's, and none of another's; out nil (no
// attempt ended) leaves them empty. Every attempt has ended.
func (hc *hedgeCall) adoptMeta(out *hedgeOutputs) {
	if out == nil {
		out = &hedgeOutputs{}
	}
	if hc.callerHeader != nil {
		*hc.callerHeader = out.header
	}
	if hc.callerTrailer != nil {
		*hc.callerTrailer = out.trailer
	}
	if hc.callerPeer != nil {
		*hc.callerPeer = out.peer
	}
}

func (hc *hedgeCall) finished(err error) {
	for _, f := range hc.onFinish {
		f(err)
	}
}

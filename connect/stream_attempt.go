package staggerconnect

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"sync"

	"connectrpc.com/connect"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/emptypb"
)

// attemptStream is one attempt's Connect stream as the engine's
// grpc.ClientStream.
type attemptStream struct {
	r   *retryConn
	ctx context.Context
	// conn is the attempt's Connect stream, replaced only by reopen, which
	// holds recvMu, sendMu and connMu: each holder reads it safely, and so
	// does a reader after the attempt's Header or end.
	conn connect.StreamingClientConn
	w    wire

	sendOnce sync.Once
	sent     chan struct{}

	// sendMu serializes the attempt's sending side (Send, CloseRequest)
	// and reopen, which sends from its receiving side. The engine sends on
	// the attempts of a hedged stream at once: each has its own.
	sendMu sync.Mutex
	// kept are the messages sent, and closeSent whether CloseRequest was,
	// while the request had not left the client: reopen sends them again.
	// Both are guarded by sendMu.
	kept      []any
	closeSent bool

	// connMu guards conn's replacement against its closing: respClosed,
	// the attempt's response was closed, and no reopen may follow.
	connMu     sync.Mutex
	respClosed bool

	// recvMu serializes the receiving side (Receive, and Header's look
	// ahead at the first message).
	recvMu sync.Mutex
	// looked: Header looked ahead; ahead is the first message it
	// received (nil: the stream ended, with aheadErr).
	looked   bool
	ahead    proto.Message
	aheadErr error
	gotMsg   bool
	// ended: the attempt ended with end (nil: success); header and trailer
	// are its metadata then.
	ended           bool
	end             error
	header, trailer metadata.MD
	closeOnce       sync.Once
}

// closeRequest closes the request of a client or bidi stream's attempt
// whose context ended, if it sent one. The engine drops such an attempt
// (a hedge that lost, or that was replaying when the stream committed; one
// still in the race when the stream failed) with its request open, and the
// application's CloseRequest reaches only the attempt that goes on: net/http's
// HTTP/1.1 transport reads a streaming request's body to its end before a
// cancelled round trip returns, so the round trip, and the connection's
// read and write loops, waited for good. (A server stream's request is
// whole once sent.)
func (a *attemptStream) closeRequest() {
	select {
	case <-a.sent:
	default:
		return // nothing sent: connect-go has no request to close
	}
	a.sendMu.Lock()
	defer a.sendMu.Unlock()
	a.connMu.Lock()
	c := a.conn
	a.connMu.Unlock()
	_ = c.CloseRequest()
}

// hasEnded reports whether the attempt's response has ended.
func (a *attemptStream) hasEnded() bool {
	a.recvMu.Lock()
	defer a.recvMu.Unlock()
	return a.ended
}

// begin sends the request headers' additions, once, before the attempt's
// first send: the application's header and the engine's outgoing metadata
// (criticality, idempotency key, grpc-previous-rpc-attempts).
func (a *attemptStream) begin() {
	a.sendOnce.Do(func() {
		a.addHeaders(a.conn.RequestHeader())
		close(a.sent)
	})
}

// addHeaders adds the application's header and the engine's outgoing
// metadata to h, a request's header.
func (a *attemptStream) addHeaders(h http.Header) {
	for k, vs := range a.r.header {
		h[k] = append(h[k], vs...)
	}
	if md, ok := metadata.FromOutgoingContext(a.ctx); ok {
		addHeaders(h, md)
	}
}

func (a *attemptStream) SendMsg(m any) error {
	a.begin()
	a.sendMu.Lock()
	defer a.sendMu.Unlock()
	a.keep(m)
	return a.sendErr(a.send(a.conn, m))
}

func (a *attemptStream) CloseSend() error {
	a.begin()
	a.sendMu.Lock()
	defer a.sendMu.Unlock()
	a.closeSent = true
	return a.sendErr(a.conn.CloseRequest())
}

// send sends m on conn, one of the attempt's streams. A client or bidi
// stream's Send writes to its own request body (connect-go sends the
// request from a goroutine of its own). A server stream's Send sends its request
// and waits for the response headers, and on the way writes the caller's
// connect.Request (its HTTP method), the same for every attempt: the
// attempts take turns (handoff) until the transport has the request (the
// trace's GetConn), or until Send returns, and never hold the turn while
// they wait for their server, so a hedge goes while the first attempt
// waits (a turn held through Send held the hedges back until the first
// attempt's server answered).
func (a *attemptStream) send(conn connect.StreamingClientConn, m any) error {
	if a.r.desc.ClientStreams {
		return conn.Send(m)
	}
	defer a.w.takeTurn(&a.r.handoff)()
	return conn.Send(m)
}

// sendErr returns a send's error as the engine's: a failure of an attempt
// whose context ended (a per-attempt timer, a hedge that lost) in the
// middle of connect-go's Send is io.EOF, as grpc-go's SendMsg says of a
// stream that ended: its status is RecvMsg's, not a message the transport
// refused, which ends the call.
func (a *attemptStream) sendErr(err error) error {
	if err != nil && a.ctx.Err() != nil {
		return io.EOF
	}
	return attemptErr(err)
}

// keep keeps m for reopen while the request has not left the client; once
// it has, nothing is kept (the engine's replay buffer has the messages
// until the stream commits).
func (a *attemptStream) keep(m any) {
	if a.w.wrote.Load() || a.r.transparent.Load() {
		a.kept = nil
		return
	}
	a.kept = append(a.kept, m)
}

// receive receives the next message into m from the attempt's stream. When
// the stream failed before its request left the client (wire.unsent), it
// is opened again, once per call (reopen), and receives from there: as
// grpc-go retries a stream that never reached the server, transparently,
// without counting an attempt. Without reopen, a failure connect-go coded
// CANCELED would end a hedged stream as a fatal answer that no server gave.
func (a *attemptStream) receive(m any) error {
	err := a.conn.Receive(m)
	if err != nil && !errors.Is(err, io.EOF) && a.reopen(err) {
		err = a.conn.Receive(m)
	}
	return err
}

// reopen replaces the attempt's stream, which failed with err before its
// request left the client, with a new one down the rest of the chain,
// and sends on it what was sent on the old one. The caller holds recvMu.
// It reports whether it did: not when err is another failure, the call
// reopened once already, or the response was closed.
func (a *attemptStream) reopen(err error) bool {
	if !a.w.unsent(a.ctx, fromConnect(err)) || !a.r.transparent.CompareAndSwap(false, true) {
		return false
	}
	a.begin()
	a.sendMu.Lock()
	defer a.sendMu.Unlock()
	next := a.r.next(a.w.context(a.ctx), a.r.spec)
	a.connMu.Lock()
	if a.respClosed {
		a.connMu.Unlock()
		return false
	}
	old := a.conn
	a.conn = next
	a.connMu.Unlock()
	_ = old.CloseResponse()
	a.addHeaders(next.RequestHeader())
	kept := a.kept
	a.kept = nil
	for _, m := range kept {
		if err := a.send(next, m); err != nil {
			// The new stream's status is Receive's.
			return true
		}
	}
	if a.closeSent {
		_ = next.CloseRequest()
	}
	return true
}

func (a *attemptStream) Context() context.Context { return a.ctx }

// RecvMsg receives the next message (m nil: only the stream's end, as the
// engine asks of an attempt without headers). For a method whose server
// sends one message it also reads the end, as grpc-go does.
func (a *attemptStream) RecvMsg(m any) error {
	a.recvMu.Lock()
	defer a.recvMu.Unlock()
	if a.ended {
		return a.end
	}
	var err error
	switch {
	case a.looked && a.ahead != nil && a.ctx.Err() != nil:
		// The attempt's context ended (the caller cancelled, its deadline
		// passed) before anyone asked for the message Header looked ahead
		// at: connect-go's own stream reads a message only when asked, and
		// fails then, so the caller gets that failure, not the message.
		a.ahead, a.looked = nil, false
		return a.finish(contextErr(a.ctx.Err()))
	case a.looked && a.ahead != nil:
		if pm, ok := m.(proto.Message); ok {
			proto.Reset(pm)
			proto.Merge(pm, a.ahead)
		}
		// Given back: the next message comes from the conn.
		a.ahead, a.looked = nil, false
	case a.looked:
		return a.finish(a.aheadErr)
	default:
		if m == nil {
			m = a.scratch()
		}
		err = a.receive(m)
	}
	if err != nil {
		return a.finish(err)
	}
	a.gotMsg = true
	if a.r.desc.ServerStreams {
		return nil
	}
	if err := a.conn.Receive(a.scratch()); err == nil {
		return a.finish(connect.NewError(connect.CodeUnimplemented, errors.New("staggerconnect: a unary response stream sent more than one message")))
	} else if !errors.Is(err, io.EOF) {
		return a.finish(err)
	}
	a.finish(io.EOF)
	return nil
}

// contextErr is connect-go's error for a stream read after its context
// ended with err.
func contextErr(err error) error {
	if errors.Is(err, context.DeadlineExceeded) {
		return connect.NewError(connect.CodeDeadlineExceeded, err)
	}
	return connect.NewError(connect.CodeCanceled, err)
}

// scratch is a message to receive into and drop.
func (a *attemptStream) scratch() any {
	if a.r.reply != nil {
		return a.r.reply.New().Interface()
	}
	return new(emptypb.Empty)
}

// finish ends the attempt with err (io.EOF: success), keeps its metadata
// and closes its response; it returns the engine's error.
func (a *attemptStream) finish(err error) error {
	a.ended = true
	if errors.Is(err, io.EOF) {
		a.end = io.EOF
		if a.gotMsg {
			a.header = toMD(a.conn.ResponseHeader(), 0)
		}
		a.trailer = toMD(a.conn.ResponseTrailer(), 0)
	} else {
		ae := strayCancel(a.ctx, fromConnect(err))
		a.end = ae
		if a.gotMsg {
			a.header = toMD(a.conn.ResponseHeader(), 0)
		}
		a.trailer = a.w.trailer(ae)
		if a.trailer != nil {
			for k, vs := range toMD(a.conn.ResponseTrailer(), 0) {
				if len(a.trailer[k]) == 0 {
					a.trailer[k] = vs
				}
			}
		}
	}
	a.closeResponse()
	return a.end
}

func (a *attemptStream) closeResponse() {
	a.closeOnce.Do(func() {
		a.connMu.Lock()
		a.respClosed = true
		c := a.conn
		a.connMu.Unlock()
		_ = c.CloseResponse()
	})
}

// Header returns the attempt's response headers once its first message
// arrived, nil when it ended without one (a failure the engine may retry,
// as a Trailers-Only one): it looks ahead at the first message, which
// RecvMsg then returns. Without the response type (no schema in the spec)
// it cannot, and returns the headers when they arrive.
func (a *attemptStream) Header() (metadata.MD, error) {
	select {
	case <-a.sent:
	case <-a.ctx.Done():
		return nil, nil
	}
	a.recvMu.Lock()
	defer a.recvMu.Unlock()
	if a.ended || a.looked {
		if a.gotMsg || a.ahead != nil {
			return toMD(a.conn.ResponseHeader(), 0), nil
		}
		return a.header, nil
	}
	if a.gotMsg {
		return toMD(a.conn.ResponseHeader(), 0), nil
	}
	if a.r.reply == nil {
		return toMD(a.conn.ResponseHeader(), 0), nil
	}
	m := a.r.reply.New().Interface()
	a.looked = true
	if err := a.receive(m); err != nil {
		a.aheadErr = err
		return nil, nil
	}
	a.ahead = m
	return toMD(a.conn.ResponseHeader(), 0), nil
}

func (a *attemptStream) Trailer() metadata.MD {
	a.recvMu.Lock()
	defer a.recvMu.Unlock()
	return a.trailer
}

// attemptErr returns a send's error as the engine's: io.EOF stays (the
// status is RecvMsg's).
func attemptErr(err error) error {
	if err == nil || errors.Is(err, io.EOF) {
		if err != nil {
			return io.EOF
		}
		return nil
	}
	return fromConnect(err)
}

// fromMD returns md as an http.Header (binary values encoded).
func fromMD(md metadata.MD) http.Header {
	h := make(http.Header, len(md))
	for k, vs := range md {
		binary := strings.HasSuffix(k, "-bin")
		for _, v := range vs {
			if binary {
				v = connect.EncodeBinaryHeader([]byte(v))
			}
			h.Add(k, v)
		}
	}
	return h
}

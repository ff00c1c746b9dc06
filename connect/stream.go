package staggerconnect

import (
	"context"
	"io"
	"net/http"
	"sync"
	"sync/atomic"

	"connectrpc.com/connect"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"

	"github.com/stagger-go/stagger/internal/frontend"
)

// WrapStreamingClient implements connect.Interceptor: a client's stream
// (client, server or bidi) runs through the engine, which opens each
// attempt down the rest of the Connect chain, replays the messages sent
// until the stream commits, and retries as package interceptor's
// StreamClientInterceptor does. The stream starts when the application
// first sends (or closes its side, or receives): that is when Connect sends
// the request's headers.
//
// A Connect stream's response headers arrive with its first message or its
// end (connect-go's handlers send them no sooner), so a stream commits when
// a message arrives or the application reads the headers; a stream that
// fails before its first message is retried as a gRPC Trailers-Only
// failure is.
func (c *Client) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return func(ctx context.Context, spec connect.Spec) connect.StreamingClientConn {
		c.learn(spec)
		ctx, cancel := context.WithCancel(ctx)
		return &retryConn{
			c: c, next: next, spec: spec, ctx: ctx, cancel: cancel,
			header: make(http.Header),
			desc: grpc.StreamDesc{
				StreamName:    spec.Procedure,
				ClientStreams: spec.StreamType&connect.StreamTypeClient != 0,
				ServerStreams: spec.StreamType&connect.StreamTypeServer != 0,
			},
			reply: replyType(spec),
		}
	}
}

// WrapStreamingHandler implements connect.Interceptor: a handler's stream is
// left alone.
func (c *Client) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return next
}

// replyType is the type of spec's response messages, nil when the spec has
// no schema or the type is not in the registry.
func replyType(spec connect.Spec) protoreflect.MessageType {
	md, ok := spec.Schema.(protoreflect.MethodDescriptor)
	if !ok {
		return nil
	}
	mt, err := protoregistry.GlobalTypes.FindMessageByName(md.Output().FullName())
	if err != nil {
		return nil
	}
	return mt
}

// retryConn is the stream the application holds: the engine's stream
// behind Connect's interface.
type retryConn struct {
	c      *Client
	next   connect.StreamingClientFunc
	spec   connect.Spec
	ctx    context.Context
	cancel context.CancelFunc
	// header is the application's request header, sent with every attempt.
	header http.Header
	desc   grpc.StreamDesc
	reply  protoreflect.MessageType

	peerOnce sync.Once
	peer     connect.Peer

	startOnce sync.Once
	cs        grpc.ClientStream
	err       error
	// transparent: an attempt whose request never left the client was
	// opened again (attemptStream.reopen), which a call does once.
	transparent atomic.Bool
	// handoff is the turn a server stream's attempts take to send their
	// request (attemptStream.send).
	handoff sync.Mutex

	mu  sync.Mutex
	cur *attemptStream
}

func (r *retryConn) Spec() connect.Spec { return r.spec }

// Peer returns the server's address, from a connection that sends nothing
// (connect-go's conns learn it when made).
func (r *retryConn) Peer() connect.Peer {
	r.peerOnce.Do(func() { r.peer = r.next(r.ctx, r.spec).Peer() })
	return r.peer
}

func (r *retryConn) RequestHeader() http.Header { return r.header }

// start opens the engine's stream, once.
func (r *retryConn) start() error {
	r.startOnce.Do(func() {
		ctx := frontend.WithTarget(r.ctx, r.Peer().Addr)
		opts := callOptions(ctx, 1)
		if r.spec.Schema != nil {
			opts = append(opts, grpc.StaticMethod())
		}
		r.cs, r.err = r.c.stream(ctx, &r.desc, nil, r.spec.Procedure, r.open, opts...)
	})
	return r.err
}

// open is the engine's streamer: one attempt, down the rest of the chain.
func (r *retryConn) open(ctx context.Context, _ *grpc.StreamDesc, _ *grpc.ClientConn, _ string, _ ...grpc.CallOption) (grpc.ClientStream, error) {
	a := &attemptStream{r: r, ctx: ctx, sent: make(chan struct{})}
	a.conn = r.next(a.w.context(ctx), r.spec)
	if r.desc.ClientStreams {
		context.AfterFunc(ctx, a.closeRequest)
	}
	r.mu.Lock()
	r.cur = a
	r.mu.Unlock()
	return a, nil
}

func (r *retryConn) Send(m any) error {
	if err := r.start(); err != nil {
		return toConnect(err)
	}
	return streamErr(r.cs.SendMsg(m))
}

func (r *retryConn) CloseRequest() error {
	if err := r.start(); err != nil {
		return toConnect(err)
	}
	return streamErr(r.cs.CloseSend())
}

func (r *retryConn) Receive(m any) error {
	if err := r.start(); err != nil {
		return toConnect(err)
	}
	return streamErr(r.cs.RecvMsg(m))
}

// ResponseHeader returns the response headers of the attempt the stream
// committed to, or of the attempt whose end ended it: what connect-go's
// own stream would return for that attempt, read from it (the engine
// decides which attempt, retrying underneath as grpc-go's Header does, and
// its gRPC metadata is not the Connect headers: an attempt that failed
// before its first message had headers all the same).
func (r *retryConn) ResponseHeader() http.Header {
	if r.start() != nil {
		return make(http.Header)
	}
	md, _ := r.cs.Header()
	if a := r.shown(); a != nil && (md != nil || a.hasEnded()) {
		return a.conn.ResponseHeader()
	}
	return fromMD(md)
}

// ResponseTrailer returns the response trailers of the attempt whose
// headers ResponseHeader returns, as connect-go's stream returns them.
func (r *retryConn) ResponseTrailer() http.Header {
	if r.start() != nil {
		return make(http.Header)
	}
	md := r.cs.Trailer()
	if a := r.shown(); a != nil && a.hasEnded() {
		return a.conn.ResponseTrailer()
	}
	return fromMD(md)
}

// shown returns the attempt whose answer the caller sees, as the engine
// chose it (frontend.Shown): never a hedge that lost, whatever the engine
// last read of one. Nil while the engine has chosen none.
func (r *retryConn) shown() *attemptStream {
	switch cs := r.cs.(type) {
	case *attemptStream:
		// No policy: the engine runs the one attempt itself.
		return cs
	case frontend.Shown:
		a, _ := cs.ShownStream().(*attemptStream)
		return a
	}
	return nil
}

// CloseResponse ends the stream: the engine's (its context) and the
// current attempt's.
func (r *retryConn) CloseResponse() error {
	r.cancel()
	r.mu.Lock()
	a := r.cur
	r.mu.Unlock()
	if a != nil {
		a.closeResponse()
	}
	return nil
}

// streamErr returns a stream method's error as Connect's: io.EOF stays.
func streamErr(err error) error {
	if err == nil || err == io.EOF {
		return err
	}
	return toConnect(err)
}

package staggerconnect

import (
	"context"
	"errors"
	"reflect"
	"sync"
	"sync/atomic"

	"connectrpc.com/connect"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/types/known/emptypb"

	"github.com/stagger-go/stagger/internal/frontend"
)

// WrapUnary implements connect.Interceptor: a client's unary call runs
// through the engine. A handler's is left alone (package server's
// counterpart for Connect handlers is Handler).
func (c *Client) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		spec := req.Spec()
		if !spec.IsClient {
			return next(ctx, req)
		}
		c.learn(spec)
		u := &unaryCall{next: next, req: req}
		opts := callOptions(ctx, 3)
		opts = append(opts, grpc.Header(&u.header), grpc.Trailer(&u.trailer))
		if spec.Schema != nil {
			opts = append(opts, grpc.StaticMethod())
		}
		ctx = frontend.WithTarget(ctx, req.Peer().Addr)
		// The engine's reply is a token: the attempts' responses are
		// Connect's own, kept by u. A proto message, so that hedging can
		// make one per attempt.
		err := c.unary(ctx, spec.Procedure, req.Any(), new(emptypb.Empty), nil, u.invoke, opts...)
		if err != nil {
			return nil, toConnect(err)
		}
		return u.response()
	}
}

// unaryCall is one unary call's state: the caller's request and the
// responses of its successful attempts.
type unaryCall struct {
	next connect.UnaryFunc
	req  connect.AnyRequest
	// header and trailer are the call's holders (grpc.Header and
	// grpc.Trailer): the engine leaves the returned attempt's there.
	header, trailer metadata.MD

	// transparent: a request that never left the client was sent again
	// (invoke), which a call does once.
	transparent atomic.Bool

	mu   sync.Mutex
	wins []win
}

// win is a successful attempt's response, known by its header metadata.
type win struct {
	header uintptr
	resp   connect.AnyResponse
}

// invoke is the engine's invoker: one attempt, through the rest of the
// Connect chain. A request that never left the client (wire.unsent) is
// sent again at once, once per call, inside the attempt: grpc-go's
// transparent retry of a stream that never reached the server, which
// does not count against maxAttempts either.
func (u *unaryCall) invoke(ctx context.Context, _ string, _, _ any, _ *grpc.ClientConn, opts ...grpc.CallOption) error {
	headerAddr, trailerAddr := outputs(opts)
	resp, w, err := u.send(ctx)
	if err != nil && w.unsent(ctx, fromConnect(err)) && u.transparent.CompareAndSwap(false, true) {
		resp, w, err = u.send(ctx)
	}
	if err != nil {
		ae := strayCancel(ctx, fromConnect(err))
		if trailerAddr != nil {
			*trailerAddr = w.trailer(ae)
		}
		// A unary Connect call shows nothing before its outcome: a
		// failure is never committed (no headers).
		if headerAddr != nil {
			*headerAddr = nil
		}
		return ae
	}
	header := toMD(resp.Header(), 0)
	if headerAddr != nil {
		*headerAddr = header
	}
	if trailerAddr != nil {
		*trailerAddr = toMD(resp.Trailer(), 0)
	}
	u.mu.Lock()
	u.wins = append(u.wins, win{header: reflect.ValueOf(header).Pointer(), resp: resp})
	u.mu.Unlock()
	return nil
}

// send sends the caller's request once, down the rest of the chain, with
// the engine's outgoing metadata; w is its wire facts.
func (u *unaryCall) send(ctx context.Context) (resp connect.AnyResponse, w *wire, err error) {
	w = new(wire)
	// Every send is a copy: connect writes the request it sends (its HTTP
	// method), and hedges run at once.
	req, err := cloneRequest(u.req)
	if err != nil {
		return nil, w, err
	}
	if md, ok := metadata.FromOutgoingContext(ctx); ok {
		addHeaders(req.Header(), md)
	}
	resp, err = u.next(w.context(ctx), req)
	return resp, w, err
}

// response returns the response of the attempt the engine returned: the one
// whose header metadata it left in u.header (a hedge's winner among several
// successes).
func (u *unaryCall) response() (connect.AnyResponse, error) {
	u.mu.Lock()
	defer u.mu.Unlock()
	p := reflect.ValueOf(u.header).Pointer()
	for _, w := range u.wins {
		if w.header == p {
			return w.resp, nil
		}
	}
	if n := len(u.wins); n > 0 {
		return u.wins[n-1].resp, nil
	}
	return nil, connect.NewError(connect.CodeInternal, errors.New("staggerconnect: the call succeeded without a response"))
}

// outputs returns the holders the engine passes an attempt for its header
// and trailer (grpc.Header, grpc.Trailer), nil where it passes none.
func outputs(opts []grpc.CallOption) (header, trailer *metadata.MD) {
	for _, o := range opts {
		if h, ok := o.(grpc.HeaderCallOption); ok {
			header = h.HeaderAddr
		} else if t, ok := o.(grpc.TrailerCallOption); ok {
			trailer = t.TrailerAddr
		}
	}
	return header, trailer
}

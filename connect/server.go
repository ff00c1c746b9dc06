package staggerconnect

import (
	"context"
	"errors"
	"net/http"
	"reflect"
	"sync"

	"connectrpc.com/connect"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/stagger-go/stagger/server"
)

// Handler is the server side for Connect handlers: package server's
// interceptors (don't-retry propagation, WithRetryAtOneLayer, criticality,
// shedding, de-duplication by idempotency key with its stores) run in front
// of each handler, for every protocol. package server's documentation has
// what each does; the translations: the request's headers are its incoming
// metadata; the headers and trailers package server sets (the negative
// pushback, a shed call's pushback, idempotent-replayed) are the
// response's, or the error's metadata; a status it answers with is a
// *connect.Error with its code, message and details.
//
// De-duplication replays a stored response as a *connect.Response of the
// procedure's response type, which a Connect interceptor can only learn from
// a response: a key whose stored answer is a success, replayed by a process
// that has not yet answered the procedure successfully itself (a shared
// store, after a restart), is answered UNAVAILABLE, which the client
// retries. Streams are not shed or de-duplicated, as with gRPC.
//
// A Handler is safe for concurrent use.
type Handler struct {
	unary  grpc.UnaryServerInterceptor
	stream grpc.StreamServerInterceptor
	// responses holds, per procedure, the type of its *connect.Response.
	responses sync.Map
}

var _ connect.Interceptor = (*Handler)(nil)

// NewHandler returns a Handler with package server's options, or their
// error (a nil option is one).
func NewHandler(opts ...server.Option) (*Handler, error) {
	side, err := server.New(opts...)
	if err != nil {
		return nil, err
	}
	return &Handler{unary: side.Unary(), stream: side.Stream()}, nil
}

// WrapUnary implements connect.Interceptor: a handler's unary call runs
// under package server's unary interceptor. A client's is left alone.
func (h *Handler) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		spec := req.Spec()
		if spec.IsClient {
			return next(ctx, req)
		}
		st := &transportStream{method: spec.Procedure}
		ctx = metadata.NewIncomingContext(ctx, toMD(req.Header(), 0))
		ctx = grpc.NewContextWithServerTransportStream(ctx, st)
		var resp connect.AnyResponse
		var herr *connect.Error
		reply, err := h.unary(ctx, req.Any(), &grpc.UnaryServerInfo{FullMethod: spec.Procedure}, func(ctx context.Context, _ any) (any, error) {
			r, err := next(ctx, req)
			if err != nil {
				ae := fromConnect(err)
				herr = ae.cerr
				// Through the stream in ctx, so that de-duplication
				// records them with the outcome.
				_ = grpc.SetTrailer(ctx, toMD(ae.cerr.Meta(), 0))
				return nil, ae
			}
			resp = r
			_ = grpc.SetHeader(ctx, toMD(r.Header(), 0))
			_ = grpc.SetTrailer(ctx, toMD(r.Trailer(), 0))
			return r.Any(), nil
		})
		if err != nil {
			return nil, st.connectError(err, herr)
		}
		if resp == nil || resp.Any() != reply {
			// A replayed outcome: the handler did not run here.
			if resp, err = h.newResponse(spec.Procedure, reply); err != nil {
				return nil, err
			}
		} else {
			h.learn(spec.Procedure, resp)
		}
		st.fill(resp.Header(), resp.Trailer())
		return resp, nil
	}
}

// learn keeps the type of procedure's responses, for replays.
func (h *Handler) learn(procedure string, resp connect.AnyResponse) {
	if _, ok := h.responses.Load(procedure); !ok {
		h.responses.Store(procedure, reflect.TypeOf(resp).Elem())
	}
}

// newResponse returns a *connect.Response[T] of procedure's type whose Msg
// is reply.
func (h *Handler) newResponse(procedure string, reply any) (connect.AnyResponse, error) {
	t, ok := h.responses.Load(procedure)
	rv := reflect.ValueOf(reply)
	if ok {
		r := reflect.New(t.(reflect.Type))
		if f := r.Elem().FieldByName("Msg"); f.IsValid() && rv.Type().AssignableTo(f.Type()) {
			f.Set(rv)
			if resp, ok := r.Interface().(connect.AnyResponse); ok {
				return resp, nil
			}
		}
	}
	return nil, connect.NewError(connect.CodeUnavailable, errors.New("staggerconnect: a stored response of "+procedure+" cannot be replayed before this process answered the procedure once"))
}

// WrapStreamingClient implements connect.Interceptor: a client's stream is
// left alone.
func (h *Handler) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return next
}

// WrapStreamingHandler implements connect.Interceptor: a handler's stream
// runs under package server's stream interceptor.
func (h *Handler) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return func(ctx context.Context, conn connect.StreamingHandlerConn) error {
		ss := &serverStream{conn: conn, ctx: metadata.NewIncomingContext(ctx, toMD(conn.RequestHeader(), 0))}
		err := h.stream(nil, ss, &grpc.StreamServerInfo{FullMethod: conn.Spec().Procedure, IsClientStream: conn.Spec().StreamType&connect.StreamTypeClient != 0, IsServerStream: conn.Spec().StreamType&connect.StreamTypeServer != 0},
			func(_ any, s grpc.ServerStream) error {
				if err := next(s.Context(), conn); err != nil {
					return fromConnect(err)
				}
				return nil
			})
		if err == nil {
			return nil
		}
		// The handler's own error, unchanged.
		if ae, ok := err.(*attemptError); ok {
			return ae.cerr
		}
		return toConnect(err)
	}
}

// transportStream is a unary call's grpc.ServerTransportStream: it keeps
// the headers and trailers package server sets.
type transportStream struct {
	method          string
	mu              sync.Mutex
	header, trailer metadata.MD
}

func (s *transportStream) Method() string { return s.method }

func (s *transportStream) SetHeader(md metadata.MD) error {
	s.mu.Lock()
	s.header = metadata.Join(s.header, md)
	s.mu.Unlock()
	return nil
}

func (s *transportStream) SendHeader(md metadata.MD) error { return s.SetHeader(md) }

func (s *transportStream) SetTrailer(md metadata.MD) error {
	s.mu.Lock()
	s.trailer = metadata.Join(s.trailer, md)
	s.mu.Unlock()
	return nil
}

// fill sets header and trailer to what was set on s.
func (s *transportStream) fill(header, trailer http.Header) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, p := range [...]struct {
		md metadata.MD
		h  http.Header
	}{{s.header, header}, {s.trailer, trailer}} {
		if p.md == nil {
			continue
		}
		clear(p.h)
		for k, vs := range fromMD(p.md) {
			p.h[k] = vs
		}
	}
}

// connectError returns the unary call's error err as the handler's: the
// handler's own *connect.Error (herr) when err is it, else one from err's
// status; with what was set on s as its metadata.
func (s *transportStream) connectError(err error, herr *connect.Error) *connect.Error {
	var out *connect.Error
	var ae *attemptError
	if herr != nil && errors.As(err, &ae) && ae.cerr == herr {
		out = herr
	} else {
		st := status.Convert(err)
		out = connect.NewError(connect.Code(st.Code()), errors.New(st.Message()))
		for _, d := range st.Proto().GetDetails() {
			if detail, derr := connect.NewErrorDetail(d); derr == nil {
				out.AddDetail(detail)
			}
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, md := range [...]metadata.MD{s.header, s.trailer} {
		for k, vs := range fromMD(md) {
			out.Meta()[k] = vs
		}
	}
	return out
}

// serverStream is a Connect handler's stream as package server's
// grpc.ServerStream: headers and trailers go to the conn's.
type serverStream struct {
	conn connect.StreamingHandlerConn
	ctx  context.Context
}

func (s *serverStream) SetHeader(md metadata.MD) error {
	for k, vs := range fromMD(md) {
		s.conn.ResponseHeader()[k] = append(s.conn.ResponseHeader()[k], vs...)
	}
	return nil
}
func (s *serverStream) SendHeader(md metadata.MD) error { return s.SetHeader(md) }
func (s *serverStream) SetTrailer(md metadata.MD) {
	for k, vs := range fromMD(md) {
		s.conn.ResponseTrailer()[k] = append(s.conn.ResponseTrailer()[k], vs...)
	}
}
func (s *serverStream) Context() context.Context { return s.ctx }
func (s *serverStream) SendMsg(m any) error      { return s.conn.Send(m) }
func (s *serverStream) RecvMsg(m any) error      { return s.conn.Receive(m) }

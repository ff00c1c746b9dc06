package staggerconnect

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptrace"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"unsafe"

	"connectrpc.com/connect"
	spb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/emptypb"

	"github.com/stagger-go/stagger/interceptor"
)

// This file translates between Connect and the engine's grpc-go shapes: an
// attempt's Connect error into a gRPC status error with the same code,
// message and details; its headers and trailers into the metadata the
// engine reads its wire facts from; the engine's outgoing metadata into
// request headers; and the call's final error back into a *connect.Error.

// attemptError is one attempt's Connect error as the engine sees it: a
// gRPC status with the Connect error's code, message and details, except
// that a lost transport connect-go codes otherwise is UNAVAILABLE to the
// engine (transportLost). cerr is the error as connect-go returned it,
// which the caller gets back.
type attemptError struct {
	cerr *connect.Error
	st   *status.Status
}

// Error returns the Connect error's message: the final error puts the code
// in front of it.
func (e *attemptError) Error() string              { return e.cerr.Message() }
func (e *attemptError) GRPCStatus() *status.Status { return e.st }
func (e *attemptError) Unwrap() error              { return e.cerr }

// fromConnect returns err, an attempt's error, as an *attemptError.
func fromConnect(err error) *attemptError {
	var cerr *connect.Error
	if !errors.As(err, &cerr) {
		cerr = connect.NewError(connect.CodeOf(err), err)
	}
	code := cerr.Code()
	if transportLost(cerr) {
		code = connect.CodeUnavailable
	}
	p := &spb.Status{Code: int32(code), Message: cerr.Message()}
	for _, d := range cerr.Details() {
		p.Details = append(p.Details, &anypb.Any{TypeUrl: "type.googleapis.com/" + d.Type(), Value: d.Bytes()})
	}
	return &attemptError{cerr: cerr, st: status.FromProto(p)}
}

// transportLost reports whether cerr is the client's report of a
// connection the peer reset or closed under the attempt, which connect-go
// codes CANCELED (on a server that means the client went away) or UNKNOWN:
// a transport failure, UNAVAILABLE as grpc-go says. A context's own end
// keeps its code.
func transportLost(cerr *connect.Error) bool {
	if connect.IsWireError(cerr) || cerr.Code() == connect.CodeUnavailable ||
		errors.Is(cerr, context.Canceled) || errors.Is(cerr, context.DeadlineExceeded) {
		return false
	}
	return errors.Is(cerr, syscall.ECONNRESET) || errors.Is(cerr, syscall.EPIPE) || errors.Is(cerr, io.ErrUnexpectedEOF)
}

// toConnect returns the engine's final error err as the caller's: the last
// attempt's *connect.Error itself when the engine returned it as it was;
// otherwise a *connect.Error whose Unwrap reaches the engine's error (an
// *interceptor.Error: attempts, reason). When the engine ended the call on
// an attempt's failure (the status is that attempt's), the caller's error
// has that attempt's code, message, details and metadata as connect-go gave
// them, so that a call stagger retried reads as one that never failed;
// when the engine decided the status (the caller left, a refusal before
// any attempt), its code and message. When stagger gave up
// (interceptor.Error's GaveUp), that *connect.Error comes inside a
// *gaveUpError, whose text says so.
func toConnect(err error) error {
	var ae *attemptError
	inner := errors.As(err, &ae)
	if inner && err == error(ae) {
		return ae.cerr
	}
	st := status.Convert(err)
	var out *connect.Error
	if !inner || st.Code() != ae.st.Code() {
		out = connect.NewError(connect.Code(st.Code()), &engineError{msg: st.Message(), err: err})
	} else {
		out = connect.NewError(ae.cerr.Code(), &engineError{msg: ae.cerr.Message(), err: err})
		for _, d := range ae.cerr.Details() {
			out.AddDetail(d)
		}
		for k, vs := range ae.cerr.Meta() {
			out.Meta()[k] = vs
		}
	}
	var ie *interceptor.Error
	if errors.As(err, &ie) && ie.GaveUp() {
		// The engine's text of the last attempt's error is the message
		// alone (attemptError.Error); the caller's is connect-go's, with
		// the code in front.
		return &gaveUpError{cerr: out, text: strings.TrimSuffix(ie.Error(), ie.Err.Error()) + out.Error()}
	}
	return out
}

// gaveUpError is the caller's error of a call stagger gave up on
// (interceptor.Error's GaveUp). Its Error says that it gave up, after how
// many attempts and why, then gives connect-go's text of the last
// attempt's error, as interceptor.Error does for a gRPC call:
//
//	stagger: gave up: max retries exhausted: failed after 3 attempts: unavailable: payments: down
//
// A *connect.Error's text is its code and its message, and the message is
// what the server sent, which must stay as it was (a Connect client
// compares it as a gRPC client compares the status): so the caller's error
// wraps the *connect.Error, which connect.CodeOf and errors.As find with
// the server's code, message, details and metadata unchanged. A call that
// ends on the server's own non-retryable answer gets the *connect.Error
// itself, its text as without stagger.
type gaveUpError struct {
	cerr *connect.Error
	text string
}

func (e *gaveUpError) Error() string { return e.text }
func (e *gaveUpError) Unwrap() error { return e.cerr }

// engineError is the engine's final error under the *connect.Error toConnect
// returns: msg is the message the caller sees.
type engineError struct {
	msg string
	err error
}

func (e *engineError) Error() string { return e.msg }
func (e *engineError) Unwrap() error { return e.err }

// wire records what an attempt's HTTP request did on the wire: whether its
// headers were written (the request left the client, so the server may have
// run it); and gives back a turn the attempt holds until the transport
// takes its request (takeTurn).
type wire struct {
	wrote atomic.Bool

	turnMu sync.Mutex
	// turn gives back the turn the attempt holds (nil: none).
	turn func()
}

// context returns ctx with a trace that records the attempt's wire facts.
func (w *wire) context(ctx context.Context) context.Context {
	return httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{
		WroteHeaders: func() { w.wrote.Store(true) },
		// net/http's transport asks for a connection as it takes a request
		// (HTTP/1.1 and HTTP/2 alike).
		GetConn: func(string) { w.giveTurn() },
	})
}

// takeTurn locks mu, a turn, until the transport takes the attempt's next
// request (the trace's GetConn) or the returned function is called,
// whichever comes first: a RoundTripper other than net/http's may never
// say.
func (w *wire) takeTurn(mu *sync.Mutex) (giveBack func()) {
	mu.Lock()
	var once sync.Once
	w.turnMu.Lock()
	w.turn = func() { once.Do(mu.Unlock) }
	w.turnMu.Unlock()
	return w.giveTurn
}

// giveTurn gives back the turn the attempt holds, if it holds one.
func (w *wire) giveTurn() {
	w.turnMu.Lock()
	give := w.turn
	w.turn = nil
	w.turnMu.Unlock()
	if give != nil {
		give()
	}
}

// trailer is the attempt's trailer metadata, as the engine reads it (see
// the engine's wire facts): a status from the server (a wire error) carries
// its metadata and content-type, so that it is never taken for a reset; a
// failure the client made up after the request left is an empty trailer
// (ambiguous: the server may have run it and sent no status); one before
// the request left is nil (it never left the client).
func (w *wire) trailer(ae *attemptError) metadata.MD {
	if connect.IsWireError(ae.cerr) {
		md := toMD(ae.cerr.Meta(), 1)
		if len(md["content-type"]) == 0 {
			md["content-type"] = []string{"application/connect"}
		}
		return md
	}
	if w.wrote.Load() {
		return metadata.MD{}
	}
	return nil
}

// unsent reports whether ae, an attempt's failure, is the client's own
// before the attempt's request left it (no status from a server, no
// header written) while ctx, the attempt's context, is not done: the
// transport failed it (a refused connection, a request net/http ended
// itself), not the server, not the caller.
func (w *wire) unsent(ctx context.Context, ae *attemptError) bool {
	return !connect.IsWireError(ae.cerr) && !w.wrote.Load() && ctx.Err() == nil
}

// strayCancel returns ae, an attempt's failure, as the engine is to see it
// when it is the client's own (not a wire error) with a context's code
// while ctx, the attempt's context, is not done: connect-go codes any
// error that wraps context.Canceled CANCELED, and a context error that no
// context of the call explains is the transport's (net/http can end a
// request with the cancellation of another request on a pooled HTTP/1.1
// connection), UNAVAILABLE to the engine as a lost transport is
// (transportLost), never the fatal answer of a server. Its trailer says
// whether it left (wire.trailer): nil, it never did; empty, the ambiguity
// rule decides.
func strayCancel(ctx context.Context, ae *attemptError) *attemptError {
	if c := ae.st.Code(); (c != codes.Canceled && c != codes.DeadlineExceeded) || connect.IsWireError(ae.cerr) || ctx.Err() != nil {
		return ae
	}
	p := ae.st.Proto()
	p.Code = int32(codes.Unavailable)
	return &attemptError{cerr: ae.cerr, st: status.FromProto(p)}
}

// toMD returns h as metadata (lower-case keys; binary values decoded), with
// room for extra more keys. It is never nil.
func toMD(h http.Header, extra int) metadata.MD {
	md := make(metadata.MD, len(h)+extra)
	for k, vs := range h {
		k = strings.ToLower(k)
		if strings.HasSuffix(k, "-bin") {
			for _, v := range vs {
				if b, err := connect.DecodeBinaryHeader(v); err == nil {
					md[k] = append(md[k], string(b))
				}
			}
			continue
		}
		md[k] = vs
	}
	return md
}

// addHeaders adds the outgoing metadata md to h: criticality, idempotency
// key, grpc-previous-rpc-attempts. A key h has already is the caller's and
// kept (a caller's own idempotency key, as the gRPC interceptors keep one).
func addHeaders(h http.Header, md metadata.MD) {
	for k, vs := range md {
		if len(h.Values(k)) > 0 {
			continue
		}
		binary := strings.HasSuffix(k, "-bin")
		for _, v := range vs {
			if binary {
				v = connect.EncodeBinaryHeader([]byte(v))
			}
			h.Add(k, v)
		}
	}
}

// headerType is the type of a connect.Request's header field.
var headerType = reflect.TypeFor[http.Header]()

// cloneRequest returns a copy of r (a *connect.Request[T]) with a header of
// its own, so that an attempt may add headers without writing the caller's
// request, and attempts that run at once (hedges) do not share one: connect
// sends a request's header map as the HTTP request's, and writes the
// request's HTTP method into it. connect offers no copy, so this one copies
// the struct and gives the copy a clone of the header through reflection.
func cloneRequest(r connect.AnyRequest) (connect.AnyRequest, error) {
	v := reflect.ValueOf(r)
	if v.Kind() != reflect.Pointer || v.IsNil() || v.Elem().Kind() != reflect.Struct {
		return nil, errUncopyable(r)
	}
	c := reflect.New(v.Elem().Type())
	c.Elem().Set(v.Elem())
	f := c.Elem().FieldByName("header")
	if !f.IsValid() || f.Type() != headerType {
		return nil, errUncopyable(r)
	}
	h := (*http.Header)(unsafe.Pointer(f.UnsafeAddr()))
	*h = h.Clone()
	if *h == nil {
		*h = make(http.Header)
	}
	out, ok := c.Interface().(connect.AnyRequest)
	if !ok {
		return nil, errUncopyable(r)
	}
	return out, nil
}

// requestCopies reports, once per process, whether cloneRequest copies
// this connect-go's requests: a copy of a sample request must have the
// sample's message and procedure, and a header of its own (ErrRequestCopy
// when not, with the reason). NewClient asks it, so that a connect-go
// whose Request changed fails there, not on every call.
var requestCopies = sync.OnceValue(func() error {
	return checkCopy(connect.NewRequest(&emptypb.Empty{}))
})

// ErrRequestCopy is the error NewClient returns, wrapped with the reason,
// when the connect-go it is built with has a connect.Request that
// staggerconnect cannot copy: it needs a newer staggerconnect.
var ErrRequestCopy = errors.New("staggerconnect: this connect-go's connect.Request cannot be copied (upgrade staggerconnect)")

// checkCopy copies sample, a fresh request, and checks the copy.
func checkCopy(sample connect.AnyRequest) error {
	c, err := cloneRequest(sample)
	if err != nil {
		return fmt.Errorf("%w: %v", ErrRequestCopy, err)
	}
	c.Header().Set("stagger-copy-check", "1")
	switch {
	case sample.Header().Get("stagger-copy-check") != "":
		return fmt.Errorf("%w: the copy shares the request's header", ErrRequestCopy)
	case c.Any() != sample.Any() || c.Spec() != sample.Spec():
		return fmt.Errorf("%w: the copy lost the request's message or spec", ErrRequestCopy)
	}
	return nil
}

func errUncopyable(r connect.AnyRequest) error {
	return connect.NewError(connect.CodeInternal, errors.New("staggerconnect: cannot copy a request of type "+reflect.TypeOf(r).String()))
}

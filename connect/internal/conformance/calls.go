package conformance

// One case's calls: a unary call, the three kinds of stream, and how each
// result and error becomes the ClientResponseResult the suite compares.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"

	conformancev1 "github.com/stagger-go/stagger/connect/internal/conformance/gen/connectrpc/conformance/v1"
	"github.com/stagger-go/stagger/connect/internal/conformance/gen/connectrpc/conformance/v1/conformancev1connect"
)

// cancelTiming is when a case cancels its call: -1 for never.
type cancelTiming struct {
	beforeCloseSend   bool
	afterCloseSendMs  int
	afterNumResponses int
}

func cancelTimingOf(c *conformancev1.ClientCompatRequest_Cancel) (cancelTiming, error) {
	t := cancelTiming{afterCloseSendMs: -1, afterNumResponses: -1}
	if c == nil {
		return t, nil
	}
	switch v := c.CancelTiming.(type) {
	case *conformancev1.ClientCompatRequest_Cancel_BeforeCloseSend:
		t.beforeCloseSend = true
	case *conformancev1.ClientCompatRequest_Cancel_AfterCloseSendMs:
		t.afterCloseSendMs = int(v.AfterCloseSendMs)
	case *conformancev1.ClientCompatRequest_Cancel_AfterNumResponses:
		t.afterNumResponses = int(v.AfterNumResponses)
	case nil: // a cancel without a timing cancels at once after close-send
		t.afterCloseSendMs = 0
	default:
		return t, fmt.Errorf("cancel: timing %T unknown", v)
	}
	return t, nil
}

// run is one case being run.
type run struct {
	req    *conformancev1.ClientCompatRequest
	timing cancelTiming
}

// message unmarshals the case's request message i into m.
func (r *run) message(i int, m proto.Message) error {
	if i >= len(r.req.RequestMessages) {
		return fmt.Errorf("request_messages: %d, want more than %d", len(r.req.RequestMessages), i)
	}
	return anypb.UnmarshalTo(r.req.RequestMessages[i], m, proto.UnmarshalOptions{})
}

func (r *run) addHeaders(h http.Header) {
	for _, hdr := range r.req.RequestHeaders {
		for _, v := range hdr.Value {
			h.Add(hdr.Name, v)
		}
	}
}

// unary runs a unary method.
func unary[Req, Res any, PReq interface {
	*Req
	proto.Message
}](
	ctx context.Context, r *run,
	call func(context.Context, *connect.Request[Req]) (*connect.Response[Res], error),
	payload func(*Res) *conformancev1.ConformancePayload,
) (*conformancev1.ClientResponseResult, error) {
	if len(r.req.RequestMessages) != 1 {
		return nil, fmt.Errorf("request_messages: %d for a unary call, want 1", len(r.req.RequestMessages))
	}
	msg := PReq(new(Req))
	if err := r.message(0, msg); err != nil {
		return nil, err
	}
	creq := connect.NewRequest((*Req)(msg))
	r.addHeaders(creq.Header())
	if r.timing.afterCloseSendMs >= 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithCancel(ctx)
		defer cancel()
		t := time.AfterFunc(time.Duration(r.timing.afterCloseSendMs)*time.Millisecond, cancel)
		defer t.Stop()
	}
	resp, err := call(ctx, creq)
	if err != nil {
		return errorResult(err), nil
	}
	result := new(conformancev1.ClientResponseResult)
	result.ResponseHeaders = protoHeaders(resp.Header())
	result.ResponseTrailers = protoHeaders(resp.Trailer())
	result.Payloads = append(result.Payloads, orEmpty(payload(resp.Msg)))
	return result, nil
}

func (r *run) serverStream(ctx context.Context, svc conformancev1connect.ConformanceServiceClient) (*conformancev1.ClientResponseResult, error) {
	msg := new(conformancev1.ServerStreamRequest)
	if len(r.req.RequestMessages) != 1 {
		return nil, fmt.Errorf("request_messages: %d for a server stream, want 1", len(r.req.RequestMessages))
	}
	if err := r.message(0, msg); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	creq := connect.NewRequest(msg)
	r.addHeaders(creq.Header())
	stream, err := svc.ServerStream(ctx, creq)
	if err != nil {
		return errorResult(err), nil
	}
	result := new(conformancev1.ClientResponseResult)
	if r.timing.afterCloseSendMs >= 0 {
		time.Sleep(time.Duration(r.timing.afterCloseSendMs) * time.Millisecond)
		cancel()
	}
	for n := 0; stream.Receive(); {
		result.Payloads = append(result.Payloads, orEmpty(stream.Msg().GetPayload()))
		if n++; n == r.timing.afterNumResponses {
			cancel()
		}
	}
	result.Error = protoError(stream.Err())
	if err := stream.Close(); err != nil && result.Error == nil {
		result.Error = protoError(err)
	}
	if responseReady(ctx, len(result.Payloads)) {
		result.ResponseHeaders = protoHeaders(stream.ResponseHeader())
		result.ResponseTrailers = protoHeaders(stream.ResponseTrailer())
	}
	return result, nil
}

func (r *run) clientStream(ctx context.Context, svc conformancev1connect.ConformanceServiceClient) (*conformancev1.ClientResponseResult, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stream := svc.ClientStream(ctx)
	r.addHeaders(stream.RequestHeader())
	result := new(conformancev1.ClientResponseResult)
	for i := range r.req.RequestMessages {
		msg := new(conformancev1.ClientStreamRequest)
		if err := r.message(i, msg); err != nil {
			return nil, err
		}
		time.Sleep(time.Duration(r.req.RequestDelayMs) * time.Millisecond)
		if err := stream.Send(msg); errors.Is(err, io.EOF) {
			result.NumUnsentRequests = int32(len(r.req.RequestMessages) - i)
			break
		}
	}
	if r.timing.beforeCloseSend {
		cancel()
	} else if r.timing.afterCloseSendMs >= 0 {
		t := time.AfterFunc(time.Duration(r.timing.afterCloseSendMs)*time.Millisecond, cancel)
		defer t.Stop()
	}
	resp, err := stream.CloseAndReceive()
	if err != nil {
		r := errorResult(err)
		r.NumUnsentRequests = result.NumUnsentRequests
		return r, nil
	}
	result.ResponseHeaders = protoHeaders(resp.Header())
	result.ResponseTrailers = protoHeaders(resp.Trailer())
	result.Payloads = append(result.Payloads, orEmpty(resp.Msg.GetPayload()))
	return result, nil
}

func (r *run) bidiStream(ctx context.Context, svc conformancev1connect.ConformanceServiceClient) (*conformancev1.ClientResponseResult, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stream := svc.BidiStream(ctx)
	r.addHeaders(stream.RequestHeader())
	result := new(conformancev1.ClientResponseResult)
	fullDuplex := r.req.StreamType == conformancev1.StreamType_STREAM_TYPE_FULL_DUPLEX_BIDI_STREAM
	received := 0
	got := func(m *conformancev1.BidiStreamResponse) {
		result.Payloads = append(result.Payloads, orEmpty(m.GetPayload()))
		if received++; received == r.timing.afterNumResponses {
			cancel()
		}
	}
	var failed error // the call's error, once it has one
	done := false    // the responses have ended
	for i := range r.req.RequestMessages {
		msg := new(conformancev1.BidiStreamRequest)
		if err := r.message(i, msg); err != nil {
			return nil, err
		}
		time.Sleep(time.Duration(r.req.RequestDelayMs) * time.Millisecond)
		if err := stream.Send(msg); err != nil {
			if errors.Is(err, io.EOF) { // the server ended the call: Receive has why
				if _, rerr := stream.Receive(); rerr != nil && !errors.Is(rerr, io.EOF) {
					failed = rerr
				} else {
					failed = err
				}
			} else {
				failed = err
			}
			result.NumUnsentRequests = int32(len(r.req.RequestMessages) - i)
			done = true
			break
		}
		if fullDuplex {
			m, err := stream.Receive()
			if err != nil {
				if !errors.Is(err, io.EOF) {
					failed = err
				}
				done = true
				break
			}
			got(m)
		}
	}
	if r.timing.beforeCloseSend {
		cancel()
	}
	if err := stream.CloseRequest(); err != nil && failed == nil && !done {
		failed = err
	}
	if r.timing.afterCloseSendMs >= 0 {
		time.Sleep(time.Duration(r.timing.afterCloseSendMs) * time.Millisecond)
		cancel()
	}
	for failed == nil && !done {
		m, err := stream.Receive()
		if err != nil {
			if !errors.Is(err, io.EOF) {
				failed = err
			}
			break
		}
		got(m)
	}
	if err := stream.CloseResponse(); err != nil && failed == nil {
		failed = err
	}
	result.Error = protoError(failed)
	if responseReady(ctx, len(result.Payloads)) {
		result.ResponseHeaders = protoHeaders(stream.ResponseHeader())
		result.ResponseTrailers = protoHeaders(stream.ResponseTrailer())
	}
	return result, nil
}

// responseReady reports whether a stream that has ended, after received
// messages, had its response: connect-go (v1.21.1) fills a stream's
// response headers and trailers on the goroutine that makes the HTTP
// request, and its ResponseHeader and ResponseTrailer wait for that only
// while the call's context lives, so reading them after the context ended
// before the response came is a data race in connect-go itself. A stream
// that received a message, or ended while its context lived, had its
// response; one cancelled before either reports no headers.
func responseReady(ctx context.Context, received int) bool {
	return received > 0 || ctx.Err() == nil
}

// orEmpty is p, or an empty payload for a response that carried none (an
// empty message is a response all the same).
func orEmpty(p *conformancev1.ConformancePayload) *conformancev1.ConformancePayload {
	if p == nil {
		return new(conformancev1.ConformancePayload)
	}
	return p
}

// errorResult is the result of a call that failed with err before any
// response: connect-go gives its headers and trailers as one bag (the
// error's Meta), which the suite accepts recorded as trailers.
func errorResult(err error) *conformancev1.ClientResponseResult {
	r := &conformancev1.ClientResponseResult{Error: protoError(err)}
	if cerr := new(connect.Error); errors.As(err, &cerr) {
		r.ResponseTrailers = protoHeaders(cerr.Meta())
	}
	return r
}

// protoError is err as the suite's Error: a *connect.Error's code, message
// and details; anything else UNKNOWN with its text; nil for nil.
func protoError(err error) *conformancev1.Error {
	if err == nil {
		return nil
	}
	cerr := new(connect.Error)
	if !errors.As(err, &cerr) {
		msg := err.Error()
		return &conformancev1.Error{Code: conformancev1.Code_CODE_UNKNOWN, Message: &msg}
	}
	msg := cerr.Message()
	out := &conformancev1.Error{Code: conformancev1.Code(cerr.Code()), Message: &msg}
	for _, d := range cerr.Details() {
		out.Details = append(out.Details, &anypb.Any{TypeUrl: "type.googleapis.com/" + d.Type(), Value: d.Bytes()})
	}
	return out
}

func protoHeaders(h http.Header) []*conformancev1.Header {
	out := make([]*conformancev1.Header, 0, len(h))
	for k, v := range h {
		out = append(out, &conformancev1.Header{Name: k, Value: v})
	}
	return out
}

// Package conformance is a client of the Connect conformance suite
// (connectrpc.com/conformance, client mode) built on connect-go's client with
// staggerconnect installed: connectconformance writes the cases to its stdin,
// each a length-prefixed ClientCompatRequest, and reads each result from its
// stdout, a length-prefixed ClientCompatResponse (Run). The suite's reference
// server answers each case as the case says, errors included; a policy
// (Policies) that retries or hedges those errors makes stagger retry them,
// and each case must still end with the result it expects: what a caller
// sees through stagger is what it would see without it.
//
// The code is ours, written from the protocol in proto/ (copied unchanged
// from connectrpc.com/conformance v1.0.7, whose own generated code and
// reference client are internal to that module). `make conformance` runs
// the suite through it (TestConformanceSuite): the test binary is the client.
package conformance

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"

	staggerconnect "github.com/stagger-go/stagger/connect"
	conformancev1 "github.com/stagger-go/stagger/connect/internal/conformance/gen/connectrpc/conformance/v1"
	"github.com/stagger-go/stagger/connect/internal/conformance/gen/connectrpc/conformance/v1/conformancev1connect"
	"github.com/stagger-go/stagger/interceptor"
	"github.com/stagger-go/stagger/policy"
)

// maxMessage bounds one length-prefixed message on stdin: a case is a few
// KiB; the suite's largest request messages are about 1 MiB.
const maxMessage = 64 << 20

// Stats counts what stagger did over a run, from each call's Report.
type Stats struct {
	Calls, Retried, Hedged, Attempts atomic.Int64

	mu      sync.Mutex
	reasons map[string]int
}

// String is one line: the counts, then how many calls ended for each reason.
func (s *Stats) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	names := make([]string, 0, len(s.reasons))
	for r, n := range s.reasons {
		names = append(names, fmt.Sprintf("%s %d", r, n))
	}
	sort.Strings(names)
	return fmt.Sprintf("%d calls, %d attempts; %d retried, %d hedged; ended: %s",
		s.Calls.Load(), s.Attempts.Load(), s.Retried.Load(), s.Hedged.Load(), strings.Join(names, ", "))
}

// Run reads cases from in until EOF, runs up to parallel of them at once
// through a client with the stagger policy named policyName (Policies; ""
// runs without stagger), and writes each result to out. An error is one of
// reading or writing, or of the policy; a case's own failure is its result.
func Run(ctx context.Context, in io.Reader, out io.Writer, policyName string, parallel int, stats *Stats) error {
	if parallel < 1 {
		return fmt.Errorf("conformance: parallel %d: want at least 1", parallel)
	}
	var retry *staggerconnect.Client
	if policyName != "" {
		file, ok := Policies[policyName]
		if !ok {
			return fmt.Errorf("conformance: no policy %q (have retry, hedge)", policyName)
		}
		cfg, err := policy.ParseConfig([]byte(file))
		if err != nil {
			return fmt.Errorf("conformance: policy %q: %w", policyName, err)
		}
		if retry, err = staggerconnect.NewClient(cfg); err != nil {
			return err
		}
	}
	c := &client{retry: retry, stats: stats}

	var (
		wg       sync.WaitGroup
		outMu    sync.Mutex
		writeErr error
		slots    = make(chan struct{}, parallel)
	)
	defer wg.Wait()
	for {
		req := new(conformancev1.ClientCompatRequest)
		if err := readMessage(in, req); err != nil {
			if errors.Is(err, io.EOF) {
				return nil
			}
			return err
		}
		select {
		case slots <- struct{}{}:
		case <-ctx.Done():
			return ctx.Err()
		}
		wg.Add(1)
		go func() {
			defer func() { <-slots; wg.Done() }()
			resp := &conformancev1.ClientCompatResponse{TestName: req.TestName}
			if result, err := c.invoke(ctx, req); err != nil {
				resp.Result = &conformancev1.ClientCompatResponse_Error{
					Error: &conformancev1.ClientErrorResult{Message: err.Error()},
				}
			} else {
				resp.Result = &conformancev1.ClientCompatResponse_Response{Response: result}
			}
			outMu.Lock()
			defer outMu.Unlock()
			if writeErr == nil {
				writeErr = writeMessage(out, resp)
			}
		}()
		outMu.Lock()
		err := writeErr
		outMu.Unlock()
		if err != nil {
			return err
		}
	}
}

// readMessage reads one message prefixed by its length, four bytes big
// endian: io.EOF when in ends before a prefix, io.ErrUnexpectedEOF inside one.
func readMessage(in io.Reader, m proto.Message) error {
	var prefix [4]byte
	if _, err := io.ReadFull(in, prefix[:]); err != nil {
		return err
	}
	n := binary.BigEndian.Uint32(prefix[:])
	if n > maxMessage {
		return fmt.Errorf("conformance: a message of %d bytes on stdin, over the %d allowed", n, maxMessage)
	}
	data := make([]byte, n)
	if _, err := io.ReadFull(in, data); err != nil {
		if errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
		return err
	}
	return proto.Unmarshal(data, m)
}

// writeMessage writes m prefixed by its length.
func writeMessage(out io.Writer, m proto.Message) error {
	data, err := proto.Marshal(m)
	if err != nil {
		return err
	}
	buf := binary.BigEndian.AppendUint32(make([]byte, 0, 4+len(data)), uint32(len(data)))
	_, err = out.Write(append(buf, data...))
	return err
}

// client runs cases; its transports are kept per HTTP version and TLS
// setting, as a service keeps one http.Client per backend.
type client struct {
	retry      *staggerconnect.Client
	stats      *Stats
	transports sync.Map // transportKey -> http.RoundTripper
}

type transportKey struct {
	version     conformancev1.HTTPVersion
	serverCert  string
	clientCert  string
	clientKey   string
	noKeepAlive bool
}

func (c *client) invoke(ctx context.Context, req *conformancev1.ClientCompatRequest) (*conformancev1.ClientResponseResult, error) {
	if req.RawRequest != nil {
		return nil, errors.New("raw_request is for the reference client only")
	}
	if req.GetService() != conformancev1connect.ConformanceServiceName {
		return nil, fmt.Errorf("service %q: this client calls only %s", req.GetService(), conformancev1connect.ConformanceServiceName)
	}
	hc, baseURL, err := c.httpClient(req)
	if err != nil {
		return nil, err
	}
	opts, err := clientOptions(req)
	if err != nil {
		return nil, err
	}
	if c.retry != nil {
		opts = append(opts, connect.WithInterceptors(c.retry))
	}
	svc := conformancev1connect.NewConformanceServiceClient(hc, baseURL, opts...)

	if req.TimeoutMs != nil {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, time.Duration(*req.TimeoutMs)*time.Millisecond)
		defer cancel()
	}
	var report interceptor.Report
	if c.retry != nil {
		ctx = staggerconnect.WithCallOptions(ctx, interceptor.WithReport(&report))
		defer c.count(&report)
	}
	timing, err := cancelTimingOf(req.Cancel)
	if err != nil {
		return nil, err
	}
	r := &run{req: req, timing: timing}
	switch req.GetMethod() {
	case "Unary":
		return unary(ctx, r, svc.Unary, (*conformancev1.UnaryResponse).GetPayload)
	case "IdempotentUnary":
		return unary(ctx, r, svc.IdempotentUnary, (*conformancev1.IdempotentUnaryResponse).GetPayload)
	case "Unimplemented":
		return unary(ctx, r, svc.Unimplemented, func(*conformancev1.UnimplementedResponse) *conformancev1.ConformancePayload { return nil })
	case "ServerStream":
		return r.serverStream(ctx, svc)
	case "ClientStream":
		return r.clientStream(ctx, svc)
	case "BidiStream":
		return r.bidiStream(ctx, svc)
	}
	return nil, fmt.Errorf("method %q: not a method of %s", req.GetMethod(), req.GetService())
}

// count adds a finished call's Report to the run's stats. A call whose
// Report stayed zero (ended before stagger saw it) counts as a call only.
func (c *client) count(r *interceptor.Report) {
	if c.stats == nil {
		return
	}
	c.stats.Calls.Add(1)
	c.stats.Attempts.Add(int64(r.Attempts))
	if r.Retries > 0 {
		c.stats.Retried.Add(1)
	}
	if r.Hedges > 0 {
		c.stats.Hedged.Add(1)
	}
	c.stats.mu.Lock()
	defer c.stats.mu.Unlock()
	if c.stats.reasons == nil {
		c.stats.reasons = make(map[string]int)
	}
	reason := r.Reason.String()
	if *r == (interceptor.Report{}) {
		reason = "unreported" // ended before stagger saw it (cancelled before it started)
	}
	c.stats.reasons[reason]++
}

// httpClient returns the transport for the case's HTTP version and TLS
// setting, and the server's base URL.
func (c *client) httpClient(req *conformancev1.ClientCompatRequest) (connect.HTTPClient, string, error) {
	key := transportKey{
		version:    req.HttpVersion,
		serverCert: string(req.ServerTlsCert),
		clientCert: string(req.GetClientTlsCreds().GetCert()),
		clientKey:  string(req.GetClientTlsCreds().GetKey()),
		// net/http: canceling an HTTP/1.1 request can close a pooled
		// connection that another request has just taken, failing that one
		// too; a case that may cancel gets a connection of its own.
		noKeepAlive: req.HttpVersion == conformancev1.HTTPVersion_HTTP_VERSION_1 &&
			(req.Cancel != nil || req.TimeoutMs != nil),
	}
	var tlsConf *tls.Config
	scheme := "http://"
	if len(req.ServerTlsCert) > 0 {
		scheme = "https://"
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(req.ServerTlsCert) {
			return nil, "", errors.New("server_tls_cert: no PEM certificate in it")
		}
		tlsConf = &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
		if creds := req.ClientTlsCreds; creds != nil {
			pair, err := tls.X509KeyPair(creds.Cert, creds.Key)
			if err != nil {
				return nil, "", fmt.Errorf("client_tls_creds: %w", err)
			}
			tlsConf.Certificates = []tls.Certificate{pair}
		}
	} else if req.ClientTlsCreds != nil {
		return nil, "", errors.New("client_tls_creds without server_tls_cert")
	}
	baseURL := scheme + net.JoinHostPort(req.Host, strconv.Itoa(int(req.Port)))
	if rt, ok := c.transports.Load(key); ok {
		return &http.Client{Transport: rt.(http.RoundTripper)}, baseURL, nil
	}
	t := &http.Transport{DisableCompression: true, DisableKeepAlives: key.noKeepAlive, TLSClientConfig: tlsConf}
	switch req.HttpVersion {
	case conformancev1.HTTPVersion_HTTP_VERSION_1:
		if tlsConf != nil {
			tlsConf.NextProtos = []string{"http/1.1"}
		}
	case conformancev1.HTTPVersion_HTTP_VERSION_2:
		if tlsConf != nil {
			tlsConf.NextProtos = []string{"h2"}
			t.ForceAttemptHTTP2 = true
		} else {
			t.Protocols = new(http.Protocols)
			t.Protocols.SetUnencryptedHTTP2(true)
		}
	default:
		return nil, "", fmt.Errorf("http_version %v: this client speaks HTTP/1.1 and HTTP/2", req.HttpVersion)
	}
	rt, _ := c.transports.LoadOrStore(key, t)
	return &http.Client{Transport: rt.(http.RoundTripper)}, baseURL, nil
}

// clientOptions translates the case's protocol, codec, compression and
// receive limit into connect-go's options.
func clientOptions(req *conformancev1.ClientCompatRequest) ([]connect.ClientOption, error) {
	opts := []connect.ClientOption{connect.WithHTTPGet(), connect.WithReadMaxBytes(int(req.MessageReceiveLimit))}
	switch req.Protocol {
	case conformancev1.Protocol_PROTOCOL_CONNECT:
	case conformancev1.Protocol_PROTOCOL_GRPC:
		opts = append(opts, connect.WithGRPC())
	case conformancev1.Protocol_PROTOCOL_GRPC_WEB:
		opts = append(opts, connect.WithGRPCWeb())
	default:
		return nil, fmt.Errorf("protocol %v: not one this client speaks", req.Protocol)
	}
	switch req.Codec {
	case conformancev1.Codec_CODEC_PROTO:
	case conformancev1.Codec_CODEC_JSON:
		opts = append(opts, connect.WithProtoJSON())
	default:
		return nil, fmt.Errorf("codec %v: this client speaks proto and JSON", req.Codec)
	}
	switch req.Compression {
	case conformancev1.Compression_COMPRESSION_UNSPECIFIED, conformancev1.Compression_COMPRESSION_IDENTITY:
		// Ask for no compression either: connect-go offers gzip by default.
		opts = append(opts, connect.WithAcceptCompression("gzip", nil, nil))
	case conformancev1.Compression_COMPRESSION_GZIP:
		opts = append(opts, connect.WithSendGzip())
	default:
		return nil, fmt.Errorf("compression %v: this client has identity and gzip", req.Compression)
	}
	return opts, nil
}

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

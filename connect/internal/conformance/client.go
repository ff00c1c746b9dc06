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

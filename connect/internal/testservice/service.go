// Package testservice is a Connect handler of the test service
// (stagger.testing.v1.TestService) that fails on demand, as each request's
// Script says, for the connect module's tests and examples: the first
// fail_attempts attempts of a key fail with the script's code, message,
// pushback trailers and RetryInfo; the next reset_attempts run and then
// reset the request (the client sees its transport fail after the request
// left). It counts the attempts and the runs of every key.
package testservice

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/stagger-go/stagger/connect/internal/proto/stagger/testing/v1/testingv1connect"
	testingv1 "github.com/stagger-go/stagger/proto/stagger/testing/v1"
)

// PushbackTrailer is the trailer a scripted failure's pushback goes in.
const PushbackTrailer = "grpc-retry-pushback-ms"

// Service is the handler. Safe for concurrent use.
type Service struct {
	testingv1connect.UnimplementedTestServiceHandler

	mu      sync.Mutex
	records map[string]*Record
	holds   map[string]chan struct{}
}

var _ testingv1connect.TestServiceHandler = (*Service)(nil)

// Record is what the service saw of one key.
type Record struct {
	// Attempts is the number of requests that arrived; Runs the number that
	// ran the method (succeeded, or reset after running).
	Attempts, Runs int
	// Headers are each attempt's request headers.
	Headers []http.Header
}

// New returns a Service.
func New() *Service {
	return &Service{records: make(map[string]*Record), holds: make(map[string]chan struct{})}
}

// Hold makes the attempts of key wait, after they arrive, until release
// is called (or their context ends).
func (s *Service) Hold(key string) (release func()) {
	ch := make(chan struct{})
	s.mu.Lock()
	s.holds[key] = ch
	s.mu.Unlock()
	var once sync.Once
	return func() { once.Do(func() { close(ch) }) }
}

// Record returns a copy of what the service saw of key.
func (s *Service) Record(key string) Record {
	s.mu.Lock()
	defer s.mu.Unlock()
	r := s.records[key]
	if r == nil {
		return Record{}
	}
	return Record{Attempts: r.Attempts, Runs: r.Runs, Headers: append([]http.Header(nil), r.Headers...)}
}

// arrive counts an attempt of sc's key and returns its number (1: first).
func (s *Service) arrive(sc *testingv1.Script, h http.Header) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	r := s.records[sc.GetKey()]
	if r == nil {
		r = new(Record)
		s.records[sc.GetKey()] = r
	}
	r.Attempts++
	r.Headers = append(r.Headers, h.Clone())
	return r.Attempts
}

func (s *Service) ran(key string) {
	s.mu.Lock()
	s.records[key].Runs++
	s.mu.Unlock()
}

// attempt plays sc for attempt n: a scripted failure's error, a reset (which
// never returns), or nil to answer.
func (s *Service) attempt(ctx context.Context, sc *testingv1.Script, n int) error {
	s.mu.Lock()
	hold := s.holds[sc.GetKey()]
	s.mu.Unlock()
	if hold != nil {
		select {
		case <-hold:
		case <-ctx.Done():
			return connect.NewError(connect.CodeOf(ctx.Err()), ctx.Err())
		}
	}
	if d := sc.GetDelay().AsDuration(); d > 0 {
		t := time.NewTimer(d)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return connect.NewError(connect.CodeOf(ctx.Err()), ctx.Err())
		}
	}
	fails := int(sc.GetFailAttempts())
	if n <= fails {
		return Failure(sc)
	}
	s.ran(sc.GetKey())
	if n <= fails+int(sc.GetResetAttempts()) {
		// The method ran; the client hears no status: the connection
		// drops (as the gRPC test server's resets do; an HTTP/2 stream
		// reset would be INTERNAL, which grpc-go does not retry either).
		// Under Middleware, once the handler's answer is written (it ran
		// to completion, and the server side may have stored it).
		if d, ok := ctx.Value(dropKey{}).(*drop); ok {
			d.armed.Store(true)
			return nil
		}
		if c, ok := ctx.Value(connKey{}).(net.Conn); ok {
			_ = c.Close()
		}
		panic(http.ErrAbortHandler)
	}
	return nil
}

type connKey struct{}

type dropKey struct{}

// drop is a request's "drop the connection when the answer is written".
type drop struct{ armed atomic.Bool }

// Middleware wraps the service's handler so that a reset attempt runs to
// completion, answer included, under every interceptor, and the
// connection drops as the answer is written.
func Middleware(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		d := new(drop)
		r = r.WithContext(context.WithValue(r.Context(), dropKey{}, d))
		h.ServeHTTP(&dropWriter{ResponseWriter: w, d: d, ctx: r.Context()}, r)
	})
}

type dropWriter struct {
	http.ResponseWriter
	d   *drop
	ctx context.Context
}

func (w *dropWriter) check() {
	if w.d.armed.Load() {
		if c, ok := w.ctx.Value(connKey{}).(net.Conn); ok {
			_ = c.Close()
		}
		panic(http.ErrAbortHandler)
	}
}

func (w *dropWriter) WriteHeader(code int) {
	w.check()
	w.ResponseWriter.WriteHeader(code)
}

func (w *dropWriter) Write(b []byte) (int, error) {
	w.check()
	return w.ResponseWriter.Write(b)
}

func (w *dropWriter) Flush() {
	w.check()
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

func (w *dropWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// ConnContext is the http.Server's ConnContext the service needs to drop a
// connection (reset_attempts).
func ConnContext(ctx context.Context, c net.Conn) context.Context {
	return context.WithValue(ctx, connKey{}, c)
}

// Failure returns sc's scripted failure.
func Failure(sc *testingv1.Script) *connect.Error {
	code := connect.Code(sc.GetCode())
	if code == 0 {
		code = connect.CodeUnavailable
	}
	err := connect.NewError(code, errors.New(sc.GetMessage()))
	if sc.GetMessage() == "" {
		err = connect.NewError(code, fmt.Errorf("scripted %v", code))
	}
	for _, p := range sc.GetPushback() {
		err.Meta().Add(PushbackTrailer, p)
	}
	if d := sc.GetRetryInfoDelay(); d != nil {
		if detail, derr := connect.NewErrorDetail(&errdetails.RetryInfo{RetryDelay: durationpb.New(d.AsDuration())}); derr == nil {
			err.AddDetail(detail)
		}
	}
	return err
}

func (s *Service) reply(sc *testingv1.Script, n int) *testingv1.Reply {
	return &testingv1.Reply{Key: sc.GetKey(), Attempt: int32(n), Payload: make([]byte, sc.GetPayloadBytes())}
}

// Write is not idempotent.
func (s *Service) Write(ctx context.Context, req *connect.Request[testingv1.WriteRequest]) (*connect.Response[testingv1.WriteResponse], error) {
	sc := req.Msg.GetScript()
	n := s.arrive(sc, req.Header())
	if err := s.attempt(ctx, sc, n); err != nil {
		return nil, err
	}
	return connect.NewResponse(&testingv1.WriteResponse{Reply: s.reply(sc, n)}), nil
}

// Get has no side effects.
func (s *Service) Get(ctx context.Context, req *connect.Request[testingv1.GetRequest]) (*connect.Response[testingv1.GetResponse], error) {
	sc := req.Msg.GetScript()
	n := s.arrive(sc, req.Header())
	if err := s.attempt(ctx, sc, n); err != nil {
		return nil, err
	}
	return connect.NewResponse(&testingv1.GetResponse{Reply: s.reply(sc, n)}), nil
}

// Put is idempotent.
func (s *Service) Put(ctx context.Context, req *connect.Request[testingv1.PutRequest]) (*connect.Response[testingv1.PutResponse], error) {
	sc := req.Msg.GetScript()
	n := s.arrive(sc, req.Header())
	if err := s.attempt(ctx, sc, n); err != nil {
		return nil, err
	}
	return connect.NewResponse(&testingv1.PutResponse{Reply: s.reply(sc, n)}), nil
}

// ListItems sends response_count items; a failing attempt sends
// messages_before_failure of them, then fails.
func (s *Service) ListItems(ctx context.Context, req *connect.Request[testingv1.ListItemsRequest], st *connect.ServerStream[testingv1.ListItemsResponse]) error {
	sc := req.Msg.GetScript()
	n := s.arrive(sc, req.Header())
	count := int64(sc.GetResponseCount())
	failing := n <= int(sc.GetFailAttempts())
	if failing {
		count = min(count, int64(sc.GetMessagesBeforeFailure()))
	}
	for seq := req.Msg.GetStartAfter() + 1; seq <= count; seq++ {
		r := s.reply(sc, n)
		r.Seq = seq
		if err := st.Send(&testingv1.ListItemsResponse{Reply: r}); err != nil {
			return err
		}
	}
	if failing {
		return Failure(sc)
	}
	s.ran(sc.GetKey())
	return nil
}

// Upload receives every message, then answers with the seqs it received; a
// failing attempt fails after messages_before_failure messages (0: once the
// client closed its side).
func (s *Service) Upload(ctx context.Context, st *connect.ClientStream[testingv1.UploadRequest]) (*connect.Response[testingv1.UploadResponse], error) {
	var sc *testingv1.Script
	n := 0
	var received []int64
	for st.Receive() {
		m := st.Msg()
		if sc == nil {
			sc = m.GetScript()
			n = s.arrive(sc, st.RequestHeader())
		}
		received = append(received, m.GetSeq())
		if n <= int(sc.GetFailAttempts()) && sc.GetMessagesBeforeFailure() > 0 && len(received) == int(sc.GetMessagesBeforeFailure()) {
			return nil, Failure(sc)
		}
	}
	if err := st.Err(); err != nil {
		return nil, err
	}
	if sc == nil {
		return nil, connect.NewError(connect.CodeInvalidArgument, errors.New("no message"))
	}
	if n <= int(sc.GetFailAttempts()) {
		return nil, Failure(sc)
	}
	s.ran(sc.GetKey())
	return connect.NewResponse(&testingv1.UploadResponse{Reply: s.reply(sc, n), Received: received}), nil
}

// Chat answers each message with its seq; a failing attempt echoes
// messages_before_failure messages, then fails.
func (s *Service) Chat(ctx context.Context, st *connect.BidiStream[testingv1.ChatRequest, testingv1.ChatResponse]) error {
	var sc *testingv1.Script
	n, echoed := 0, 0
	for {
		m, err := st.Receive()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return err
		}
		if sc == nil {
			sc = m.GetScript()
			n = s.arrive(sc, st.RequestHeader())
		}
		if n <= int(sc.GetFailAttempts()) && echoed == int(sc.GetMessagesBeforeFailure()) {
			return Failure(sc)
		}
		r := s.reply(sc, n)
		r.Seq = m.GetSeq()
		if err := st.Send(&testingv1.ChatResponse{Reply: r}); err != nil {
			return err
		}
		echoed++
	}
	if sc != nil && n <= int(sc.GetFailAttempts()) {
		return Failure(sc)
	}
	if sc != nil {
		s.ran(sc.GetKey())
	}
	return nil
}

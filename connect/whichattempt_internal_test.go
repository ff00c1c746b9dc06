package staggerconnect

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"

	"connectrpc.com/connect"

	"github.com/stagger-go/stagger/connect/internal/proto/stagger/testing/v1/testingv1connect"
	"github.com/stagger-go/stagger/policy"
	testingv1 "github.com/stagger-go/stagger/proto/stagger/testing/v1"
)

// hangFirst serves Chat: the first attempt to arrive waits for its
// cancellation; every later one answers the first message with one reply
// and the response header x-attempt.
type hangFirst struct {
	testingv1connect.UnimplementedTestServiceHandler
	arrived atomic.Int32
}

func (h *hangFirst) Chat(ctx context.Context, st *connect.BidiStream[testingv1.ChatRequest, testingv1.ChatResponse]) error {
	n := h.arrived.Add(1)
	if n == 1 {
		<-ctx.Done()
		return connect.NewError(connect.CodeCanceled, ctx.Err())
	}
	if _, err := st.Receive(); err != nil {
		return err
	}
	st.ResponseHeader().Set("x-attempt", "winner")
	return st.Send(&testingv1.ChatResponse{Reply: &testingv1.Reply{Attempt: n}})
}

// captureConns is an interceptor placed outside stagger's: it keeps the
// stagger stream of each call.
type captureConns struct {
	mu    sync.Mutex
	conns []*retryConn
}

func (c *captureConns) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc { return next }
func (c *captureConns) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return next
}
func (c *captureConns) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return func(ctx context.Context, spec connect.Spec) connect.StreamingClientConn {
		conn := next(ctx, spec)
		c.mu.Lock()
		c.conns = append(c.conns, conn.(*retryConn))
		c.mu.Unlock()
		return conn
	}
}

// A hedged stream's ResponseHeader is the winner's, whatever the engine
// last read of a hedge that lost: it answered with the attempt the engine
// asked last, and a loser cancelled by the commit still counted as asked
// when its watcher read its trailer (the Connect suite's Duplicate
// Metadata/.../bidi-stream/half-duplex/error-with-responses got a loser's
// headers). Here the loser's trailer is read again and again beside the
// caller's ResponseHeader.
func TestHedgedStreamHeaderIsNeverALosers(t *testing.T) {
	mux := http.NewServeMux()
	mux.Handle(testingv1connect.NewTestServiceHandler(new(hangFirst)))
	srv := httptest.NewUnstartedServer(mux)
	var p http.Protocols
	p.SetUnencryptedHTTP2(true)
	srv.Config.Protocols = &p
	srv.Start()
	tr := &http.Transport{Protocols: &p}
	defer srv.Close()
	defer tr.CloseIdleConnections()
	cfg, err := policy.ParseConfig([]byte(`{"methodConfig": [{
	  "name": [{"service": "stagger.testing.v1.TestService", "method": "Chat"}], "idempotent": true,
	  "hedgingPolicy": {"maxAttempts": 2, "hedgingDelay": "0.3s", "nonFatalStatusCodes": ["UNAVAILABLE"]}}]}`))
	if err != nil {
		t.Fatal(err)
	}
	sc, err := NewClient(cfg)
	if err != nil {
		t.Fatal(err)
	}
	var capture captureConns
	client := testingv1connect.NewTestServiceClient(&http.Client{Transport: tr}, srv.URL, connect.WithInterceptors(&capture, sc))
	st := client.Chat(context.Background())
	defer func() {
		_ = st.CloseRequest()
		_ = st.CloseResponse()
	}()
	if err := st.Send(&testingv1.ChatRequest{Seq: 1}); err != nil {
		t.Fatal(err)
	}
	// The first attempt opened as the first message was sent; the hedge opens
	// after the hedging delay (r.open makes each current).
	r := capture.conns[0]
	r.mu.Lock()
	loser := r.cur
	r.mu.Unlock()
	if _, err := st.Receive(); err != nil {
		t.Fatalf("Receive: %v", err)
	}
	r.mu.Lock()
	winner := r.cur
	r.mu.Unlock()
	if loser == winner {
		t.Fatal("the hedge opened before the first attempt could be read")
	}
	<-loser.ctx.Done()
	done := make(chan struct{})
	go func() {
		defer close(done)
		for range 2000 {
			loser.Trailer()
			_, _ = loser.Header()
		}
	}()
	for i := range 2000 {
		if got := st.ResponseHeader().Get("x-attempt"); got != "winner" {
			t.Fatalf("read %d: ResponseHeader x-attempt = %q, want the winner's", i, got)
		}
	}
	<-done
}

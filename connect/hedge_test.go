package staggerconnect_test

import (
	"context"
	"errors"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"

	staggerconnect "github.com/stagger-go/stagger/connect"
	"github.com/stagger-go/stagger/connect/internal/proto/stagger/testing/v1/testingv1connect"
	"github.com/stagger-go/stagger/interceptor"
	testingv1 "github.com/stagger-go/stagger/proto/stagger/testing/v1"
)

// hedgeFile hedges Get (no side effects): 2 attempts, the second after
// delay or at once after a non-fatal UNAVAILABLE.
func hedgeFile(delay string) string {
	return `{"methodConfig": [{
	  "name": [{"service": "stagger.testing.v1.TestService", "method": "Get"}],
	  "hedgingPolicy": {"maxAttempts": 2, "hedgingDelay": "` + delay + `", "nonFatalStatusCodes": ["UNAVAILABLE"]}}]}`
}

func TestHedging(t *testing.T) {
	forEachProtocol(t, func(t *testing.T, p protocol) {
		t.Run("the second attempt wins", func(t *testing.T) {
			ts := newTestServer(t, p.h2c, nil)
			var rep interceptor.Report
			client := ts.testClient(p, newClient(t, hedgeFile("10s")))
			ctx := staggerconnect.WithCallOptions(context.Background(), interceptor.WithReport(&rep))
			resp, err := client.Get(ctx, connect.NewRequest(&testingv1.GetRequest{Script: &testingv1.Script{Key: "k", FailAttempts: 1}}))
			if err != nil {
				t.Fatal(err)
			}
			if got := resp.Msg.GetReply().GetAttempt(); got != 2 || rep.Hedges != 1 {
				t.Errorf("answer of attempt %d after %d hedges, want 2 after 1", got, rep.Hedges)
			}
		})
		t.Run("two attempts at once", func(t *testing.T) {
			ts := newTestServer(t, p.h2c, nil)
			release := ts.svc.Hold("k")
			go func() {
				for ts.svc.Record("k").Attempts < 2 {
					time.Sleep(time.Millisecond)
				}
				release()
			}()
			var rep interceptor.Report
			client := ts.testClient(p, newClient(t, hedgeFile("0s")))
			ctx := staggerconnect.WithCallOptions(context.Background(), interceptor.WithReport(&rep))
			req := connect.NewRequest(&testingv1.GetRequest{Script: &testingv1.Script{Key: "k"}})
			req.Header().Set("x-app", "mine")
			resp, err := client.Get(ctx, req)
			if err != nil {
				t.Fatal(err)
			}
			if a := resp.Msg.GetReply().GetAttempt(); a != 1 && a != 2 {
				t.Errorf("answer of attempt %d", a)
			}
			rec := ts.svc.Record("k")
			if rec.Attempts != 2 || rep.Hedges != 1 {
				t.Errorf("server saw %d attempts, report %d hedges; want 2, 1", rec.Attempts, rep.Hedges)
			}
			for i, h := range rec.Headers {
				if h.Get("x-app") != "mine" {
					t.Errorf("attempt %d lost the caller's header", i+1)
				}
			}
			if got := req.Header().Get("grpc-previous-rpc-attempts"); got != "" {
				t.Errorf("the caller's request was written: grpc-previous-rpc-attempts %q", got)
			}
		})
	})
}

// slowFirstList serves ListItems: the first attempt to arrive answers
// nothing until its client goes away; every later one sends one item at
// once, from its attempt.
type slowFirstList struct {
	testingv1connect.UnimplementedTestServiceHandler
	arrived atomic.Int32
}

func (s *slowFirstList) ListItems(ctx context.Context, _ *connect.Request[testingv1.ListItemsRequest], st *connect.ServerStream[testingv1.ListItemsResponse]) error {
	n := s.arrived.Add(1)
	if n == 1 {
		<-ctx.Done()
		return connect.NewError(connect.CodeCanceled, ctx.Err())
	}
	return st.Send(&testingv1.ListItemsResponse{Reply: &testingv1.Reply{Attempt: n}})
}

// A hedged server stream sends its hedge on the hedging delay while the
// first attempt waits for its response: connect-go sends a server stream's
// request, and waits for the response headers, inside Send, which held the
// hedged stream's sending side (and the Connect stream's) until the first
// attempt answered, so the hedge never went before it.
func TestHedgedServerStreamSendsItsHedge(t *testing.T) {
	for _, p := range streamProtocols(false) {
		t.Run(p.name, func(t *testing.T) {
			mux := http.NewServeMux()
			mux.Handle(testingv1connect.NewTestServiceHandler(new(slowFirstList)))
			url, tr := serve(t, p.h2c, mux)
			client := testingv1connect.NewTestServiceClient(&http.Client{Transport: tr}, url, append([]connect.ClientOption{connect.WithInterceptors(newClient(t, `{"methodConfig": [{
			  "name": [{"service": "stagger.testing.v1.TestService", "method": "ListItems"}], "idempotent": true,
			  "hedgingPolicy": {"maxAttempts": 2, "hedgingDelay": "0.05s", "nonFatalStatusCodes": ["UNAVAILABLE"]}}]}`))}, p.opts...)...)
			// The first attempt never answers: without its hedge, the call
			// ends at this deadline.
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
			defer cancel()
			start := time.Now()
			st, err := client.ListItems(ctx, connect.NewRequest(&testingv1.ListItemsRequest{}))
			if err != nil {
				t.Fatal(err)
			}
			defer st.Close()
			if !st.Receive() {
				t.Fatalf("no item after %v: %v", time.Since(start), st.Err())
			}
			if a := st.Msg().GetReply().GetAttempt(); a != 2 {
				t.Errorf("item from attempt %d, want the hedge's (2)", a)
			}
			t.Logf("the hedge's item after %v", time.Since(start))
		})
	}
}

// A server stream whose first attempt's per-attempt timer fires while
// connect-go's Send waits for its response headers is retried: the
// cancelled Send's error is the attempt's end (io.EOF to the engine, as
// grpc-go's SendMsg says), not a message the transport refused, which
// failed the call CANCELED before.
func TestServerStreamPerAttemptTimeoutInSend(t *testing.T) {
	for _, p := range streamProtocols(false) {
		t.Run(p.name, func(t *testing.T) {
			mux := http.NewServeMux()
			mux.Handle(testingv1connect.NewTestServiceHandler(new(slowFirstList)))
			url, tr := serve(t, p.h2c, mux)
			client := testingv1connect.NewTestServiceClient(&http.Client{Transport: tr}, url, append([]connect.ClientOption{connect.WithInterceptors(newClient(t, `{"methodConfig": [{
			  "name": [{"service": "stagger.testing.v1.TestService", "method": "ListItems"}], "idempotent": true,
			  "retryPolicy": {"maxAttempts": 2, "initialBackoff": "0.001s", "maxBackoff": "0.001s", "backoffMultiplier": 1,
			    "retryableStatusCodes": ["UNAVAILABLE"], "perAttemptRecvTimeout": "0.05s"}}]}`))}, p.opts...)...)
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
			defer cancel()
			st, err := client.ListItems(ctx, connect.NewRequest(&testingv1.ListItemsRequest{}))
			if err != nil {
				t.Fatal(err)
			}
			defer st.Close()
			if !st.Receive() {
				t.Fatalf("no item: %v", st.Err())
			}
			if a := st.Msg().GetReply().GetAttempt(); a != 2 {
				t.Errorf("item from attempt %d, want the retry's (2)", a)
			}
		})
	}
}

// silentUpload serves Upload: no attempt answers until its client goes
// away.
type silentUpload struct {
	testingv1connect.UnimplementedTestServiceHandler
}

func (silentUpload) Upload(ctx context.Context, st *connect.ClientStream[testingv1.UploadRequest]) (*connect.Response[testingv1.UploadResponse], error) {
	// Read to the request's end: net/http's HTTP/1.1 server sees the
	// client go away only after that.
	for st.Receive() {
	}
	<-ctx.Done()
	return nil, connect.NewError(connect.CodeCanceled, ctx.Err())
}

// tripsRefusingHedges fails the hedges' requests (grpc-previous-rpc-attempts
// set) before they leave, INTERNAL, and counts the others in flight.
type tripsRefusingHedges struct {
	next     http.RoundTripper
	inFlight atomic.Int32
}

func (c *tripsRefusingHedges) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.Header.Get("grpc-previous-rpc-attempts") != "" {
		if r.Body != nil {
			_ = r.Body.Close()
		}
		return nil, connect.NewError(connect.CodeInternal, errors.New("refused"))
	}
	c.inFlight.Add(1)
	defer c.inFlight.Add(-1)
	return c.next.RoundTrip(r)
}

// An attempt of a client stream cancelled while its request is open ends
// its HTTP request, its body included: net/http's HTTP/1.1 transport reads
// a streaming request's body to its end before a cancelled round trip
// returns, and stagger closed an attempt's request only when the
// application closed its side, which reaches the attempts still in the
// race alone. Here the hedge fails fatally while the first attempt's
// request is open: the stream fails, and the first attempt, cancelled,
// kept its round trip and its goroutines (the round trip's, the
// connection's read and write loops) for good; so did a hedge that lost
// while its replay ran (the model test's 100,000 seeds left 32 such).
func TestCancelledAttemptEndsItsRequest(t *testing.T) {
	for _, p := range streamProtocols(false) {
		t.Run(p.name, func(t *testing.T) {
			mux := http.NewServeMux()
			mux.Handle(testingv1connect.NewTestServiceHandler(silentUpload{}))
			url, tr := serve(t, p.h2c, mux)
			trips := &tripsRefusingHedges{next: tr}
			client := testingv1connect.NewTestServiceClient(&http.Client{Transport: trips}, url, append([]connect.ClientOption{connect.WithInterceptors(newClient(t, `{"methodConfig": [{
			  "name": [{"service": "stagger.testing.v1.TestService", "method": "Upload"}], "idempotent": true,
			  "hedgingPolicy": {"maxAttempts": 2, "hedgingDelay": "0.02s", "nonFatalStatusCodes": ["UNAVAILABLE"]}}]}`))}, p.opts...)...)
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
			defer cancel()
			up := client.Upload(ctx)
			if err := up.Send(&testingv1.UploadRequest{Seq: 1}); err != nil {
				t.Fatal(err)
			}
			// The stream fails on the hedge's INTERNAL (ResponseHeader
			// waits for the stream to commit or fail) with the first
			// attempt's request open.
			conn, err := up.Conn()
			if err != nil {
				t.Fatal(err)
			}
			conn.ResponseHeader()
			if _, err := up.CloseAndReceive(); connect.CodeOf(err) != connect.CodeInternal {
				t.Fatalf("CloseAndReceive = %v, want the hedge's INTERNAL", err)
			}
			deadline := time.Now().Add(2 * time.Second)
			for trips.inFlight.Load() > 0 && time.Now().Before(deadline) {
				time.Sleep(time.Millisecond)
			}
			if n := trips.inFlight.Load(); n > 0 {
				t.Errorf("%d round trips still in flight 2 s after the call", n)
			}
		})
	}
}

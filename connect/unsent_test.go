package staggerconnect_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptrace"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"

	staggerconnect "github.com/stagger-go/stagger/connect"
	"github.com/stagger-go/stagger/connect/internal/proto/stagger/testing/v1/testingv1connect"
	"github.com/stagger-go/stagger/interceptor"
	testingv1 "github.com/stagger-go/stagger/proto/stagger/testing/v1"
)

// unsentTransport fails the requests whose numbers (1, 2, ... in the order
// they reach it) it lists with context.Canceled, without sending them, as
// net/http fails a request it gave up on before writing it (connect-go
// then says CANCELED, `Post "...": context canceled`, with neither the
// attempt's nor the call's context done). The others go to next.
// Those listed in written are failed so after their headers were written
// (the request's trace hears WroteHeaders), as when another request's
// cancellation closes the pooled HTTP/1.1 connection under it.
type unsentTransport struct {
	next          http.RoundTripper
	fail, written map[int64]bool
	n             atomic.Int64
}

func (t *unsentTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	n := t.n.Add(1)
	if t.fail[n] || t.written[n] {
		if tr := httptrace.ContextClientTrace(r.Context()); t.written[n] && tr != nil && tr.WroteHeaders != nil {
			tr.WroteHeaders()
		}
		if r.Body != nil {
			_ = r.Body.Close()
		}
		return nil, context.Canceled
	}
	return t.next.RoundTrip(r)
}

// unsentClient is a client of ts in protocol p through stagger's Client for
// file, whose requests numbered in fail never leave it (-n: request n fails
// after its headers were written).
func unsentClient(t *testing.T, ts *testServer, p protocol, file string, fail ...int64) testingv1connect.TestServiceClient {
	t.Helper()
	tr := &unsentTransport{next: ts.client.Transport, fail: make(map[int64]bool), written: make(map[int64]bool)}
	for _, n := range fail {
		if n < 0 {
			tr.written[-n] = true
		} else {
			tr.fail[n] = true
		}
	}
	opts := append([]connect.ClientOption{connect.WithInterceptors(newClient(t, file))}, p.opts...)
	return testingv1connect.NewTestServiceClient(&http.Client{Transport: tr}, ts.url, opts...)
}

// unsentCalls are the call shapes an unsent request can fail: unary, a
// server stream, and a bidi stream (over HTTP/2).
var unsentCalls = map[string]struct {
	call func(ctx context.Context, c testingv1connect.TestServiceClient, sc *testingv1.Script) error
	bidi bool
}{
	"unary": {call: func(ctx context.Context, c testingv1connect.TestServiceClient, sc *testingv1.Script) error {
		_, err := c.Get(ctx, connect.NewRequest(&testingv1.GetRequest{Script: sc}))
		return err
	}},
	"server-stream": {call: connectCalls["server-stream"]},
	"bidi": {bidi: true, call: func(ctx context.Context, c testingv1connect.TestServiceClient, sc *testingv1.Script) error {
		st := c.Chat(ctx)
		if err := st.Send(&testingv1.ChatRequest{Script: sc, Seq: 1}); err != nil && !errors.Is(err, io.EOF) {
			return err
		}
		if err := st.CloseRequest(); err != nil {
			return err
		}
		for {
			if _, err := st.Receive(); err != nil {
				_ = st.CloseResponse()
				if errors.Is(err, io.EOF) {
					return nil
				}
				return err
			}
		}
	}},
}

// TestUnsentRequestRetriedTransparently: a request that never left the
// client (its transport failed it before writing it, with an error
// connect-go codes CANCELED) is sent again at once, once per call, without
// counting an attempt, under a retry and a hedging policy alike, as
// grpc-go retries a stream that never reached the server; the server sees
// one request and the call succeeds (under the retry policy: a hedge may
// go out meanwhile under the hedging one). A second such failure is the
// transport's UNAVAILABLE to the policy (retried here), never the fatal
// CANCELED of a server that never saw the request.
func TestUnsentRequestRetriedTransparently(t *testing.T) {
	for fileName, file := range streamFiles {
		for callName, c := range unsentCalls {
			for _, p := range streamProtocols(c.bidi) {
				t.Run(fileName+"/"+callName+"/"+p.name, func(t *testing.T) {
					for _, tc := range []struct {
						fail     []int64
						attempts int
					}{{fail: []int64{1}, attempts: 1}, {fail: []int64{1, 2}, attempts: 2}} {
						ts := newTestServer(t, p.h2c, nil)
						client := unsentClient(t, ts, p, file, tc.fail...)
						var rep interceptor.Report
						ctx := staggerconnect.WithCallOptions(context.Background(), interceptor.WithReport(&rep))
						if err := c.call(ctx, client, &testingv1.Script{Key: "k", ResponseCount: 2}); err != nil {
							t.Fatalf("%d unsent: %v", len(tc.fail), err)
						}
						if fileName == "hedge" {
							// Its hedges go out while the first attempt
							// waits for its first message: how many is
							// the machine's speed.
							continue
						}
						if rep.Attempts != tc.attempts {
							t.Errorf("%d unsent: report %v, want %d attempts", len(tc.fail), &rep, tc.attempts)
						}
						if got := ts.svc.Record("k").Attempts; got != 1 {
							t.Errorf("%d unsent: the server saw %d requests, want 1", len(tc.fail), got)
						}
					}
				})
			}
		}
	}
}

// TestUnsentHedgeIsNotFatal is the Connect conformance case that failed
// about one hedged run in 30 (Errors/HTTPVersion:1/.../server-stream/
// error-with-no-responses): every request that reaches the server fails
// with INTERNAL, a non-fatal code of the hedging policy, and the hedge's
// request fails in the client's transport before it is written, which
// connect-go codes CANCELED. The stream must end with the server's
// INTERNAL after its three attempts, as without the lost request, never
// with the CANCELED no server sent.
func TestUnsentHedgeIsNotFatal(t *testing.T) {
	const file = `{"methodConfig": [{
	  "name": [{"service": "stagger.testing.v1.TestService"}], "idempotent": true,
	  "hedgingPolicy": {"maxAttempts": 3, "hedgingDelay": "0.005s", "nonFatalStatusCodes": ["INTERNAL", "UNAVAILABLE"]}}],
	  "retryThrottling": {"maxTokens": 1000, "tokenRatio": 1}}`
	for _, p := range protocols {
		t.Run(p.name, func(t *testing.T) {
			ts := newTestServer(t, p.h2c, nil)
			client := unsentClient(t, ts, p, file, 2)
			err := connectCalls["server-stream"](context.Background(), client,
				&testingv1.Script{Key: "k", FailAttempts: 100, Code: int32(connect.CodeInternal), Message: "no responses"})
			if cerr, ok := asConnectError(err); !ok || cerr.Code() != connect.CodeInternal || cerr.Message() != "no responses" {
				t.Errorf("error %v, want the server's internal: no responses", err)
			}
			if got := ts.svc.Record("k").Attempts; got != 3 {
				t.Errorf("the server saw %d requests, want 3", got)
			}
		})
	}
}

// TestStrayCancelAfterWriteIsUnavailable: a request whose headers were
// written and that then fails with a context error no context of the call
// explains (connect-go: CANCELED) is a lost transport to the policy,
// UNAVAILABLE under the ambiguity rule (the methods are idempotent here:
// retried), not the fatal CANCELED of a server; it is not sent again
// transparently, for it may have reached the server.
func TestStrayCancelAfterWriteIsUnavailable(t *testing.T) {
	const file = `{"methodConfig": [{
	  "name": [{"service": "stagger.testing.v1.TestService"}], "idempotent": true,
	  "retryPolicy": {"maxAttempts": 3, "initialBackoff": "0.001s", "maxBackoff": "0.002s",
	    "backoffMultiplier": 2, "retryableStatusCodes": ["UNAVAILABLE"]}}]}`
	for callName, c := range unsentCalls {
		for _, p := range streamProtocols(c.bidi) {
			t.Run(callName+"/"+p.name, func(t *testing.T) {
				ts := newTestServer(t, p.h2c, nil)
				client := unsentClient(t, ts, p, file, -1)
				var rep interceptor.Report
				ctx := staggerconnect.WithCallOptions(context.Background(), interceptor.WithReport(&rep))
				if err := c.call(ctx, client, &testingv1.Script{Key: "k", ResponseCount: 2}); err != nil {
					t.Fatal(err)
				}
				if rep.Attempts != 2 {
					t.Errorf("report %v, want 2 attempts", &rep)
				}
			})
		}
	}
}

// TestUnsentReplayKeepsEveryMessage: a client stream whose first attempt
// failed (UNAVAILABLE, after the application had sent its messages and
// closed its side) is replayed on the next attempt, and that attempt's
// request fails in the client's transport before it is written, under the
// replay's first message: the attempt is opened again transparently
// (attemptStream.reopen) and its server must receive every message the
// application sent, and the request's end. The replay stopped at the
// first message's io.EOF, so the re-opened request carried that message
// alone (and under a retry policy no end, and hung). Found by the Connect
// conformance suite under hedging (client-stream/error and
// error-multiple-requests over HTTP/1.1, 2 runs in 30: "expecting 2
// request messages to be described but instead got 1").
func TestUnsentReplayKeepsEveryMessage(t *testing.T) {
	files := map[string]string{
		"retry": retryFile,
		// A hedging delay past the test: the second attempt goes when the
		// first fails, after the application closed its side.
		"hedge": `{"methodConfig": [{
		  "name": [{"service": "stagger.testing.v1.TestService"}], "idempotent": true,
		  "hedgingPolicy": {"maxAttempts": 3, "hedgingDelay": "2s", "nonFatalStatusCodes": ["UNAVAILABLE"]}}]}`,
	}
	for fileName, file := range files {
		for _, p := range streamProtocols(false) {
			t.Run(fileName+"/"+p.name, func(t *testing.T) {
				ts := newTestServer(t, p.h2c, nil)
				// Request 2 is the second attempt's: it never leaves.
				client := unsentClient(t, ts, p, file, 2)
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				defer cancel()
				up := client.Upload(ctx)
				sc := &testingv1.Script{Key: "k", FailAttempts: 1}
				for seq := int64(1); seq <= 3; seq++ {
					if err := up.Send(&testingv1.UploadRequest{Script: sc, Seq: seq}); err != nil {
						t.Fatalf("Send %d: %v", seq, err)
					}
				}
				res, err := up.CloseAndReceive()
				if err != nil {
					t.Fatalf("CloseAndReceive: %v", err)
				}
				if got := res.Msg.GetReceived(); !slices.Equal(got, []int64{1, 2, 3}) {
					t.Errorf("the answering attempt (%d) received %v, want [1 2 3]", res.Msg.GetReply().GetAttempt(), got)
				}
			})
		}
	}
}

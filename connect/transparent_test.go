package staggerconnect_test

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"connectrpc.com/connect"

	staggerconnect "github.com/stagger-go/stagger/connect"
	"github.com/stagger-go/stagger/interceptor"
	testingv1 "github.com/stagger-go/stagger/proto/stagger/testing/v1"
)

// streamFiles retry, or hedge, every method of the test service on
// UNAVAILABLE (hedging: every method marked idempotent, so that streams
// hedge).
var streamFiles = map[string]string{
	"retry": retryFile,
	"hedge": `{"methodConfig": [{
	  "name": [{"service": "stagger.testing.v1.TestService"}], "idempotent": true,
	  "hedgingPolicy": {"maxAttempts": 3, "hedgingDelay": "0.005s", "nonFatalStatusCodes": ["UNAVAILABLE"]}}]}`,
}

// withCustomHeader wraps the test service so that every response carries a
// header of the application's, as the Connect conformance suite's server
// sends one (x-custom-header).
func withCustomHeader(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("x-custom-header", "custom")
		h.ServeHTTP(w, r)
	})
}

// streamOutcome is what a caller reads of a server stream: its messages,
// its end, and its response headers and trailers read after Close, as the
// Connect conformance client reads them.
type streamOutcome struct {
	messages         int
	code             connect.Code
	header, trailers string
}

func serverStreamOutcome(t *testing.T, ts *testServer, p protocol, ics []connect.Interceptor, script *testingv1.Script) streamOutcome {
	t.Helper()
	client := ts.testClient(p, ics...)
	st, err := client.ListItems(context.Background(), connect.NewRequest(&testingv1.ListItemsRequest{Script: script}))
	if err != nil {
		t.Fatal(err)
	}
	var o streamOutcome
	for st.Receive() {
		o.messages++
	}
	o.code = connect.CodeOf(st.Err())
	if st.Err() == nil {
		o.code = 0
	}
	_ = st.Close()
	o.header = st.ResponseHeader().Get("x-custom-header")
	o.trailers = fmt.Sprint(len(st.ResponseTrailer()))
	return o
}

// TestServerStreamReadsAsWithoutStagger: a server stream that ended (with
// messages or none, with success or a failure stagger retried or hedged
// and that failed again at its last attempt) shows its caller the headers,
// trailers, messages and status it would show without stagger, read after
// Close as the conformance client reads them. Found by the Connect
// conformance suite (server-stream/no-responses, error-with-no-responses):
// the headers of an attempt that sent no message were dropped.
func TestServerStreamReadsAsWithoutStagger(t *testing.T) {
	scripts := map[string]func(key string) *testingv1.Script{
		"no messages": func(key string) *testingv1.Script { return &testingv1.Script{Key: key} },
		"three messages": func(key string) *testingv1.Script {
			return &testingv1.Script{Key: key, ResponseCount: 3}
		},
		"unavailable at every attempt": func(key string) *testingv1.Script {
			return &testingv1.Script{Key: key, FailAttempts: 100, ResponseCount: 3}
		},
		"internal at once": func(key string) *testingv1.Script {
			return &testingv1.Script{Key: key, FailAttempts: 100, Code: int32(connect.CodeInternal)}
		},
		"unavailable after a message": func(key string) *testingv1.Script {
			return &testingv1.Script{Key: key, FailAttempts: 100, MessagesBeforeFailure: 1, ResponseCount: 3}
		},
	}
	for _, p := range streamProtocols(false) {
		t.Run(p.name, func(t *testing.T) {
			ts := newTestServer(t, p.h2c, withCustomHeader)
			for name, script := range scripts {
				want := serverStreamOutcome(t, ts, p, nil, script("plain "+name))
				if want.header != "custom" {
					t.Fatalf("%s without stagger: header %q, want custom", name, want.header)
				}
				for _, file := range []string{"retry", "hedge"} {
					// A few runs: the hedge's attempts race.
					for i := range 5 {
						retry := newClient(t, streamFiles[file])
						got := serverStreamOutcome(t, ts, p, []connect.Interceptor{retry}, script(fmt.Sprintf("%s %s %d", file, name, i)))
						if got != want {
							t.Errorf("%s, %s: read %+v through stagger, %+v without", name, file, got, want)
						}
					}
				}
			}
		})
	}
}

// truncating answers every gRPC and gRPC-Web call with a response whose
// one message is cut short (an envelope that promises 10 bytes and holds
// 3) and no status: connect-go reports a protocol error (INTERNAL, its
// cause io.ErrUnexpectedEOF), which stagger's engine retries as a lost
// transport (UNAVAILABLE), as in the Connect conformance suite's cases of
// a response cut short.
func truncating(http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", r.Header.Get("Content-Type"))
		w.WriteHeader(http.StatusOK)
		_, _ = w.Write([]byte{0, 0, 0, 0, 10, 1, 2, 3})
	})
}

// TestUnaryProtocolErrorReadsAsWithoutStagger: a call whose every attempt
// broke mid-response, retried by stagger (the method is idempotent) until
// its attempts ran out, ends with the code and message connect-go gave
// the last attempt, not the UNAVAILABLE stagger's engine judged it by.
// Found by the Connect conformance suite.
func TestUnaryProtocolErrorReadsAsWithoutStagger(t *testing.T) {
	for _, p := range protocols {
		if !strings.HasPrefix(p.name, "grpc") {
			continue // Connect's unary responses are not enveloped
		}
		t.Run(p.name, func(t *testing.T) {
			ts := newTestServer(t, p.h2c, truncating)
			call := func(ics ...connect.Interceptor) *connect.Error {
				_, err := ts.testClient(p, ics...).Get(context.Background(), connect.NewRequest(&testingv1.GetRequest{}))
				cerr, ok := asConnectError(err)
				if !ok {
					t.Fatalf("error %v, want a *connect.Error", err)
				}
				return cerr
			}
			want := call()
			if want.Code() == connect.CodeUnavailable {
				t.Fatalf("without stagger: %v; the test needs a protocol error that is not UNAVAILABLE", want)
			}
			var rep interceptor.Report
			ctx := staggerconnect.WithCallOptions(context.Background(), interceptor.WithReport(&rep))
			_, err := ts.testClient(p, newClient(t, retryFile)).Get(ctx, connect.NewRequest(&testingv1.GetRequest{}))
			got, _ := asConnectError(err)
			if got == nil || got.Code() != want.Code() || got.Message() != want.Message() {
				t.Errorf("through stagger: %v; without: %v", err, want)
			}
			if rep.Attempts < 2 {
				t.Errorf("%d attempts: stagger did not retry it (report %+v)", rep.Attempts, rep)
			}
		})
	}
}

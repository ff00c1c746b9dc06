package interceptor

import (
	"context"
	"io"
	"slices"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/stagger-go/stagger/policy"
)

// A hedge goes on the hedging delay while the application's SendMsg waits
// in the first attempt's send: connect-go sends a server stream's request
// and waits for its response headers inside Send, and grpc-go's SendMsg
// waits for flow control while the server does not read. The hedge's
// replay waited for the sending side the blocked SendMsg held, so no hedge
// went before the first attempt answered (here: never). The first
// attempt's send ends with an error when the commit to the hedge cancels
// it, which is not grpc refusing the caller's message.
func TestHedgeGoesWhileTheFirstSendWaits(t *testing.T) {
	cfg, err := policy.ParseConfig([]byte(`{"methodConfig": [{"name": [{"service": "stagger.testing.v1.TestService"}],
	"idempotent": true, "hedgingPolicy": {"maxAttempts": 2, "hedgingDelay": "0.01s", "nonFatalStatusCodes": ["UNAVAILABLE"]}}]}`))
	if err != nil {
		t.Fatal(err)
	}
	fs := &fakeStreamer{plan: []func(*fakeAttempt) error{
		func(a *fakeAttempt) error {
			// The first attempt's server never answers: its send and its
			// end wait for its cancellation, which its send returns (as
			// connect-go's does; grpc-go's would say io.EOF).
			a.sendErr = func(any) error {
				<-a.ctx.Done()
				return status.FromContextError(a.ctx.Err()).Err()
			}
			a.waitClose = true
			return nil
		},
		func(a *fakeAttempt) error {
			a.header, a.recvN = metadata.MD{"x-attempt": {"2"}}, 1
			return nil
		},
	}}
	list := &grpc.StreamDesc{StreamName: "ListItems", ServerStreams: true}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cs, err := StreamClientInterceptor(WithConfig(cfg), WithBudget(nil))(ctx, list, nil, "/stagger.testing.v1.TestService/ListItems", fs.stream)
	if err != nil {
		t.Fatal(err)
	}
	sent := make(chan error, 1)
	go func() { sent <- cs.SendMsg(sv("request")) }()
	got := make(chan error, 1)
	go func() { got <- cs.RecvMsg(new(wrapperspb.StringValue)) }()
	select {
	case err := <-got:
		if err != nil {
			t.Fatalf("RecvMsg = %v, want the hedge's message", err)
		}
	case <-time.After(5 * time.Second):
		cancel()
		<-got
		t.Fatal("no message 5 s after a hedging delay of 10 ms: the hedge never went")
	}
	if err := <-sent; err != nil {
		t.Errorf("SendMsg = %v, want nil (the first attempt's send ended with its cancel)", err)
	}
	if md, _ := cs.Header(); !slices.Equal(md.Get("x-attempt"), []string{"2"}) {
		t.Errorf("Header x-attempt = %q, want the hedge's", md.Get("x-attempt"))
	}
	fs.mu.Lock()
	hedge := fs.attempts[1]
	fs.mu.Unlock()
	if v := hedge.values(); !slices.Equal(v, []string{"request"}) {
		t.Errorf("the hedge was sent %q, want the request once", v)
	}
	if err := cs.CloseSend(); err != nil {
		t.Fatal(err)
	}
	if err := drainStream(cs); err != io.EOF {
		t.Errorf("the stream ended with %v, want io.EOF", err)
	}
}

package staggerconnect_test

import (
	"context"
	"net/http"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/stagger-go/stagger/connect/internal/proto/stagger/testing/v1/testingv1connect"
	testingv1 "github.com/stagger-go/stagger/proto/stagger/testing/v1"
)

// lateItem serves ListItems as the Connect conformance suite's
// server-stream/cancel-after-close-send case does: its response headers at
// once, an item after itemDelay, then nothing until its client goes away.
type lateItem struct {
	testingv1connect.UnimplementedTestServiceHandler
}

const itemDelay = 50 * time.Millisecond

func (lateItem) ListItems(ctx context.Context, _ *connect.Request[testingv1.ListItemsRequest], st *connect.ServerStream[testingv1.ListItemsResponse]) error {
	if err := st.Send(nil); err != nil {
		return err
	}
	select {
	case <-time.After(itemDelay):
	case <-ctx.Done():
		return connect.NewError(connect.CodeCanceled, ctx.Err())
	}
	if err := st.Send(&testingv1.ListItemsResponse{Reply: &testingv1.Reply{Attempt: 1}}); err != nil {
		return err
	}
	<-ctx.Done()
	return connect.NewError(connect.CodeCanceled, ctx.Err())
}

// A caller that cancels its server stream before it receives gets no
// message, though the message arrived before the cancel: stagger's look
// ahead at an attempt's first message (which commits the stream) read it,
// and Receive gave it back after the cancel, where connect-go's own stream
// reads only when asked, after the cancel, and fails CANCELED. The Connect
// conformance suite's hedged half failed one run in 30 on a loaded machine
// with it (Client Cancellation/HTTPVersion:1/.../server-stream/
// cancel-after-close-send: "expecting 0 response messages but instead got
// 1"): the client's goroutine that cancels 5 ms after the call ran late,
// after the server's item (500 ms) had arrived. Here the caller is late on
// purpose.
func TestCancelledStreamGetsNoMessageReadAhead(t *testing.T) {
	policies := map[string]string{
		"hedge": `{"methodConfig": [{
		  "name": [{"service": "stagger.testing.v1.TestService", "method": "ListItems"}], "idempotent": true,
		  "hedgingPolicy": {"maxAttempts": 2, "hedgingDelay": "10s", "nonFatalStatusCodes": ["UNAVAILABLE"]}}]}`,
		"retry": `{"methodConfig": [{
		  "name": [{"service": "stagger.testing.v1.TestService", "method": "ListItems"}], "idempotent": true,
		  "retryPolicy": {"maxAttempts": 2, "initialBackoff": "0.001s", "maxBackoff": "0.001s", "backoffMultiplier": 1,
		    "retryableStatusCodes": ["UNAVAILABLE"]}}]}`,
		"without stagger": "",
	}
	for _, p := range streamProtocols(false) {
		for name, file := range policies {
			t.Run(p.name+"/"+name, func(t *testing.T) {
				mux := http.NewServeMux()
				mux.Handle(testingv1connect.NewTestServiceHandler(lateItem{}))
				url, tr := serve(t, p.h2c, mux)
				opts := p.opts
				if file != "" {
					opts = append([]connect.ClientOption{connect.WithInterceptors(newClient(t, file))}, opts...)
				}
				client := testingv1connect.NewTestServiceClient(&http.Client{Transport: tr}, url, opts...)
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				defer cancel()
				st, err := client.ListItems(ctx, connect.NewRequest(&testingv1.ListItemsRequest{}))
				if err != nil {
					t.Fatal(err)
				}
				defer st.Close()
				// The caller is late: the item arrives before it cancels.
				time.Sleep(itemDelay + 200*time.Millisecond)
				cancel()
				n := 0
				for st.Receive() {
					n++
				}
				if n != 0 || connect.CodeOf(st.Err()) != connect.CodeCanceled {
					t.Errorf("%d messages, then %v; want none, then canceled", n, st.Err())
				}
			})
		}
	}
}

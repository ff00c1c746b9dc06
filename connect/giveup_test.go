package staggerconnect_test

import (
	"context"
	"errors"
	"testing"

	"connectrpc.com/connect"

	"github.com/stagger-go/stagger/connect/internal/proto/stagger/testing/v1/testingv1connect"
	"github.com/stagger-go/stagger/interceptor"
	testingv1 "github.com/stagger-go/stagger/proto/stagger/testing/v1"
)

// connectCall is a unary Get or a server stream ListItems read to its end,
// returning the call's error.
type connectCall func(ctx context.Context, c testingv1connect.TestServiceClient, sc *testingv1.Script) error

var connectCalls = map[string]connectCall{
	"unary": func(ctx context.Context, c testingv1connect.TestServiceClient, sc *testingv1.Script) error {
		_, err := c.Get(ctx, connect.NewRequest(&testingv1.GetRequest{Script: sc}))
		return err
	},
	"server-stream": func(ctx context.Context, c testingv1connect.TestServiceClient, sc *testingv1.Script) error {
		st, err := c.ListItems(ctx, connect.NewRequest(&testingv1.ListItemsRequest{Script: sc}))
		if err != nil {
			return err
		}
		for st.Receive() {
		}
		err = st.Err()
		_ = st.Close()
		return err
	},
}

// TestGiveUpSaysSo: a Connect call stagger gave up on says so in Error(),
// as a gRPC call does, in front of connect-go's text of the last attempt's
// error, and connect.CodeOf and errors.As give the server's code and
// message unchanged; a call that ends on the server's non-retryable answer
// prints exactly what it prints without stagger.
func TestGiveUpSaysSo(t *testing.T) {
	forEachProtocol(t, func(t *testing.T, p protocol) {
		for name, call := range connectCalls {
			t.Run(name, func(t *testing.T) {
				ts := newTestServer(t, p.h2c, nil)
				client := ts.testClient(p, newClient(t, retryFile))
				plain := ts.testClient(p)
				ctx := context.Background()
				err := call(ctx, client, &testingv1.Script{Key: "down", FailAttempts: 9, Message: "payments: down"})
				const want = "stagger: gave up: max retries exhausted: failed after 5 attempts: unavailable: payments: down"
				if err == nil || err.Error() != want {
					t.Errorf("Error() = %q,\nwant %q", err, want)
				}
				cerr, ok := asConnectError(err)
				if !ok || cerr.Code() != connect.CodeUnavailable || cerr.Message() != "payments: down" || connect.CodeOf(err) != connect.CodeUnavailable {
					t.Errorf("*connect.Error = %v, want the server's unavailable: payments: down", cerr)
				}
				var ie *interceptor.Error
				if !errors.As(err, &ie) || !ie.GaveUp() || ie.Attempts != 5 {
					t.Errorf("stagger's error: %+v, want a give-up after 5 attempts", ie)
				}

				fatal := func(key string) *testingv1.Script {
					return &testingv1.Script{Key: key, FailAttempts: 1, Code: int32(connect.CodeUnknown),
						Message: "\t\ntest with whitespace\r\nand Unicode BMP ☺ and non-BMP 😈\t\n"}
				}
				err = call(ctx, client, fatal("fatal"))
				without := call(ctx, plain, fatal("fatal-plain"))
				if err == nil || without == nil || err.Error() != without.Error() {
					t.Errorf("non-retryable: Error() = %q, without stagger %q", err, without)
				}
				if _, ok := err.(*connect.Error); !ok {
					t.Errorf("non-retryable: error %T, want the *connect.Error itself", err)
				}
			})
		}
	})
}

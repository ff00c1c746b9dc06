//go:build go1.25

package test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/stagger-go/stagger/interceptor"
	"github.com/stagger-go/stagger/policy"
	testingv1 "github.com/stagger-go/stagger/proto/stagger/testing/v1"
	"github.com/stagger-go/stagger/testserver"
)

// grpcRetryConfig is retryFile as grpc-go's own retry reads it (a service
// config), for the client without stagger that the give-up tests compare
// stagger's text with.
const grpcRetryConfig = `{"methodConfig": [{
	"name": [{"service": "stagger.testing.v1.TestService"}],
	"retryPolicy": {"maxAttempts": 4, "initialBackoff": "1s", "maxBackoff": "10s",
		"backoffMultiplier": 2, "retryableStatusCodes": ["UNAVAILABLE"]}
}]}`

// giveUpCall is one call of the give-up tests: unary Get, or the server
// stream ListItems read to its end; it returns the call's error.
type giveUpCall func(ctx context.Context, c testingv1.TestServiceClient, sc *testingv1.Script) error

var giveUpCalls = map[string]giveUpCall{
	"unary": func(ctx context.Context, c testingv1.TestServiceClient, sc *testingv1.Script) error {
		_, err := c.Get(ctx, &testingv1.GetRequest{Script: sc})
		return err
	},
	"server-stream": func(ctx context.Context, c testingv1.TestServiceClient, sc *testingv1.Script) error {
		st, err := c.ListItems(ctx, &testingv1.ListItemsRequest{Script: sc})
		if err != nil {
			return err
		}
		for {
			if _, err := st.Recv(); err != nil {
				return err
			}
		}
	},
}

// giveUpClients are, over one testserver, a client through stagger (both
// interceptors, retryFile or the file given), one without any retry layer
// and one with grpc-go's own retry (grpcRetryConfig).
func giveUpClients(t *testing.T, file string) (stagger, plain, grpcRetry testingv1.TestServiceClient) {
	t.Helper()
	srv := testserver.New()
	t.Cleanup(srv.Close)
	opts := []interceptor.Option{interceptor.WithConfig(parse(t, file))}
	stagger = testingv1.NewTestServiceClient(srv.ClientConn(t, grpc.WithDisableRetry(),
		grpc.WithChainUnaryInterceptor(interceptor.UnaryClientInterceptor(opts...)),
		grpc.WithChainStreamInterceptor(interceptor.StreamClientInterceptor(opts...))))
	plain = testingv1.NewTestServiceClient(srv.ClientConn(t, grpc.WithDisableRetry()))
	grpcRetry = testingv1.NewTestServiceClient(srv.ClientConn(t, grpc.WithDefaultServiceConfig(grpcRetryConfig)))
	return stagger, plain, grpcRetry
}

// TestGiveUpSaysSo: a call stagger gave up on (no attempt left) says so in
// Error(), with grpc-go's own retry's words after stagger's "gave up"
// (where the grpc-go in use words it so: v1.85 does), its attempts and the
// last attempt's text, while status.FromError gives the server's status
// unchanged; a call that ends on the server's non-retryable answer prints
// exactly what it prints without stagger, and with grpc-go's retry.
func TestGiveUpSaysSo(t *testing.T) {
	for name, call := range giveUpCalls {
		t.Run(name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				c, plain, grpcRetry := giveUpClients(t, retryFile)
				ctx := context.Background()
				down := func(key string) *testingv1.Script {
					return &testingv1.Script{Key: key, FailAttempts: 10, Message: "payments: down"}
				}
				err := call(ctx, c, down("down"))
				const want = "stagger: gave up: max retries exhausted: failed after 4 attempts: rpc error: code = Unavailable desc = payments: down"
				if err == nil || err.Error() != want {
					t.Errorf("Error() = %q,\nwant %q", err, want)
				}
				if st, ok := status.FromError(err); !ok || st.Code() != codes.Unavailable || st.Message() != "payments: down" {
					t.Errorf("status.FromError = %v, %v: want the server's UNAVAILABLE %q", st, ok, "payments: down")
				}
				var e *interceptor.Error
				if !errors.As(err, &e) || !e.GaveUp() || e.Attempts != 4 || e.Reason != policy.ReasonAttempts {
					t.Errorf("*interceptor.Error = %+v, want 4 attempts, reason attempts", e)
				}
				theirs := call(ctx, grpcRetry, down("down-grpc"))
				if strings.HasPrefix(theirs.Error(), "max retries exhausted: ") {
					if err.Error() != "stagger: gave up: "+theirs.Error() {
						t.Errorf("stagger's text %q is not grpc-go's %q after \"stagger: gave up: \"", err, theirs)
					}
				} else {
					t.Logf("this grpc-go does not say it gave up: %q", theirs)
				}

				// The server's own non-retryable answer: its text as
				// without stagger.
				fatal := func(key string) *testingv1.Script {
					return &testingv1.Script{Key: key, FailAttempts: 1, Code: int32(codes.Unknown),
						Message: "\t\ntest with whitespace\r\nand Unicode BMP ☺ and non-BMP 😈\t\n"}
				}
				err = call(ctx, c, fatal("fatal"))
				without := call(ctx, plain, fatal("fatal-plain"))
				withGRPC := call(ctx, grpcRetry, fatal("fatal-grpc"))
				if err == nil || err.Error() != without.Error() || err.Error() != withGRPC.Error() {
					t.Errorf("non-retryable: Error() = %q; without stagger %q, with grpc-go's retry %q", err, without, withGRPC)
				}
				if !errors.As(err, &e) || e.GaveUp() {
					t.Errorf("non-retryable: *interceptor.Error = %+v, want one that did not give up", e)
				}
			})
		})
	}
}

// TestGiveUpReasons: each way stagger gives up on a failure it would
// otherwise retry names itself in Error() with the attempts made (the
// budget, throttling and a hedge's spent attempts here; the rest in the
// interceptor package's table), over real gRPC.
func TestGiveUpReasons(t *testing.T) {
	tests := []struct {
		name, file string
		reason     policy.Reason
		want       string
	}{
		{
			// Two tokens: the first failure leaves one, not above half.
			name: "budget",
			file: `{"methodConfig": [{"name": [{"service": "stagger.testing.v1.TestService"}],
				"retryPolicy": {"maxAttempts": 4, "initialBackoff": "1s", "maxBackoff": "10s",
				"backoffMultiplier": 2, "retryableStatusCodes": ["UNAVAILABLE"], "jitter": "NONE"}}],
				"retryThrottling": {"maxTokens": 2, "tokenRatio": 0.1}}`,
			reason: policy.ReasonBudget,
			want:   "stagger: gave up: retry budget spent: failed after 1 attempt: rpc error: code = Unavailable desc = payments: down",
		},
		{
			name: "hedge",
			file: `{"methodConfig": [{"name": [{"service": "stagger.testing.v1.TestService"}], "idempotent": true,
				"hedgingPolicy": {"maxAttempts": 3, "hedgingDelay": "0.1s", "nonFatalStatusCodes": ["UNAVAILABLE"]}}]}`,
			reason: policy.ReasonAttempts,
			want:   "stagger: gave up: max retries exhausted: failed after 3 attempts: rpc error: code = Unavailable desc = payments: down",
		},
	}
	for _, tt := range tests {
		for name, call := range giveUpCalls {
			t.Run(tt.name+"/"+name, func(t *testing.T) {
				synctest.Test(t, func(t *testing.T) {
					c, _, _ := giveUpClients(t, tt.file)
					ctx := context.Background()
					err := call(ctx, c, &testingv1.Script{Key: "k", FailAttempts: 10, Message: "payments: down",
						Delay: durationpb.New(10 * time.Millisecond)})
					if err == nil || err.Error() != tt.want {
						t.Errorf("Error() = %q,\nwant %q", err, tt.want)
					}
					var e *interceptor.Error
					if !errors.As(err, &e) || e.Reason != tt.reason {
						t.Errorf("*interceptor.Error = %+v, want reason %v", e, tt.reason)
					}
					if st := status.Convert(err); st.Code() != codes.Unavailable || st.Message() != "payments: down" {
						t.Errorf("status = %v, want the server's", st)
					}
				})
			})
		}
	}
}

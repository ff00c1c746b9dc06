package test

import (
	"context"
	"errors"
	"io"
	"net"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/status"

	"github.com/stagger-go/stagger"
	"github.com/stagger-go/stagger/interceptor"
	"github.com/stagger-go/stagger/policy"
)

// mwPerCallFile is the middleware suite's client with WithPerRetryTimeout
// and WithMax(5): its codes, 5 attempts, and a per-attempt timeout of
// mwPerCallTimeout. The pause is 10ms, not the suite's 50ms: the original
// cuts each attempt at 5ms against a server that fails after 10ms, and
// stagger's attempt runs on through the retry's pause (its grace), so the
// pause must end before the server answers for the timer to be what
// retries; the times are ten times the original's, which a loaded machine
// keeps apart.
const mwPerCallFile = `{"methodConfig": [{
	"name": [{"service": "grpc.testing.TestService"}],
	"retryPolicy": {"maxAttempts": 5, "initialBackoff": "0.01s", "maxBackoff": "0.01s",
		"backoffMultiplier": 1, "jitter": "NONE", "retryableStatusCodes": ["UNAVAILABLE", "DATA_LOSS"],
		"perAttemptRecvTimeout": "0.05s"}
}]}`

// mwPerCallTimeout is mwPerCallFile's per-attempt timeout.
const mwPerCallTimeout = 50 * time.Millisecond

// mwTCPBench serves a fresh mwFailingService over loopback TCP and
// connects to it through stagger with file; no budget (the middleware has
// none).
func mwTCPBench(t *testing.T, file string) (*mwFailingService, testgrpc.TestServiceClient) {
	t.Helper()
	cfg, err := policy.ParseConfig([]byte(file))
	if err != nil {
		t.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	svc := &mwFailingService{}
	gs := grpc.NewServer()
	testgrpc.RegisterTestServiceServer(gs, svc)
	served := make(chan struct{})
	go func() {
		defer close(served)
		_ = gs.Serve(lis)
	}()
	dial := append(stagger.DialOptions(cfg, interceptor.WithBudget(nil)), grpc.WithTransportCredentials(insecure.NewCredentials()))
	cc, err := grpc.NewClient(lis.Addr().String(), dial...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cc.Close()
		// GracefulStop waits for the handlers, so a request still on
		// its way when the call ended (a deadline) has joined sleeping
		// and left it: Wait never meets an Add.
		gs.GracefulStop()
		<-served
		svc.sleeping.Wait()
	})
	client := testgrpc.NewTestServiceClient(cc)
	// Connect outside the measured call.
	if _, err := client.UnaryCall(context.Background(), mwGoodPing); err != nil {
		t.Fatal(err)
	}
	return svc, client
}

// TestMiddlewarePerRetryTimeoutPortRealTime ports go-grpc-middleware v1's
// per-retry-timeout tests (retry_test.go's TestUnary_PerCallDeadline_* and
// TestServerStream_PerCallDeadline_*), which run on real time: a
// sequential caller whose server sleeps twice the per-attempt timeout and
// fails (NOT_FOUND, which the policy does not retry) the first four
// requests and answers the fifth, three calls in a row. Only stagger's
// timer can retry them, so a call succeeds on its fifth attempt exactly
// when the timer cut off each of the first four, as the user configured;
// with a parent deadline shorter than the five attempts the call ends with
// DEADLINE_EXCEEDED. The times are ten times the original's
// (mwPerCallFile). Over loopback TCP on real time, beside the synctest
// port (TestMiddlewarePerRetryTimeoutPort): whether the timer cuts an
// attempt off must not depend on how the goroutines were scheduled, so
// make test-realtime runs it at -cpu=1 beside busy loops too.
func TestMiddlewarePerRetryTimeoutPortRealTime(t *testing.T) {
	cases := []struct {
		name string
		call func(ctx context.Context, c testgrpc.TestServiceClient) error
	}{
		{"Unary", func(ctx context.Context, c testgrpc.TestServiceClient) error {
			out, err := c.UnaryCall(ctx, mwGoodPing, interceptor.Idempotent())
			if err == nil && out == nil {
				return errors.New("nil reply without an error")
			}
			return err
		}},
		{"ServerStream", func(ctx context.Context, c testgrpc.TestServiceClient) error {
			stream, err := c.StreamingOutputCall(ctx, mwGoodPingList, interceptor.Idempotent())
			if err != nil {
				return err
			}
			n := 0
			for {
				_, err := stream.Recv()
				if errors.Is(err, io.EOF) {
					break
				}
				if err != nil {
					return err
				}
				n++
			}
			if n != mwListResponseCount {
				return errors.New("short stream")
			}
			return nil
		}},
	}
	for _, tc := range cases {
		t.Run("PerCallDeadline_Succeeds/"+tc.name, func(t *testing.T) {
			svc, client := mwTCPBench(t, mwPerCallFile)
			// Three calls in a row on one client: the later ones find the
			// earlier ones' evidence (sends, timers fired, a success).
			for i := range 3 {
				svc.resetFailingConfiguration(5, codes.NotFound, 2*mwPerCallTimeout)
				ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
				err := tc.call(ctx, client)
				cancel()
				if err != nil {
					t.Errorf("call %d: the fifth invocation should succeed: %v (reason %q, %d attempts)", i, err, reasonOf(err), interceptor.Attempts(err))
				}
				if arrivals, _ := svc.record(); len(arrivals) != 5 {
					t.Errorf("call %d: %d requests; want five", i, len(arrivals))
				}
				// The cut-off attempts' handlers end before the next
				// call resets the server's count (each joined sleeping
				// as the server recorded it).
				svc.sleeping.Wait()
			}
		})
		t.Run("PerCallDeadline_FailsOnParent/"+tc.name, func(t *testing.T) {
			svc, client := mwTCPBench(t, mwPerCallFile)
			svc.resetFailingConfiguration(5, codes.NotFound, 2*mwPerCallTimeout)
			// Two attempts fit, then the deadline ends the third.
			ctx, cancel := context.WithTimeout(context.Background(), 3*mwPerCallTimeout)
			defer cancel()
			err := tc.call(ctx, client)
			if status.Code(err) != codes.DeadlineExceeded {
				t.Errorf("error %v; want DEADLINE_EXCEEDED", err)
			}
		})
	}
}

//go:build go1.25

// The package's //go:debug asynctimerchan=0, which synctest needs, is in
// interceptor_test.go.

package test

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"reflect"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/stats"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/test/bufconn"
	"google.golang.org/protobuf/proto"

	"github.com/stagger-go/stagger"
	"github.com/stagger-go/stagger/budget"
	"github.com/stagger-go/stagger/interceptor"
	"github.com/stagger-go/stagger/policy"
)

// A port of grpc-go's own TestRetryStreaming (test/retry_test.go, the same
// in v1.64 and v1.85), run against stagger.DialOptions instead of grpc-go's
// built-in retry: the same service config, the same bidi script of server
// and client operations per case, the same expectations. grpc-go's
// MaxRetryRPCBufferSize(200) becomes interceptor.WithReplayBufferSize(200).
//
// One difference from the original: the budget is switched off
// (interceptor.WithBudget(nil)), since grpc-go's test has no throttling and
// its cases count attempts exactly across a sequence of calls; with the
// default budget the retries still come (refused ones wait and go as
// probes), later. TestGRPCRetryUnaryPort runs with the default budget. The
// test runs in a synctest bubble, so the 1s pushback case waits on virtual
// time.

// portServiceConfig is the service config of grpc-go's retry tests: 4
// attempts, pauses of 10ms, retrying the code named, then extra top-level
// entries (retryThrottling), as grpc-go writes it (capitalised keys).
func portServiceConfig(code, extra string) string {
	return `{
    "methodConfig": [{
      "name": [{"service": "grpc.testing.TestService"}],
      "waitForReady": true,
      "retryPolicy": {
          "MaxAttempts": 4,
          "InitialBackoff": ".01s",
          "MaxBackoff": ".01s",
          "BackoffMultiplier": 1.0,
          "RetryableStatusCodes": [ "` + code + `" ]
      }
    }]` + extra + `}`
}

type (
	portServerOp func(testgrpc.TestService_FullDuplexCallServer) error
	portClientOp func(testgrpc.TestService_FullDuplexCallClient) error
)

// portServer runs the current case's server operations, in order, across
// the attempts: each attempt picks up where the last one stopped.
type portServer struct {
	testgrpc.UnimplementedTestServiceServer
	mu  sync.Mutex
	ops []portServerOp
	at  int
}

func (s *portServer) FullDuplexCall(stream testgrpc.TestService_FullDuplexCallServer) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	for s.at < len(s.ops) {
		op := s.ops[s.at]
		s.at++
		if err := op(stream); err != nil {
			return err
		}
	}
	return nil
}

func (s *portServer) set(ops []portServerOp) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.ops, s.at = ops, 0
}

func TestGRPCRetryStreamingPort(t *testing.T) {
	req := func(b byte) *testgrpc.StreamingOutputCallRequest {
		return &testgrpc.StreamingOutputCallRequest{Payload: &testgrpc.Payload{Body: []byte{b}}}
	}
	res := func(b byte) *testgrpc.StreamingOutputCallResponse {
		return &testgrpc.StreamingOutputCallResponse{Payload: &testgrpc.Payload{Body: []byte{b}}}
	}
	largePayload := &testgrpc.Payload{Type: testgrpc.PayloadType_COMPRESSABLE, Body: make([]byte, 500)}

	// Server operations.
	sAttempts := func(n int) portServerOp {
		return func(stream testgrpc.TestService_FullDuplexCallServer) error {
			const key = "grpc-previous-rpc-attempts"
			md, _ := metadata.FromIncomingContext(stream.Context())
			if got := md[key]; len(got) != 1 || got[0] != fmt.Sprint(n) {
				return status.Errorf(codes.Internal, "server: metadata = %v; want <contains %q: %q>", md, key, fmt.Sprint(n))
			}
			return nil
		}
	}
	sReqPayload := func(p *testgrpc.Payload) portServerOp {
		return func(stream testgrpc.TestService_FullDuplexCallServer) error {
			want := &testgrpc.StreamingOutputCallRequest{Payload: p}
			if got, err := stream.Recv(); err != nil || !proto.Equal(got, want) {
				return status.Errorf(codes.Internal, "server: Recv() = %v, %v; want %v, <nil>", got, err, want)
			}
			return nil
		}
	}
	sReq := func(b byte) portServerOp { return sReqPayload(req(b).Payload) }
	sHdr := func() portServerOp {
		return func(stream testgrpc.TestService_FullDuplexCallServer) error {
			return stream.SendHeader(metadata.Pairs("test_header", "test_value"))
		}
	}
	sRes := func(b byte) portServerOp {
		return func(stream testgrpc.TestService_FullDuplexCallServer) error {
			if err := stream.Send(res(b)); err != nil {
				return status.Errorf(codes.Internal, "server: Send(%v) = %v; want <nil>", res(b), err)
			}
			return nil
		}
	}
	sErr := func(c codes.Code) portServerOp {
		return func(testgrpc.TestService_FullDuplexCallServer) error {
			return status.New(c, "this is a test error").Err()
		}
	}
	sCloseSend := func() portServerOp {
		return func(stream testgrpc.TestService_FullDuplexCallServer) error {
			if msg, err := stream.Recv(); msg != nil || err != io.EOF {
				return status.Errorf(codes.Internal, "server: Recv() = %v, %v; want <nil>, io.EOF", msg, err)
			}
			return nil
		}
	}
	sPushback := func(v string) portServerOp {
		return func(stream testgrpc.TestService_FullDuplexCallServer) error {
			stream.SetTrailer(metadata.MD{"grpc-retry-pushback-ms": []string{v}})
			return nil
		}
	}

	// Client operations.
	cReqPayload := func(p *testgrpc.Payload) portClientOp {
		return func(stream testgrpc.TestService_FullDuplexCallClient) error {
			msg := &testgrpc.StreamingOutputCallRequest{Payload: p}
			if err := stream.Send(msg); err != nil {
				return fmt.Errorf("client: Send(%v) = %v; want <nil>", msg, err)
			}
			return nil
		}
	}
	cReq := func(b byte) portClientOp { return cReqPayload(req(b).Payload) }
	cRes := func(b byte) portClientOp {
		return func(stream testgrpc.TestService_FullDuplexCallClient) error {
			if got, err := stream.Recv(); err != nil || !proto.Equal(got, res(b)) {
				return fmt.Errorf("client: Recv() = %v, %v; want %v, <nil>", got, err, res(b))
			}
			return nil
		}
	}
	cErr := func(c codes.Code) portClientOp {
		return func(stream testgrpc.TestService_FullDuplexCallClient) error {
			got, err := stream.Recv()
			gotCode := status.Code(err)
			if err == io.EOF {
				gotCode = codes.OK
			}
			if got != nil || gotCode != c {
				return fmt.Errorf("client: Recv() = %v, %v; want <nil>, %v", got, err, c)
			}
			return nil
		}
	}
	cCloseSend := func() portClientOp {
		return func(stream testgrpc.TestService_FullDuplexCallClient) error {
			if err := stream.CloseSend(); err != nil {
				return fmt.Errorf("client: CloseSend() = %v; want <nil>", err)
			}
			return nil
		}
	}
	var curTime time.Time
	cGetTime := func() portClientOp {
		return func(testgrpc.TestService_FullDuplexCallClient) error {
			curTime = time.Now()
			return nil
		}
	}
	cCheckElapsed := func(d time.Duration) portClientOp {
		return func(testgrpc.TestService_FullDuplexCallClient) error {
			if elapsed := time.Since(curTime); elapsed < d {
				return fmt.Errorf("elapsed time: %v; want >= %v", elapsed, d)
			}
			return nil
		}
	}
	cHdr := func() portClientOp {
		return func(stream testgrpc.TestService_FullDuplexCallClient) error {
			_, err := stream.Header()
			if err == io.EOF {
				err = nil
			}
			return err
		}
	}
	cCtx := func() portClientOp {
		return func(stream testgrpc.TestService_FullDuplexCallClient) error {
			stream.Context()
			return nil
		}
	}

	testCases := []struct {
		desc      string
		serverOps []portServerOp
		clientOps []portClientOp
	}{{
		desc:      "Non-retryable error code",
		serverOps: []portServerOp{sReq(1), sErr(codes.Internal)},
		clientOps: []portClientOp{cReq(1), cErr(codes.Internal)},
	}, {
		desc:      "One retry necessary",
		serverOps: []portServerOp{sReq(1), sErr(codes.Unavailable), sReq(1), sAttempts(1), sRes(1)},
		clientOps: []portClientOp{cReq(1), cRes(1), cErr(codes.OK)},
	}, {
		desc: "Exceed max attempts (4); check attempts header on server",
		serverOps: []portServerOp{
			sReq(1), sErr(codes.Unavailable),
			sReq(1), sAttempts(1), sErr(codes.Unavailable),
			sAttempts(2), sReq(1), sErr(codes.Unavailable),
			sAttempts(3), sReq(1), sErr(codes.Unavailable),
		},
		clientOps: []portClientOp{cReq(1), cErr(codes.Unavailable)},
	}, {
		desc: "Multiple requests",
		serverOps: []portServerOp{
			sReq(1), sReq(2), sErr(codes.Unavailable),
			sReq(1), sReq(2), sRes(5),
		},
		clientOps: []portClientOp{cReq(1), cReq(2), cRes(5), cErr(codes.OK)},
	}, {
		desc: "Multiple successive requests",
		serverOps: []portServerOp{
			sReq(1), sErr(codes.Unavailable),
			sReq(1), sReq(2), sErr(codes.Unavailable),
			sReq(1), sReq(2), sReq(3), sRes(5),
		},
		clientOps: []portClientOp{cReq(1), cReq(2), cReq(3), cRes(5), cErr(codes.OK)},
	}, {
		desc: "No retry after receiving",
		serverOps: []portServerOp{
			sReq(1), sErr(codes.Unavailable),
			sReq(1), sRes(3), sErr(codes.Unavailable),
		},
		clientOps: []portClientOp{cReq(1), cRes(3), cErr(codes.Unavailable)},
	}, {
		desc:      "Retry via ClientStream.Header()",
		serverOps: []portServerOp{sReq(1), sErr(codes.Unavailable), sReq(1), sAttempts(1)},
		clientOps: []portClientOp{cReq(1), cHdr() /* this should cause a retry */, cErr(codes.OK)},
	}, {
		desc:      "No retry after header",
		serverOps: []portServerOp{sReq(1), sHdr(), sErr(codes.Unavailable)},
		clientOps: []portClientOp{cReq(1), cHdr(), cErr(codes.Unavailable)},
	}, {
		desc:      "No retry after context",
		serverOps: []portServerOp{sReq(1), sErr(codes.Unavailable)},
		clientOps: []portClientOp{cReq(1), cCtx(), cErr(codes.Unavailable)},
	}, {
		desc: "Replaying close send",
		serverOps: []portServerOp{
			sReq(1), sReq(2), sCloseSend(), sErr(codes.Unavailable),
			sReq(1), sReq(2), sCloseSend(), sRes(1), sRes(3), sRes(5),
		},
		clientOps: []portClientOp{cReq(1), cReq(2), cCloseSend(), cRes(1), cRes(3), cRes(5), cErr(codes.OK)},
	}, {
		desc:      "Negative server pushback - no retry",
		serverOps: []portServerOp{sReq(1), sPushback("-1"), sErr(codes.Unavailable)},
		clientOps: []portClientOp{cReq(1), cErr(codes.Unavailable)},
	}, {
		desc:      "Non-numeric server pushback - no retry",
		serverOps: []portServerOp{sReq(1), sPushback("xxx"), sErr(codes.Unavailable)},
		clientOps: []portClientOp{cReq(1), cErr(codes.Unavailable)},
	}, {
		desc:      "Multiple server pushback values - no retry",
		serverOps: []portServerOp{sReq(1), sPushback("100"), sPushback("10"), sErr(codes.Unavailable)},
		clientOps: []portClientOp{cReq(1), cErr(codes.Unavailable)},
	}, {
		desc:      "1s server pushback - delayed retry",
		serverOps: []portServerOp{sReq(1), sPushback("1000"), sErr(codes.Unavailable), sReq(1), sRes(2)},
		clientOps: []portClientOp{cGetTime(), cReq(1), cRes(2), cCheckElapsed(time.Second), cErr(codes.OK)},
	}, {
		desc:      "Overflowing buffer - no retry",
		serverOps: []portServerOp{sReqPayload(largePayload), sErr(codes.Unavailable)},
		clientOps: []portClientOp{cReqPayload(largePayload), cErr(codes.Unavailable)},
	}}

	for _, tc := range testCases {
		t.Run(tc.desc, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				srv := &portServer{}
				srv.set(tc.serverOps)
				client := portClient(t, srv)
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				defer cancel()
				stream, err := client.FullDuplexCall(ctx)
				if err != nil {
					t.Fatalf("FullDuplexCall: %v", err)
				}
				for _, op := range tc.clientOps {
					if err := op(stream); err != nil {
						t.Fatal(err)
					}
				}
				srv.mu.Lock()
				defer srv.mu.Unlock()
				if srv.at != len(srv.ops) {
					t.Fatalf("the server ran %d of its %d operations", srv.at, len(srv.ops))
				}
			})
		})
	}
}

// portClient serves srv over bufconn and returns a client of it through
// stagger.DialOptions with the ported streaming service config.
func portClient(t *testing.T, srv testgrpc.TestServiceServer) testgrpc.TestServiceClient {
	t.Helper()
	return portClientFile(t, srv, portServiceConfig("UNAVAILABLE", ""), interceptor.WithBudget(nil), interceptor.WithReplayBufferSize(200))
}

// portClientFile serves srv over bufconn and returns a client of it through
// stagger.DialOptions(file, opts...).
func portClientFile(t *testing.T, srv testgrpc.TestServiceServer, file string, opts ...interceptor.Option) testgrpc.TestServiceClient {
	t.Helper()
	cfg, err := policy.ParseConfig([]byte(file))
	if err != nil {
		t.Fatal(err)
	}
	return portClientConfig(t, srv, cfg, opts...)
}

// portClientConfig serves srv over bufconn and returns a client of it
// through stagger.DialOptions(cfg, opts...).
func portClientConfig(t *testing.T, srv testgrpc.TestServiceServer, cfg *policy.Config, opts ...interceptor.Option) testgrpc.TestServiceClient {
	t.Helper()
	lis := bufconn.Listen(1 << 20)
	gs := grpc.NewServer()
	testgrpc.RegisterTestServiceServer(gs, srv)
	served := make(chan struct{})
	go func() {
		defer close(served)
		_ = gs.Serve(lis)
	}()
	t.Cleanup(func() {
		gs.Stop()
		<-served
	})
	return testgrpc.NewTestServiceClient(portDial(t, lis, cfg, opts))
}

// portDial connects to lis through stagger.DialOptions(cfg, opts...) and
// the extra dial options, and closes the connection when the test ends.
func portDial(t *testing.T, lis *bufconn.Listener, cfg *policy.Config, opts []interceptor.Option, extra ...grpc.DialOption) *grpc.ClientConn {
	t.Helper()
	dial := append(stagger.DialOptions(cfg, opts...),
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }))
	cc, err := grpc.NewClient("passthrough:///bufnet", append(dial, extra...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	return cc
}

// portUnaryServer answers EmptyCall with answer(i), i counting calls from 0.
type portUnaryServer struct {
	testgrpc.UnimplementedTestServiceServer
	mu     sync.Mutex
	i      int
	answer func(i int) error
}

func (s *portUnaryServer) EmptyCall(context.Context, *testgrpc.Empty) (*testgrpc.Empty, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.i++
	if err := s.answer(s.i); err != nil {
		return nil, err
	}
	return &testgrpc.Empty{}, nil
}

func (s *portUnaryServer) count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.i
}

// portUnaryCase is one call of a ported unary test: its code, and the
// server's call counter after it.
type portUnaryCase struct {
	wantCode  codes.Code
	wantCount int
}

// runPortUnary runs cases, with no budget when budgetOff, else with a budget
// of budget.DefaultSettings, the one stagger.DialOptions installs (a fresh
// one, inside the bubble: budget.DefaultBackends is one per process, and its
// deferral would wait on channels made outside the bubble).
func runPortUnary(t *testing.T, file string, budgetOff bool, answer func(int) error, cases []portUnaryCase) {
	t.Helper()
	synctest.Test(t, func(t *testing.T) {
		srv := &portUnaryServer{i: -1, answer: answer}
		var opts []interceptor.Option
		if budgetOff {
			opts = append(opts, interceptor.WithBudget(nil))
		} else if !strings.Contains(file, "retryThrottling") {
			b, err := budget.New(budget.DefaultSettings())
			if err != nil {
				t.Fatal(err)
			}
			opts = append(opts, interceptor.WithBudget(b))
		}
		client := portClientFile(t, srv, file, opts...)
		for n, tc := range cases {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			_, err := client.EmptyCall(ctx, &testgrpc.Empty{})
			cancel()
			if status.Code(err) != tc.wantCode {
				t.Errorf("case %d: EmptyCall = %v; want code %v", n, err, tc.wantCode)
			}
			if got := srv.count(); got != tc.wantCount {
				t.Errorf("case %d: server count = %d; want %d", n, got, tc.wantCount)
			}
		}
	})
}

// TestGRPCRetryUnaryPort ports grpc-go's TestRetryUnary through
// stagger.DialOptions's default budget: a quiet process gets every retry
// gRFC A6 gives it (the budget's one, then probes: issue 13).
func TestGRPCRetryUnaryPort(t *testing.T) {
	file := portServiceConfig("ALREADY_EXISTS", "")
	answer := func(i int) error {
		switch i {
		case 0, 2, 5:
			return nil
		case 6, 8, 11:
			return status.New(codes.Internal, "non-retryable error").Err()
		}
		return status.New(codes.AlreadyExists, "retryable error").Err()
	}
	runPortUnary(t, file, false, answer, []portUnaryCase{
		{codes.OK, 0},
		{codes.OK, 2},
		{codes.OK, 5},
		{codes.Internal, 6},
		{codes.Internal, 8},
		{codes.Internal, 11},
		{codes.AlreadyExists, 15},
	})
}

// TestGRPCRetryThrottlingPort ports grpc-go's TestRetryThrottling: the
// file's retryThrottling is the budget, with grpc-go's exact arithmetic
// (tokenRatio kept to 3 decimals; budget.ThrottleSettings).
func TestGRPCRetryThrottlingPort(t *testing.T) {
	file := portServiceConfig("UNAVAILABLE", `,
    "retryThrottling": {
      "maxTokens": 10,
      "tokenRatio": 0.5
    }`)
	answer := func(i int) error {
		switch i {
		case 0, 3, 6, 10, 11, 12, 13, 14, 16, 18:
			return nil
		}
		return status.New(codes.Unavailable, "retryable error").Err()
	}
	runPortUnary(t, file, false, answer, []portUnaryCase{
		{codes.OK, 0},           // tokens = 10
		{codes.OK, 3},           // tokens = 8.5 (10 - 2 failures + 0.5 success)
		{codes.OK, 6},           // tokens = 6
		{codes.Unavailable, 8},  // tokens = 5 -- first attempt is retried; second aborted.
		{codes.Unavailable, 9},  // tokens = 4
		{codes.OK, 10},          // tokens = 4.5
		{codes.OK, 11},          // tokens = 5
		{codes.OK, 12},          // tokens = 5.5
		{codes.OK, 13},          // tokens = 6
		{codes.OK, 14},          // tokens = 6.5
		{codes.OK, 16},          // tokens = 5.5
		{codes.Unavailable, 17}, // tokens = 4.5
	})
}

// portFailingServer fails every EmptyCall and FullDuplexCall with
// UNAVAILABLE, counting each method's calls, as the stub server of grpc-go's
// TestMaxCallAttempts does.
type portFailingServer struct {
	testgrpc.UnimplementedTestServiceServer
	mu            sync.Mutex
	unary, stream int
}

func (s *portFailingServer) EmptyCall(context.Context, *testgrpc.Empty) (*testgrpc.Empty, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.unary++
	return nil, status.New(codes.Unavailable, "this is a test error").Err()
}

func (s *portFailingServer) FullDuplexCall(testgrpc.TestService_FullDuplexCallServer) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.stream++
	return status.New(codes.Unavailable, "this is a test error").Err()
}

func (s *portFailingServer) counts() (unary, stream int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.unary, s.stream
}

// TestGRPCMaxCallAttemptsPort ports grpc-go v1.85's TestMaxCallAttempts:
// grpc.WithMaxCallAttempts(n) caps the file's maxAttempts at n (5 when n <
// 2). stagger's cap is policy.WithMaxAttemptsCap(n) when the file is parsed,
// with the same rule for n < 2; the cases and expectations are grpc-go's.
//
// Differences from the original, each kept as an assertion:
//   - grpc-go v1.85 wraps the final error as "max retries exhausted: failed
//     after N attempts: ..." (v1.64 does not). stagger returns the server's
//     status unchanged (interceptor.Error.GRPCStatus) and says why it stopped in the
//     *interceptor.Error: Reason attempts and Attempts N. The test checks
//     both, and that the message is the server's own.
//   - grpc-go's test polls until the channel has applied its service config;
//     stagger's interceptors apply the file from the first call, so there is
//     nothing to wait for.
//   - The budget is off, as in TestGRPCRetryStreamingPort: grpc-go's test
//     has no throttling.
func TestGRPCMaxCallAttemptsPort(t *testing.T) {
	testCases := []struct {
		serviceMaxAttempts int
		clientMaxAttempts  int
		expectedAttempts   int
	}{
		{serviceMaxAttempts: 9, clientMaxAttempts: 4, expectedAttempts: 4},
		{serviceMaxAttempts: 9, clientMaxAttempts: 7, expectedAttempts: 7},
		{serviceMaxAttempts: 3, clientMaxAttempts: 10, expectedAttempts: 3},
		{serviceMaxAttempts: 8, clientMaxAttempts: -1, expectedAttempts: 5}, // 5 is default max
		{serviceMaxAttempts: 3, clientMaxAttempts: 0, expectedAttempts: 3},
	}
	check := func(t *testing.T, what string, err error, want int) {
		t.Helper()
		if status.Code(err) != codes.Unavailable {
			t.Fatalf("%s: %v; want code Unavailable", what, err)
		}
		if msg := status.Convert(err).Message(); msg != "this is a test error" {
			t.Errorf("%s: message %q; want the server's own, %q", what, msg, "this is a test error")
		}
		var se *interceptor.Error
		if !errors.As(err, &se) {
			t.Fatalf("%s: %T is not an *interceptor.Error", what, err)
		}
		if se.Reason != policy.ReasonAttempts || se.Attempts != want {
			t.Errorf("%s: reason %v after %d attempts; want %v after %d", what, se.Reason, se.Attempts, policy.ReasonAttempts, want)
		}
	}
	for _, tc := range testCases {
		name := fmt.Sprintf("service %d client %d", tc.serviceMaxAttempts, tc.clientMaxAttempts)
		t.Run(name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				file := fmt.Sprintf(`{
				"methodConfig": [{
					"name": [{"service": "grpc.testing.TestService"}],
					"waitForReady": true,
					"retryPolicy": {
						"MaxAttempts": %d,
						"InitialBackoff": ".01s",
						"MaxBackoff": ".01s",
						"BackoffMultiplier": 1.0,
						"RetryableStatusCodes": [ "UNAVAILABLE" ]
					}
					}]}`, tc.serviceMaxAttempts)
				cfg, err := policy.ParseConfig([]byte(file), policy.WithMaxAttemptsCap(tc.clientMaxAttempts))
				if err != nil {
					t.Fatal(err)
				}
				srv := &portFailingServer{}
				client := portClientConfig(t, srv, cfg, interceptor.WithBudget(nil))
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				defer cancel()

				stream, err := client.FullDuplexCall(ctx)
				if err != nil {
					t.Fatalf("FullDuplexCall: %v", err)
				}
				got, err := stream.Recv()
				if got != nil {
					t.Fatalf("client: Recv() = %v, %v; want <nil>, error", got, err)
				}
				check(t, "stream", err, tc.expectedAttempts)
				if _, n := srv.counts(); n != tc.expectedAttempts {
					t.Fatalf("stream attempts at the server = %d; want %d", n, tc.expectedAttempts)
				}

				_, err = client.EmptyCall(ctx, &testgrpc.Empty{})
				check(t, "unary", err, tc.expectedAttempts)
				if n, _ := srv.counts(); n != tc.expectedAttempts {
					t.Fatalf("unary attempts at the server = %d; want %d", n, tc.expectedAttempts)
				}
			})
		})
	}
}

// portHTTPServerResponse and portHTTPServer are grpc-go's test httpServer
// (test/end2end_test.go): a raw HTTP/2 server that answers each request
// with a scripted response, in turn, after refusing the streams refuseStream
// picks (RST_STREAM REFUSED_STREAM, which grpc-go retries transparently).
type portHTTPServerResponse struct {
	headers  [][]string
	payloads [][]byte
	trailers [][]string
}

type portHTTPServer struct {
	// waitForEndStream: answer only once the client's frame with END_STREAM
	// arrived.
	waitForEndStream bool
	refuseStream     func(uint32) bool
	responses        []portHTTPServerResponse
}

func (s *portHTTPServer) writeHeader(framer *http2.Framer, sid uint32, headerFields []string, endStream bool) error {
	var buf bytes.Buffer
	henc := hpack.NewEncoder(&buf)
	for ; len(headerFields) >= 2; headerFields = headerFields[2:] {
		if err := henc.WriteField(hpack.HeaderField{Name: headerFields[0], Value: headerFields[1]}); err != nil {
			return err
		}
	}
	return framer.WriteHeaders(http2.HeadersFrameParam{
		StreamID:      sid,
		BlockFragment: buf.Bytes(),
		EndStream:     endStream,
		EndHeaders:    true,
	})
}

// start serves the first connection lis accepts, until the client closes
// it; the returned channel is closed when the server has stopped.
func (s *portHTTPServer) start(t *testing.T, lis net.Listener) <-chan struct{} {
	done := make(chan struct{})
	go func() {
		defer close(done)
		conn, err := lis.Accept()
		if err != nil {
			return // the listener closed: the test ended before dialling
		}
		defer conn.Close()
		if _, err := io.ReadFull(conn, make([]byte, len(http2.ClientPreface))); err != nil {
			t.Errorf("server: reading the client preface: %v", err)
			return
		}
		writer := bufio.NewWriter(conn)
		framer := http2.NewFramer(writer, bufio.NewReader(conn))
		if err := framer.WriteSettingsAck(); err != nil {
			t.Errorf("server: WriteSettingsAck: %v", err)
			return
		}
		writer.Flush() // the client waits for the server's preface
		for requestNum := 0; ; requestNum = (requestNum + 1) % len(s.responses) {
			var sid uint32
			for sid == 0 {
				frame, err := framer.ReadFrame()
				if err != nil {
					return // the client closed the connection
				}
				switch fr := frame.(type) {
				case *http2.HeadersFrame:
					if !s.waitForEndStream || fr.StreamEnded() {
						sid = fr.Header().StreamID
					}
				case *http2.DataFrame:
					if s.waitForEndStream && fr.StreamEnded() {
						sid = fr.Header().StreamID
					}
				}
				if sid != 0 && s.refuseStream != nil && s.refuseStream(sid) {
					if err := framer.WriteRSTStream(sid, http2.ErrCodeRefusedStream); err != nil {
						t.Errorf("server: WriteRSTStream: %v", err)
						return
					}
					writer.Flush()
					sid = 0
				}
			}
			response := s.responses[requestNum]
			hasPayload, hasTrailers := len(response.payloads) > 0, len(response.trailers) > 0
			for i, header := range response.headers {
				endStream := !hasPayload && !hasTrailers && i == len(response.headers)-1
				if err := s.writeHeader(framer, sid, header, endStream); err != nil {
					t.Errorf("server: writing headers: %v", err)
					return
				}
				writer.Flush()
			}
			for i, payload := range response.payloads {
				endStream := !hasTrailers && i == len(response.payloads)-1
				if err := framer.WriteData(sid, endStream, payload); err != nil {
					t.Errorf("server: writing a payload: %v", err)
					return
				}
				writer.Flush()
			}
			for i, trailer := range response.trailers {
				if err := s.writeHeader(framer, sid, trailer, i == len(response.trailers)-1); err != nil {
					t.Errorf("server: writing trailers: %v", err)
					return
				}
				writer.Flush()
			}
		}
	}()
	return done
}

// portStatsHandler records the client's RPC events, as grpc-go's
// retryStatsHandler does.
type portStatsHandler struct {
	mu sync.Mutex
	s  []stats.RPCStats
}

func (*portStatsHandler) TagRPC(ctx context.Context, _ *stats.RPCTagInfo) context.Context {
	return ctx
}

func (h *portStatsHandler) HandleRPC(_ context.Context, s stats.RPCStats) {
	// The event that says a pick waited for a new picker comes or not as
	// the connection races the first RPC, so grpc-go's test ignores it. Its
	// name differs between the lanes (v1.64 PickerUpdated, v1.85
	// DelayedPickComplete, of which PickerUpdated is a deprecated alias).
	switch fmt.Sprintf("%T", s) {
	case "*stats.PickerUpdated", "*stats.DelayedPickComplete":
		return
	}
	h.mu.Lock()
	h.s = append(h.s, s)
	h.mu.Unlock()
}

func (*portStatsHandler) TagConn(ctx context.Context, _ *stats.ConnTagInfo) context.Context {
	return ctx
}

func (*portStatsHandler) HandleConn(context.Context, stats.ConnStats) {}

// TestGRPCRetryStatsPort ports grpc-go's TestRetryStats (the same in v1.64
// and v1.85): a raw HTTP/2 server refuses the first stream, answers the
// second with a Trailers-Only UNAVAILABLE and a 10ms pushback, and the third
// with an empty message; a stats.Handler records what the client did.
//
// The expected events are grpc-go's, and so is their order: grpc-go's
// transparent retry of a refused stream still runs under stagger (it is
// below the interceptors, and grpc.WithDisableRetry keeps it), so stagger's
// first attempt is one grpc RPC that holds the refused stream and its
// transparent retry, exactly the first nine events of grpc-go's list. The
// differences, each asserted:
//
//   - stagger's retry is a new grpc RPC, so its Begin, like grpc-go's own
//     retry attempt, has IsTransparentRetryAttempt false; the number of
//     events is grpc-go's.
//   - stagger sends grpc-previous-rpc-attempts as outgoing metadata, so the
//     retry's OutHeader.Header carries it ("1"); grpc-go writes its own
//     straight into the HTTP/2 headers, where a stats.Handler never sees it.
//     The first two OutHeaders carry none, in both.
//   - grpc-go's test accepts a pause of 10ms to 50ms between the second End
//     and the last Begin (real time). In a synctest bubble stagger's pause is
//     the pushback exactly: 10ms.
//   - The budget is off, as in TestGRPCRetryStreamingPort.
func TestGRPCRetryStatsPort(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		lis := bufconn.Listen(1 << 20)
		server := &portHTTPServer{
			waitForEndStream: true,
			responses: []portHTTPServerResponse{{
				trailers: [][]string{{
					":status", "200",
					"content-type", "application/grpc",
					"grpc-status", "14", // UNAVAILABLE
					"grpc-message", "unavailable retry",
					"grpc-retry-pushback-ms", "10",
				}},
			}, {
				headers: [][]string{{
					":status", "200",
					"content-type", "application/grpc",
				}},
				payloads: [][]byte{{0, 0, 0, 0, 0}}, // header for 0-byte response message.
				trailers: [][]string{{
					"grpc-status", "0", // OK
				}},
			}},
			refuseStream: func(i uint32) bool {
				return i == 1
			},
		}
		served := server.start(t, lis)
		t.Cleanup(func() {
			// The client's connection is closed by now (portDial's cleanup
			// runs first), so the server sees it end; closing the listener
			// ends a server that was never dialled.
			lis.Close()
			<-served
		})
		cfg, err := policy.ParseConfig([]byte(`{
    "methodConfig": [{
      "name": [{"service": "grpc.testing.TestService"}],
      "retryPolicy": {
          "MaxAttempts": 4,
          "InitialBackoff": ".01s",
          "MaxBackoff": ".01s",
          "BackoffMultiplier": 1.0,
          "RetryableStatusCodes": [ "UNAVAILABLE" ]
      }
    }]}`))
		if err != nil {
			t.Fatal(err)
		}
		handler := &portStatsHandler{}
		cc := portDial(t, lis, cfg, []interceptor.Option{interceptor.WithBudget(nil)}, grpc.WithStatsHandler(handler))
		client := testgrpc.NewTestServiceClient(cc)

		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if _, err := client.EmptyCall(ctx, &testgrpc.Empty{}); err != nil {
			t.Fatalf("unexpected EmptyCall error: %v", err)
		}

		handler.mu.Lock()
		defer handler.mu.Unlock()
		want := []stats.RPCStats{
			&stats.Begin{},
			&stats.OutHeader{FullMethod: "/grpc.testing.TestService/EmptyCall"},
			&stats.OutPayload{WireLength: 5},
			&stats.End{},

			&stats.Begin{IsTransparentRetryAttempt: true},
			&stats.OutHeader{FullMethod: "/grpc.testing.TestService/EmptyCall"},
			&stats.OutPayload{WireLength: 5},
			&stats.InTrailer{Trailer: metadata.Pairs("content-type", "application/grpc", "grpc-retry-pushback-ms", "10")},
			&stats.End{},

			&stats.Begin{},
			&stats.OutHeader{FullMethod: "/grpc.testing.TestService/EmptyCall"},
			&stats.OutPayload{WireLength: 5},
			&stats.InHeader{},
			&stats.InPayload{WireLength: 5},
			&stats.InTrailer{},
			&stats.End{},
		}
		toString := func(ss []stats.RPCStats) (ret []string) {
			for _, s := range ss {
				ret = append(ret, fmt.Sprintf("%T - %v", s, s))
			}
			return ret
		}
		t.Logf("Handler received frames:\n%v\n---\nwant:\n%v\n",
			strings.Join(toString(handler.s), "\n"),
			strings.Join(toString(want), "\n"))
		if len(handler.s) != len(want) {
			t.Fatalf("received unexpected number of RPCStats: got %v; want %v", len(handler.s), len(want))
		}

		// The races grpc-go's test allows for: the transport reports the
		// trailer and the application's read of the payload in either order;
		// OutPayload is reported when the data frame is queued, so what the
		// server answered to it can be reported first: the trailer of the
		// transparent retry (grpc-go's test), and, on a loaded machine, the
		// final attempt's header too (1 run in 100 beside a CPU hog).
		// Within each attempt, OutPayload is put back after OutHeader.
		swapIf := func(i, j int, first, second reflect.Type) {
			if reflect.TypeOf(handler.s[i]) == first && reflect.TypeOf(handler.s[j]) == second {
				handler.s[i], handler.s[j] = handler.s[j], handler.s[i]
			}
		}
		for i := range handler.s {
			if _, ok := handler.s[i].(*stats.OutHeader); !ok {
				continue
			}
			for j := i + 1; j < len(handler.s); j++ {
				if _, end := handler.s[j].(*stats.End); end {
					break
				}
				if _, ok := handler.s[j].(*stats.OutPayload); ok {
					out := handler.s[j]
					copy(handler.s[i+2:j+1], handler.s[i+1:j])
					handler.s[i+1] = out
					break
				}
			}
		}
		swapIf(13, 14, reflect.TypeOf(&stats.InTrailer{}), reflect.TypeOf(&stats.InPayload{}))

		for i := range handler.s {
			w, s := want[i], handler.s[i]
			if reflect.TypeOf(w) != reflect.TypeOf(s) {
				t.Fatalf("at position %v: got %T; want %T", i, s, w)
			}
			wv, sv := reflect.ValueOf(w).Elem(), reflect.ValueOf(s).Elem()
			if !sv.FieldByName("Client").Interface().(bool) {
				t.Fatalf("at position %v: got Client=false; want true", i)
			}
			for f := 0; f < wv.NumField(); f++ {
				if !wv.Field(f).IsZero() {
					if got, want := sv.Field(f).Interface(), wv.Field(f).Interface(); !reflect.DeepEqual(got, want) {
						name := reflect.TypeOf(w).Elem().Field(f).Name
						t.Fatalf("at position %v, field %v: got %v; want %v", i, name, got, want)
					}
				}
			}
			if wb, ok := w.(*stats.Begin); ok && !wb.IsTransparentRetryAttempt {
				if s.(*stats.Begin).IsTransparentRetryAttempt {
					t.Fatalf("at position %v: got IsTransparentRetryAttempt=true; want false", i)
				}
			}
		}

		// stagger's attempt header: absent from the first attempt (both of
		// its grpc-level tries), "1" on the retry.
		const key = "grpc-previous-rpc-attempts"
		for i, wantHdr := range map[int][]string{1: nil, 5: nil, 10: {"1"}} {
			if got := handler.s[i].(*stats.OutHeader).Header[key]; !reflect.DeepEqual(got, wantHdr) {
				t.Errorf("at position %v: OutHeader %s = %q; want %q", i, key, got, wantHdr)
			}
		}

		// Each grpc RPC's End says how it ended: grpc-go's test does not
		// look, but stagger decided on the second one's UNAVAILABLE (and
		// never saw the first, which grpc-go retried below it).
		for i, wantCode := range map[int]codes.Code{3: codes.Unavailable, 8: codes.Unavailable, 15: codes.OK} {
			if got := handler.s[i].(*stats.End).Error; status.Code(got) != wantCode {
				t.Errorf("at position %v: End.Error = %v; want code %v", i, got, wantCode)
			}
		}

		// The pushback before the final attempt, exactly.
		end := handler.s[8].(*stats.End)
		begin := handler.s[9].(*stats.Begin)
		if diff := begin.BeginTime.Sub(end.EndTime); diff != 10*time.Millisecond {
			t.Fatalf("pushback time before final attempt = %v; want 10ms exactly", diff)
		}
	})
}

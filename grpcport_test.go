//go:build go1.25

// The package's //go:debug asynctimerchan=0, which synctest needs, is in
// interceptor_test.go.

package stagger_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/test/bufconn"
	"google.golang.org/protobuf/proto"

	"github.com/stagger-go/stagger"
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
// stagger.DialOptions's default budget admits one retry to a quiet process
// (issue 13 changes that). The test runs in a synctest bubble, so the 1s
// pushback case waits on virtual time.

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
	cfg, err := policy.ParseConfig([]byte(file))
	if err != nil {
		t.Fatal(err)
	}
	dial := append(stagger.DialOptions(cfg, opts...),
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }))
	cc, err := grpc.NewClient("passthrough:///bufnet", dial...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	return testgrpc.NewTestServiceClient(cc)
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

func runPortUnary(t *testing.T, file string, budgetOff bool, answer func(int) error, cases []portUnaryCase) {
	t.Helper()
	synctest.Test(t, func(t *testing.T) {
		srv := &portUnaryServer{i: -1, answer: answer}
		var opts []interceptor.Option
		if budgetOff {
			opts = append(opts, interceptor.WithBudget(nil))
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

// TestGRPCRetryUnaryPort ports grpc-go's TestRetryUnary (budget off, as in
// TestGRPCRetryStreamingPort).
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
	runPortUnary(t, file, true, answer, []portUnaryCase{
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
// (DESIGN.md, "A6 exactness").
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

//go:build go1.25

package test

import (
	"context"
	"slices"
	"strconv"
	"testing"
	"testing/synctest"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/stagger-go/stagger"
	"github.com/stagger-go/stagger/interceptor"
	testingv1 "github.com/stagger-go/stagger/proto/stagger/testing/v1"
	"github.com/stagger-go/stagger/testserver"
)

// What a caller of a retried or hedged call sees is one attempt's: its
// status, headers, trailer and peer, never a mix (the rule is in package
// interceptor's doc). These tests answer each attempt from a script and tag
// everything an attempt sends with its number.

// attemptNumber is the attempt's number as the client numbered it.
func attemptNumber(ctx context.Context) int {
	md, _ := metadata.FromIncomingContext(ctx)
	if v := md.Get("grpc-previous-rpc-attempts"); len(v) == 1 {
		p, _ := strconv.Atoi(v[0])
		return p + 1
	}
	return 1
}

// attemptStep is how the scripted server answers one attempt: after
// delay, headers (x-attempt) when headers is set, then, unless hang (the
// attempt waits for its cancellation), its end with code (a message naming
// the attempt) and its trailer (x-attempt-trailer).
type attemptStep struct {
	delay   time.Duration
	headers bool
	hang    bool
	code    codes.Code
}

// scriptedUnary answers each unary attempt from steps, by its number, in
// place of the handler.
func scriptedUnary(steps map[int]attemptStep) grpc.UnaryServerInterceptor {
	return func(ctx context.Context, _ any, _ *grpc.UnaryServerInfo, _ grpc.UnaryHandler) (any, error) {
		n := attemptNumber(ctx)
		st := steps[n]
		s := strconv.Itoa(n)
		time.Sleep(st.delay)
		if st.headers {
			_ = grpc.SendHeader(ctx, metadata.Pairs("x-attempt", s))
		}
		if st.hang {
			<-ctx.Done()
			return nil, status.FromContextError(ctx.Err()).Err()
		}
		_ = grpc.SetTrailer(ctx, metadata.Pairs("x-attempt-trailer", s))
		if st.code == codes.OK {
			return &testingv1.GetResponse{Reply: &testingv1.Reply{Attempt: int32(n)}}, nil
		}
		return nil, status.Error(st.code, "attempt "+s)
	}
}

// A failed hedged unary call gives the caller the status, headers and
// trailer of the attempt whose failure ended it, none of another's: attempt
// 1 wrote straight into the caller's holders, and the call ended with the
// last attempt's status beside them.
func TestHedgeFailureShowsOneAttempt(t *testing.T) {
	tests := []struct {
		name        string
		steps       map[int]attemptStep
		wantMsg     string
		wantHeader  []string
		wantTrailer []string
	}{
		{
			// Attempt 1 fails UNAVAILABLE at 10 ms; the hedge, sent at once,
			// fails UNAVAILABLE too and ends the call.
			name: "both non-fatal",
			steps: map[int]attemptStep{
				1: {delay: 10 * time.Millisecond, code: codes.Unavailable},
				2: {delay: 10 * time.Millisecond, code: codes.Unavailable},
			},
			wantMsg: "attempt 2", wantTrailer: []string{"2"},
		},
		{
			// Attempt 1 sends headers and hangs; the hedge, at 100 ms,
			// fails INTERNAL (fatal) before it committed.
			name: "hedge fatal beside headers",
			steps: map[int]attemptStep{
				1: {headers: true, hang: true},
				2: {code: codes.Internal},
			},
			wantMsg: "attempt 2", wantTrailer: []string{"2"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				srv := testserver.New(testserver.WithServerOptions(grpc.ChainUnaryInterceptor(scriptedUnary(tt.steps))))
				t.Cleanup(srv.Close)
				cc := srv.ClientConn(t, grpc.WithChainUnaryInterceptor(interceptor.UnaryClientInterceptor(
					interceptor.WithConfig(hedgeConfig(t, 2, 100*time.Millisecond, "")))), grpc.WithDisableRetry())
				header, trailer := metadata.Pairs("stale", "x"), metadata.Pairs("stale", "x")
				_, err := testingv1.NewTestServiceClient(cc).Get(context.Background(), &testingv1.GetRequest{}, grpc.Header(&header), grpc.Trailer(&trailer))
				if got := status.Convert(err).Message(); got != tt.wantMsg {
					t.Errorf("status %v, want %q", err, tt.wantMsg)
				}
				if got := header.Get("x-attempt"); !slices.Equal(got, tt.wantHeader) || len(header.Get("stale")) > 0 {
					t.Errorf("grpc.Header = %v, want x-attempt %q", header, tt.wantHeader)
				}
				if got := trailer.Get("x-attempt-trailer"); !slices.Equal(got, tt.wantTrailer) || len(trailer.Get("stale")) > 0 {
					t.Errorf("grpc.Trailer = %v, want x-attempt-trailer %q", trailer, tt.wantTrailer)
				}
			})
		})
	}
}

// A retried stream whose next attempt fails to open (an interceptor below
// stagger refuses it, INTERNAL) ends with that failure, and the caller sees
// that attempt's metadata (none), not the trailer of the attempt before:
// Trailer and the caller's grpc.Trailer showed attempt 1's.
func TestStreamFailedOpenShowsItsAttempt(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		failFirst := func(_ any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, _ grpc.StreamHandler) error {
			ss.SetTrailer(metadata.Pairs("x-attempt-trailer", strconv.Itoa(attemptNumber(ss.Context()))))
			return status.Error(codes.Unavailable, "attempt 1")
		}
		refuseSecond := func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
			if md, _ := metadata.FromOutgoingContext(ctx); len(md.Get("grpc-previous-rpc-attempts")) > 0 {
				return nil, status.Error(codes.Internal, "attempt 2 refused below stagger")
			}
			return streamer(ctx, desc, cc, method, opts...)
		}
		srv := testserver.New(testserver.WithServerOptions(grpc.ChainStreamInterceptor(failFirst)))
		t.Cleanup(srv.Close)
		cc := srv.ClientConn(t, grpc.WithChainStreamInterceptor(interceptor.StreamClientInterceptor(
			interceptor.WithConfig(parse(t, fastRetryFile))), refuseSecond), grpc.WithDisableRetry())
		var trailer metadata.MD
		st, err := testingv1.NewTestServiceClient(cc).ListItems(context.Background(), &testingv1.ListItemsRequest{}, grpc.Trailer(&trailer))
		if err != nil {
			t.Fatal(err)
		}
		_, err = st.Recv()
		if s := status.Convert(err); s.Code() != codes.Internal {
			t.Fatalf("Recv: %v, want attempt 2's INTERNAL", err)
		}
		if got := st.Trailer(); len(got) != 0 {
			t.Errorf("Trailer() = %v, want none (attempt 2 never opened)", got)
		}
		if len(trailer) != 0 {
			t.Errorf("grpc.Trailer = %v, want none (attempt 2 never opened)", trailer)
		}
		if md, err := st.Header(); md != nil || err != nil {
			t.Errorf("Header() = %v, %v; want nil, nil", md, err)
		}
	})
}

// grpc-go's interop case status_code_and_message under a hedging policy
// (hedgingDelay 5 ms, UNAVAILABLE non-fatal) with stagger's default
// budget: every call's first attempt fails UNAVAILABLE 30 ms after it
// arrives, and any later attempt reaches the handler, which ends it with
// UNKNOWN. Once the process's first call spent the budget's one retry, a
// hedge refused while the first attempt ran stopped hedging for the call,
// and that attempt's late UNAVAILABLE ended it (the FullDuplexCall half
// returned it); the hedge is held instead, and goes as a retry once
// nothing is in flight, waiting in the Gate as a retry does.
func TestHedgeRefusedWhileInFlightRetriesLater(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		unary := func(ctx context.Context, _ any, _ *grpc.UnaryServerInfo, _ grpc.UnaryHandler) (any, error) {
			if attemptNumber(ctx) == 1 {
				time.Sleep(30 * time.Millisecond)
				return nil, status.Error(codes.Unavailable, "injected: first attempt")
			}
			return nil, status.Error(codes.Unknown, "test status message")
		}
		stream := func(_ any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, _ grpc.StreamHandler) error {
			if attemptNumber(ss.Context()) == 1 {
				time.Sleep(30 * time.Millisecond)
				return status.Error(codes.Unavailable, "injected: first attempt")
			}
			if err := ss.RecvMsg(new(testingv1.ChatRequest)); err != nil {
				return err
			}
			return status.Error(codes.Unknown, "test status message")
		}
		srv := testserver.New(testserver.WithServerOptions(grpc.ChainUnaryInterceptor(unary), grpc.ChainStreamInterceptor(stream)))
		t.Cleanup(srv.Close)
		cc, err := srv.Dial(stagger.DialOptions(hedgeStreamFile(t, 4, 5*time.Millisecond, `"UNAVAILABLE", "RESOURCE_EXHAUSTED"`), interceptor.WithDefaultBudgets(freshDefaults(t)))...)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cc.Close() })
		client := testingv1.NewTestServiceClient(cc)
		for i := range 3 {
			_, err := client.Get(context.Background(), &testingv1.GetRequest{})
			if s := status.Convert(err); s.Code() != codes.Unknown || s.Message() != "test status message" {
				t.Errorf("round %d: Get: %v, want the handler's UNKNOWN", i, err)
			}
			st, err := client.Chat(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			if err := st.Send(&testingv1.ChatRequest{Seq: 1}); err != nil {
				t.Fatal(err)
			}
			if err := st.CloseSend(); err != nil {
				t.Fatal(err)
			}
			_, err = st.Recv()
			if s := status.Convert(err); s.Code() != codes.Unknown || s.Message() != "test status message" {
				t.Errorf("round %d: Chat Recv: %v, want the handler's UNKNOWN", i, err)
			}
		}
	})
}

// Context commits a hedged stream to its oldest attempt open, never to one
// that has ended: an attempt whose end its watcher saw stays among those
// open until the driver hears of it, and Context committed to it then, so
// that its UNAVAILABLE, which the next hedge answers, became the stream's.
// A hook holds the driver (it runs the hooks of hedge events) while
// attempt 1 ends and the caller calls Context.
func TestHedgedStreamContextSkipsAnEndedAttempt(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		answer := func(_ any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, _ grpc.StreamHandler) error {
			n := attemptNumber(ss.Context())
			if n == 1 {
				time.Sleep(20 * time.Millisecond)
				return status.Error(codes.Unavailable, "attempt 1")
			}
			if err := ss.RecvMsg(new(testingv1.ListItemsRequest)); err != nil {
				return err
			}
			return ss.SendMsg(&testingv1.ListItemsResponse{Reply: &testingv1.Reply{Attempt: int32(n)}})
		}
		release := make(chan struct{})
		hold := func(e interceptor.Event) {
			if e.Kind == interceptor.EventHedge && e.Attempt == 2 {
				<-release
			}
		}
		srv := testserver.New(testserver.WithServerOptions(grpc.ChainStreamInterceptor(answer)))
		t.Cleanup(srv.Close)
		cc := srv.ClientConn(t, grpc.WithChainStreamInterceptor(interceptor.StreamClientInterceptor(
			interceptor.WithConfig(hedgeStreamFile(t, 3, 10*time.Millisecond, "")), interceptor.WithHook(hold))), grpc.WithDisableRetry())
		st, err := testingv1.NewTestServiceClient(cc).ListItems(context.Background(), &testingv1.ListItemsRequest{})
		if err != nil {
			t.Fatal(err)
		}
		// At 30 ms attempt 1 has ended, and the driver is in the hook of
		// attempt 2's hedge (sent at 10 ms).
		time.Sleep(30 * time.Millisecond)
		_ = st.Context()
		close(release)
		m, err := st.Recv()
		if err != nil || m.GetReply().GetAttempt() != 2 {
			t.Fatalf("Recv = %v, %v; want attempt 2's message", m, err)
		}
	})
}

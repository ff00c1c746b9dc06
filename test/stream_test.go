//go:build go1.25

// The package's //go:debug asynctimerchan=0, which synctest needs, is in
// interceptor_test.go (a package may state it once).

package test

import (
	"context"
	"errors"
	"io"
	"reflect"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/stagger-go/stagger"
	"github.com/stagger-go/stagger/budget"
	"github.com/stagger-go/stagger/interceptor"
	"github.com/stagger-go/stagger/policy"
	testingv1 "github.com/stagger-go/stagger/proto/stagger/testing/v1"
	"github.com/stagger-go/stagger/testserver"
)

// The stream tests run each scenario for the three streaming kinds, over
// bufconn against testserver, inside a testing/synctest bubble.

// streamResult is what the application saw of one streaming call.
type streamResult struct {
	// seqs: ListItems, the seq of each message received; Upload, the seqs
	// the server answers it received; Chat, the seq of each echo.
	seqs []int64
	// attempts: the server's attempt number on each message received.
	attempts []int32
	header   metadata.MD
	err      error
}

// streamKind runs one call of a streaming method: it sends n messages (seq 1
// to n; ListItems asks for n responses) with the script on the first, closes
// its side and reads until the end.
type streamKind struct {
	name   string
	method string
	run    func(ctx context.Context, c testingv1.TestServiceClient, sc *testingv1.Script, n int, opts ...grpc.CallOption) streamResult
}

var streamKinds = []streamKind{
	{"server", testingv1.TestService_ListItems_FullMethodName, runListItems},
	{"client", testingv1.TestService_Upload_FullMethodName, runUpload},
	{"bidi", testingv1.TestService_Chat_FullMethodName, runChat},
}

func runListItems(ctx context.Context, c testingv1.TestServiceClient, sc *testingv1.Script, n int, opts ...grpc.CallOption) (r streamResult) {
	sc.ResponseCount = int32(n)
	st, err := c.ListItems(ctx, &testingv1.ListItemsRequest{Script: sc}, opts...)
	if err != nil {
		r.err = err
		return r
	}
	for {
		m, err := st.Recv()
		if err != nil {
			if !errors.Is(err, io.EOF) {
				r.err = err
			}
			r.header, _ = st.Header()
			return r
		}
		r.seqs = append(r.seqs, m.GetReply().GetSeq())
		r.attempts = append(r.attempts, m.GetReply().GetAttempt())
	}
}

func runUpload(ctx context.Context, c testingv1.TestServiceClient, sc *testingv1.Script, n int, opts ...grpc.CallOption) (r streamResult) {
	st, err := c.Upload(ctx, opts...)
	if err != nil {
		r.err = err
		return r
	}
	for i := 1; i <= n; i++ {
		m := &testingv1.UploadRequest{Seq: int64(i), Payload: make([]byte, sc.GetPayloadBytes())}
		if i == 1 {
			m.Script = sc
		}
		if err := st.Send(m); err != nil {
			break // the status comes from CloseAndRecv
		}
	}
	resp, err := st.CloseAndRecv()
	r.err = err
	r.header, _ = st.Header()
	if err == nil {
		r.seqs = resp.GetReceived()
		r.attempts = []int32{resp.GetReply().GetAttempt()}
	}
	return r
}

func runChat(ctx context.Context, c testingv1.TestServiceClient, sc *testingv1.Script, n int, opts ...grpc.CallOption) (r streamResult) {
	st, err := c.Chat(ctx, opts...)
	if err != nil {
		r.err = err
		return r
	}
	// Send from another goroutine while this one receives, as grpc allows.
	sent := make(chan struct{})
	go func() {
		defer close(sent)
		for i := 1; i <= n; i++ {
			m := &testingv1.ChatRequest{Seq: int64(i), Payload: make([]byte, sc.GetPayloadBytes())}
			if i == 1 {
				m.Script = sc
			}
			if err := st.Send(m); err != nil {
				return
			}
		}
		_ = st.CloseSend()
	}()
	defer func() { <-sent }()
	for {
		m, err := st.Recv()
		if err != nil {
			if !errors.Is(err, io.EOF) {
				r.err = err
			}
			r.header, _ = st.Header()
			return r
		}
		r.seqs = append(r.seqs, m.GetReply().GetSeq())
		r.attempts = append(r.attempts, m.GetReply().GetAttempt())
	}
}

func seqsTo(n int) []int64 {
	out := make([]int64, n)
	for i := range out {
		out[i] = int64(i + 1)
	}
	return out
}

// newStreamBench is a server and a client whose stream interceptor is built
// from opts.
func newStreamBench(t *testing.T, opts ...interceptor.Option) (*testserver.Server, testingv1.TestServiceClient) {
	t.Helper()
	srv := testserver.New()
	t.Cleanup(srv.Close)
	cc := srv.ClientConn(t,
		grpc.WithChainStreamInterceptor(interceptor.StreamClientInterceptor(opts...)),
		grpc.WithDisableRetry())
	return srv, testingv1.NewTestServiceClient(cc)
}

func TestStreamSuccessFirstTime(t *testing.T) {
	for _, k := range streamKinds {
		t.Run(k.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				srv, c := newStreamBench(t, interceptor.WithConfig(parse(t, retryFile)))
				r := k.run(context.Background(), c, &testingv1.Script{Key: "k"}, 5)
				if r.err != nil {
					t.Fatalf("err = %v", r.err)
				}
				if !slices.Equal(r.seqs, seqsTo(5)) {
					t.Errorf("seqs = %v, want 1..5", r.seqs)
				}
				recs := srv.Attempts("k")
				if len(recs) != 1 || recs[0].Code != codes.OK || recs[0].PreviousAttempts != "" {
					t.Errorf("server records = %+v, want one OK attempt without grpc-previous-rpc-attempts", recs)
				}
			})
		})
	}
}

// TestStreamRetryReplaysInOrder: attempts that fail before the stream
// committed (Trailers-Only) are retried with every sent message replayed in
// order; the caller sees each message once.
func TestStreamRetryReplaysInOrder(t *testing.T) {
	for _, k := range streamKinds {
		for _, before := range []int32{0, 2} {
			if before > 0 && k.name != "client" {
				continue // only Upload fails mid-stream without having answered
			}
			t.Run(k.name, func(t *testing.T) {
				synctest.Test(t, func(t *testing.T) {
					var h hookLog
					srv, c := newStreamBench(t, interceptor.WithConfig(parse(t, retryFile)), interceptor.WithHook(h.hook))
					start := time.Now()
					r := k.run(context.Background(), c, &testingv1.Script{Key: "k", FailAttempts: 2, MessagesBeforeFailure: before}, 6)
					if r.err != nil {
						t.Fatalf("err = %v", r.err)
					}
					if !slices.Equal(r.seqs, seqsTo(6)) {
						t.Errorf("seqs = %v, want 1..6 once each, in order", r.seqs)
					}
					for _, a := range r.attempts {
						if a != 3 {
							t.Errorf("a message came from attempt %d, want only from attempt 3", a)
						}
					}
					recs := srv.Attempts("k")
					if len(recs) != 3 {
						t.Fatalf("server saw %d attempts, want 3", len(recs))
					}
					for i, want := range []string{"", "1", "2"} {
						if recs[i].PreviousAttempts != want {
							t.Errorf("attempt %d: grpc-previous-rpc-attempts = %q, want %q", i+1, recs[i].PreviousAttempts, want)
						}
					}
					if recs[2].Received != 6 && k.name != "server" {
						t.Errorf("last attempt received %d messages, want 6", recs[2].Received)
					}
					if g := gaps(recs); !equalDurations(g, []time.Duration{time.Second, 2 * time.Second}) {
						t.Errorf("pauses = %v, want [1s 2s]", g)
					}
					if took := time.Since(start); took != 3*time.Second {
						t.Errorf("call took %v, want 3s", took)
					}
					if n := len(h.all()); n != 2 {
						t.Errorf("%d events, want 2 retries", n)
					}
				})
			})
		}
	}
}

// TestStreamCommittedNotRetried: a failure after a response message, or after
// response headers, is returned to the caller and never retried.
func TestStreamCommittedNotRetried(t *testing.T) {
	type tc struct {
		name     string
		sc       *testingv1.Script
		wantSeqs []int64
		header   bool
	}
	for _, k := range streamKinds {
		cases := []tc{{"after headers", &testingv1.Script{Key: "k", FailAttempts: 1, HeadersFirst: true}, nil, true}}
		if k.name != "client" {
			cases = append(cases, tc{"after two messages", &testingv1.Script{Key: "k", FailAttempts: 1, MessagesBeforeFailure: 2}, []int64{1, 2}, false})
		}
		for _, c := range cases {
			t.Run(k.name+"/"+c.name, func(t *testing.T) {
				synctest.Test(t, func(t *testing.T) {
					var h hookLog
					srv, cl := newStreamBench(t, interceptor.WithConfig(parse(t, retryFile)), interceptor.WithHook(h.hook))
					r := k.run(context.Background(), cl, c.sc, 4)
					if status.Code(r.err) != codes.Unavailable {
						t.Fatalf("err = %v, want UNAVAILABLE", r.err)
					}
					if !slices.Equal(r.seqs, c.wantSeqs) {
						t.Errorf("seqs = %v, want %v", r.seqs, c.wantSeqs)
					}
					if n := len(srv.Attempts("k")); n != 1 {
						t.Errorf("server saw %d attempts, want 1", n)
					}
					if c.header && r.header.Get(testserver.HeadersFirstHeader) == nil {
						t.Errorf("Header() = %v, want the committed attempt's headers", r.header)
					}
					if n := interceptor.Attempts(r.err); n != 1 {
						t.Errorf("Attempts(err) = %d, want 1", n)
					}
					if e := h.last(); e.Kind != interceptor.EventGiveUp || e.Reason != policy.ReasonCommitted {
						t.Errorf("last event = %+v, want give up, reason committed", e)
					}
				})
			})
		}
	}
}

// TestStreamOverflowCommits: a stream whose messages pass the replay bound
// commits and is not retried.
func TestStreamOverflowCommits(t *testing.T) {
	for _, k := range streamKinds {
		t.Run(k.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				srv, c := newStreamBench(t, interceptor.WithConfig(parse(t, retryFile)))
				// ListItems' one request is about 10 bytes; the others send
				// 4 messages of about 105 bytes. Chat fails as soon as its
				// first message arrives, so its first message must overflow
				// (else the failure may come before the overflow).
				size := map[string]int{"server": 1, "client": 250, "bidi": 50}[k.name]
				r := k.run(context.Background(), c, &testingv1.Script{Key: "k", FailAttempts: 1, PayloadBytes: 100}, 4,
					interceptor.WithReplayBufferSize(size))
				if status.Code(r.err) != codes.Unavailable {
					t.Fatalf("err = %v, want UNAVAILABLE", r.err)
				}
				if n := len(srv.Attempts("k")); n != 1 {
					t.Errorf("server saw %d attempts, want 1", n)
				}
			})
		})
	}
}

// TestStreamReplayBufferLimit: a cap shared across streams commits a stream
// whose messages do not fit in what is left, and every byte is given back.
func TestStreamReplayBufferLimit(t *testing.T) {
	for _, k := range streamKinds {
		t.Run(k.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				limit := interceptor.NewReplayLimit(150)
				srv, c := newStreamBench(t, interceptor.WithConfig(parse(t, retryFile)), interceptor.WithReplayBufferLimit(limit))
				// ListItems' request fits: the retry happens. Upload's first
				// message fits, its second does not: commit. Chat's first
				// does not fit (Chat fails as soon as it arrives).
				size := map[string]int32{"server": 0, "client": 100, "bidi": 200}[k.name]
				r := k.run(context.Background(), c, &testingv1.Script{Key: "k", FailAttempts: 1, PayloadBytes: size}, 4)
				want := 1
				if k.name == "server" {
					want = 2
				}
				if (r.err == nil) != (want == 2) {
					t.Fatalf("err = %v", r.err)
				}
				if n := len(srv.Attempts("k")); n != want {
					t.Errorf("server saw %d attempts, want %d", n, want)
				}
				if u := limit.InUse(); u != 0 {
					t.Errorf("limit holds %d bytes after the call, want 0", u)
				}
				if p := limit.Peak(); p > 150 || (p == 0) != (k.name == "bidi") {
					t.Errorf("peak = %d, want in (0, 150] (0 for bidi)", p)
				}
			})
		})
	}
}

func TestStreamMaxAttempts(t *testing.T) {
	for _, k := range streamKinds {
		t.Run(k.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				var h hookLog
				srv, c := newStreamBench(t, interceptor.WithConfig(parse(t, retryFile)), interceptor.WithHook(h.hook))
				r := k.run(context.Background(), c, &testingv1.Script{Key: "k", FailAttempts: 10}, 3)
				if status.Code(r.err) != codes.Unavailable {
					t.Fatalf("err = %v, want UNAVAILABLE", r.err)
				}
				recs := srv.Attempts("k")
				if len(recs) != 4 {
					t.Fatalf("server saw %d attempts, want 4", len(recs))
				}
				for i, want := range []string{"", "1", "2", "3"} {
					if recs[i].PreviousAttempts != want {
						t.Errorf("attempt %d: grpc-previous-rpc-attempts = %q, want %q", i+1, recs[i].PreviousAttempts, want)
					}
				}
				if n := interceptor.Attempts(r.err); n != 4 {
					t.Errorf("Attempts(err) = %d, want 4", n)
				}
				if e := h.last(); e.Kind != interceptor.EventGiveUp || e.Reason != policy.ReasonAttempts {
					t.Errorf("last event = %+v, want give up, reason attempts", e)
				}
			})
		})
	}
}

func TestStreamPushback(t *testing.T) {
	for _, k := range streamKinds {
		t.Run(k.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				srv, c := newStreamBench(t, interceptor.WithConfig(parse(t, retryFile)))
				r := k.run(context.Background(), c, &testingv1.Script{Key: "k", FailAttempts: 2, Pushback: []string{"3500"}}, 2)
				if r.err != nil {
					t.Fatalf("err = %v", r.err)
				}
				// Pushback is waited exactly, and restarts the backoff.
				if g := gaps(srv.Attempts("k")); !equalDurations(g, []time.Duration{3500 * time.Millisecond, 3500 * time.Millisecond}) {
					t.Errorf("pauses = %v, want [3.5s 3.5s]", g)
				}
			})
		})
	}
}

func TestStreamDeadlineAware(t *testing.T) {
	for _, k := range streamKinds {
		t.Run(k.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				var h hookLog
				srv, c := newStreamBench(t, interceptor.WithConfig(parse(t, retryFile)), interceptor.WithHook(h.hook))
				// Pauses are 1s then 2s: the first fits in 2.5s, the second does not.
				ctx, cancel := context.WithTimeout(context.Background(), 2500*time.Millisecond)
				defer cancel()
				start := time.Now()
				r := k.run(ctx, c, &testingv1.Script{Key: "k", FailAttempts: 10, Message: "shard 7 is down"}, 2)
				if took := time.Since(start); took != time.Second {
					t.Errorf("call took %v, want 1s", took)
				}
				st, _ := status.FromError(r.err)
				if st.Code() != codes.Unavailable || st.Message() != "shard 7 is down" {
					t.Errorf("status = %v %q, want the server's UNAVAILABLE and message", st.Code(), st.Message())
				}
				if n := len(srv.Attempts("k")); n != 2 {
					t.Errorf("server saw %d attempts, want 2", n)
				}
				if e := h.last(); e.Reason != policy.ReasonDeadline {
					t.Errorf("reason = %v, want deadline", e.Reason)
				}
			})
		})
	}
}

func TestStreamCancelEndsPause(t *testing.T) {
	for _, k := range streamKinds {
		t.Run(k.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				var h hookLog
				srv, c := newStreamBench(t, interceptor.WithConfig(parse(t, retryFile)), interceptor.WithHook(h.hook))
				ctx, cancel := context.WithCancel(context.Background())
				done := make(chan streamResult, 1)
				go func() { done <- k.run(ctx, c, &testingv1.Script{Key: "k", FailAttempts: 10}, 3) }()
				if _, err := srv.AwaitAttempts(context.Background(), "k", 1); err != nil {
					t.Fatal(err)
				}
				synctest.Wait() // the client is now in its 1s pause, inside RecvMsg
				at := time.Now()
				cancel()
				r := <-done
				if took := time.Since(at); took != 0 {
					t.Errorf("call returned %v after cancel, want at once", took)
				}
				if status.Code(r.err) != codes.Canceled {
					t.Errorf("err = %v, want CANCELED", r.err)
				}
				if n := len(srv.Attempts("k")); n != 1 {
					t.Errorf("server saw %d attempts, want 1", n)
				}
				if e := h.last(); e.Reason != policy.ReasonCaller || e.Kind != interceptor.EventGiveUp {
					t.Errorf("last event = %+v, want give up, reason caller", e)
				}
			})
		})
	}
}

func TestStreamNotRetryableAtOnce(t *testing.T) {
	for _, k := range streamKinds {
		t.Run(k.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				srv, c := newStreamBench(t, interceptor.WithConfig(parse(t, retryFile)))
				start := time.Now()
				r := k.run(context.Background(), c, &testingv1.Script{Key: "k", FailAttempts: 10, Code: int32(codes.InvalidArgument), Message: "bad seq"}, 2)
				st, _ := status.FromError(r.err)
				if st.Code() != codes.InvalidArgument || st.Message() != "bad seq" {
					t.Errorf("status = %v %q, want INVALID_ARGUMENT \"bad seq\"", st.Code(), st.Message())
				}
				if n := len(srv.Attempts("k")); n != 1 {
					t.Errorf("server saw %d attempts, want 1", n)
				}
				if took := time.Since(start); took != 0 {
					t.Errorf("call took %v, want no pause", took)
				}
			})
		})
	}
}

// TestStreamPerAttemptTimeout: the timer cuts off an attempt that sends
// nothing, and stops at the first response header (C-core's meaning).
func TestStreamPerAttemptTimeout(t *testing.T) {
	slowFirst := []*durationpb.Duration{durationpb.New(5 * time.Second), durationpb.New(0)}
	tests := []struct {
		name         string
		headersFirst bool
		wantAttempts int
		wantTook     time.Duration
	}{
		{"silent attempt cut off", false, 2, time.Second + 100*time.Millisecond},
		{"headers stop the timer", true, 1, 5 * time.Second},
	}
	for _, k := range streamKinds {
		for _, tt := range tests {
			t.Run(k.name+"/"+tt.name, func(t *testing.T) {
				synctest.Test(t, func(t *testing.T) {
					srv, c := newStreamBench(t, interceptor.WithConfig(parse(t, perAttemptFile)))
					start := time.Now()
					r := k.run(context.Background(), c, &testingv1.Script{Key: "k", AttemptDelays: slowFirst, HeadersFirst: tt.headersFirst}, 2,
						interceptor.Idempotent())
					if r.err != nil {
						t.Fatalf("err = %v", r.err)
					}
					if took := time.Since(start); took != tt.wantTook {
						t.Errorf("call took %v, want %v", took, tt.wantTook)
					}
					if n := len(srv.Attempts("k")); n != tt.wantAttempts {
						t.Errorf("server saw %d attempts, want %d", n, tt.wantAttempts)
					}
				})
			})
		}
	}
}

// TestStreamCallerStopsReading: a caller that reads one message and cancels
// leaves no goroutine or stream behind (the bubble and goleak check).
func TestStreamCallerStopsReading(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv, c := newStreamBench(t, interceptor.WithConfig(parse(t, retryFile)))
		ctx, cancel := context.WithCancel(context.Background())
		st, err := c.ListItems(ctx, &testingv1.ListItemsRequest{Script: &testingv1.Script{Key: "k", ResponseCount: 1000, PayloadBytes: 1 << 10}})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := st.Recv(); err != nil {
			t.Fatal(err)
		}
		cancel()
		recs, err := srv.AwaitAttempts(context.Background(), "k", 1)
		if err != nil {
			t.Fatal(err)
		}
		if !recs[0].Cancelled {
			t.Errorf("server attempt = %+v, want cancelled", recs[0])
		}
		// Messages grpc had already buffered may still come; then CANCELED.
		for i := 0; i < 1000 && err == nil; i++ {
			_, err = st.Recv()
		}
		if status.Code(err) != codes.Canceled {
			t.Errorf("Recv after cancel = %v, want CANCELED", err)
		}
	})
}

// TestStreamOneBufferPerRPC: a client stream that sends more than the replay
// bound holds at most the bound in stagger's buffer, and grpc-go keeps no
// second copy of its own.
func TestStreamOneBufferPerRPC(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		limit := interceptor.NewReplayLimit(1 << 40)
		var raw grpcStreamProbe
		srv := testserver.New()
		t.Cleanup(srv.Close)
		cc := srv.ClientConn(t, grpc.WithDisableRetry(), grpc.WithChainStreamInterceptor(
			interceptor.StreamClientInterceptor(interceptor.WithConfig(parse(t, retryFile)), interceptor.WithReplayBufferLimit(limit)),
			raw.interceptor))
		st, err := testingv1.NewTestServiceClient(cc).Upload(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		for i := 1; i <= 400; i++ {
			m := &testingv1.UploadRequest{Seq: int64(i), Payload: make([]byte, 1<<10)}
			if i == 1 {
				m.Script = &testingv1.Script{Key: "k"}
			}
			if err := st.Send(m); err != nil {
				t.Fatal(err)
			}
			if h := raw.held(); h != 0 {
				t.Fatalf("after message %d grpc-go holds %d bytes for retry, want 0", i, h)
			}
		}
		if _, err := st.CloseAndRecv(); err != nil {
			t.Fatal(err)
		}
		if p := limit.Peak(); p > interceptor.DefaultReplayBufferSize || p < interceptor.DefaultReplayBufferSize-2<<10 {
			t.Errorf("replay buffer peak = %d, want just under %d", p, interceptor.DefaultReplayBufferSize)
		}
		if u := limit.InUse(); u != 0 {
			t.Errorf("replay buffer holds %d bytes after the call, want 0", u)
		}
	})
}

// BenchmarkStreamMessage measures one Send and one Recv on a committed bidi
// stream, with and without stagger: the per-message overhead after commit.
func BenchmarkStreamMessage(b *testing.B) {
	for _, bc := range []struct {
		name string
		dial []grpc.DialOption
	}{
		{"none", nil},
		{"stagger", []grpc.DialOption{grpc.WithChainStreamInterceptor(interceptor.StreamClientInterceptor(
			interceptor.WithConfig(streamBenchConfig(b))))}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			srv := testserver.New()
			defer srv.Close()
			cc := srv.ClientConn(b, append(bc.dial, grpc.WithDisableRetry())...)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			st, err := testingv1.NewTestServiceClient(cc).Chat(ctx)
			if err != nil {
				b.Fatal(err)
			}
			if err := st.Send(&testingv1.ChatRequest{Script: &testingv1.Script{}, Seq: 1}); err != nil {
				b.Fatal(err)
			}
			var resp testingv1.ChatResponse
			if err := st.RecvMsg(&resp); err != nil { // commits
				b.Fatal(err)
			}
			req := &testingv1.ChatRequest{Seq: 2}
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				if err := st.Send(req); err != nil {
					b.Fatal(err)
				}
				if err := st.RecvMsg(&resp); err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			_ = st.CloseSend()
		})
	}
}

// BenchmarkStreamUploadMemory sends 10 000 messages of 1 KiB on one client
// stream that commits only at its end (no response header before), and
// reports the most bytes stagger's replay buffer held (replay-peak-B) and the
// most grpc-go's own retry buffer held (grpc-buffer-peak-B, read from grpc's
// stream every 100 messages). "none" is grpc alone; "stagger+grpc-buffer"
// gives grpc-go back its default 256 KiB buffer, which stagger turns off.
func BenchmarkStreamUploadMemory(b *testing.B) {
	const messages, payload = 10000, 1 << 10
	for _, bc := range []struct {
		name     string
		stagger  bool
		callOpts []grpc.CallOption
	}{
		{"none", false, nil},
		{"stagger", true, nil},
		{"stagger+grpc-buffer", true, []grpc.CallOption{grpc.MaxRetryRPCBufferSize(256 << 10)}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			limit := interceptor.NewReplayLimit(1 << 40)
			var raw grpcStreamProbe
			dial := []grpc.DialOption{grpc.WithDisableRetry()}
			if bc.stagger {
				dial = append(dial, grpc.WithChainStreamInterceptor(interceptor.StreamClientInterceptor(
					interceptor.WithConfig(streamBenchConfig(b)), interceptor.WithReplayBufferLimit(limit)), raw.interceptor))
			} else {
				dial = append(dial, grpc.WithChainStreamInterceptor(raw.interceptor))
			}
			srv := testserver.New()
			defer srv.Close()
			c := testingv1.NewTestServiceClient(srv.ClientConn(b, dial...))
			var grpcPeak int64
			b.ReportAllocs()
			for b.Loop() {
				st, err := c.Upload(context.Background(), bc.callOpts...)
				if err != nil {
					b.Fatal(err)
				}
				for i := 1; i <= messages; i++ {
					m := &testingv1.UploadRequest{Seq: int64(i), Payload: make([]byte, payload)}
					if i == 1 {
						m.Script = &testingv1.Script{}
					}
					if err := st.Send(m); err != nil {
						b.Fatal(err)
					}
					if i%100 == 0 {
						grpcPeak = max(grpcPeak, raw.held())
					}
				}
				resp, err := st.CloseAndRecv()
				if err != nil || len(resp.GetReceived()) != messages {
					b.Fatalf("CloseAndRecv: %d received, err %v", len(resp.GetReceived()), err)
				}
			}
			b.ReportMetric(float64(limit.Peak()), "replay-peak-B")
			b.ReportMetric(float64(grpcPeak), "grpc-buffer-peak-B")
		})
	}
}

// grpcStreamProbe captures the stream grpc-go made for the last attempt and
// reads how many bytes its own retry buffer holds (unexported fields, read
// through reflect: a measurement, not an API; 0 when the layout changes).
type grpcStreamProbe struct {
	mu sync.Mutex
	cs grpc.ClientStream
}

func (p *grpcStreamProbe) interceptor(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
	cs, err := streamer(ctx, desc, cc, method, opts...)
	p.mu.Lock()
	p.cs = cs
	p.mu.Unlock()
	return cs, err
}

func (p *grpcStreamProbe) held() int64 {
	p.mu.Lock()
	cs := p.cs
	p.mu.Unlock()
	v := reflect.ValueOf(cs)
	if v.Kind() != reflect.Pointer || v.Elem().Kind() != reflect.Struct {
		return 0
	}
	v = v.Elem()
	committed, size := v.FieldByName("committed"), v.FieldByName("bufferSize")
	if !committed.IsValid() || !size.IsValid() || committed.Bool() {
		return 0
	}
	return size.Int()
}

func streamBenchConfig(b *testing.B) *policy.Config {
	b.Helper()
	cfg, err := policy.ParseConfig([]byte(retryFile))
	if err != nil {
		b.Fatal(err)
	}
	return cfg
}

// TestStreamHedgedNotIdempotentRunsOnce: a streaming method whose entry
// hedges but that is not known to be idempotent (the test service's streams
// have no idempotency_level) runs once, and the hooks hear why, once.
func TestStreamHedgedNotIdempotentRunsOnce(t *testing.T) {
	const hedgeFile = `{"methodConfig": [{
		"name": [{"service": "stagger.testing.v1.TestService"}],
		"hedgingPolicy": {"maxAttempts": 3, "hedgingDelay": "0.1s", "nonFatalStatusCodes": ["UNAVAILABLE"]}
	}]}`
	for _, k := range streamKinds {
		t.Run(k.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				var h hookLog
				srv, c := newStreamBench(t, interceptor.WithConfig(parse(t, hedgeFile)), interceptor.WithHook(h.hook))
				for range 2 {
					r := k.run(context.Background(), c, &testingv1.Script{Key: "k", FailAttempts: 10, Delay: durationpb.New(time.Second)}, 2)
					if status.Code(r.err) != codes.Unavailable {
						t.Fatalf("err = %v, want UNAVAILABLE", r.err)
					}
				}
				if n := len(srv.Attempts("k")); n != 2 {
					t.Errorf("server saw %d attempts for 2 calls, want 2", n)
				}
				ev := h.all()
				if len(ev) != 1 || ev[0].Kind != interceptor.EventNotice || ev[0].Reason != policy.ReasonNotIdempotent || !ev[0].Hedging {
					t.Errorf("events = %+v, want one notice, reason not idempotent, hedging", ev)
				}
			})
		})
	}
}

// TestStreamOnFinishOnce: the caller's grpc.OnFinish runs once per call, not
// once per attempt, with the final outcome, also when the caller abandons
// the stream.
func TestStreamOnFinishOnce(t *testing.T) {
	for _, k := range streamKinds {
		t.Run(k.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				_, c := newStreamBench(t, interceptor.WithConfig(parse(t, retryFile)))
				var mu sync.Mutex
				var got []error
				onFinish := grpc.OnFinish(func(err error) {
					mu.Lock()
					got = append(got, err)
					mu.Unlock()
				})
				r := k.run(context.Background(), c, &testingv1.Script{Key: "k", FailAttempts: 2}, 3, onFinish)
				if r.err != nil {
					t.Fatal(r.err)
				}
				synctest.Wait()
				mu.Lock()
				defer mu.Unlock()
				if len(got) != 1 || got[0] != nil {
					t.Errorf("OnFinish ran with %v, want once with nil", got)
				}
			})
		})
	}
	t.Run("abandoned", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			_, c := newStreamBench(t, interceptor.WithConfig(parse(t, retryFile)))
			var mu sync.Mutex
			var got []error
			ctx, cancel := context.WithCancel(context.Background())
			st, err := c.ListItems(ctx, &testingv1.ListItemsRequest{Script: &testingv1.Script{Key: "k", ResponseCount: 100}},
				grpc.OnFinish(func(err error) {
					mu.Lock()
					got = append(got, err)
					mu.Unlock()
				}))
			if err != nil {
				t.Fatal(err)
			}
			if _, err := st.Recv(); err != nil {
				t.Fatal(err)
			}
			cancel()
			synctest.Wait()
			mu.Lock()
			defer mu.Unlock()
			if len(got) != 1 || status.Code(got[0]) != codes.Canceled {
				t.Errorf("OnFinish ran with %v, want once with CANCELED", got)
			}
		})
	})
}

// streamRefusingBudget refuses every retry and counts what it heard.
type streamRefusingBudget struct {
	mu       sync.Mutex
	outcomes []budget.Outcome
	asked    int
}

func (b *streamRefusingBudget) Record(a budget.Attempt) {
	b.mu.Lock()
	b.outcomes = append(b.outcomes, a.Outcome)
	b.mu.Unlock()
}

func (b *streamRefusingBudget) Allow(budget.Request) bool {
	b.mu.Lock()
	b.asked++
	b.mu.Unlock()
	return false
}

func (b *streamRefusingBudget) State() budget.State { return budget.State{Kind: "refusing"} }

// TestStreamBudget: the budget hears every attempt of a stream and its
// refusal ends the call with the last error, as for unary calls.
func TestStreamBudget(t *testing.T) {
	for _, k := range streamKinds {
		t.Run(k.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				var h hookLog
				b := &streamRefusingBudget{}
				srv, c := newStreamBench(t, interceptor.WithConfig(parse(t, retryFile)), interceptor.WithBudget(b), interceptor.WithHook(h.hook))
				r := k.run(context.Background(), c, &testingv1.Script{Key: "k", FailAttempts: 1}, 2)
				if status.Code(r.err) != codes.Unavailable {
					t.Fatalf("err = %v, want UNAVAILABLE", r.err)
				}
				if n := len(srv.Attempts("k")); n != 1 {
					t.Errorf("server saw %d attempts, want 1", n)
				}
				if e := h.last(); e.Kind != interceptor.EventGiveUp || e.Reason != policy.ReasonBudget {
					t.Errorf("last event = %+v, want give up, reason budget", e)
				}
				b.mu.Lock()
				defer b.mu.Unlock()
				if b.asked != 1 || !slices.Equal(b.outcomes, []budget.Outcome{budget.Failure}) {
					t.Errorf("budget asked %d times, heard %v; want 1 and [failure]", b.asked, b.outcomes)
				}
			})
		})
	}
}

// TestStreamDialOptions: stagger.DialOptions installs the stream
// interceptor.
func TestStreamDialOptions(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := testserver.New()
		t.Cleanup(srv.Close)
		cc := srv.ClientConn(t, stagger.DialOptions(parse(t, retryFile))...)
		r := runUpload(context.Background(), testingv1.NewTestServiceClient(cc), &testingv1.Script{Key: "k", FailAttempts: 1}, 3)
		if r.err != nil || !slices.Equal(r.seqs, seqsTo(3)) {
			t.Fatalf("Upload = %v, %v; want [1 2 3]", r.seqs, r.err)
		}
		if n := len(srv.Attempts("k")); n != 2 {
			t.Errorf("server saw %d attempts, want 2", n)
		}
	})
}

// TestStreamOnFinishCallerAlreadyGone: a stream opened with a context that
// has already ended, and a grpc.OnFinish, runs it once with CANCELED, and
// nothing races: the watch on the caller's context starts at once then, in
// its own goroutine, before the stream has finished setting up (the watch
// used to call the stream's stopWatch, not yet assigned: a data race, or a
// nil call). Retried streams and hedged streams alike, many times over.
func TestStreamOnFinishCallerAlreadyGone(t *testing.T) {
	for _, kind := range []string{"retried", "hedged"} {
		t.Run(kind, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				var c testingv1.TestServiceClient
				if kind == "retried" {
					_, c = newStreamBench(t, interceptor.WithConfig(parse(t, retryFile)))
				} else {
					c = newHedgeStreamBench(t, hedgeStreamFile(t, 3, 100*time.Millisecond, "")).client
				}
				ctx, cancel := context.WithCancel(context.Background())
				cancel()
				for i := 0; i < 50; i++ {
					var mu sync.Mutex
					var got []error
					st, err := c.ListItems(ctx, &testingv1.ListItemsRequest{Script: &testingv1.Script{ResponseCount: 1}},
						grpc.OnFinish(func(err error) {
							mu.Lock()
							got = append(got, err)
							mu.Unlock()
						}))
					if err == nil {
						_, err = st.Recv()
					}
					if status.Code(err) != codes.Canceled {
						t.Fatalf("stream %d: %v, want CANCELED", i, err)
					}
					synctest.Wait()
					mu.Lock()
					if len(got) != 1 || status.Code(got[0]) != codes.Canceled {
						t.Errorf("stream %d: OnFinish ran with %v, want once with CANCELED", i, got)
					}
					mu.Unlock()
				}
			})
		})
	}
}

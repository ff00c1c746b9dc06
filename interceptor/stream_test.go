package interceptor

import (
	"context"
	"errors"
	"io"
	"runtime"
	"slices"
	"sync"
	"testing"

	"github.com/stagger-go/stagger/budget"
	"github.com/stagger-go/stagger/policy"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// These tests drive the stream engine with a fake grpc stream, for the paths
// a real server cannot time exactly: creation failures, local send errors,
// messages that cannot be sized, overflow while a replay runs, and the
// budget of a stream without a retry policy. The end-to-end tests are in
// test/stream_test.go.

const streamMethod = "/stagger.testing.v1.TestService/Chat"

var bidi = &grpc.StreamDesc{StreamName: "Chat", ServerStreams: true, ClientStreams: true}

// fakeAttempt is one attempt's stream. RecvMsg delivers recvN messages, then
// returns end (io.EOF: success). SendMsg waits on gate when set.
type fakeAttempt struct {
	ctx     context.Context
	gate    chan struct{}
	sendErr func(m any) error
	recvN   int
	end     error
	header  metadata.MD
	// waitClose: RecvMsg ends only after CloseSend (or the attempt's end).
	waitClose bool
	// headerGate, when set, holds Header until it is closed.
	headerGate chan struct{}
	closedCh   chan struct{}

	mu     sync.Mutex
	sent   []any
	closed bool
	got    int
}

func (f *fakeAttempt) SendMsg(m any) error {
	if f.gate != nil {
		<-f.gate
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.sendErr != nil {
		if err := f.sendErr(m); err != nil {
			return err
		}
	}
	f.sent = append(f.sent, m)
	return nil
}

func (f *fakeAttempt) RecvMsg(any) error {
	if f.waitClose {
		select {
		case <-f.closedCh:
		case <-f.ctx.Done():
			return status.FromContextError(f.ctx.Err()).Err()
		}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.got < f.recvN {
		f.got++
		return nil
	}
	return f.end
}

func (f *fakeAttempt) CloseSend() error {
	f.mu.Lock()
	if !f.closed {
		close(f.closedCh)
	}
	f.closed = true
	f.mu.Unlock()
	return nil
}

func (f *fakeAttempt) Header() (metadata.MD, error) {
	if f.headerGate != nil {
		<-f.headerGate
	}
	return f.header, nil
}
func (f *fakeAttempt) Trailer() metadata.MD     { return nil }
func (f *fakeAttempt) Context() context.Context { return f.ctx }

func (f *fakeAttempt) values() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []string
	for _, m := range f.sent {
		if s, ok := m.(*wrapperspb.StringValue); ok {
			out = append(out, s.GetValue())
		}
	}
	return out
}

// fakeStreamer makes attempts; plan[i] prepares attempt i (from 0) or
// returns the error creating it fails with.
type fakeStreamer struct {
	plan []func(*fakeAttempt) error

	mu       sync.Mutex
	attempts []*fakeAttempt
	ctxs     []context.Context
}

func (fs *fakeStreamer) stream(ctx context.Context, _ *grpc.StreamDesc, _ *grpc.ClientConn, _ string, _ ...grpc.CallOption) (grpc.ClientStream, error) {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	n := len(fs.ctxs)
	fs.ctxs = append(fs.ctxs, ctx)
	a := &fakeAttempt{ctx: ctx, end: io.EOF, closedCh: make(chan struct{})}
	if n < len(fs.plan) {
		if err := fs.plan[n](a); err != nil {
			return nil, err
		}
	}
	fs.attempts = append(fs.attempts, a)
	return a, nil
}

var errStreamDown = status.Error(codes.Unavailable, "down")

func attemptFails(err error) func(*fakeAttempt) error {
	return func(a *fakeAttempt) error { a.end = err; return nil }
}

// noPause retries UNAVAILABLE n attempts with pauses of 0.
func streamNoPause(n int) []Option {
	return []Option{
		WithPolicy(policy.Policy{MaxAttempts: n, Backoff: policy.Backoff{Initial: 1, Max: 1, Multiplier: 1, Jitter: policy.JitterFull}}),
		WithRandom(func() float64 { return 0 }),
	}
}

func sv(s string) *wrapperspb.StringValue { return wrapperspb.String(s) }

// drainStream reads until the stream ends and returns how.
func drainStream(cs grpc.ClientStream) error {
	for i := 0; i < 100; i++ {
		if err := cs.RecvMsg(new(wrapperspb.StringValue)); err != nil {
			return err
		}
	}
	return errors.New("stream never ended")
}

func TestStreamCreationFailureRetried(t *testing.T) {
	fs := &fakeStreamer{plan: []func(*fakeAttempt) error{
		func(*fakeAttempt) error { return errStreamDown },
		func(*fakeAttempt) error { return errStreamDown },
	}}
	cs, err := StreamClientInterceptor(streamNoPause(3)...)(context.Background(), bidi, nil, streamMethod, fs.stream)
	if err != nil {
		t.Fatalf("err = %v", err)
	}
	if len(fs.ctxs) != 3 {
		t.Fatalf("%d attempts, want 3", len(fs.ctxs))
	}
	for i, ctx := range fs.ctxs {
		md, _ := metadata.FromOutgoingContext(ctx)
		got, want := md.Get(previousAttemptsKey), []string(nil)
		if i > 0 {
			want = []string{string(rune('0' + i))}
		}
		if !slices.Equal(got, want) {
			t.Errorf("attempt %d: %s = %v, want %v", i+1, previousAttemptsKey, got, want)
		}
	}
	if err := drainStream(cs); err != io.EOF {
		t.Errorf("RecvMsg = %v, want io.EOF", err)
	}
}

func TestStreamCreationFailureFinal(t *testing.T) {
	fs := &fakeStreamer{plan: []func(*fakeAttempt) error{
		func(*fakeAttempt) error { return errStreamDown },
		func(*fakeAttempt) error { return errStreamDown },
	}}
	_, err := StreamClientInterceptor(streamNoPause(2)...)(context.Background(), bidi, nil, streamMethod, fs.stream)
	if status.Code(err) != codes.Unavailable || Attempts(err) != 2 {
		t.Errorf("err = %v (attempts %d), want UNAVAILABLE after 2", err, Attempts(err))
	}
}

func TestStreamReplaysSkippingRefusedMessage(t *testing.T) {
	tooBig := status.Error(codes.ResourceExhausted, "trying to send message larger than max")
	fs := &fakeStreamer{plan: []func(*fakeAttempt) error{
		func(a *fakeAttempt) error {
			a.end = errStreamDown
			a.sendErr = func(m any) error {
				if m.(*wrapperspb.StringValue).GetValue() == "big" {
					return tooBig
				}
				return nil
			}
			return nil
		},
	}}
	cs, err := StreamClientInterceptor(streamNoPause(2)...)(context.Background(), bidi, nil, streamMethod, fs.stream)
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range []string{"a", "big", "b"} {
		err := cs.SendMsg(sv(v))
		if want := v == "big"; (err != nil) != want {
			t.Errorf("SendMsg(%q) = %v", v, err)
		}
	}
	if err := cs.CloseSend(); err != nil {
		t.Fatal(err)
	}
	if err := drainStream(cs); err != io.EOF {
		t.Fatalf("RecvMsg = %v, want io.EOF", err)
	}
	a := fs.attempts[1]
	if got := a.values(); !slices.Equal(got, []string{"a", "b"}) || !a.closed {
		t.Errorf("attempt 2 got %v closed %v, want [a b] closed", got, a.closed)
	}
}

// notProto is a message another codec would marshal: stagger cannot size it.
type notProto struct{ s string }

func TestStreamUnsizedMessageCommits(t *testing.T) {
	fs := &fakeStreamer{plan: []func(*fakeAttempt) error{attemptFails(errStreamDown)}}
	cs, err := StreamClientInterceptor(streamNoPause(3)...)(context.Background(), bidi, nil, streamMethod, fs.stream)
	if err != nil {
		t.Fatal(err)
	}
	if err := cs.SendMsg(&notProto{"x"}); err != nil {
		t.Fatal(err)
	}
	if err := drainStream(cs); status.Code(err) != codes.Unavailable || Attempts(err) != 1 {
		t.Errorf("RecvMsg = %v (attempts %d), want UNAVAILABLE after 1", err, Attempts(err))
	}
}

func TestStreamHeadersCommit(t *testing.T) {
	fs := &fakeStreamer{plan: []func(*fakeAttempt) error{func(a *fakeAttempt) error {
		a.end, a.header = errStreamDown, metadata.MD{}
		return nil
	}}}
	cs, err := StreamClientInterceptor(streamNoPause(3)...)(context.Background(), bidi, nil, streamMethod, fs.stream)
	if err != nil {
		t.Fatal(err)
	}
	if err := drainStream(cs); status.Code(err) != codes.Unavailable || len(fs.ctxs) != 1 {
		t.Errorf("RecvMsg = %v after %d attempts, want UNAVAILABLE after 1: empty headers still commit", err, len(fs.ctxs))
	}
}

// TestStreamOverflowDuringReplay: a message sent while a replay runs is sent
// after the replayed ones, and its overflow commits the stream when the
// replay ends; the buffer is then released.
func TestStreamOverflowDuringReplay(t *testing.T) {
	gate := make(chan struct{})
	fs := &fakeStreamer{plan: []func(*fakeAttempt) error{
		attemptFails(errStreamDown),
		func(a *fakeAttempt) error { a.gate, a.end = gate, errStreamDown; return nil },
	}}
	opts := append(streamNoPause(3), WithReplayBufferSize(2*proto.Size(sv("aaaa"))))
	cs, err := StreamClientInterceptor(opts...)(context.Background(), bidi, nil, streamMethod, fs.stream)
	if err != nil {
		t.Fatal(err)
	}
	rs := cs.(*retryStream)
	for _, v := range []string{"aaaa", "bbbb"} {
		if err := cs.SendMsg(sv(v)); err != nil {
			t.Fatal(err)
		}
	}
	recvDone := make(chan error, 1)
	go func() { recvDone <- drainStream(cs) }()
	// Wait until RecvMsg is replaying on attempt 2 (blocked on the gate).
	for {
		rs.mu.Lock()
		switching := len(rs.live) == 0
		rs.mu.Unlock()
		fs.mu.Lock()
		n := len(fs.attempts)
		fs.mu.Unlock()
		if switching && n == 2 {
			break
		}
		runtime.Gosched()
	}
	if err := cs.SendMsg(sv("cccc")); err != nil { // overflows during the replay
		t.Fatal(err)
	}
	close(gate)
	err = <-recvDone
	// Attempt 2 fails too, but the overflow committed the stream: final.
	if status.Code(err) != codes.Unavailable || Attempts(err) != 2 {
		t.Errorf("RecvMsg = %v (attempts %d), want UNAVAILABLE after 2", err, Attempts(err))
	}
	if got := fs.attempts[1].values(); !slices.Equal(got, []string{"aaaa", "bbbb", "cccc"}) {
		t.Errorf("attempt 2 got %v, want [aaaa bbbb cccc]", got)
	}
	rs.mu.Lock()
	defer rs.mu.Unlock()
	if !rs.committed || rs.buf.msgs != nil || rs.buf.bytes != 0 {
		t.Errorf("committed %v, buffer %d messages %d bytes; want committed and released", rs.committed, len(rs.buf.msgs), rs.buf.bytes)
	}
}

// recordingBudget records every attempt.
type recordingBudget struct {
	mu      sync.Mutex
	records []budget.Attempt
}

func (b *recordingBudget) Record(a budget.Attempt) {
	b.mu.Lock()
	b.records = append(b.records, a)
	b.mu.Unlock()
}
func (b *recordingBudget) Allow(budget.Request) bool { return true }
func (b *recordingBudget) State() budget.State       { return budget.State{Kind: "recording"} }

func TestStreamBudgetHearsOutcome(t *testing.T) {
	tests := []struct {
		name string
		opts []Option
		plan []func(*fakeAttempt) error
		want []budget.Outcome
	}{
		{"no retry policy: success recorded", nil, nil, []budget.Outcome{budget.Success}},
		{"retry then success", streamNoPause(3), []func(*fakeAttempt) error{attemptFails(errStreamDown)}, []budget.Outcome{budget.Failure, budget.Success}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := &recordingBudget{}
			fs := &fakeStreamer{plan: tt.plan}
			cs, err := StreamClientInterceptor(append(tt.opts, WithBudget(b))...)(context.Background(), bidi, nil, streamMethod, fs.stream)
			if err != nil {
				t.Fatal(err)
			}
			if err := drainStream(cs); err != io.EOF {
				t.Fatalf("RecvMsg = %v, want io.EOF", err)
			}
			if err := cs.RecvMsg(nil); err != io.EOF {
				t.Errorf("RecvMsg after the end = %v, want io.EOF again", err)
			}
			var got []budget.Outcome
			for _, r := range b.records {
				got = append(got, r.Outcome)
			}
			if !slices.Equal(got, tt.want) {
				t.Errorf("budget heard %v, want %v", got, tt.want)
			}
		})
	}
}

// TestStreamConcurrentSendRecv: one goroutine sends while another receives
// across retries; each attempt sees the messages in order, the last one all
// of them (run with -race).
func TestStreamConcurrentSendRecv(t *testing.T) {
	for round := 0; round < 20; round++ {
		// Two attempts fail at once; the third ends only when the sender
		// closed, so it must hold every message.
		fs := &fakeStreamer{plan: []func(*fakeAttempt) error{attemptFails(errStreamDown), attemptFails(errStreamDown),
			func(a *fakeAttempt) error { a.waitClose = true; return nil }}}
		cs, err := StreamClientInterceptor(streamNoPause(5)...)(context.Background(), bidi, nil, streamMethod, fs.stream)
		if err != nil {
			t.Fatal(err)
		}
		want := []string{"1", "2", "3", "4", "5", "6", "7", "8"}
		sent := make(chan error, 1)
		go func() {
			for _, v := range want {
				if err := cs.SendMsg(sv(v)); err != nil {
					sent <- err
					return
				}
			}
			sent <- cs.CloseSend()
		}()
		if err := drainStream(cs); !errors.Is(err, io.EOF) {
			t.Fatalf("RecvMsg = %v", err)
		}
		if err := <-sent; err != nil {
			t.Fatal(err)
		}
		for i, a := range fs.attempts {
			got := a.values()
			if !slices.Equal(got, want[:len(got)]) {
				t.Fatalf("round %d attempt %d got %v: not a prefix of %v", round, i+1, got, want)
			}
		}
		if last := fs.attempts[len(fs.attempts)-1]; !slices.Equal(last.values(), want) || !last.closed {
			t.Fatalf("round %d: last attempt got %v closed %v", round, last.values(), last.closed)
		}
	}
}

func TestReplayBuffer(t *testing.T) {
	m := sv("0123456789") // 12 bytes
	n := proto.Size(m)
	tests := []struct {
		name     string
		size     int
		limit    int64
		adds     int
		wantKept int
	}{
		{"fits", 3 * n, 0, 3, 3},
		{"per-stream bound", 2*n + 1, 0, 3, 2},
		{"shared cap", 10 * n, int64(n), 3, 1},
		{"shared cap zero admits nothing", 10 * n, -1, 1, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var l *ReplayLimit
			if tt.limit != 0 {
				l = NewReplayLimit(max(tt.limit, 0))
			}
			var b replayBuffer
			b.init(tt.size, l)
			kept := 0
			for i := 0; i < tt.adds; i++ {
				if k, _ := b.keepBeforeCommit(m, true); k {
					kept++
				}
			}
			if kept != tt.wantKept || len(b.msgs) != kept || b.bytes != int64(kept*n) {
				t.Errorf("kept %d (%d msgs, %d bytes), want %d", kept, len(b.msgs), b.bytes, tt.wantKept)
			}
			if l != nil && l.InUse() != b.bytes {
				t.Errorf("limit in use %d, want %d", l.InUse(), b.bytes)
			}
			b.release()
			if b.msgs != nil || b.bytes != 0 || (l != nil && l.InUse() != 0) {
				t.Errorf("after release: %d msgs %d bytes", len(b.msgs), b.bytes)
			}
		})
	}
}

func TestReplayBufferDefaultSize(t *testing.T) {
	var b replayBuffer
	b.init(0, nil)
	if b.max != DefaultReplayBufferSize {
		t.Errorf("max = %d, want %d", b.max, DefaultReplayBufferSize)
	}
}

// nopStream sends and receives nothing, at no cost: what is left of a
// benchmark over it is the wrapper's own cost.
type nopStream struct{ grpc.ClientStream }

func (nopStream) SendMsg(any) error { return nil }
func (nopStream) RecvMsg(any) error { return nil }

// BenchmarkStreamCommittedMessage is one SendMsg and one RecvMsg on a stream
// that committed (raw: grpc's stream without stagger).
func BenchmarkStreamCommittedMessage(b *testing.B) {
	streamer := func(context.Context, *grpc.StreamDesc, *grpc.ClientConn, string, ...grpc.CallOption) (grpc.ClientStream, error) {
		return nopStream{}, nil
	}
	stagger, err := StreamClientInterceptor(streamNoPause(3)...)(context.Background(), bidi, nil, streamMethod, streamer)
	if err != nil {
		b.Fatal(err)
	}
	m := sv("x")
	if err := stagger.RecvMsg(m); err != nil { // commits
		b.Fatal(err)
	}
	for _, bc := range []struct {
		name string
		cs   grpc.ClientStream
	}{{"raw", nopStream{}}, {"stagger", stagger}} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			for i := 0; i < b.N; i++ {
				if err := bc.cs.SendMsg(m); err != nil {
					b.Fatal(err)
				}
				if err := bc.cs.RecvMsg(m); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// oneReply is a server stream's grpc stream that answers with headers, one
// message and OK.
type oneReply struct {
	grpc.ClientStream
	ctx  context.Context
	sent bool
}

func (r *oneReply) Header() (metadata.MD, error) { return metadata.MD{}, nil }
func (r *oneReply) Trailer() metadata.MD         { return nil }
func (r *oneReply) CloseSend() error             { return nil }
func (r *oneReply) Context() context.Context     { return r.ctx }
func (r *oneReply) SendMsg(any) error            { return nil }
func (r *oneReply) RecvMsg(any) error {
	if r.sent {
		return io.EOF
	}
	r.sent = true
	return nil
}

// BenchmarkStreamOpen is a whole server stream that succeeds on its first
// attempt: open, send, close, one message and the end. The retried stream
// runs on its caller's goroutines; the hedged one (a hedging delay that
// never runs out) with the driver and one watch per attempt, the shape
// issue 71 asks of every stream, so the two measure its cost.
func BenchmarkStreamOpen(b *testing.B) {
	desc := &grpc.StreamDesc{StreamName: "ListItems", ServerStreams: true}
	const method = "/stagger.testing.v1.TestService/ListItems"
	streamer := func(ctx context.Context, _ *grpc.StreamDesc, _ *grpc.ClientConn, _ string, _ ...grpc.CallOption) (grpc.ClientStream, error) {
		return &oneReply{ctx: ctx}, nil
	}
	for _, bc := range []struct{ name, policy string }{
		{"retried", `"retryPolicy": {"maxAttempts": 3, "initialBackoff": "1s", "maxBackoff": "1s", "backoffMultiplier": 1, "retryableStatusCodes": ["UNAVAILABLE"]}`},
		{"hedged", `"hedgingPolicy": {"maxAttempts": 3, "hedgingDelay": "10s", "nonFatalStatusCodes": ["UNAVAILABLE"]}`},
	} {
		b.Run(bc.name, func(b *testing.B) {
			cfg, err := policy.ParseConfig([]byte(`{"methodConfig": [{"name": [{"service": "stagger.testing.v1.TestService"}], "idempotent": true, ` + bc.policy + `}]}`))
			if err != nil {
				b.Fatal(err)
			}
			ic := StreamClientInterceptor(WithConfig(cfg), WithBudget(nil))
			ctx := context.Background()
			m := sv("x")
			b.ReportAllocs()
			for i := 0; i < b.N; i++ {
				cs, err := ic(ctx, desc, nil, method, streamer)
				if err != nil {
					b.Fatal(err)
				}
				if err := cs.SendMsg(m); err != nil {
					b.Fatal(err)
				}
				if err := cs.CloseSend(); err != nil {
					b.Fatal(err)
				}
				if err := cs.RecvMsg(m); err != nil {
					b.Fatal(err)
				}
				if err := cs.RecvMsg(m); err != io.EOF {
					b.Fatalf("RecvMsg at the end: %v, want io.EOF", err)
				}
			}
		})
	}
}

// BenchmarkStreamUncommittedSend is SendMsg before the stream commits: the
// message is sized and kept (the buffer is reset when full, so the benchmark
// measures keeping, not overflow).
func BenchmarkStreamUncommittedSend(b *testing.B) {
	streamer := func(context.Context, *grpc.StreamDesc, *grpc.ClientConn, string, ...grpc.CallOption) (grpc.ClientStream, error) {
		return nopStream{}, nil
	}
	cs, err := StreamClientInterceptor(streamNoPause(3)...)(context.Background(), bidi, nil, streamMethod, streamer)
	if err != nil {
		b.Fatal(err)
	}
	rs := cs.(*retryStream)
	m := sv("0123456789")
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		if i%1000 == 0 {
			rs.mu.Lock()
			rs.buf.msgs = rs.buf.msgs[:0]
			rs.buf.bytes = 0
			rs.mu.Unlock()
		}
		if err := cs.SendMsg(m); err != nil {
			b.Fatal(err)
		}
	}
}

// A hedged client stream whose caller cancelled before the attempt's
// headers were seen ends Canceled, not with the reply: the headers here
// reach the attempt's goroutine only after the cancel, as a server's
// answer to a CloseSend sent after the cancel did on a loaded machine
// (grpc-go's interop case cancel_after_begin under hedging got OK from
// CloseAndRecv). grpc-go's own stream ends so when its reader finds the
// context done with nothing received.
func TestHedgedStreamCancelledBeforeHeadersEndsCancelled(t *testing.T) {
	cfg, err := policy.ParseConfig([]byte(`{"methodConfig": [{"name": [{"service": "stagger.testing.v1.TestService"}],
	"idempotent": true, "hedgingPolicy": {"maxAttempts": 2, "hedgingDelay": "10s", "nonFatalStatusCodes": ["UNAVAILABLE"]}}]}`))
	if err != nil {
		t.Fatal(err)
	}
	release := make(chan struct{})
	fs := &fakeStreamer{plan: []func(*fakeAttempt) error{func(a *fakeAttempt) error {
		a.header, a.headerGate, a.recvN = metadata.MD{}, release, 1
		return nil
	}}}
	upload := &grpc.StreamDesc{StreamName: "Upload", ClientStreams: true}
	ctx, cancel := context.WithCancel(context.Background())
	cs, err := StreamClientInterceptor(WithConfig(cfg), WithBudget(nil))(ctx, upload, nil, "/stagger.testing.v1.TestService/Upload", fs.stream)
	if err != nil {
		t.Fatal(err)
	}
	if rs, ok := cs.(*retryStream); !ok || rs.race == nil {
		t.Fatalf("the stream is a %T, not hedged", cs)
	}
	cancel()
	close(release) // the headers come after the cancel
	if err := cs.CloseSend(); err != nil {
		t.Fatal(err)
	}
	if err := cs.RecvMsg(new(wrapperspb.StringValue)); status.Code(err) != codes.Canceled {
		t.Fatalf("CloseAndRecv after the caller's cancel = %v, want Canceled", err)
	}
}

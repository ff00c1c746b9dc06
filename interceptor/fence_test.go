package interceptor_test

import (
	"context"
	"fmt"
	"io"
	"log"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/stagger-go/stagger/budget"
	"github.com/stagger-go/stagger/interceptor"
	testingv1 "github.com/stagger-go/stagger/proto/stagger/testing/v1"
	"github.com/stagger-go/stagger/testserver"
)

func durations(ds ...time.Duration) []*durationpb.Duration {
	out := make([]*durationpb.Duration, len(ds))
	for i, d := range ds {
		out[i] = durationpb.New(d)
	}
	return out
}

// quietPanics sends slog's default logger, where recovered panics are
// logged, nowhere until the test ends.
func quietPanics(t *testing.T) {
	prev, w, flags := slog.Default(), log.Writer(), log.Flags()
	slog.SetDefault(slog.New(slog.NewTextHandler(io.Discard, nil)))
	t.Cleanup(func() {
		// SetDefault pointed package log at the discarding handler.
		slog.SetDefault(prev)
		log.SetOutput(w)
		log.SetFlags(flags)
	})
}

// noLeakAfter checks, once the test and its cleanups ended, that no
// goroutine it started is left.
func noLeakAfter(t *testing.T) {
	ignore := goleak.IgnoreCurrent()
	t.Cleanup(func() { goleak.VerifyNone(t, ignore) })
}

// fencedClient dials srv through both interceptors built with opts.
func fencedClient(t *testing.T, srv *testserver.Server, opts ...interceptor.Option) testingv1.TestServiceClient {
	t.Helper()
	cc := srv.ClientConn(t, grpc.WithDisableRetry(),
		grpc.WithChainUnaryInterceptor(interceptor.UnaryClientInterceptor(opts...)),
		grpc.WithChainStreamInterceptor(interceptor.StreamClientInterceptor(opts...)))
	return testingv1.NewTestServiceClient(cc)
}

// getOwn makes a Get of key and fails the test unless its reply is its own.
func getOwn(t *testing.T, client testingv1.TestServiceClient, key string, sc *testingv1.Script) {
	t.Helper()
	if sc == nil {
		sc = &testingv1.Script{}
	}
	sc.Key = key
	resp, err := client.Get(context.Background(), &testingv1.GetRequest{Script: sc})
	if err != nil || resp.GetReply().GetKey() != key {
		t.Errorf("Get %q = %v, %v; want its own reply", key, resp, err)
	}
}

// A hook that panics on EventHedge while a hedged call's first attempt
// runs: the call goes on without the event (the panic counted once), the
// attempt's goroutine ends with the call, and the hedged calls after it,
// which take the pooled state it used, each get their own reply.
func TestPanickingHedgeHookLeavesNextCallsAlone(t *testing.T) {
	noLeakAfter(t)
	quietPanics(t)
	srv := testserver.New()
	defer srv.Close()
	var armed atomic.Bool
	var hookPanics atomic.Int64
	client := fencedClient(t, srv, interceptor.WithConfig(mustParse(hedgeFile)), interceptor.WithHook(func(e interceptor.Event) {
		if e.Kind == interceptor.EventHedge && armed.Load() {
			hookPanics.Add(1)
			panic("hook on hedge")
		}
	}))
	before := interceptor.RecoveredPanics()
	armed.Store(true)
	func() {
		defer func() {
			if p := recover(); p != nil {
				t.Errorf("the hook's panic reached the caller: %v", p)
			}
		}()
		// Attempt 1 runs 300 ms: the hedge goes at 50 ms, its hook panics.
		getOwn(t, client, "first", &testingv1.Script{AttemptDelays: durations(300*time.Millisecond, 10*time.Millisecond, 10*time.Millisecond)})
	}()
	armed.Store(false)
	for i := range 20 {
		getOwn(t, client, fmt.Sprintf("next-%d", i), &testingv1.Script{AttemptDelays: durations(100*time.Millisecond, 0)})
	}
	if got, want := interceptor.RecoveredPanics()-before, hookPanics.Load(); got != want || want == 0 {
		t.Errorf("RecoveredPanics grew by %d; the hook panicked %d times (want > 0, each counted once)", got, want)
	}
}

// A hook that panics on every event of a hedged stream, whose hooks run
// on the hedge driver's goroutine: the process lives, the stream reads
// its own messages, and the next stream too.
func TestPanickingHookOnHedgedStream(t *testing.T) {
	noLeakAfter(t)
	quietPanics(t)
	srv := testserver.New()
	defer srv.Close()
	var hookPanics atomic.Int64
	client := fencedClient(t, srv, interceptor.WithConfig(mustParse(hedgeFile)), interceptor.WithHook(func(e interceptor.Event) {
		hookPanics.Add(1)
		panic("hook on " + e.Kind.String())
	}))
	before := interceptor.RecoveredPanics()
	for i := range 3 {
		key := fmt.Sprintf("stream-%d", i)
		sc := &testingv1.Script{Key: key, ResponseCount: 3, AttemptDelays: durations(300*time.Millisecond, 0)}
		readOwn(t, client, sc, 3, interceptor.Idempotent())
	}
	if got, want := interceptor.RecoveredPanics()-before, hookPanics.Load(); got != want || want == 0 {
		t.Errorf("RecoveredPanics grew by %d; the hook panicked %d times (want > 0, each counted once)", got, want)
	}
}

// readOwn reads a ListItems stream of sc to its end and fails the test
// unless it gets want messages, all its own, in order.
func readOwn(t *testing.T, client testingv1.TestServiceClient, sc *testingv1.Script, want int, opts ...grpc.CallOption) {
	t.Helper()
	got, err := readStream(client, sc, opts...)
	if err != nil || got != want {
		t.Errorf("stream %q: %d messages, %v; want %d, its own, and its end", sc.Key, got, err, want)
	}
}

// readStream reads a ListItems stream of sc to its end: the messages
// read (each checked to be sc's, in order) and its error (nil at io.EOF).
func readStream(client testingv1.TestServiceClient, sc *testingv1.Script, opts ...grpc.CallOption) (int, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st, err := client.ListItems(ctx, &testingv1.ListItemsRequest{Script: sc}, opts...)
	if err != nil {
		return 0, err
	}
	n := 0
	for {
		m, err := st.Recv()
		if err == io.EOF {
			return n, nil
		}
		if err != nil {
			return n, err
		}
		n++
		if m.GetReply().GetKey() != sc.Key || m.GetReply().GetSeq() != int64(n) {
			return n, status.Errorf(codes.DataLoss, "message %d is %v, not %q's", n, m.GetReply(), sc.Key)
		}
	}
}

// panickyBudget lets everything go, but panics on a hedge's admission
// while armed: the caller's own code panics on the caller's goroutine.
type panickyBudget struct{ armed atomic.Bool }

func (b *panickyBudget) Record(budget.Attempt) {}
func (b *panickyBudget) Allow(r budget.Request) bool {
	if r.Number > 1 && b.armed.Load() {
		panic("budget on a hedge")
	}
	return true
}
func (b *panickyBudget) State() budget.State { return budget.State{Kind: "panicky"} }

// A panic that ends a hedged call's loop on the caller's goroutine (its
// own budget's, which reaches the caller as grpc would let it) while its
// first attempt runs: the pooled state goes back only once that attempt
// ended, so the hedged calls after it each get their own reply, and no
// goroutine is left.
func TestHedgeLoopPanicReturnsPooledStateLast(t *testing.T) {
	noLeakAfter(t)
	quietPanics(t)
	srv := testserver.New()
	defer srv.Close()
	b := new(panickyBudget)
	client := fencedClient(t, srv, interceptor.WithConfig(mustParse(hedgeFile)), interceptor.WithBudget(b))
	b.armed.Store(true)
	func() {
		defer func() {
			if p := recover(); p != "budget on a hedge" {
				t.Errorf("the caller recovered %v, want its budget's panic", p)
			}
		}()
		getOwn(t, client, "first", &testingv1.Script{AttemptDelays: durations(200 * time.Millisecond)})
	}()
	b.armed.Store(false)
	for i := range 20 {
		getOwn(t, client, fmt.Sprintf("next-%d", i), &testingv1.Script{AttemptDelays: durations(100*time.Millisecond, 0)})
	}
}

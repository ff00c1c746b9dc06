//go:build go1.25

package interceptor

import (
	"context"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	"github.com/stagger-go/stagger/breaker"
	"github.com/stagger-go/stagger/budget"
	"github.com/stagger-go/stagger/policy"
)

// A hedge due after the breaker's break asks the breaker, which goes
// half-open and tells the hooks (EventBreaker). The hooks run outside
// every lock: a hook that reads the stream must not find the stream's mu
// held by the driver that asked.
func TestHedgedStreamBreakerHookOutsideLock(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var stream atomic.Pointer[retryStream]
		halfOpen, heldInHook := 0, 0
		hook := func(e Event) {
			if e.Kind != EventBreaker || e.Breaker.To != breaker.StateHalfOpen {
				return
			}
			halfOpen++
			s := stream.Load()
			if !s.mu.TryLock() {
				heldInHook++
				return
			}
			s.mu.Unlock()
		}
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		cs, _, _ := breakerHedgedStream(t, ctx, hook)
		stream.Store(cs.(*retryStream))
		if md, err := cs.Header(); err != nil || md.Get("x-attempt")[0] != "2" {
			t.Fatalf("Header = %v, %v; want the hedge's", md, err)
		}
		if halfOpen != 1 {
			t.Fatalf("%d half-open events, want 1 (the hedge's asking)", halfOpen)
		}
		if heldInHook != 0 {
			t.Error("the breaker's hook ran while the stream's mu was held")
		}
		cancel()
		_ = drainStream(cs)
	})
}

// The application's Context asks for a commit while the driver asks the
// breaker for a hedge (the hedge's half-open probe): the stream commits to
// its first attempt, no hedge goes, and the probe slot the asking took is
// given back, so the breaker's next retry may go as its probe.
func TestHedgedStreamCommitWhileHedgeAskedGivesBack(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var stream atomic.Pointer[retryStream]
		ctxs := make(chan context.Context, 1)
		held := false
		hook := func(e Event) {
			if e.Kind != EventBreaker || e.Breaker.To != breaker.StateHalfOpen {
				return
			}
			s := stream.Load()
			if !s.mu.TryLock() {
				held = true
				ctxs <- nil
				return
			}
			s.mu.Unlock()
			go func() { ctxs <- s.Context() }()
			// Until Context waits for the driver's answer.
			synctest.Wait()
		}
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		cs, fs, br := breakerHedgedStream(t, ctx, hook)
		stream.Store(cs.(*retryStream))
		got := <-ctxs
		if held {
			t.Fatal("the breaker's hook ran while the stream's mu was held")
		}
		fs.mu.Lock()
		sent, first := len(fs.ctxs), fs.ctxs[0]
		fs.mu.Unlock()
		if sent != 1 {
			t.Errorf("%d attempts sent, want 1: the hedge asked for as the stream committed went", sent)
		}
		if got != first {
			t.Error("Context is not the first attempt's")
		}
		if ok, _ := br.AllowRetry(0, nil); !ok {
			t.Error("the breaker refuses its half-open probe: the hedge that never went holds it")
		}
		cancel()
		_ = drainStream(cs)
	})
}

// breakerHedgedStream starts a stream hedged once after 2s behind a
// breaker that then opens (its break lasts 1s, so the hedge asks it as its
// half-open probe). The first attempt never answers; the hedge answers at
// once. hook hears the interceptor's events.
func breakerHedgedStream(t *testing.T, ctx context.Context, hook func(Event)) (grpc.ClientStream, *fakeStreamer, *breaker.Breaker) {
	t.Helper()
	cfg, err := policy.ParseConfig([]byte(`{"methodConfig": [{"name": [{"service": "stagger.testing.v1.TestService"}],
	"idempotent": true, "hedgingPolicy": {"maxAttempts": 2, "hedgingDelay": "2s", "nonFatalStatusCodes": ["UNAVAILABLE"]}}]}`))
	if err != nil {
		t.Fatal(err)
	}
	bs, err := breaker.NewSet(breaker.Settings{FailureRatio: 0.5, MinimumThroughput: 2, BreakDuration: time.Second, ProbeEvery: 1}, nil)
	if err != nil {
		t.Fatal(err)
	}
	fs := &fakeStreamer{plan: []func(*fakeAttempt) error{
		func(a *fakeAttempt) error { a.waitClose = true; return nil },
		func(a *fakeAttempt) error { a.header = metadata.MD{"x-attempt": {"2"}}; return nil },
	}}
	cs, err := StreamClientInterceptor(WithConfig(cfg), WithBudget(nil), WithBreakers(bs), WithHook(hook))(ctx, bidi, nil, streamMethod, fs.stream)
	if err != nil {
		t.Fatal(err)
	}
	br := bs.Get("", streamMethod)
	for range 2 {
		br.Record(budget.Failure, true, 0, nil)
	}
	if br.Closed() {
		t.Fatal("breaker closed after two failures, want open")
	}
	return cs, fs, br
}

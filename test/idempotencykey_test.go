//go:build go1.25

package test

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stagger-go/stagger/interceptor"
	"github.com/stagger-go/stagger/policy"
	testingv1 "github.com/stagger-go/stagger/proto/stagger/testing/v1"
	"github.com/stagger-go/stagger/testserver"
)

// sameKey checks that the server saw n attempts, all with one non-empty
// idempotency key.
func sameKey(t *testing.T, recs []testserver.AttemptRecord, n int) {
	t.Helper()
	if len(recs) != n {
		t.Fatalf("server saw %d attempts %+v, want %d", len(recs), recs, n)
	}
	for i, r := range recs {
		if r.IdempotencyKey == "" || r.IdempotencyKey != recs[0].IdempotencyKey {
			t.Errorf("attempt %d: key %q, want the first attempt's %q, not empty", i+1, r.IdempotencyKey, recs[0].IdempotencyKey)
		}
	}
}

// TestKeyedCallTimerCutsAndRetries: a unary call of a method not known to
// be idempotent (Write) that carries an idempotency key runs under the
// per-attempt timer, which cuts its slow attempt off and retries it with
// the same key (the server side de-duplicates it); without the key the
// attempt runs on (TestPerAttemptTimeout).
func TestKeyedCallTimerCutsAndRetries(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var h hookLog
		b := newBench(t, []interceptor.Option{interceptor.WithConfig(parse(t, perAttemptFile)), interceptor.WithHook(h.hook),
			interceptor.WithIdempotencyKey(interceptor.DefaultIdempotencyHeader)})
		start := time.Now()
		_, err := b.client.Write(context.Background(), &testingv1.WriteRequest{Script: &testingv1.Script{Key: "k", AttemptDelays: delays(5*time.Second, 0)}})
		if err != nil {
			t.Fatalf("Write: %v", err)
		}
		if took := time.Since(start); took != 1100*time.Millisecond {
			t.Errorf("call took %v, want 1.1s (cut off at 1s, retried after the 100ms pause)", took)
		}
		synctest.Wait()
		recs := b.attempts(t, "k")
		sameKey(t, recs, 2)
		checkTimerAttempts(t, recs, 2, 1)
		for _, e := range h.all() {
			if e.Kind == interceptor.EventNotice {
				t.Errorf("notice %+v: the keyed call's timer was applied", e)
			}
		}
	})
}

// TestKeyedCallHedged: a unary call of a method not known to be idempotent
// that carries an idempotency key is hedged, every hedge with the call's
// key; without the key it runs once (TestHedgeNotIdempotentRunsOnce).
func TestKeyedCallHedged(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := newHedgeBench(t, interceptor.WithConfig(hedgeConfig(t, 3, 10*time.Millisecond, "")),
			interceptor.WithIdempotencyKey(interceptor.DefaultIdempotencyHeader))
		_, err := b.client.Write(context.Background(), &testingv1.WriteRequest{Script: &testingv1.Script{Key: "w", Delay: durations(time.Second)[0]}})
		if err != nil {
			t.Fatalf("Write: %v", err)
		}
		synctest.Wait()
		sameKey(t, b.srv.Attempts("w"), 3)
		if n := len(b.hooks.kinds(interceptor.EventNotice)); n != 0 {
			t.Errorf("%d notices, want none: the keyed call was hedged", n)
		}
	})
}

// TestKeyedStreamNoTimer: a key does not make a stream of a method not
// known to be idempotent safe to cut off (the server side does not
// de-duplicate streams): it runs without the per-attempt timer, and the
// logger and hooks hear so once.
func TestKeyedStreamNoTimer(t *testing.T) {
	for _, k := range streamKinds {
		t.Run(k.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				var h hookLog
				srv, c := newStreamBench(t, interceptor.WithConfig(parse(t, perAttemptFile)), interceptor.WithHook(h.hook))
				start := time.Now()
				r := k.run(context.Background(), c, &testingv1.Script{Key: "k", AttemptDelays: delays(5*time.Second, 0)}, 2,
					interceptor.WithIdempotencyKey(interceptor.DefaultIdempotencyHeader))
				if r.err != nil {
					t.Fatalf("err = %v, want OK", r.err)
				}
				if took := time.Since(start); took != 5*time.Second {
					t.Errorf("call took %v, want 5s (no timer: the attempt ran to its answer)", took)
				}
				synctest.Wait()
				sameKey(t, srv.Attempts("k"), 1)
				var notices int
				for _, e := range h.all() {
					if e.Kind == interceptor.EventNotice {
						notices++
						if e.Reason != policy.ReasonNotIdempotent {
							t.Errorf("notice %+v, want reason not idempotent", e)
						}
					}
				}
				if notices != 1 {
					t.Errorf("%d notices, want 1", notices)
				}
			})
		})
	}
}

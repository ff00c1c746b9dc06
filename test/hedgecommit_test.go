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
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// TestKeyedHedgedCallNotCommitted: headers do not commit a unary call that
// carries an idempotency key, hedged as retried (TestKeyedUnaryCallNotCommitted):
// a non-fatal failure after headers lets the next hedge go, on the same key.
// Without the key, the same failure after headers commits the hedged call.
func TestKeyedHedgedCallNotCommitted(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := newHedgeBench(t, interceptor.WithConfig(hedgeConfig(t, 3, time.Second, "")),
			interceptor.WithIdempotencyKey(interceptor.DefaultIdempotencyHeader))
		_, err := b.client.Write(context.Background(), &testingv1.WriteRequest{Script: &testingv1.Script{Key: "w", FailAttempts: 1, HeadersFirst: true}})
		if err != nil {
			t.Fatalf("keyed hedged call, failure after headers then success: %v", err)
		}
		synctest.Wait()
		recs := b.srv.Attempts("w")
		sameKey(t, recs, 2)
		if !recs[0].HeadersSent {
			t.Errorf("first attempt %+v sent no headers", recs[0])
		}
		if n := len(b.hooks.kinds(interceptor.EventGiveUp)); n != 0 {
			t.Errorf("%d give-ups, want none", n)
		}
	})
	synctest.Test(t, func(t *testing.T) {
		b := newHedgeBench(t, interceptor.WithConfig(hedgeConfig(t, 3, time.Second, "")))
		_, err := b.client.Get(context.Background(), &testingv1.GetRequest{Script: &testingv1.Script{Key: "g", FailAttempts: 1, HeadersFirst: true}})
		if status.Code(err) != codes.Unavailable {
			t.Fatalf("unkeyed hedged call: code %v, want UNAVAILABLE (committed by headers)", status.Code(err))
		}
		synctest.Wait()
		if n := len(b.srv.Attempts("g")); n != 1 {
			t.Errorf("server saw %d attempts, want 1", n)
		}
		if e := b.hooks.kinds(interceptor.EventGiveUp); len(e) != 1 || e[0].Reason != policy.ReasonCommitted {
			t.Errorf("give-ups %+v, want one, reason committed", e)
		}
	})
}

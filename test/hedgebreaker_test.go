//go:build go1.25

package test

import (
	"context"
	"fmt"
	"testing"
	"testing/synctest"
	"time"

	testingv1 "github.com/stagger-go/stagger/proto/stagger/testing/v1"
)

// hedgeBreakerFile hedges Get once after 2s, behind breakerStanza's
// breaker.
const hedgeBreakerFile = `{
  ` + breakerStanza + `,
  "methodConfig": [{
	"name": [{"service": "stagger.testing.v1.TestService", "method": "Get"}],
	"hedgingPolicy": {"maxAttempts": 2, "hedgingDelay": "2s", "nonFatalStatusCodes": ["UNAVAILABLE"]}
  }]}`

// A hedge asks the circuit breaker as a retry does: a hedge due once the
// breaker's break is over goes as its half-open probe (and its success
// closes the breaker), where it used to be dropped because the breaker was
// not closed.
func TestHedgeGoesAsTheBreakersProbe(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv, hooks, client := breakerBench(t, hedgeBreakerFile)
		start := time.Now()
		slow := make(chan error, 1)
		go func() {
			// Its first attempt, admitted while the breaker is closed,
			// takes 5s; its hedge answers at once.
			_, err := client.Get(context.Background(), &testingv1.GetRequest{Script: &testingv1.Script{Key: "slow", AttemptDelays: durations(5*time.Second, 0)}})
			slow <- err
		}()
		synctest.Wait()
		// Two failed first attempts open the breaker.
		srv.SetOutage(true)
		for i := range 2 {
			_, _ = client.Get(context.Background(), &testingv1.GetRequest{Script: &testingv1.Script{Key: fmt.Sprint("fail", i)}})
		}
		srv.SetOutage(false)
		if got := breakerKinds(hooks); got != "open" {
			t.Fatalf("breaker events %q, want open", got)
		}
		if err := <-slow; err != nil {
			t.Fatalf("slow call: %v", err)
		}
		recs := srv.Attempts("slow")
		if took := time.Since(start); len(recs) != 2 || took != 2*time.Second || recs[1].Arrived.Sub(start) != 2*time.Second {
			t.Fatalf("slow call: %d attempts reached the server, it took %v; want its hedge sent and answered at 2s", len(recs), took)
		}
		if got := breakerKinds(hooks); got != "open half-open closed" {
			t.Fatalf("breaker events %q, want open half-open closed", got)
		}
	})
}

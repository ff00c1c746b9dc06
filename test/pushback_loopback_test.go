package test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/stagger-go/stagger"
	"github.com/stagger-go/stagger/interceptor"
	testingv1 "github.com/stagger-go/stagger/proto/stagger/testing/v1"
	"github.com/stagger-go/stagger/testserver"
)

// pricingPolicy retries UNAVAILABLE and RESOURCE_EXHAUSTED, 4 attempts,
// 0.1 s doubling to 1 s: issue 65's checkout service's file.
const pricingPolicy = `{"methodConfig": [{
	"name": [{"service": "stagger.testing.v1.TestService"}],
	"retryPolicy": {"maxAttempts": 4, "initialBackoff": "0.1s", "maxBackoff": "1s",
		"backoffMultiplier": 2, "retryableStatusCodes": ["UNAVAILABLE", "RESOURCE_EXHAUSTED"]}
}]}`

// A backend that refuses 30 % of attempts with RESOURCE_EXHAUSTED and
// grpc-retry-pushback-ms: 100, and serves the rest at once, is not
// overloaded: the default client retries after the pushback's 100 ms and
// serves nearly every call whose four attempts suffice, with a 500 ms
// deadline and without one (issue 65's pricing: 78-84 % and 91-98 %, the
// failed calls without a deadline waiting 10 s, when any RESOURCE_EXHAUSTED
// held every retry for 5 s). Loopback TCP, real time, 30 calls a second
// for 6 s; each call's attempts fail independently with probability 0.3,
// drawn from a fixed seed, so the calls whose four attempts all fail are
// known (the ceiling). Not in the real-time lane (make test-realtime),
// which repeats its tests eight times: it races no timer against a
// message, and its 12 s run once in every lane suffice.
func TestPushbackIsObeyedOnLoopback(t *testing.T) {
	for _, tt := range []struct {
		name     string
		deadline time.Duration
		bar      float64
	}{{"deadline 500ms", 500 * time.Millisecond, 0.97}, {"no deadline", 0, 0.99}} {
		t.Run(tt.name, func(t *testing.T) {
			srv := testserver.New(testserver.WithTCP())
			defer srv.Close()
			cc, err := srv.DialTCP(stagger.DialOptions(rtConfig(t, pricingPolicy))...)
			if err != nil {
				t.Fatal(err)
			}
			defer cc.Close()
			client := testingv1.NewTestServiceClient(cc)
			rnd := rand.New(rand.NewPCG(65, 30))
			const calls = 180
			var (
				mu                       sync.Mutex
				healable, served, pushed int
				slowest                  time.Duration
				failed                   []string
				wg                       sync.WaitGroup
			)
			tick := time.NewTicker(time.Second / 30)
			defer tick.Stop()
			for i := range calls {
				<-tick.C
				fails := 0
				for fails < 4 && rnd.Float64() < 0.3 {
					fails++
				}
				if fails < 4 {
					healable++
				}
				wg.Add(1)
				go func() {
					defer wg.Done()
					ctx, cancel := context.Background(), func() {}
					if tt.deadline > 0 {
						ctx, cancel = context.WithTimeout(ctx, tt.deadline)
					}
					defer cancel()
					var r interceptor.Report
					start := time.Now()
					_, err := client.Get(ctx, &testingv1.GetRequest{Script: &testingv1.Script{
						Key: fmt.Sprintf("%s-%d", t.Name(), i), FailAttempts: int32(fails),
						Code: int32(codes.ResourceExhausted), Pushback: []string{"100"},
					}}, interceptor.WithReport(&r))
					took := time.Since(start)
					mu.Lock()
					defer mu.Unlock()
					slowest = max(slowest, took)
					if r.Pushback > 0 {
						pushed++
					}
					if err == nil {
						served++
					} else if fails < 4 {
						failed = append(failed, fmt.Sprintf("%d failures: %v after %v (%s)", fails, err, took, r))
					}
				}()
			}
			wg.Wait()
			t.Logf("%s: %d of %d calls served, %d of them healable; the slowest took %v; %d paused for a pushback", tt.name, served, calls, healable, slowest, pushed)
			for _, f := range failed {
				t.Log(f)
			}
			if share := float64(served) / float64(healable); share < tt.bar {
				t.Errorf("served %d of %d healable calls (%.1f %%), want at least %.0f %%", served, healable, 100*share, 100*tt.bar)
			}
			if pushed == 0 {
				t.Error("no Report counted a pause as the server's pushback")
			}
		})
	}
}

//go:build go1.25

package budget

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	tune "github.com/stagger-go/stagger/internal/gatetune"
)

// 1,000 calls held through an outage and their return: a probe, then each
// release at the back pace, wakes its taker and the next in line, not
// every held call (all slept to the one time only one could take: 28
// polls a release, the whole room a probe).
func TestGateReturnWakesFew(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := downServer(newGateOnTime(t))
		for range tune.Evidence {
			g.Record(Attempt{Number: 1, Outcome: Failure})
		}
		const n = 1000
		ctx, cancel := context.WithCancel(context.Background())
		var wg sync.WaitGroup
		var went atomic.Int64
		var down atomic.Bool
		down.Store(true)
		for range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				a, err := g.Wait(ctx, Request{Number: 2}, 0)
				if err == nil {
					went.Add(1)
					time.Sleep(5 * time.Millisecond)
					o := Success
					if down.Load() {
						o = Failure
					}
					g.Record(Attempt{Number: 2, Outcome: o, Admission: a, Took: 5 * time.Millisecond})
				}
			}()
		}
		// Down for 7 s (less than MaxWait): probes go now and then, and each wakes its taker
		// and the next in line (each probe woke every held call).
		time.Sleep(time.Second)
		synctest.Wait()
		before, wentBefore := g.pollCount(), went.Load()
		time.Sleep(6 * time.Second)
		synctest.Wait()
		polls, probes := g.pollCount()-before, went.Load()-wentBefore
		t.Logf("down: %d probes with %d polls", probes, polls)
		if probes == 0 || polls > 10*uint64(probes) {
			t.Errorf("down: %d polls for %d probes, want 10 a probe at most", polls, probes)
		}
		before, wentBefore = g.pollCount(), went.Load()
		down.Store(false)
		g.Record(Attempt{Number: 1, Outcome: Success})
		time.Sleep(3 * time.Second)
		synctest.Wait()
		polls, back := g.pollCount()-before, went.Load()-wentBefore
		t.Logf("back: %d of %d went back in 3 s with %d polls (%.1f a release)", back, n, polls, float64(polls)/float64(max(back, 1)))
		if back == 0 || float64(polls)/float64(back) > 10 {
			t.Errorf("%d polls for %d calls back, want 10 a call at most", polls, back)
		}
		cancel()
		wg.Wait()
	})
}

//go:build go1.25

package test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stagger-go/stagger/interceptor"
	testingv1 "github.com/stagger-go/stagger/proto/stagger/testing/v1"
	"github.com/stagger-go/stagger/testserver"
)

// A call without a deadline waits at most defer.maxWait (10 s) in all,
// however many of its retries wait (issue 63: per wait, calls ran 19-25 s).
// A backend down for a minute, calls 100 ms apart for 30 s, each with five
// attempts: every call lasts at most 10 s plus its pauses outside the
// Gate (the tree before: 10.08 s, a call's second wait starting afresh).
func TestCallWaitsAtMostMaxWaitInAll(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := testserver.New()
		defer srv.Close()
		client := warmClient(t, srv)
		var (
			mu       sync.Mutex
			longest  time.Duration
			multiple int
			wg       sync.WaitGroup
		)
		for i := range 300 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				var r interceptor.Report
				start := time.Now()
				_, _ = client.Write(context.Background(), &testingv1.WriteRequest{Script: &testingv1.Script{Key: fmt.Sprint("down-", i), FailAttempts: 100}}, interceptor.WithReport(&r))
				took := time.Since(start)
				mu.Lock()
				defer mu.Unlock()
				longest = max(longest, took)
				if r.Deferred > 0 && r.Delay > 10*time.Second {
					multiple++ // its waits came to more than one wait's bound
				}
			}()
			time.Sleep(100 * time.Millisecond)
		}
		wg.Wait()
		t.Logf("longest call %v; %d calls paused more than 10 s", longest, multiple)
		if bound := 10*time.Second + 4*10*time.Millisecond; longest > bound {
			t.Errorf("a call without a deadline lasted %v, want at most %v (defer.maxWait in all, plus its pauses)", longest, bound)
		}
	})
}

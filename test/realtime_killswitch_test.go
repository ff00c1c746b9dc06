package test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/stagger-go/stagger"
	"github.com/stagger-go/stagger/budget"
	"github.com/stagger-go/stagger/interceptor"
	testingv1 "github.com/stagger-go/stagger/proto/stagger/testing/v1"
	"github.com/stagger-go/stagger/testserver"
)

// The switch on real time, loopback TCP: 200 calls whose retries the Gate
// holds in an outage (some of them still entering it when it turns: the
// switch and a retry's start race) all end soon after SetDisabled(true),
// with their last status; none waits for its 10 s deadline. The bound is
// loose for a loaded machine; the synctest twin holds 100 ms exactly.
func TestRealTimeKillSwitchReleasesHeldCalls(t *testing.T) {
	defer interceptor.SetDisabled(interceptor.Disabled())
	interceptor.SetDisabled(false)
	srv := testserver.New(testserver.WithTCP())
	t.Cleanup(srv.Close)
	bs, err := budget.NewBackends(budget.DefaultSettings())
	if err != nil {
		t.Fatal(err)
	}
	const n = 200
	var deferred atomic.Int64
	allDeferred := make(chan struct{})
	cc, err := srv.DialTCP(stagger.DialOptions(parse(t, retryFile), interceptor.WithDefaultBudgets(bs),
		interceptor.WithHook(func(e interceptor.Event) {
			if e.Kind == interceptor.EventDeferred && deferred.Add(1) == n {
				close(allDeferred)
			}
		}))...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	client := testingv1.NewTestServiceClient(cc)
	if _, err := client.Get(context.Background(), &testingv1.GetRequest{Script: &testingv1.Script{Key: "warm"}}); err != nil {
		t.Fatal(err)
	}
	// The outage rule: failures after a second without any are an outage.
	time.Sleep(1100 * time.Millisecond)
	srv.SetOutage(true)
	ends := make([]time.Time, n)
	got := make([]codes.Code, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			_, err := client.Get(ctx, &testingv1.GetRequest{Script: &testingv1.Script{Key: fmt.Sprint("rt-held-", i)}})
			ends[i], got[i] = time.Now(), status.Code(err)
		}()
	}
	select {
	case <-allDeferred:
	case <-time.After(5 * time.Second):
		t.Fatalf("%d of %d calls deferred a retry within 5 s", deferred.Load(), n)
	}
	flipped := time.Now()
	interceptor.SetDisabled(true)
	wg.Wait()
	var latest time.Duration
	for i := range ends {
		latest = max(latest, ends[i].Sub(flipped))
		if got[i] != codes.Unavailable {
			t.Errorf("call %d ended %v, want UNAVAILABLE, its last status", i, got[i])
		}
	}
	t.Logf("the last of %d held calls ended %v after the switch", n, latest)
	if latest > time.Second {
		t.Errorf("the last held call ended %v after the switch, want at once", latest)
	}
}

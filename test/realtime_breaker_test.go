package test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"

	"github.com/stagger-go/stagger"
	"github.com/stagger-go/stagger/breaker"
	"github.com/stagger-go/stagger/budget"
	"github.com/stagger-go/stagger/interceptor"
	testingv1 "github.com/stagger-go/stagger/proto/stagger/testing/v1"
	"github.com/stagger-go/stagger/testserver"
)

// TestRealTimeBreakerProbeThroughWaitingRetries: a circuit breaker and the
// Gate of its backend through an outage, over loopback TCP on real time,
// with twenty callers at once. While the breaker is open their retries
// wait in the Gate, which asks the breaker (its budget.Guard) without its
// own lock, holding the retry's admission meanwhile: the breaker's
// half-open probe must go to one retry at a time, and must never be lost
// (a probe slot taken and never reported would keep the breaker
// half-open, its backend refused, long after the server is back). Once
// the server serves again, the breaker closes and the calls succeed
// within about a second; when the callers stop, nobody waits in a Gate.
func TestRealTimeBreakerProbeThroughWaitingRetries(t *testing.T) {
	cfg := rtConfig(t, `{"circuitBreaker": {"consecutiveFailures": 5, "breakDuration": "100ms", "maxBreakDuration": "200ms"},
 "methodConfig": [{"name": [{"service": "stagger.testing.v1.TestService"}],
  "retryPolicy": {"maxAttempts": 3, "initialBackoff": "10ms", "maxBackoff": "50ms", "backoffMultiplier": 2, "retryableStatusCodes": ["UNAVAILABLE"]}}]}`)
	bs, err := budget.NewBackends(budget.DefaultSettings())
	if err != nil {
		t.Fatal(err)
	}
	var attempts atomic.Int64
	count := func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		attempts.Add(1)
		return handler(ctx, req)
	}
	srv := testserver.New(testserver.WithTCP(), testserver.WithServerOptions(grpc.ChainUnaryInterceptor(count)))
	defer srv.Close()
	st := interceptor.NewState()
	cc, err := srv.DialTCP(stagger.DialOptions(cfg, interceptor.WithDefaultBudgets(bs), interceptor.WithState(st))...)
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	client := testingv1.NewTestServiceClient(cc)

	const callers = 20
	var (
		mu      sync.Mutex
		backAt  time.Time // when the server serves again (zero: not yet)
		lateOK  int       // calls made 1 s or more after it, that succeeded
		lateAll int
	)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				start := time.Now()
				ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
				_, err := client.Get(ctx, &testingv1.GetRequest{})
				cancel()
				mu.Lock()
				if !backAt.IsZero() && start.Sub(backAt) >= time.Second {
					lateAll++
					if err == nil {
						lateOK++
					}
				}
				mu.Unlock()
				time.Sleep(5 * time.Millisecond)
			}
		}()
	}
	time.Sleep(100 * time.Millisecond)
	srv.SetOutage(true)
	down := time.Now()
	for open := false; !open; time.Sleep(5 * time.Millisecond) {
		for _, set := range st.Breakers() {
			for _, s := range set.Snapshots() {
				open = open || s.State != breaker.StateClosed
			}
		}
		if time.Since(down) > 5*time.Second {
			t.Fatal("the breaker did not open in 5 s of outage")
		}
	}
	opened := time.Since(down)
	before := attempts.Load()
	time.Sleep(500 * time.Millisecond)
	inOutage := attempts.Load() - before
	srv.SetOutage(false)
	mu.Lock()
	backAt = time.Now()
	mu.Unlock()
	time.Sleep(1500 * time.Millisecond)
	close(stop)
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("callers did not return 10 s after the load stopped")
	}

	// An open breaker lets a probe go every break (100 to 200 ms): about
	// five in the half second after it opened, each a new call's first
	// attempt or a waiting retry. Twenty callers with every retry sent
	// would make hundreds.
	if inOutage > 20 {
		t.Errorf("%d attempts reached the server in the half second after the breaker opened; want at most 20", inOutage)
	}
	mu.Lock()
	defer mu.Unlock()
	if lateAll == 0 || float64(lateOK) < 0.95*float64(lateAll) {
		t.Errorf("from 1 s after the server was back: %d of %d calls succeeded; want 95 %%", lateOK, lateAll)
	}
	for _, set := range st.Breakers() {
		for _, s := range set.Snapshots() {
			if s.State != breaker.StateClosed {
				t.Errorf("breaker %s is %v 1.5 s after the server was back; want closed", s.Key, s.State)
			}
		}
	}
	for _, st := range bs.States() {
		if st.Waiting != 0 {
			t.Errorf("the Gate of %s %s counts %d waiting after every caller returned", st.Target, st.Method, st.Waiting)
		}
	}
	t.Logf("breaker open %v into the outage; attempts in the half second after: %d; after the outage: %d of %d late calls served", opened.Round(time.Millisecond), inOutage, lateOK, lateAll)
}

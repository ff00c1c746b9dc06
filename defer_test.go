//go:build go1.25

package stagger_test

import (
	"context"

	"fmt"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/stagger-go/stagger"
	"github.com/stagger-go/stagger/budget"
	"github.com/stagger-go/stagger/interceptor"
	"github.com/stagger-go/stagger/policy"
	testingv1 "github.com/stagger-go/stagger/proto/stagger/testing/v1"
	"github.com/stagger-go/stagger/testserver"
)

// retryAdmissions lists how each retry the hooks saw was let go.
func retryAdmissions(hooks *hookLog) []budget.Admission {
	var out []budget.Admission
	for _, e := range hooks.all() {
		if e.Kind == interceptor.EventRetry {
			out = append(out, e.Admission)
		}
	}
	return out
}

// Deferral end to end: stagger.DialOptions with a budget of the default
// settings (a fresh one per test: budget.Default is one per process), over
// bufconn in a synctest bubble.

// deferFile retries UNAVAILABLE up to 5 attempts, pauses of exactly 10ms.
const deferFile = `{"methodConfig": [{
	"name": [{"service": "stagger.testing.v1.TestService"}],
	"retryPolicy": {"maxAttempts": 5, "initialBackoff": "0.01s", "maxBackoff": "0.01s",
		"backoffMultiplier": 1, "retryableStatusCodes": ["UNAVAILABLE"], "jitter": "NONE"}
}]}`

func deferClient(t *testing.T, srv *testserver.Server, hooks ...func(interceptor.Event)) testingv1.TestServiceClient {
	t.Helper()
	b, err := budget.New(budget.DefaultSettings())
	if err != nil {
		t.Fatal(err)
	}
	opts := []interceptor.Option{interceptor.WithBudget(b)}
	for _, h := range hooks {
		opts = append(opts, interceptor.WithHook(h))
	}
	return testingv1.NewTestServiceClient(srv.ClientConn(t, stagger.DialOptions(parse(t, deferFile), opts...)...))
}

// checkFourFailures makes one call, with ctx, to a server that fails its
// first four attempts, in a synctest bubble, and checks that it succeeds on
// the fifth with the gaps between attempts and the retries' admissions
// given.
func checkFourFailures(t *testing.T, ctx context.Context, key string, wantGaps []time.Duration, wantAdm []budget.Admission) {
	t.Helper()
	srv := testserver.New()
	defer srv.Close()
	var hooks hookLog
	client := deferClient(t, srv, hooks.hook)
	_, err := client.Write(ctx, &testingv1.WriteRequest{Script: &testingv1.Script{Key: key, FailAttempts: 4}})
	if err != nil {
		t.Fatalf("call: %v (reason %q), want OK on the fifth attempt", err, reasonOf(err))
	}
	if g := gaps(srv.Attempts(key)); !equalDurations(g, wantGaps) {
		t.Fatalf("gaps %v, want %v", g, wantGaps)
	}
	if adm := retryAdmissions(&hooks); fmt.Sprint(adm) != fmt.Sprint(wantAdm) {
		t.Fatalf("retries admitted by %v, want %v", adm, wantAdm)
	}
}

// A quiet process retries as gRFC A6 says, every attempt of maxAttempts:
// the default budget admits one retry to a fresh process, and the rest wait
// and go as probes (nothing else reaches the server), the first its pause
// after the attempt before, then twice as long after each failure (the
// evidence that the server is still down grows).
func TestDeferQuietProcessRetries(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		checkFourFailures(t, context.Background(), "quiet",
			[]time.Duration{10 * time.Millisecond, 10 * time.Millisecond, 20 * time.Millisecond, 40 * time.Millisecond},
			[]budget.Admission{budget.AdmitNone, budget.AdmitProbe, budget.AdmitProbe, budget.AdmitProbe})
	})
}

// The last attempt of a call with a deadline is not spent on a probe: it
// is kept for the call's last chance, budget.Rules().LastChanceLead before the
// deadline (a server that comes back meanwhile heals the call).
func TestDeferKeepsTheLastAttemptForTheDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		// 0 and 10ms (the budget's retry), probes at 20ms and 40ms, the
		// last chance at 950ms.
		checkFourFailures(t, ctx, "last",
			[]time.Duration{10 * time.Millisecond, 10 * time.Millisecond, 20 * time.Millisecond, time.Second - budget.Rules().LastChanceLead - 40*time.Millisecond},
			[]budget.Admission{budget.AdmitNone, budget.AdmitProbe, budget.AdmitProbe, budget.AdmitLast})
	})
}

// A deferred retry that cannot go before the deadline ends the call with its
// last real status, reason deferred, a millisecond before the deadline; the
// caller cancelling a wait gets CANCELED at once.
func TestDeferEndsAtDeadlineOrCancel(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := testserver.New()
		defer srv.Close()
		var hooks hookLog
		client := deferClient(t, srv, hooks.hook)
		// Attempts at 0 and 10ms (the budget's one retry), probes at 20ms
		// and 40ms (the gap doubles after a failed probe); the next is due
		// at 80ms, past the deadline.
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Millisecond)
		defer cancel()
		start := time.Now()
		_, err := client.Write(ctx, &testingv1.WriteRequest{Script: &testingv1.Script{Key: "deadline", FailAttempts: 10}})
		if status.Code(err) != codes.Unavailable || reasonOf(err) != policy.ReasonDeferred.String() {
			t.Fatalf("call: %v (reason %q), want the last UNAVAILABLE, reason deferred", err, reasonOf(err))
		}
		if d := time.Since(start); d != 59*time.Millisecond {
			t.Fatalf("returned after %v, want 59ms", d)
		}
		if n := len(srv.Attempts("deadline")); n != 4 {
			t.Fatalf("%d attempts, want 4", n)
		}
		last := hooks.last()
		// Deferred from 10ms to 20ms, 20ms to 40ms and 40ms to 59ms.
		if last.Kind != interceptor.EventGiveUp || last.Deferred != 49*time.Millisecond {
			t.Fatalf("last event %+v, want a give-up after 49ms deferred in all", last)
		}

		ctx, cancel = context.WithCancel(context.Background())
		time.AfterFunc(15*time.Millisecond, cancel)
		start = time.Now()
		_, err = client.Write(ctx, &testingv1.WriteRequest{Script: &testingv1.Script{Key: "cancel", FailAttempts: 10}})
		if status.Code(err) != codes.Canceled || reasonOf(err) != policy.ReasonCaller.String() {
			t.Fatalf("cancelled call: %v (reason %q), want CANCELED, reason caller", err, reasonOf(err))
		}
		if d := time.Since(start); d != 15*time.Millisecond {
			t.Fatalf("cancelled call returned after %v, want 15ms", d)
		}
	})
}

// An outage: calls keep coming (one every 10ms), the budget runs dry, and
// the calls made during the outage wait instead of failing; when the server
// is back, they are released a few at a time (the first at once, then 2/s
// and a share of the new calls' successes that grows to a quarter), and
// every call succeeds. While the outage lasts, the waiting calls add almost
// nothing to the load: the new calls' own attempts are the evidence; after
// it, the releases add at most half of the new calls' load to any 100ms.
func TestDeferHealsAnOutage(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := testserver.New()
		defer srv.Close()
		var mu sync.Mutex
		var reasons []string
		client := deferClient(t, srv)
		const (
			calls    = 300
			interval = 10 * time.Millisecond
			down     = 200 * time.Millisecond
			up       = 500 * time.Millisecond
		)
		start := time.Now()
		srv.SetOutageWindow(start.Add(down), start.Add(up))
		var wg sync.WaitGroup
		for i := range calls {
			wg.Add(1)
			time.AfterFunc(time.Duration(i)*interval, func() {
				defer wg.Done()
				ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
				defer cancel()
				_, err := client.Get(ctx, &testingv1.GetRequest{Script: &testingv1.Script{}})
				if err != nil {
					mu.Lock()
					reasons = append(reasons, fmt.Sprintf("call %d: %v (%s)", i, err, reasonOf(err)))
					mu.Unlock()
				}
			})
		}
		wg.Wait()
		for _, r := range reasons {
			t.Error(r)
		}
		// Arrivals during the outage: the 30 new calls, the budget's one
		// retry, and the probes, at most one per 10ms pause (fewer: the new
		// calls' attempts keep the process from being quiet).
		arr := srv.Arrivals()
		bucket := srv.ArrivalBucket()
		var during int64
		for i, n := range arr {
			if at := time.Duration(i) * bucket; at >= down && at < up {
				during += n
			}
		}
		if during > 30+1+5 {
			t.Errorf("%d attempts arrived during the outage, want at most 36 (30 new calls, the budget's retry, a few probes)", during)
		}
		for i, n := range arr {
			if at := time.Duration(i) * bucket; at >= up && n > 15 {
				t.Errorf("%d attempts arrived in the 100ms from %v, want at most 15 (10 new calls, releases)", n, at)
			}
		}
		t.Logf("arrivals per %v: %v", bucket, arr)
	})
}

// A server stream that went as the Gate's probe, committed, and was then
// abandoned by its caller (cancelled, never read to its end) settles its
// attempt: the next outage still gets its probes. Before streams settled on
// their caller's cancellation, the probe slot stayed taken for good and
// every later deferred retry of the process waited out its call.
func TestDeferAbandonedStreamProbeSettles(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := testserver.New()
		defer srv.Close()
		var hooks hookLog
		client := deferClient(t, srv, hooks.hook)

		// Two failures in a row (an outage; the second attempt is the one
		// retry the fresh bucket pays for), then the third goes as the
		// probe, and the server serves it.
		ctx, cancel := context.WithCancel(context.Background())
		st, err := client.ListItems(ctx, &testingv1.ListItemsRequest{Script: &testingv1.Script{Key: "abandoned", FailAttempts: 2, ResponseCount: 5}})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := st.Recv(); err != nil {
			t.Fatalf("first message: %v", err)
		}
		if adm := retryAdmissions(&hooks); fmt.Sprint(adm) != fmt.Sprint([]budget.Admission{budget.AdmitNone, budget.AdmitProbe}) {
			t.Fatalf("the stream's retries went by %v, want [none probe]", adm)
		}
		cancel() // committed, abandoned: never read again
		synctest.Wait()

		// A new outage, a second later (well within the 30 s a lost probe
		// of a call without a deadline holds its slot): a call whose
		// first three attempts fail must get its probes.
		time.Sleep(time.Second)
		start := time.Now()
		_, err = client.Write(context.Background(), &testingv1.WriteRequest{Script: &testingv1.Script{Key: "next", FailAttempts: 3}})
		if err != nil {
			t.Fatalf("the next outage's call: %v (reason %q), want OK on its fourth attempt", err, reasonOf(err))
		}
		if d := time.Since(start); d > time.Second {
			t.Fatalf("the next outage's call took %v, want its probes at its backoff's pace", d)
		}
	})
}

//go:build go1.25

package test

import (
	"context"
	"math/rand/v2"

	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/stagger-go/stagger"
	"github.com/stagger-go/stagger/budget"
	"github.com/stagger-go/stagger/interceptor"
	"github.com/stagger-go/stagger/internal/gatetune"
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
// settings (a fresh one per test: budget.DefaultBackends is one per process), over
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

// warmClient is deferClient after a call that succeeded a second ago: the
// server has served, and failures from now on make an outage (budget.Gate,
// the outage rule). The hooks hear from the next call on.
func warmClient(t *testing.T, srv *testserver.Server, hooks ...func(interceptor.Event)) testingv1.TestServiceClient {
	t.Helper()
	var on atomic.Bool
	var hs []func(interceptor.Event)
	for _, h := range hooks {
		hs = append(hs, func(e interceptor.Event) {
			if on.Load() {
				h(e)
			}
		})
	}
	client := deferClient(t, srv, hs...)
	if _, err := client.Write(context.Background(), &testingv1.WriteRequest{Script: &testingv1.Script{Key: "warm"}}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Second)
	on.Store(true)
	return client
}

// checkFourFailures makes one call, with a deadline timeout away (0: none),
// from a warm client to a server that fails its first four attempts, in a
// synctest bubble, and checks that it succeeds on the fifth with the gaps
// between attempts and the retries' admissions given.
func checkFourFailures(t *testing.T, timeout time.Duration, key string, wantGaps []time.Duration, wantAdm string) {
	t.Helper()
	srv := testserver.New()
	defer srv.Close()
	var hooks hookLog
	client := warmClient(t, srv, hooks.hook)
	ctx := context.Background()
	if timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, timeout)
		defer cancel()
	}
	_, err := client.Write(ctx, &testingv1.WriteRequest{Script: &testingv1.Script{Key: key, FailAttempts: 4}})
	if err != nil {
		t.Fatalf("call: %v (reason %q), want OK on the fifth attempt", err, reasonOf(err))
	}
	if g := gaps(srv.Attempts(key)); !equalDurations(g, wantGaps) {
		t.Fatalf("gaps %v, want %v", g, wantGaps)
	}
	if adm := retryAdmissions(&hooks); fmt.Sprint(adm) != wantAdm {
		t.Fatalf("retries admitted by %v, want %s", adm, wantAdm)
	}
}

// A quiet process whose server was serving retries as gRFC A6 says, every
// attempt of maxAttempts, when the server goes down: the default budget
// admits two retries (one more for the earlier call's success), and once
// two retries failed the rest wait, held in the outage, and go as probes
// (nothing else reaches the server), the first its pause after the attempt
// before, then twice as long after each failure (the evidence that the
// server is still down grows).
func TestDeferQuietProcessRetries(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		checkFourFailures(t, 0, "quiet",
			[]time.Duration{10 * time.Millisecond, 10 * time.Millisecond, 10 * time.Millisecond, 20 * time.Millisecond},
			"[none none probe probe]")
	})
}

// The last attempt of a call with a deadline is not spent on a probe: it
// is kept for the call's last chance, gatetune.LastChanceLead before its
// wait would end (here the deadline: no attempt took any time), so a server
// that comes back meanwhile heals the call.
func TestDeferKeepsTheLastAttemptForTheDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		// 0, then the budget's retries at 10ms and 20ms, a probe at 30ms,
		// the last chance at 950ms.
		checkFourFailures(t, time.Second, "last",
			[]time.Duration{10 * time.Millisecond, 10 * time.Millisecond, 10 * time.Millisecond, time.Second - gatetune.LastChanceLead - 30*time.Millisecond},
			"[none none probe last]")
	})
}

// A fresh process whose server never served does not know whether retries
// heal: after the one retry its budget pays for, one call at a time goes on
// as the probe that learns it, each retry with attempts left once nothing
// reached the server for gatetune.QuietGapMax (the failed paid retry is the
// evidence of an outage), its last attempt at once (else a process whose
// budget refuses its retries never learns that they heal: issue 62's quiet
// process), and this one's fifth attempt is served; once
// a learning call failed its last attempt, the others' waits end a tenth
// past their pause (reason deferred). The call's last attempt goes as a
// probe too, so a flaky server that serves the last attempt is found out.
func TestDeferFreshProcessDoesNotStorm(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := testserver.New()
		defer srv.Close()
		client := deferClient(t, srv)
		start := time.Now()
		if _, err := client.Write(context.Background(), &testingv1.WriteRequest{Script: &testingv1.Script{Key: "fresh", FailAttempts: 4}}); err != nil {
			t.Fatalf("the learning call: %v (reason %q), want served on its fifth attempt", err, reasonOf(err))
		}
		t.Logf("the learning call took %v", time.Since(start))
		if n := len(srv.Attempts("fresh")); n != 5 {
			t.Fatalf("%d attempts, want 5", n)
		}
		// At a server that fails every attempt, one learning call, and
		// then no more: the next call's retry waits its pause and a tenth.
		down := testserver.New()
		defer down.Close()
		client = deferClient(t, down)
		client.Write(context.Background(), &testingv1.WriteRequest{Script: &testingv1.Script{Key: "down1", FailAttempts: 100}})
		if n := len(down.Attempts("down1")); n != 5 {
			t.Fatalf("the learning call: %d attempts, want 5", n)
		}
		start = time.Now()
		_, err := client.Write(context.Background(), &testingv1.WriteRequest{Script: &testingv1.Script{Key: "down2", FailAttempts: 100}})
		if status.Code(err) != codes.Unavailable || reasonOf(err) != policy.ReasonDeferred.String() {
			t.Fatalf("call: %v (reason %q), want the last UNAVAILABLE, reason deferred", err, reasonOf(err))
		}
		if n := len(down.Attempts("down2")); n != 1 || time.Since(start) != 11*time.Millisecond {
			t.Fatalf("the next call: %d attempts in %v, want 1 in 11ms", n, time.Since(start))
		}

		// Three attempts: the budget pays for the second, the third is the
		// last, and probes.
		var hooks hookLog
		client = deferClient(t, srv, hooks.hook)
		_, err = client.Write(context.Background(), &testingv1.WriteRequest{Script: &testingv1.Script{Key: "flaky", FailAttempts: 2}}, interceptor.WithMaxAttempts(3))
		if err != nil {
			t.Fatalf("flaky: %v (reason %q), want OK on the last attempt", err, reasonOf(err))
		}
		if adm := retryAdmissions(&hooks); fmt.Sprint(adm) != "[none probe]" {
			t.Fatalf("flaky's retries admitted by %v, want [none probe]", adm)
		}
	})
}

// A deferred retry that cannot go before the deadline ends the call with its
// last real status, reason deferred: the outage (two paid retries and the
// probe failed) has lasted longer than what the calls that waited had
// left, yet a call with a deadline waits for the return to its end (the
// futility rule spares it), and its last chance would come past its
// deadline; the caller cancelling a wait gets CANCELED at once.
func TestDeferEndsAtDeadlineOrCancel(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := testserver.New()
		defer srv.Close()
		var hooks hookLog
		client := warmClient(t, srv, hooks.hook)
		// Attempts at 0, 10ms and 20ms (the budget's two retries), a probe
		// at 30ms; the last attempt's last chance is due at 50ms (its gap
		// doubled by the failed probe), past the deadline: it does not wait.
		ctx, cancel := context.WithTimeout(context.Background(), 45*time.Millisecond)
		defer cancel()
		start := time.Now()
		_, err := client.Write(ctx, &testingv1.WriteRequest{Script: &testingv1.Script{Key: "deadline", FailAttempts: 10}})
		if status.Code(err) != codes.Unavailable || reasonOf(err) != policy.ReasonDeferred.String() {
			t.Fatalf("call: %v (reason %q), want the last UNAVAILABLE, reason deferred", err, reasonOf(err))
		}
		if d := time.Since(start); d != 45*time.Millisecond {
			t.Fatalf("returned after %v, want 45ms (its deadline: no attempt of the method was timed)", d)
		}
		if n := len(srv.Attempts("deadline")); n != 4 {
			t.Fatalf("%d attempts, want 4", n)
		}
		last := hooks.last()
		// Its last retry waited past its pause to the deadline, held by
		// the outage.
		if last.Kind != interceptor.EventGiveUp || last.Deferred <= 0 {
			t.Fatalf("last event %+v, want a give-up deferred past its pause", last)
		}

		// A fresh client (the other's Gate is in an outage whose retries
		// fail at once): its call waits, and the caller cancels.
		client = warmClient(t, srv)
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
// is back, they go back spread over what their deadlines leave, and every
// call succeeds. While the outage lasts, the waiting calls add almost
// nothing to the load: the new calls' own attempts are the evidence; after
// it, the calls that waited add at most half of the new calls' load to any
// 100ms.
func TestDeferHealsAnOutage(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := testserver.New()
		defer srv.Close()
		var mu sync.Mutex
		var reasons []string
		// The gate's draws from a fixed seed, so that how the calls that
		// waited spread after the outage does not vary from run to run.
		rng := rand.New(rand.NewPCG(1, 2))
		b, err := budget.New(budget.DefaultSettings(), budget.WithRandom(rng.Float64))
		if err != nil {
			t.Fatal(err)
		}
		client := testingv1.NewTestServiceClient(srv.ClientConn(t, stagger.DialOptions(parse(t, deferFile), interceptor.WithBudget(b))...))
		const (
			calls    = 300
			interval = 10 * time.Millisecond
			down     = 1200 * time.Millisecond
			up       = 1500 * time.Millisecond
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
		// Arrivals during the outage: the 30 new calls, the budget's
		// retries, and the probes, at most one per 10ms pause (fewer: the
		// new calls' attempts keep the process from being quiet).
		arr := srv.Arrivals()
		bucket := srv.ArrivalBucket()
		var during int64
		for i, n := range arr {
			if at := time.Duration(i) * bucket; at >= down && at < up {
				during += n
			}
		}
		if during > 30+2+5 {
			t.Errorf("%d attempts arrived during the outage, want at most 37 (30 new calls, the budget's retries, a few probes)", during)
		}
		// After it, each call that waited goes back once, its pause after
		// the recovery and then the share it drew of what its deadline
		// leaves (the release rule): spread over about a second, they add at most
		// the new calls' load (10 per 100ms) to any 100ms, where they all
		// came in the first 100ms when they went back at their pause.
		for i, n := range arr {
			at := time.Duration(i) * bucket
			if at >= up && n > 10+10 {
				t.Errorf("%d attempts arrived in the 100ms from %v, want at most 20", n, at)
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
		client := warmClient(t, srv, hooks.hook)

		// Three failures in a row (an outage; the second and third attempts
		// are the retries the bucket pays for), then the fourth goes as the
		// probe, and the server serves it.
		ctx, cancel := context.WithCancel(context.Background())
		st, err := client.ListItems(ctx, &testingv1.ListItemsRequest{Script: &testingv1.Script{Key: "abandoned", FailAttempts: 3, ResponseCount: 5}})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := st.Recv(); err != nil {
			t.Fatalf("first message: %v", err)
		}
		if adm := retryAdmissions(&hooks); fmt.Sprint(adm) != "[none none probe]" {
			t.Fatalf("the stream's retries went by %v, want [none none probe]", adm)
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

//go:build go1.25

package test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/stagger-go/stagger"
	"github.com/stagger-go/stagger/breaker"
	"github.com/stagger-go/stagger/budget"
	"github.com/stagger-go/stagger/interceptor"
	testingv1 "github.com/stagger-go/stagger/proto/stagger/testing/v1"
	"github.com/stagger-go/stagger/testserver"
)

// breakerStanza opens the breaker on 2 answered first attempts of which
// half failed, for 1s (probeEvery 1: the first attempt asked after it
// may be the probe).
const breakerStanza = `"circuitBreaker": {"failureRatio": 0.5, "minimumThroughput": 2, "breakDuration": "1s", "probeEvery": 1}`

// breakerFile retries UNAVAILABLE once after 10ms, behind breakerStanza's
// breaker.
const breakerFile = `{
  ` + breakerStanza + `,
  "methodConfig": [{
	"name": [{"service": "stagger.testing.v1.TestService"}],
	"retryPolicy": {"maxAttempts": 2, "initialBackoff": "0.01s", "maxBackoff": "0.01s",
		"backoffMultiplier": 1, "retryableStatusCodes": ["UNAVAILABLE"], "jitter": "NONE"}
  }]}`

// breakerBench is a server and a client of it through stagger.DialOptions
// for file, without a budget unless opts give one, the call events logged.
func breakerBench(t *testing.T, file string, opts ...interceptor.Option) (*testserver.Server, *hookLog, testingv1.TestServiceClient) {
	t.Helper()
	srv := testserver.New()
	t.Cleanup(srv.Close)
	hooks := new(hookLog)
	opts = append([]interceptor.Option{interceptor.WithBudget(nil), interceptor.WithHook(hooks.hook)}, opts...)
	cc := srv.ClientConn(t, stagger.DialOptions(parse(t, file), opts...)...)
	return srv, hooks, testingv1.NewTestServiceClient(cc)
}

func breakerKinds(h *hookLog) string {
	var out []string
	for _, e := range h.all() {
		if e.Kind == interceptor.EventBreaker {
			out = append(out, e.Breaker.To.String())
		}
	}
	return strings.Join(out, " ")
}

// Without a deferring budget: the breaker opens on failures, fails first
// attempts fast with a status that names it (no attempt reaches the
// server), refuses retries, lets one probe through after its break, and
// closes when the probe succeeds.
func TestBreakerOpensFailsFastAndCloses(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv, hooks, client := breakerBench(t, breakerFile)
		get := func(key string) error {
			_, err := client.Get(context.Background(), &testingv1.GetRequest{Script: &testingv1.Script{Key: key}})
			return err
		}
		srv.SetOutage(true)
		// Call 1: two failed attempts, one answered first attempt: not yet
		// the minimum throughput (retries do not count).
		if err := get("c1"); status.Code(err) != codes.Unavailable || interceptor.Attempts(err) != 2 {
			t.Fatalf("call 1: %v after %d attempts", err, interceptor.Attempts(err))
		}
		// Call 2: its first attempt is the second failure, which opens
		// the breaker; its retry is refused (no deferring budget).
		if err := get("c2"); reasonOf(err) != "breaker" || interceptor.Attempts(err) != 1 {
			t.Fatalf("call 2: %v (%s, %d attempts)", err, reasonOf(err), interceptor.Attempts(err))
		}
		if got := breakerKinds(hooks); got != "open" {
			t.Fatalf("breaker events %q, want open", got)
		}
		// Open: fail fast. The Report names the backend and the breaker's state.
		var rep interceptor.Report
		_, _ = client.Get(context.Background(), &testingv1.GetRequest{Script: &testingv1.Script{Key: "c3r"}}, interceptor.WithReport(&rep))
		if rep.Breaker.State != breaker.StateOpen || !strings.Contains(rep.String(), "breaker open") {
			t.Fatalf("report of a call the open breaker refused: %q", rep.String())
		}
		err := get("c3")
		var r *breaker.Refusal
		if status.Code(err) != codes.Unavailable || !errors.Is(err, breaker.ErrOpen) || !errors.As(err, &r) ||
			reasonOf(err) != "breaker" || interceptor.Attempts(err) != 0 || len(srv.Attempts("c3")) != 0 {
			t.Fatalf("call while open: %v (reason %q, %d attempts, %d reached the server)", err, reasonOf(err), interceptor.Attempts(err), len(srv.Attempts("c3")))
		}
		if msg := status.Convert(err).Message(); !strings.Contains(msg, "circuit breaker open") || !strings.Contains(msg, "/stagger.testing.v1.TestService/Get") {
			t.Fatalf("message %q does not name the breaker", msg)
		}
		// The server comes back; the breaker waits out its break.
		srv.SetOutage(false)
		if err := get("c4"); reasonOf(err) != "breaker" {
			t.Fatalf("call before the break ended: %v", err)
		}
		time.Sleep(time.Second)
		if err := get("c5"); err != nil {
			t.Fatalf("probe: %v", err)
		}
		if got := breakerKinds(hooks); got != "open half-open closed" {
			t.Fatalf("breaker events %q, want open half-open closed", got)
		}
		for i := range 10 {
			if err := get(fmt.Sprint("after", i)); err != nil {
				t.Fatalf("after closing: %v", err)
			}
		}
	})
}

// With the default (deferring) budget, a retry the open breaker refuses
// waits, within its deadline; a new call's first attempt, after the break,
// is the breaker's probe (one probe: the waiting retry does not go beside
// it), and once it succeeds the waiting retry is released and heals its
// call.
func TestBreakerRetryWaitsForItsProbe(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b, err := budget.New(budget.DefaultSettings())
		if err != nil {
			t.Fatal(err)
		}
		// A break of up to 5 s, and a probe one in two first attempts, so
		// that the waiting retry, refused before any first attempt was,
		// asks again only after the new call's probe (at the default 1 s
		// it would go as the probe itself, and so it would with
		// probeEvery 1, which needs no refusal before the probe).
		file := strings.Replace(breakerFile, `"probeEvery": 1`, `"probeEvery": 2, "maxBreakDuration": "5s"`, 1)
		srv, hooks, client := breakerBench(t, file, interceptor.WithBudget(b))
		get := func(ctx context.Context, key string, fail int32) error {
			_, err := client.Get(ctx, &testingv1.GetRequest{Script: &testingv1.Script{Key: key, FailAttempts: fail}})
			return err
		}
		// x1: its first attempt fails, its retry (paid by the budget)
		// succeeds.
		if err := get(context.Background(), "x1", 1); err != nil {
			t.Fatal(err)
		}
		// x2: its first attempt is the second failed one: the breaker
		// opens and x2's retry waits.
		x2 := make(chan error, 1)
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			x2 <- get(ctx, "x2", 1)
		}()
		time.Sleep(500 * time.Millisecond)
		if got := breakerKinds(hooks); got != "open" {
			t.Fatalf("breaker events %q, want open", got)
		}
		if err := get(context.Background(), "fast", 0); reasonOf(err) != "breaker" || len(srv.Attempts("fast")) != 0 {
			t.Fatalf("first attempt while open: %v", err)
		}
		time.Sleep(time.Second)
		if err := get(context.Background(), "probe", 0); err != nil {
			t.Fatalf("the probe: %v", err)
		}
		if err := <-x2; err != nil {
			t.Fatalf("x2: %v (reason %q)", err, reasonOf(err))
		}
		recs, probe := srv.Attempts("x2"), srv.Attempts("probe")
		if len(recs) != 2 || recs[1].Arrived.Before(probe[0].Arrived) {
			t.Fatalf("x2's retry went at %v, before the probe at %v", recs[1].Arrived, probe[0].Arrived)
		}
		if got := breakerKinds(hooks); got != "open half-open closed" {
			t.Fatalf("breaker events %q", got)
		}
		// The Gate hears the breaker close (budget.GuardWatcher) before
		// its own record of the probe's success: the waiting retry goes
		// at the close, paid by the budget (it went as healed, unpaid,
		// when the Gate waited for its own news).
		adm := retryAdmissions(hooks)
		if len(adm) == 0 || adm[len(adm)-1].String() != "budget" && adm[len(adm)-1].String() != "heal" {
			t.Fatalf("the waiting retry was admitted by %v, want budget or heal", adm)
		}
	})
}

// Adaptive throttling rejects first attempts locally while the server
// fails them, in the SRE book's proportion, and stops once it serves.
func TestThrottlingRejectsLocally(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := testserver.New()
		defer srv.Close()
		cfg := parse(t, `{"adaptiveThrottling": {"k": 2}}`)
		cc := srv.ClientConn(t, stagger.DialOptions(cfg, interceptor.WithBudget(nil))...)
		client := testingv1.NewTestServiceClient(cc)
		srv.SetOutage(true)
		throttled := 0
		const calls = 1000
		for i := range calls {
			_, err := client.Get(context.Background(), &testingv1.GetRequest{Script: &testingv1.Script{Key: fmt.Sprint(i)}})
			if reasonOf(err) == "throttled" {
				throttled++
			}
		}
		// No accepts: p = requests / (requests + 1), capped at 0.8, so
		// about four in five are rejected locally and one in five reaches
		// the server (no time passes: the probe rule has nothing to do).
		reached := int(srv.Stats().Received)
		if throttled+reached != calls || reached > calls*3/10 || reached < calls/10 {
			t.Fatalf("%d throttled, %d reached the server, of %d", throttled, reached, calls)
		}
		srv.SetOutage(false)
		time.Sleep(11 * time.Second) // the window forgets
		for i := range 100 {
			if _, err := client.Get(context.Background(), &testingv1.GetRequest{Script: &testingv1.Script{Key: fmt.Sprint("ok", i)}}); err != nil {
				t.Fatalf("after recovery: %v", err)
			}
		}
	})
}

// The breaker's check adds no allocation to a successful call.
func TestBreakerSuccessPathAllocs(t *testing.T) {
	cfg := parse(t, breakerFile)
	st := interceptor.NewState()
	invoker := func(context.Context, string, any, any, *grpc.ClientConn, ...grpc.CallOption) error { return nil }
	with := interceptor.UnaryClientInterceptor(interceptor.WithConfig(cfg), interceptor.WithBudget(nil), interceptor.WithState(st))
	without := interceptor.UnaryClientInterceptor(interceptor.WithConfig(cfg), interceptor.WithBudget(nil), interceptor.WithBreakers(nil))
	ctx := context.Background()
	const m = "/stagger.testing.v1.TestService/Get"
	a := testing.AllocsPerRun(1000, func() { _ = with(ctx, m, nil, nil, nil, invoker) })
	b := testing.AllocsPerRun(1000, func() { _ = without(ctx, m, nil, nil, nil, invoker) })
	if a != b {
		t.Fatalf("%v allocations per call with the breaker, %v without", a, b)
	}
	if sets := st.Breakers(); len(sets) != 1 || len(sets[0].Snapshots()) != 1 {
		t.Fatal("the calls did not go through the breaker")
	}
}

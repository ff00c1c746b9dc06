//go:build go1.25

package stagger_test

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
	"github.com/stagger-go/stagger/budget"
	"github.com/stagger-go/stagger/interceptor"
	testingv1 "github.com/stagger-go/stagger/proto/stagger/testing/v1"
	"github.com/stagger-go/stagger/testserver"
)

// breakerFile retries UNAVAILABLE once after 10ms; the breaker opens on 4
// answers of which half failed, for 1s.
const breakerFile = `{
  "circuitBreaker": {"failureRatio": 0.5, "minimumThroughput": 4, "breakDuration": "1s"},
  "methodConfig": [{
	"name": [{"service": "stagger.testing.v1.TestService"}],
	"retryPolicy": {"maxAttempts": 2, "initialBackoff": "0.01s", "maxBackoff": "0.01s",
		"backoffMultiplier": 1, "retryableStatusCodes": ["UNAVAILABLE"], "jitter": "NONE"}
  }]}`

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
		srv := testserver.New()
		defer srv.Close()
		var hooks hookLog
		cc := srv.ClientConn(t, stagger.DialOptions(parse(t, breakerFile), interceptor.WithBudget(nil), interceptor.WithHook(hooks.hook))...)
		client := testingv1.NewTestServiceClient(cc)
		get := func(key string) error {
			_, err := client.Get(context.Background(), &testingv1.GetRequest{Script: &testingv1.Script{Key: key}})
			return err
		}
		srv.SetOutage(true)
		// Call 1: two failed attempts, not yet the minimum throughput.
		if err := get("c1"); status.Code(err) != codes.Unavailable || interceptor.Attempts(err) != 2 {
			t.Fatalf("call 1: %v after %d attempts", err, interceptor.Attempts(err))
		}
		// Call 2: its retry is the fourth failure, which opens the breaker.
		if err := get("c2"); reasonOf(err) != "attempts" || interceptor.Attempts(err) != 2 {
			t.Fatalf("call 2: %v (%s, %d attempts)", err, reasonOf(err), interceptor.Attempts(err))
		}
		if got := breakerKinds(&hooks); got != "open" {
			t.Fatalf("breaker events %q, want open", got)
		}
		// Open: fail fast.
		err := get("c3")
		var r *budget.Refusal
		if status.Code(err) != codes.Unavailable || !errors.Is(err, budget.ErrBreakerOpen) || !errors.As(err, &r) ||
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
		if got := breakerKinds(&hooks); got != "open half-open closed" {
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
// waits, within its deadline, and goes as the breaker's half-open probe:
// one probe for both, never a first attempt beside it.
func TestBreakerRetryWaitsForItsProbe(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := testserver.New()
		defer srv.Close()
		var hooks hookLog
		b, err := budget.New(budget.DefaultSettings())
		if err != nil {
			t.Fatal(err)
		}
		cc := srv.ClientConn(t, stagger.DialOptions(parse(t, breakerFile), interceptor.WithBudget(b), interceptor.WithHook(hooks.hook))...)
		client := testingv1.NewTestServiceClient(cc)
		// Four failed attempts open the breaker (two calls with a budget
		// that pays for one retry each, or waits).
		for _, key := range []string{"a", "b"} {
			_, _ = client.Get(context.Background(), &testingv1.GetRequest{Script: &testingv1.Script{Key: key, FailAttempts: 2}})
		}
		if got := breakerKinds(&hooks); got != "open" {
			t.Fatalf("breaker events %q, want open", got)
		}
		opened := time.Now()
		if _, err := client.Get(context.Background(), &testingv1.GetRequest{Script: &testingv1.Script{Key: "fast"}}); reasonOf(err) != "breaker" {
			t.Fatalf("first attempt while open: %v", err)
		}
		// After the break, a call's first attempt is the probe; it fails
		// (open again, for 2 s), and the call's retry waits in the Gate,
		// within its deadline, for the breaker's next probe.
		time.Sleep(time.Until(opened.Add(time.Second)))
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_, err = client.Get(ctx, &testingv1.GetRequest{Script: &testingv1.Script{Key: "probe", FailAttempts: 1}})
		if err != nil {
			t.Fatalf("the probe's call: %v (reason %q)", err, reasonOf(err))
		}
		// Its first attempt was the probe and failed (open again, 2 s);
		// its retry, the call's last attempt, waited in the Gate past the
		// break, for its last chance (the deadline less 50ms: no other
		// call came to probe), and succeeded as the breaker's probe.
		recs := srv.Attempts("probe")
		if len(recs) != 2 {
			t.Fatalf("%d attempts, want 2", len(recs))
		}
		if g := recs[1].Arrived.Sub(recs[0].Arrived); g != 5*time.Second-budget.LastChanceLead {
			t.Fatalf("the retry went %v after the failed probe, want its last chance, 4.95s", g)
		}
		if got := breakerKinds(&hooks); got != "open half-open open half-open closed" {
			t.Fatalf("breaker events %q", got)
		}
		adm := retryAdmissions(&hooks)
		if len(adm) == 0 || adm[len(adm)-1] == budget.AdmitNone {
			t.Fatalf("the waiting retry was admitted by %v, want the gate", adm)
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
		// No accepts: p = requests / (requests + 1), so nearly all are
		// rejected locally; the server still sees some (the draws).
		reached := int(srv.Stats().Received)
		if throttled+reached != calls || reached > 50 || reached < 1 {
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
	bs := cfg.Breakers(nil)
	if bs == nil {
		t.Fatal("no breakers")
	}
	invoker := func(context.Context, string, any, any, *grpc.ClientConn, ...grpc.CallOption) error { return nil }
	with := interceptor.UnaryClientInterceptor(interceptor.WithConfig(cfg), interceptor.WithBudget(nil))
	without := interceptor.UnaryClientInterceptor(interceptor.WithConfig(cfg), interceptor.WithBudget(nil), interceptor.WithBreakers(nil))
	ctx := context.Background()
	const m = "/stagger.testing.v1.TestService/Get"
	a := testing.AllocsPerRun(1000, func() { _ = with(ctx, m, nil, nil, nil, invoker) })
	b := testing.AllocsPerRun(1000, func() { _ = without(ctx, m, nil, nil, nil, invoker) })
	if a != b {
		t.Fatalf("%v allocations per call with the breaker, %v without", a, b)
	}
	if len(bs.Snapshots()) != 1 {
		t.Fatal("the calls did not go through the breaker")
	}
}

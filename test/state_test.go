//go:build go1.25

package test

import (
	"context"
	"math"
	"strconv"
	"testing"
	"testing/synctest"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/stagger-go/stagger"
	"github.com/stagger-go/stagger/breaker"
	"github.com/stagger-go/stagger/budget"
	"github.com/stagger-go/stagger/interceptor"
	"github.com/stagger-go/stagger/policy"
	testingv1 "github.com/stagger-go/stagger/proto/stagger/testing/v1"
	"github.com/stagger-go/stagger/testserver"
)

// throttleOf is gRFC A6's throttle with maxTokens n: it starts full and
// admits a retry while its tokens stay above n/2. Each failure takes a
// token and each success gives back 0.1, so with n = 4 a call whose first
// attempt fails is retried twice (4 → 3 → 3.1 → 2.1 → 2.2) and the third
// such call is not (1.2).
func throttleOf(n int) string {
	return `"retryThrottling": {"maxTokens": ` + strconv.Itoa(n) + `, "tokenRatio": 0.1}`
}

// dialAs dials srv's bufconn listener under the target "passthrough:///"+name,
// so that one server stands for as many backends as there are names.
func dialAs(t *testing.T, srv *testserver.Server, name string, opts []grpc.DialOption) *grpc.ClientConn {
	t.Helper()
	all := append([]grpc.DialOption{srv.DialOption(), grpc.WithTransportCredentials(insecure.NewCredentials())}, opts...)
	cc, err := grpc.NewClient("passthrough:///"+name, all...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cc.Close() })
	return cc
}

// A policy file is data; the interceptors keep each backend's budget. A
// reload that keeps the budget's settings (only the methods changed) keeps
// every backend's tokens: the ones a backend spent stay spent, and the
// other backend's stay its own. A reload that changes the settings starts
// afresh, and so does one that goes back to the earlier settings.
func TestReloadKeepsEachBackendsBudget(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		src := policy.NewSource(parse(t, sourceFile(4, throttleOf(4))))
		srv := testserver.New()
		defer srv.Close()
		st := interceptor.NewState()
		opts := stagger.DialOptionsFromSource(src, interceptor.WithState(st))
		a, b := dialAs(t, srv, "a", opts), dialAs(t, srv, "b", opts)
		n := 0
		call := func(cc *grpc.ClientConn) int {
			n++
			got, _ := getAttempts(t, srv, cc, "call"+strconv.Itoa(n), 1)
			return got
		}
		level := func(target string) float64 {
			t.Helper()
			bss := st.Budgets()
			if len(bss) != 1 {
				t.Fatalf("the State holds %d budgets, want 1 (the file's)", len(bss))
			}
			for _, s := range bss[0].States() {
				if s.Target == "passthrough:///"+target {
					return s.Level
				}
			}
			t.Fatalf("no budget for %s", target)
			return 0
		}

		// a spends its tokens: two retries, then none.
		for i, want := range []int{2, 2, 1} {
			if got := call(a); got != want {
				t.Fatalf("a's call %d made %d attempts, want %d", i, got, want)
			}
		}
		spent := level("a")

		if err := src.Update(parse(t, sourceFile(3, throttleOf(4)))); err != nil {
			t.Fatal(err)
		}
		if got := call(a); got != 1 {
			t.Errorf("after a reload with the same budget, a's call made %d attempts, want 1 (its tokens stay spent)", got)
		}
		if got := level("a"); math.Abs(got-(spent-1)) > 1e-9 {
			t.Errorf("a's tokens after the reload and one more failure: %g, want %g", got, spent-1)
		}
		if got := call(b); got != 2 {
			t.Errorf("b's call made %d attempts, want 2 (a's spending is not b's)", got)
		}

		if err := src.Update(parse(t, sourceFile(3, throttleOf(5)))); err != nil {
			t.Fatal(err)
		}
		if got := call(a); got != 2 {
			t.Errorf("after a reload that changed the budget, a's call made %d attempts, want 2 (fresh tokens)", got)
		}
		if bss := st.Budgets(); len(bss) != 1 || len(bss[0].States()) != 1 || bss[0].States()[0].Capacity != 5 {
			t.Errorf("the State holds %d budgets, want one of maxTokens 5", len(bss))
		}

		// Back to the first settings: not the old tokens, new ones.
		if err := src.Update(parse(t, sourceFile(3, throttleOf(4)))); err != nil {
			t.Fatal(err)
		}
		if got := call(a); got != 2 {
			t.Errorf("after going back to the first budget, a's call made %d attempts, want 2 (fresh tokens)", got)
		}
		if got := level("a"); math.Abs(got-3.1) > 1e-9 {
			t.Errorf("a's tokens = %g, want 3.1: a full throttle after one failure and one success", got)
		}
	})
}

// One DialOptions result keeps one state per target for every connection
// dialed with it: two connections to one target share that target's
// tokens, a connection to another target has its own, and a second
// DialOptions call of the same Config has its own too (as grpc-go keeps
// one throttle per channel), unless both are given one State.
func TestDialOptionsStatePerInterceptorSet(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := parse(t, sourceFile(4, throttleOf(4)))
		srv := testserver.New()
		defer srv.Close()
		opts := stagger.DialOptions(cfg)
		first, second := dialAs(t, srv, "a", opts), dialAs(t, srv, "a", opts)
		other := dialAs(t, srv, "b", opts)
		apart := dialAs(t, srv, "a", stagger.DialOptions(cfg))
		var st interceptor.State // the zero value is ready to use
		sharedA := dialAs(t, srv, "a", stagger.DialOptions(cfg, interceptor.WithState(&st)))
		sharedB := dialAs(t, srv, "a", stagger.DialOptions(cfg, interceptor.WithState(&st)))
		n := 0
		call := func(cc *grpc.ClientConn) int {
			n++
			got, _ := getAttempts(t, srv, cc, "call"+strconv.Itoa(n), 1)
			return got
		}
		for _, cc := range []*grpc.ClientConn{first, first, sharedA, sharedA} {
			if got := call(cc); got != 2 {
				t.Fatalf("a call made %d attempts, want 2 (a full throttle)", got)
			}
		}
		for _, c := range []struct {
			name string
			cc   *grpc.ClientConn
			want int
		}{
			{"the same options, the same target", second, 1},
			{"the same options, another target", other, 2},
			{"another DialOptions call, the same target", apart, 2},
			{"another DialOptions call with the same State, the same target", sharedB, 1},
		} {
			if got := call(c.cc); got != c.want {
				t.Errorf("%s: %d attempts, want %d", c.name, got, c.want)
			}
		}
		if bss := st.Budgets(); len(bss) != 1 || len(bss[0].States()) != 1 || bss[0].States()[0].Kind != budget.KindThrottle.String() {
			t.Errorf("the shared State holds %d budgets, want one throttle with one target", len(bss))
		}
	})
}

// The file's circuit breakers live in the State as its budgets do: a reload
// that keeps their settings keeps the breakers (and what they counted), one
// that changes them gets new ones and the State drops the old.
func TestReloadKeepsBreakers(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		withBreaker := func(attempts int, ratio string) *policy.Config {
			f := sourceFile(attempts, `"circuitBreaker": {"failureRatio": `+ratio+`}`)
			return parse(t, f)
		}
		src := policy.NewSource(withBreaker(4, "0.5"))
		srv := testserver.New()
		defer srv.Close()
		st := interceptor.NewState()
		cc := dialAs(t, srv, "a", stagger.DialOptionsFromSource(src, interceptor.WithState(st), interceptor.WithBudget(nil)))
		n := 0
		call := func() {
			n++
			_, _ = getAttempts(t, srv, cc, "call"+strconv.Itoa(n), 0)
		}
		one := func(when string) *breaker.Set {
			t.Helper()
			sets := st.Breakers()
			if len(sets) != 1 {
				t.Fatalf("%s: the State holds %d breaker sets, want 1", when, len(sets))
			}
			return sets[0]
		}
		if len(st.Breakers()) != 0 {
			t.Fatal("breakers built before any call")
		}
		call()
		first := one("first file")
		if err := src.Update(withBreaker(3, "0.5")); err != nil {
			t.Fatal(err)
		}
		call()
		if kept := one("same settings"); kept != first {
			t.Error("a reload with the same breaker settings lost the breakers")
		}
		if err := src.Update(withBreaker(3, "0.7")); err != nil {
			t.Fatal(err)
		}
		call()
		if next := one("new settings"); next == first || next.Settings().FailureRatio != 0.7 {
			t.Errorf("a reload with new breaker settings kept the old breakers (failure ratio %g)", next.Settings().FailureRatio)
		}
	})
}

// stagger.DialOptions gives its unary and stream interceptors one State: a
// target's stream calls spend the tokens its unary calls spend.
func TestDialOptionsUnaryAndStreamShareTheBudget(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := testserver.New()
		defer srv.Close()
		cc := dialAs(t, srv, "a", stagger.DialOptions(parse(t, sourceFile(4, throttleOf(4)))))
		for i := range 2 {
			if got, _ := getAttempts(t, srv, cc, "unary"+strconv.Itoa(i), 1); got != 2 {
				t.Fatalf("unary call %d made %d attempts, want 2", i, got)
			}
		}
		stream, err := testingv1.NewTestServiceClient(cc).ListItems(context.Background(),
			&testingv1.ListItemsRequest{Script: &testingv1.Script{Key: "stream", FailAttempts: 1}})
		if err != nil {
			t.Fatal(err)
		}
		for err == nil {
			_, err = stream.Recv()
		}
		if n := len(srv.Attempts("stream")); n != 1 {
			t.Errorf("the stream made %d attempts, want 1: the unary calls spent the target's tokens", n)
		}
	})
}

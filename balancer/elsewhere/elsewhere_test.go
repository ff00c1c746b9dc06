package elsewhere_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors/logging"
	"google.golang.org/grpc"
	"google.golang.org/grpc/balancer"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/resolver"
	"google.golang.org/grpc/resolver/manual"
	"google.golang.org/grpc/serviceconfig"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/stagger-go/stagger"
	"github.com/stagger-go/stagger/balancer/elsewhere"
	"github.com/stagger-go/stagger/interceptor"
	"github.com/stagger-go/stagger/policy"
	testingv1 "github.com/stagger-go/stagger/proto/stagger/testing/v1"
	"github.com/stagger-go/stagger/testserver"
)

const getMethod = testingv1.TestService_Get_FullMethodName

// The service configs the tests dial with: the policy over round_robin, and
// round_robin alone (what a user has without the policy).
const (
	withPolicy = `{"loadBalancingConfig": [{"stagger_elsewhere": {"childPolicy": [{"round_robin": {}}]}}]}`
	roundRobin = `{"loadBalancingConfig": [{"round_robin": {}}]}`
)

const retryFile = `{"methodConfig": [{"name": [{"service": "stagger.testing.v1.TestService"}],
  "retryPolicy": {"maxAttempts": 3, "initialBackoff": "0.001s", "maxBackoff": "0.002s",
    "backoffMultiplier": 2, "retryableStatusCodes": ["UNAVAILABLE"]}}]}`

const hedgeFile = `{"methodConfig": [{"name": [{"service": "stagger.testing.v1.TestService"}],
  "hedgingPolicy": {"maxAttempts": 3, "hedgingDelay": "0s", "nonFatalStatusCodes": ["UNAVAILABLE"]}}]}`

var dials atomic.Int64

// replicas starts n servers on loopback TCP.
func replicas(t testing.TB, n int) []*testserver.Server {
	t.Helper()
	srvs := make([]*testserver.Server, n)
	for i := range srvs {
		srvs[i] = testserver.New(testserver.WithTCP())
		t.Cleanup(srvs[i].Close)
	}
	return srvs
}

// dial connects to every server through one channel whose resolver returns
// their addresses, with the service config sc and stagger following file;
// it returns once each server has answered a call.
func dial(t testing.TB, srvs []*testserver.Server, sc, file string, iopts ...interceptor.Option) testingv1.TestServiceClient {
	t.Helper()
	r := manual.NewBuilderWithScheme(fmt.Sprintf("elsewhere%d", dials.Add(1)))
	var addrs []resolver.Address
	for _, s := range srvs {
		addrs = append(addrs, resolver.Address{Addr: s.Addr()})
	}
	r.InitialState(resolver.State{Addresses: addrs})
	cfg, err := policy.ParseConfig([]byte(file))
	if err != nil {
		t.Fatal(err)
	}
	opts := append(stagger.DialOptions(cfg, append([]interceptor.Option{interceptor.WithBudget(nil)}, iopts...)...),
		grpc.WithResolvers(r),
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultServiceConfig(sc))
	cc, err := grpc.NewClient(r.Scheme()+":///replicas", opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cc.Close() })
	client := testingv1.NewTestServiceClient(cc)
	// Every backend READY before the test's calls: round_robin sends calls
	// to each READY one in turn.
	deadline := time.Now().Add(20 * time.Second)
	for {
		if _, err := client.Get(context.Background(), &testingv1.GetRequest{Script: &testingv1.Script{}}); err != nil {
			t.Fatal(err)
		}
		all := true
		for _, s := range srvs {
			all = all && s.Executions(getMethod) > 0
		}
		if all {
			return client
		}
		if time.Now().After(deadline) {
			t.Fatal("not every replica answered within 20s")
		}
	}
}

// perServer is how many attempts of key each server saw.
func perServer(srvs []*testserver.Server, key string) []int {
	n := make([]int, len(srvs))
	for i, s := range srvs {
		n[i] = len(s.Attempts(key))
	}
	return n
}

// runCalls makes n calls of Get, par at a time, each with a key of its own
// (prefix-i) and the script sc, and returns their errors.
func runCalls(client testingv1.TestServiceClient, prefix string, n, par int, sc *testingv1.Script) []error {
	errs := make([]error, n)
	var wg sync.WaitGroup
	next := make(chan int)
	for range par {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				s := &testingv1.Script{Key: fmt.Sprintf("%s-%d", prefix, i), Delay: sc.GetDelay()}
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				_, errs[i] = client.Get(ctx, &testingv1.GetRequest{Script: s})
				cancel()
			}
		}()
	}
	for i := range n {
		next <- i
	}
	close(next)
	wg.Wait()
	return errs
}

// badRepeats runs calls against three replicas of which the first answers
// every attempt UNAVAILABLE, and returns how many calls failed and how many
// met the bad replica more than once.
func badRepeats(t *testing.T, sc string, round, calls int) (failed, repeats int) {
	t.Helper()
	srvs := replicas(t, 3)
	client := dial(t, srvs, sc, retryFile)
	srvs[0].SetOutage(true)
	prefix := fmt.Sprintf("bad%d", round)
	for i, err := range runCalls(client, prefix, calls, 12, nil) {
		if err != nil {
			failed++
			t.Logf("call %d: %v", i, err)
		}
		if perServer(srvs, fmt.Sprintf("%s-%d", prefix, i))[0] > 1 {
			repeats++
		}
	}
	return failed, repeats
}

// With the policy, a retry never goes back to the replica that failed while
// another is READY: every call succeeds within 3 attempts and none meets the
// bad replica twice, as the bad replica's own records show.
func TestRetryGoesElsewhere(t *testing.T) {
	failed, repeats := badRepeats(t, withPolicy, 0, 150)
	if failed != 0 || repeats != 0 {
		t.Errorf("with %s: %d of 150 calls failed, %d met the bad replica more than once; want 0 and 0", elsewhere.Name, failed, repeats)
	}
}

// Without the policy, round_robin sends concurrent calls' retries to
// whichever replica is next, the bad one included: calls that meet it twice
// exist (the assertion above is not vacuous).
func TestRoundRobinRetriesRepeatTheBadReplica(t *testing.T) {
	total := 0
	for round := range 10 {
		_, repeats := badRepeats(t, roundRobin, round, 150)
		total += repeats
		if total > 0 {
			return
		}
	}
	t.Errorf("round_robin: no call met the bad replica twice in 1,500 calls")
}

// hedgeSpread runs hedged calls (3 attempts at once, each held 50 ms by the
// server) against three replicas and returns how many calls sent two of
// their attempts to one replica.
func hedgeSpread(t *testing.T, sc string, calls int) (doubled int) {
	t.Helper()
	srvs := replicas(t, 3)
	client := dial(t, srvs, sc, hedgeFile)
	for i, err := range runCalls(client, "hedge", calls, 6, &testingv1.Script{Delay: durationpb.New(50 * time.Millisecond)}) {
		if err != nil {
			t.Errorf("call %d: %v", i, err)
		}
	}
	for i := range calls {
		key := fmt.Sprintf("hedge-%d", i)
		// The losers' records end as the server hears of the cancel.
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		for _, s := range srvs {
			_, _ = s.Await(ctx, key, func(r []testserver.AttemptRecord) bool {
				for _, a := range r {
					if !a.Done {
						return false
					}
				}
				return true
			})
		}
		cancel()
		n := perServer(srvs, key)
		if n[0]+n[1]+n[2] != 3 {
			t.Errorf("call %d: attempts per replica %v, want 3 in all", i, n)
		}
		for _, k := range n {
			if k > 1 {
				doubled++
				break
			}
		}
	}
	return doubled
}

// With the policy, the three attempts of a hedged call go to the three
// replicas.
func TestHedgesGoToDistinctReplicas(t *testing.T) {
	if d := hedgeSpread(t, withPolicy, 60); d != 0 {
		t.Errorf("with %s: %d of 60 hedged calls sent two attempts to one replica, want 0", elsewhere.Name, d)
	}
}

// Without it, concurrent hedged calls share round_robin's rotation and some
// send two attempts to one replica.
func TestRoundRobinHedgesShareReplicas(t *testing.T) {
	for range 10 {
		if hedgeSpread(t, roundRobin, 60) > 0 {
			return
		}
	}
	t.Error("round_robin: no hedged call sent two attempts to one replica in 600 calls")
}

const hedgeStreamFile = `{"methodConfig": [{"name": [{"service": "stagger.testing.v1.TestService", "method": "ListItems"}], "idempotent": true,
  "hedgingPolicy": {"maxAttempts": 3, "hedgingDelay": "0s", "nonFatalStatusCodes": ["UNAVAILABLE"]}}]}`

// Hedged server streams too: the three attempts of each stream, racing
// until one commits, go to the three replicas.
func TestStreamHedgesGoToDistinctReplicas(t *testing.T) {
	srvs := replicas(t, 3)
	client := dial(t, srvs, withPolicy, hedgeStreamFile)
	const calls = 20
	var wg sync.WaitGroup
	for i := range calls {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			sc := &testingv1.Script{Key: fmt.Sprintf("stream-%d", i), Delay: durationpb.New(50 * time.Millisecond), ResponseCount: 2}
			st, err := client.ListItems(ctx, &testingv1.ListItemsRequest{Script: sc})
			if err != nil {
				t.Errorf("stream %d: %v", i, err)
				return
			}
			for n := 0; ; n++ {
				if _, err := st.Recv(); err != nil {
					if n != 2 || err.Error() != "EOF" {
						t.Errorf("stream %d: %d messages, then %v", i, n, err)
					}
					return
				}
			}
		}()
	}
	wg.Wait()
	for i := range calls {
		key := fmt.Sprintf("stream-%d", i)
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		for _, s := range srvs {
			_, _ = s.Await(ctx, key, func(r []testserver.AttemptRecord) bool {
				for _, a := range r {
					if !a.Done {
						return false
					}
				}
				return true
			})
		}
		cancel()
		if n := perServer(srvs, key); n[0] != 1 || n[1] != 1 || n[2] != 1 {
			t.Errorf("stream %d: attempts per replica %v, want one each", i, n)
		}
	}
}

// A service config that changes the child (round_robin, then pick_first,
// then round_robin again) swaps it: calls go on succeeding, under
// pick_first every call goes to one replica, and back under round_robin
// hedges spread again.
func TestChildSwitch(t *testing.T) {
	srvs := replicas(t, 3)
	r := manual.NewBuilderWithScheme(fmt.Sprintf("elsewhere%d", dials.Add(1)))
	var rcc resolver.ClientConn
	r.BuildCallback = func(_ resolver.Target, cc resolver.ClientConn, _ resolver.BuildOptions) { rcc = cc }
	var addrs []resolver.Address
	for _, s := range srvs {
		addrs = append(addrs, resolver.Address{Addr: s.Addr()})
	}
	withChild := func(child string) *serviceconfig.ParseResult {
		return rcc.ParseServiceConfig(`{"loadBalancingConfig": [{"stagger_elsewhere": {"childPolicy": [{"` + child + `": {}}]}}]}`)
	}
	r.InitialState(resolver.State{Addresses: addrs})
	cfg, err := policy.ParseConfig([]byte(hedgeFile))
	if err != nil {
		t.Fatal(err)
	}
	opts := append(stagger.DialOptions(cfg, interceptor.WithBudget(nil)), grpc.WithResolvers(r),
		grpc.WithTransportCredentials(insecure.NewCredentials()), grpc.WithDefaultServiceConfig(withPolicy))
	cc, err := grpc.NewClient(r.Scheme()+":///replicas", opts...)
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	cc.Connect()
	client := testingv1.NewTestServiceClient(cc)
	// Each call's three hedges reach the servers (each holds them 20 ms).
	call := func(key string) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if _, err := client.Get(ctx, &testingv1.GetRequest{Script: &testingv1.Script{Key: key, Delay: durationpb.New(20 * time.Millisecond)}}); err != nil {
			t.Fatalf("%s: %v", key, err)
		}
		for _, s := range srvs {
			_, _ = s.Await(ctx, key, func(r []testserver.AttemptRecord) bool {
				for _, a := range r {
					if !a.Done {
						return false
					}
				}
				return true
			})
		}
	}
	call("warm")
	r.UpdateState(resolver.State{Addresses: addrs, ServiceConfig: withChild("pick_first")})
	// The switch is applied on grpc's own goroutine: wait until pick_first
	// sends a call's three hedges to one replica. Then it must go on doing
	// so: round_robin's connections are gone (a closed child that left
	// them, as grpc-go v1.64's does, would leave them READY here).
	deadline := time.Now().Add(10 * time.Second)
	for i := 0; ; i++ {
		key := fmt.Sprintf("pf-%d", i)
		call(key)
		if n := perServer(srvs, key); n[0] == 3 || n[1] == 3 || n[2] == 3 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("pick_first never took over")
		}
	}
	for i := range 5 {
		key := fmt.Sprintf("pf-after-%d", i)
		call(key)
		if n := perServer(srvs, key); n[0] != 3 && n[1] != 3 && n[2] != 3 {
			t.Errorf("under pick_first, attempts per replica %v, want 3 on one", n)
		}
	}
	r.UpdateState(resolver.State{Addresses: addrs, ServiceConfig: withChild("round_robin")})
	deadline = time.Now().Add(10 * time.Second)
	for i := 0; ; i++ {
		key := fmt.Sprintf("rr-%d", i)
		call(key)
		if n := perServer(srvs, key); n[0] <= 1 && n[1] <= 1 && n[2] <= 1 && n[0]+n[1]+n[2] >= 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("round_robin never spread the hedges again")
		}
	}
}

func TestParseConfig(t *testing.T) {
	p := balancer.Get(elsewhere.Name).(balancer.ConfigParser)
	for _, tc := range []struct {
		js, err string
	}{
		{``, ""},
		{`{}`, ""},
		{`{"childPolicy": [{"round_robin": {}}]}`, ""},
		{`{"childPolicy": [{"no_such_policy": {}}, {"pick_first": {}}]}`, ""},
		{`{"childPolicy": [{"no_such_policy": {}}]}`, `elsewhere: childPolicy: no registered policy among ["no_such_policy"]`},
		{`{"childPolicy": [{"round_robin": {}, "pick_first": {}}]}`, "elsewhere: childPolicy[0]: want one policy name as the only key, got 2 keys"},
		{`{"childPolicy": [{"stagger_elsewhere": {}}]}`, "elsewhere: childPolicy[0]: stagger_elsewhere cannot be its own child"},
		{`{"childPolicy": [{"pick_first": {"shuffleAddressList": 3}}]}`, "elsewhere: childPolicy[0] (pick_first): "},
		{`[`, "elsewhere: config: "},
	} {
		_, err := p.ParseConfig([]byte(tc.js))
		switch {
		case tc.err == "" && err != nil:
			t.Errorf("ParseConfig(%s): %v", tc.js, err)
		case tc.err != "" && (err == nil || !strings.HasPrefix(err.Error(), tc.err)):
			t.Errorf("ParseConfig(%s) = %v, want an error starting %q", tc.js, err, tc.err)
		}
	}
}

// A call of one's own (here grpc-go's own retry, with stagger's interceptors
// absent) gets a set from NewCallContext; Backends and Backend then say where
// its attempts went: the bad replica first, then another.
func TestNewCallContextWithGRPCRetry(t *testing.T) {
	srvs := replicas(t, 3)
	r := manual.NewBuilderWithScheme(fmt.Sprintf("elsewhere%d", dials.Add(1)))
	var addrs []resolver.Address
	for _, s := range srvs {
		addrs = append(addrs, resolver.Address{Addr: s.Addr()})
	}
	r.InitialState(resolver.State{Addresses: addrs})
	sc := `{"loadBalancingConfig": [{"stagger_elsewhere": {}}], "methodConfig": [{"name": [{"service": "stagger.testing.v1.TestService"}],
  "retryPolicy": {"maxAttempts": 3, "initialBackoff": "0.001s", "maxBackoff": "0.002s", "backoffMultiplier": 2, "retryableStatusCodes": ["UNAVAILABLE"]}}]}`
	cc, err := grpc.NewClient(r.Scheme()+":///replicas", grpc.WithResolvers(r), grpc.WithTransportCredentials(insecure.NewCredentials()), grpc.WithDefaultServiceConfig(sc))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	client := testingv1.NewTestServiceClient(cc)
	for all := false; !all; {
		if _, err := client.Get(context.Background(), &testingv1.GetRequest{Script: &testingv1.Script{}}); err != nil {
			t.Fatal(err)
		}
		all = srvs[0].Executions(getMethod) > 0 && srvs[1].Executions(getMethod) > 0 && srvs[2].Executions(getMethod) > 0
	}
	srvs[0].SetOutage(true)
	bad := srvs[0].Addr()
	seen := 0
	for i := range 30 {
		ctx := elsewhere.NewCallContext(context.Background())
		if _, err := client.Get(ctx, &testingv1.GetRequest{Script: &testingv1.Script{Key: fmt.Sprintf("own-%d", i)}}); err != nil {
			t.Fatalf("call %d: %v", i, err)
		}
		b := elsewhere.Backends(ctx)
		if len(b) == 0 || elsewhere.Backend(ctx) != b[len(b)-1] || b[len(b)-1] == bad {
			t.Errorf("call %d: Backends %v, Backend %q; want the last one good", i, b, elsewhere.Backend(ctx))
		}
		if len(b) > 1 {
			seen++
			if b[0] != bad || len(b) != 2 {
				t.Errorf("call %d: Backends %v, want the bad replica %s then a good one", i, b, bad)
			}
		}
	}
	if seen == 0 {
		t.Error("no call of 30 met the bad replica of three")
	}
}

// A context without a set has no backend; NewCallContext's set starts empty.
func TestBackendWithoutPicks(t *testing.T) {
	ctx := context.Background()
	if b := elsewhere.Backend(ctx); b != "" {
		t.Errorf("Backend(Background) = %q", b)
	}
	if b := elsewhere.Backend(elsewhere.NewCallContext(ctx)); b != "" {
		t.Errorf("Backend(new call) = %q", b)
	}
	if b := elsewhere.Backends(elsewhere.NewCallContext(ctx)); b != nil {
		t.Errorf("Backends(new call) = %q", b)
	}
}

// The events and the logger's lines of a retry name the backend the failed
// attempt went to: the bad replica, the only one that fails.
func TestEventsNameTheBackend(t *testing.T) {
	srvs := replicas(t, 3)
	var mu sync.Mutex
	var backends, logged []string
	hook := interceptor.WithHook(func(e interceptor.Event) {
		if e.Kind == interceptor.EventRetry {
			mu.Lock()
			backends = append(backends, e.Backend)
			mu.Unlock()
		}
	})
	logger := interceptor.WithLogger(logging.LoggerFunc(func(_ context.Context, _ logging.Level, _ string, fields ...any) {
		for i := 0; i+1 < len(fields); i += 2 {
			if fields[i] == "stagger.backend" {
				mu.Lock()
				logged = append(logged, fmt.Sprint(fields[i+1]))
				mu.Unlock()
			}
		}
	}))
	client := dial(t, srvs, withPolicy, retryFile, hook, logger)
	srvs[0].SetOutage(true)
	for i, err := range runCalls(client, "events", 30, 3, nil) {
		if err != nil {
			t.Errorf("call %d: %v", i, err)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if len(backends) == 0 {
		t.Fatal("no retry in 30 calls with one bad replica of three")
	}
	for _, b := range backends {
		if b != srvs[0].Addr() {
			t.Errorf("retry event's Backend %q, want the bad replica %s", b, srvs[0].Addr())
		}
	}
	if len(logged) != len(backends) {
		t.Errorf("logger: %d lines with stagger.backend, want %d (one per retry)", len(logged), len(backends))
	}
}

// Once the policy is in use, a call that may retry costs one allocation more
// on its success path (the call's set of backends); see
// interceptor.TestSuccessPathAllocatesNothing for the path without it.
func TestSuccessPathCostsOneAllocation(t *testing.T) {
	if _, err := balancer.Get(elsewhere.Name).(balancer.ConfigParser).ParseConfig([]byte(`{}`)); err != nil {
		t.Fatal(err)
	}
	icpt := successInterceptor(t)
	ok := func(context.Context, string, any, any, *grpc.ClientConn, ...grpc.CallOption) error { return nil }
	ctx := context.Background()
	if n := testing.AllocsPerRun(1000, func() { _ = icpt(ctx, getMethod, nil, nil, nil, ok) }); n != 1 {
		t.Errorf("success path with the policy in use: %v allocs per call, want 1", n)
	}
}

func successInterceptor(tb testing.TB) grpc.UnaryClientInterceptor {
	cfg, err := policy.ParseConfig([]byte(retryFile))
	if err != nil {
		tb.Fatal(err)
	}
	return interceptor.UnaryClientInterceptor(interceptor.WithConfig(cfg))
}

// BenchmarkSuccessPath is a call that may retry and succeeds at once, with
// the policy in use (its set of backends allocated), the invoker a stub.
func BenchmarkSuccessPath(b *testing.B) {
	if _, err := balancer.Get(elsewhere.Name).(balancer.ConfigParser).ParseConfig([]byte(`{}`)); err != nil {
		b.Fatal(err)
	}
	icpt := successInterceptor(b)
	ok := func(context.Context, string, any, any, *grpc.ClientConn, ...grpc.CallOption) error { return nil }
	ctx := context.Background()
	b.ReportAllocs()
	for range b.N {
		_ = icpt(ctx, getMethod, nil, nil, nil, ok)
	}
}

// BenchmarkCall is a successful call over loopback TCP to one of three
// replicas, through round_robin and through the policy over it. Both carry
// the call's set (once the policy is in use in the process, every call that
// may retry does: its one allocation, BenchmarkSuccessPath); equal figures
// say that the picker allocates nothing.
func BenchmarkCall(b *testing.B) {
	for _, bc := range []struct{ name, sc string }{{"round_robin", roundRobin}, {elsewhere.Name, withPolicy}} {
		b.Run(bc.name, func(b *testing.B) {
			client := dial(b, replicas(b, 3), bc.sc, retryFile)
			req := &testingv1.GetRequest{Script: &testingv1.Script{}}
			ctx := context.Background()
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N {
				if _, err := client.Get(ctx, req); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

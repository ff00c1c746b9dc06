//go:build go1.25

package test

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/stagger-go/stagger/budget"
	"github.com/stagger-go/stagger/interceptor"
	"github.com/stagger-go/stagger/policy"
	testingv1 "github.com/stagger-go/stagger/proto/stagger/testing/v1"
	"github.com/stagger-go/stagger/testserver"
)

// The hedging tests run real gRPC over bufconn inside a testing/synctest
// bubble: the server's arrival times are virtual and exact, so "the second
// attempt left 100ms after the first" is asserted to the nanosecond.

// hedgeConfig hedges every method of the test service.
func hedgeConfig(t *testing.T, maxAttempts int, delay time.Duration, extra string) *policy.Config {
	t.Helper()
	file := fmt.Sprintf(`{"methodConfig": [{
		"name": [{"service": "stagger.testing.v1.TestService"}],
		"hedgingPolicy": {"maxAttempts": %d, "hedgingDelay": "%s", "nonFatalStatusCodes": ["UNAVAILABLE"]%s}
	}]}`, maxAttempts, delay, extra)
	cfg, err := policy.ParseConfig([]byte(file))
	if err != nil {
		t.Fatalf("ParseConfig: %v", err)
	}
	return cfg
}

// attemptEcho is a server interceptor that sends each attempt's number, as
// the client numbered it, in a response header and a trailer, so a test can
// tell whose headers and trailers the caller got.
func attemptEcho(ctx context.Context, req any, _ *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	n := 1
	if md, ok := metadata.FromIncomingContext(ctx); ok {
		if v := md.Get("grpc-previous-rpc-attempts"); len(v) == 1 {
			p, _ := strconv.Atoi(v[0])
			n = p + 1
		}
	}
	s := strconv.Itoa(n)
	_ = grpc.SetTrailer(ctx, metadata.Pairs("x-attempt-trailer", s))
	resp, err := handler(ctx, req)
	if err == nil {
		// Only on success: headers sent before a failure would commit the
		// call (a Trailers-Only failure carries none).
		_ = grpc.SetHeader(ctx, metadata.Pairs("x-attempt", s))
	}
	return resp, err
}

// inFlight is a client interceptor placed after stagger: it sees every
// attempt and counts those running.
type inFlight struct{ n atomic.Int64 }

func (f *inFlight) intercept(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	f.n.Add(1)
	defer f.n.Add(-1)
	return invoker(ctx, method, req, reply, cc, opts...)
}

type hedgeBench struct {
	srv      *testserver.Server
	client   testingv1.TestServiceClient
	hooks    hookLog
	inFlight inFlight
}

func newHedgeBench(t *testing.T, opts ...interceptor.Option) *hedgeBench {
	t.Helper()
	b := &hedgeBench{}
	b.srv = testserver.New(testserver.WithServerOptions(grpc.ChainUnaryInterceptor(attemptEcho)))
	t.Cleanup(b.srv.Close)
	opts = append(opts, interceptor.WithHook(b.hooks.hook))
	cc := b.srv.ClientConn(t,
		grpc.WithChainUnaryInterceptor(interceptor.UnaryClientInterceptor(opts...), b.inFlight.intercept),
		grpc.WithDisableRetry())
	b.client = testingv1.NewTestServiceClient(cc)
	return b
}

func durations(ds ...time.Duration) []*durationpb.Duration {
	out := make([]*durationpb.Duration, len(ds))
	for i, d := range ds {
		out[i] = durationpb.New(d)
	}
	return out
}

func previousAttempts(recs []testserver.AttemptRecord) []string {
	out := make([]string, len(recs))
	for i, r := range recs {
		out[i] = r.PreviousAttempts
	}
	return out
}

func TestHedgeSlowFirstAttemptLoses(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := newHedgeBench(t, interceptor.WithConfig(hedgeConfig(t, 3, 100*time.Millisecond, "")))
		var header, trailer metadata.MD
		var p peer.Peer
		finished := 0
		start := time.Now()
		_, err := b.client.Get(context.Background(), &testingv1.GetRequest{Script: &testingv1.Script{
			Key: "k", AttemptDelays: durations(10*time.Second, 0),
		}}, grpc.Header(&header), grpc.Trailer(&trailer), grpc.Peer(&p),
			grpc.OnFinish(func(error) { finished++ }))
		if err != nil {
			t.Fatalf("Get: %v", err)
		}
		if took := time.Since(start); took != 100*time.Millisecond {
			t.Errorf("call took %v, want 100ms (the hedge's start)", took)
		}
		if n := b.inFlight.n.Load(); n != 0 {
			t.Errorf("%d attempts still running after the call returned", n)
		}
		synctest.Wait()
		recs := b.srv.Attempts("k")
		if len(recs) != 2 {
			t.Fatalf("server saw %d attempts, want 2", len(recs))
		}
		if !recs[0].Cancelled || recs[1].Code != codes.OK {
			t.Errorf("attempt 1 cancelled = %v, attempt 2 code = %v; want cancelled, OK", recs[0].Cancelled, recs[1].Code)
		}
		if g := gaps(recs); !equalDurations(g, []time.Duration{100 * time.Millisecond}) {
			t.Errorf("hedge sent after %v, want 100ms", g)
		}
		if got := previousAttempts(recs); got[0] != "" || got[1] != "1" {
			t.Errorf("grpc-previous-rpc-attempts = %q, want [\"\" \"1\"]", got)
		}
		if got := header.Get("x-attempt"); len(got) != 1 || got[0] != "2" {
			t.Errorf("header x-attempt = %q, want the winner's [2]", got)
		}
		if got := trailer.Get("x-attempt-trailer"); len(got) != 1 || got[0] != "2" {
			t.Errorf("trailer x-attempt-trailer = %q, want the winner's [2]", got)
		}
		if p.Addr == nil {
			t.Error("peer not set")
		}
		if finished != 1 {
			t.Errorf("OnFinish ran %d times, want 1", finished)
		}
		won := b.hooks.kinds(interceptor.EventHedgeWon)
		if len(won) != 1 || won[0].Attempt != 2 {
			t.Errorf("hedge-won events = %+v, want one for attempt 2", won)
		}
		if h := b.hooks.kinds(interceptor.EventHedge); len(h) != 1 || h[0].Attempt != 2 || h[0].Pause != 100*time.Millisecond {
			t.Errorf("hedge events = %+v, want one, attempt 2 after 100ms", h)
		}
	})
}

// TestHedgeReplyIsExactlyTheWinners hands stagger a reply with stale fields
// through Invoke: after a hedge wins it must equal the winner's reply, with
// nothing left from before or from the losing attempt.
func TestHedgeReplyIsExactlyTheWinners(t *testing.T) {
	tests := []struct {
		name       string
		delays     []time.Duration
		wantWinner int32
	}{
		{"first attempt wins", []time.Duration{10 * time.Millisecond, time.Second}, 1},
		{"hedge wins", []time.Duration{10 * time.Second, 0}, 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				srv := testserver.New(testserver.WithServerOptions(grpc.ChainUnaryInterceptor(attemptEcho)))
				t.Cleanup(srv.Close)
				cc := srv.ClientConn(t, grpc.WithChainUnaryInterceptor(interceptor.UnaryClientInterceptor(
					interceptor.WithConfig(hedgeConfig(t, 2, 5*time.Millisecond, "")))), grpc.WithDisableRetry())
				reply := &testingv1.GetResponse{Reply: &testingv1.Reply{Key: "stale", Seq: 99, Payload: []byte("old")}}
				var header, trailer metadata.MD
				req := &testingv1.GetRequest{Script: &testingv1.Script{Key: "k", AttemptDelays: durations(tt.delays...)}}
				if err := cc.Invoke(context.Background(), getMethod, req, reply, grpc.Header(&header), grpc.Trailer(&trailer)); err != nil {
					t.Fatalf("Invoke: %v", err)
				}
				want := &testingv1.GetResponse{Reply: &testingv1.Reply{Key: "k", Attempt: tt.wantWinner}}
				if !proto.Equal(reply, want) {
					t.Errorf("reply = %v, want %v", reply, want)
				}
				w := strconv.Itoa(int(tt.wantWinner))
				if got := header.Get("x-attempt"); len(got) != 1 || got[0] != w {
					t.Errorf("header x-attempt = %q, want [%s]", got, w)
				}
				if got := trailer.Get("x-attempt-trailer"); len(got) != 1 || got[0] != w {
					t.Errorf("trailer x-attempt-trailer = %q, want [%s]", got, w)
				}
			})
		})
	}
}

func TestHedgeFatalCodeStopsAll(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := newHedgeBench(t, interceptor.WithConfig(hedgeConfig(t, 3, 100*time.Millisecond, "")))
		start := time.Now()
		// Attempt 1 is slow; attempt 2 fails at once with INVALID_ARGUMENT,
		// which the policy does not list as non-fatal.
		err := b.get(&testingv1.Script{Key: "k", FailAttempts: 2, Code: int32(codes.InvalidArgument), AttemptDelays: durations(10*time.Second, 0)})
		if status.Code(err) != codes.InvalidArgument {
			t.Fatalf("code = %v, want InvalidArgument (err %v)", status.Code(err), err)
		}
		checkFatalSecond(t, err, start, b.srv, &b.hooks)
	})
}

// checkFatalSecond checks a hedged call (delay 100ms) begun at start, whose
// slow first attempt "k" was cancelled when its hedge failed with a fatal
// code: the call ended then, with err after 2 attempts, and gave up.
func checkFatalSecond(t *testing.T, err error, start time.Time, srv *testserver.Server, hooks *hookLog) {
	t.Helper()
	if took := time.Since(start); took != 100*time.Millisecond {
		t.Errorf("call took %v, want 100ms", took)
	}
	if n := interceptor.Attempts(err); n != 2 {
		t.Errorf("Attempts = %d, want 2", n)
	}
	synctest.Wait()
	recs := srv.Attempts("k")
	if len(recs) != 2 || !recs[0].Cancelled {
		t.Fatalf("server saw %+v, want 2 attempts, the first cancelled", recs)
	}
	if e := hooks.last(); e.Kind != interceptor.EventGiveUp || e.Reason != policy.ReasonNotRetryable || e.Attempt != 2 || !e.Hedging {
		t.Errorf("last event = %+v, want give up (not retryable) on attempt 2", e)
	}
}

func (b *hedgeBench) get(sc *testingv1.Script, opts ...grpc.CallOption) error {
	_, err := b.client.Get(context.Background(), &testingv1.GetRequest{Script: sc}, opts...)
	return err
}

func TestHedgeNonFatalSendsNextAtOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := newHedgeBench(t, interceptor.WithConfig(hedgeConfig(t, 3, time.Second, "")))
		// Attempt 1 fails with UNAVAILABLE after 50ms: attempt 2 leaves then,
		// not after the 1s delay; attempt 2 fails at once too, and so attempt
		// 3 leaves at the same instant and succeeds.
		err := b.get(&testingv1.Script{Key: "k", FailAttempts: 2, AttemptDelays: durations(50*time.Millisecond, 0)})
		if err != nil {
			t.Fatalf("Get: %v", err)
		}
		recs := b.srv.Attempts("k")
		if g := gaps(recs); !equalDurations(g, []time.Duration{50 * time.Millisecond, 0}) {
			t.Errorf("gaps = %v, want [50ms 0s]", g)
		}
		h := b.hooks.kinds(interceptor.EventHedge)
		if len(h) != 2 || h[0].Code != codes.Unavailable || h[1].Code != codes.Unavailable {
			t.Errorf("hedge events = %+v, want two, each after UNAVAILABLE", h)
		}
	})
}

func TestHedgeAllFailReturnsLastStatus(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := newHedgeBench(t, interceptor.WithConfig(hedgeConfig(t, 3, time.Second, "")))
		err := b.get(&testingv1.Script{Key: "k", FailAttempts: 3, Message: "down"})
		if status.Code(err) != codes.Unavailable || status.Convert(err).Message() != "down" {
			t.Fatalf("err = %v, want UNAVAILABLE: down", err)
		}
		if n := interceptor.Attempts(err); n != 3 {
			t.Errorf("Attempts = %d, want 3", n)
		}
		if e := b.hooks.last(); e.Kind != interceptor.EventGiveUp || e.Reason != policy.ReasonAttempts || e.Attempt != 3 {
			t.Errorf("last event = %+v, want give up (attempts) on attempt 3", e)
		}
	})
}

// hedgeMaxAttemptsTests are the cases of TestHedgeMaxAttempts and
// TestHedgedStreamMaxAttempts: maxAttempts in the file, the hedging delay,
// the attempts the server sees and the gaps between them.
var hedgeMaxAttemptsTests = []struct {
	name     string
	file     int
	delay    time.Duration
	want     int
	wantGaps []time.Duration
}{
	{"every delay", 3, 100 * time.Millisecond, 3, []time.Duration{100 * time.Millisecond, 100 * time.Millisecond}},
	{"zero delay sends all at once", 4, 0, 4, []time.Duration{0, 0, 0}},
	{"file above the cap of 5", 9, 10 * time.Millisecond, 5, []time.Duration{10 * time.Millisecond, 10 * time.Millisecond, 10 * time.Millisecond, 10 * time.Millisecond}},
}

func TestHedgeMaxAttempts(t *testing.T) {
	for _, tt := range hedgeMaxAttemptsTests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				b := newHedgeBench(t, interceptor.WithConfig(hedgeConfig(t, tt.file, tt.delay, "")))
				if err := b.get(&testingv1.Script{Key: "k", Delay: durationpb.New(time.Second)}); err != nil {
					t.Fatalf("Get: %v", err)
				}
				synctest.Wait()
				recs := b.srv.Attempts("k")
				if len(recs) != tt.want {
					t.Fatalf("server saw %d attempts, want %d", len(recs), tt.want)
				}
				if g := gaps(recs); !equalDurations(g, tt.wantGaps) {
					t.Errorf("gaps = %v, want %v", g, tt.wantGaps)
				}
				// Attempts sent at the same instant may arrive in any order.
				seen := map[string]bool{}
				for _, got := range previousAttempts(recs) {
					seen[got] = true
				}
				for i := 0; i < tt.want; i++ {
					want := ""
					if i > 0 {
						want = strconv.Itoa(i)
					}
					if !seen[want] {
						t.Errorf("no attempt with grpc-previous-rpc-attempts %q; got %q", want, previousAttempts(recs))
					}
				}
				if tt.delay == 0 {
					return
				}
				// The first attempt wins (all are equally slow, it left first);
				// the others are cancelled.
				for i, r := range recs[1:] {
					if !r.Cancelled {
						t.Errorf("attempt %d not cancelled: %+v", i+2, r)
					}
				}
			})
		})
	}
}

// refusingBudget allows the first `allow` requests and refuses the rest
// (math.MaxInt: a log that admits everything), keeping the requests asked
// and the attempts told.
type refusingBudget struct {
	mu       sync.Mutex
	allow    int
	asked    []budget.Request
	recorded []budget.Attempt
}

func (r *refusingBudget) Record(a budget.Attempt) {
	r.mu.Lock()
	r.recorded = append(r.recorded, a)
	r.mu.Unlock()
}

func (r *refusingBudget) Allow(q budget.Request) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.asked = append(r.asked, q)
	if r.allow > 0 {
		r.allow--
		return true
	}
	return false
}

func (r *refusingBudget) State() budget.State { return budget.State{Kind: "test"} }

// take returns the attempts told and the requests asked, and forgets them.
func (r *refusingBudget) take() ([]budget.Attempt, []budget.Request) {
	r.mu.Lock()
	defer r.mu.Unlock()
	a, q := r.recorded, r.asked
	r.recorded, r.asked = nil, nil
	return a, q
}

func TestHedgeBudgetRefusalLimitsHedges(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		bud := &refusingBudget{allow: 1}
		b := newHedgeBench(t, interceptor.WithConfig(hedgeConfig(t, 5, 100*time.Millisecond, "")), interceptor.WithBudget(bud))
		// Every attempt takes 1s: the first, and the one hedge the budget
		// allows, stay in flight after the refusal; the first wins.
		if err := b.get(&testingv1.Script{Key: "k", Delay: durationpb.New(time.Second)}); err != nil {
			t.Fatalf("Get: %v", err)
		}
		synctest.Wait()
		if n := len(b.srv.Attempts("k")); n != 2 {
			t.Errorf("server saw %d attempts, want 2", n)
		}
		bud.mu.Lock()
		defer bud.mu.Unlock()
		want := []budget.Request{{Number: 2, Hedge: true}, {Number: 3, Hedge: true}}
		if fmt.Sprint(bud.asked) != fmt.Sprint(want) {
			t.Errorf("budget asked %+v, want %+v", bud.asked, want)
		}
		wantRec := []budget.Attempt{{Number: 1, Outcome: budget.Success}, {Number: 2, Outcome: budget.Other, Hedge: true}}
		if fmt.Sprint(bud.recorded) != fmt.Sprint(wantRec) {
			t.Errorf("budget recorded %+v, want %+v", bud.recorded, wantRec)
		}
		stops := b.hooks.kinds(interceptor.EventHedgeStop)
		if len(stops) != 1 || stops[0].Reason != policy.ReasonBudget || stops[0].Attempt != 3 {
			t.Errorf("hedge-stop events = %+v, want one, budget, attempt 3", stops)
		}
	})
}

func TestHedgeNoGoroutineLeftBehind(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := newHedgeBench(t, interceptor.WithConfig(hedgeConfig(t, 5, 0, "")))
		for _, sc := range []*testingv1.Script{
			{Key: "win", AttemptDelays: durations(time.Second, time.Second, 10*time.Millisecond, time.Second, time.Second)},
			{Key: "fatal", FailAttempts: 5, Code: int32(codes.Internal), AttemptDelays: durations(time.Second, 10*time.Millisecond, time.Second, time.Second, time.Second)},
		} {
			_ = b.get(sc)
			// Checked at once, before the server or the clock move on: every
			// attempt has returned to stagger before the call returned.
			if n := b.inFlight.n.Load(); n != 0 {
				t.Errorf("%s: %d attempts still running after the call returned", sc.Key, n)
			}
		}
		ctx, cancel := context.WithCancel(context.Background())
		go func() {
			time.Sleep(50 * time.Millisecond)
			cancel()
		}()
		_, err := b.client.Get(ctx, &testingv1.GetRequest{Script: &testingv1.Script{Key: "cancel", Delay: durationpb.New(time.Second)}})
		if status.Code(err) != codes.Canceled {
			t.Errorf("cancelled call: code = %v, want Canceled", status.Code(err))
		}
		if n := b.inFlight.n.Load(); n != 0 {
			t.Errorf("cancelled call: %d attempts still running after it returned", n)
		}
	})
}

func TestHedgeNotIdempotentRunsOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := newHedgeBench(t, interceptor.WithConfig(hedgeConfig(t, 3, 10*time.Millisecond, "")))
		for i := 0; i < 2; i++ {
			key := fmt.Sprintf("w%d", i)
			_, err := b.client.Write(context.Background(), &testingv1.WriteRequest{Script: &testingv1.Script{Key: key, Delay: durationpb.New(time.Second)}})
			if err != nil {
				t.Fatalf("Write: %v", err)
			}
			if n := len(b.srv.Attempts(key)); n != 1 {
				t.Errorf("call %d: server saw %d attempts of Write, want 1", i, n)
			}
		}
		notices := b.hooks.kinds(interceptor.EventNotice)
		if len(notices) != 1 || notices[0].Reason != policy.ReasonNotIdempotent || !notices[0].Hedging || notices[0].Method != writeMethod {
			t.Errorf("notices = %+v, want one, not idempotent, hedging, for Write", notices)
		}
		// The call option marks it idempotent: hedged.
		_, err := b.client.Write(context.Background(), &testingv1.WriteRequest{Script: &testingv1.Script{Key: "w-idem", Delay: durationpb.New(time.Second)}}, interceptor.Idempotent())
		if err != nil {
			t.Fatalf("Write: %v", err)
		}
		synctest.Wait()
		if n := len(b.srv.Attempts("w-idem")); n != 3 {
			t.Errorf("Write with Idempotent(): server saw %d attempts, want 3", n)
		}
	})
}

func TestHedgePushback(t *testing.T) {
	tests := []struct {
		name      string
		pushback  []string
		wantCode  codes.Code
		wantCount int
		wantGaps  []time.Duration
		wantStop  policy.Reason
	}{
		{"valid pushback delays the next hedge", []string{"300"}, codes.OK, 2, []time.Duration{300 * time.Millisecond}, policy.ReasonNone},
		{"negative pushback stops hedging", []string{"-1"}, codes.Unavailable, 1, nil, policy.ReasonPushback},
		{"malformed pushback stops hedging", []string{"soon"}, codes.Unavailable, 1, nil, policy.ReasonPushback},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				b := newHedgeBench(t, interceptor.WithConfig(hedgeConfig(t, 3, time.Second, "")))
				err := b.get(&testingv1.Script{Key: "k", FailAttempts: 1, Pushback: tt.pushback})
				if status.Code(err) != tt.wantCode {
					t.Fatalf("code = %v, want %v (err %v)", status.Code(err), tt.wantCode, err)
				}
				recs := b.srv.Attempts("k")
				if len(recs) != tt.wantCount {
					t.Fatalf("server saw %d attempts, want %d", len(recs), tt.wantCount)
				}
				if g := gaps(recs); !equalDurations(g, tt.wantGaps) {
					t.Errorf("gaps = %v, want %v", g, tt.wantGaps)
				}
				if tt.wantStop != policy.ReasonNone {
					stops := b.hooks.kinds(interceptor.EventHedgeStop)
					if len(stops) != 1 || stops[0].Reason != tt.wantStop {
						t.Errorf("hedge-stop events = %+v, want one, %v", stops, tt.wantStop)
					}
					if e := b.hooks.last(); e.Kind != interceptor.EventGiveUp || e.Reason != tt.wantStop {
						t.Errorf("last event = %+v, want give up (%v)", e, tt.wantStop)
					}
				} else if h := b.hooks.kinds(interceptor.EventHedge); len(h) != 1 || !h[0].Pushback || h[0].Pause != 300*time.Millisecond {
					t.Errorf("hedge events = %+v, want one after a 300ms pushback", h)
				}
			})
		})
	}
}

func TestHedgeDeadlineAware(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := newHedgeBench(t, interceptor.WithConfig(hedgeConfig(t, 3, time.Second, "")))
		ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
		defer cancel()
		// Attempt 1 fails at once with a pushback of 600ms: the hedge could
		// not leave before the deadline, so the call returns the real status
		// now rather than DEADLINE_EXCEEDED later.
		start := time.Now()
		_, err := b.client.Get(ctx, &testingv1.GetRequest{Script: &testingv1.Script{Key: "k", FailAttempts: 1, Pushback: []string{"600"}}})
		if status.Code(err) != codes.Unavailable || time.Since(start) != 0 {
			t.Errorf("err = %v after %v, want UNAVAILABLE at once", err, time.Since(start))
		}
		if e := b.hooks.last(); e.Kind != interceptor.EventGiveUp || e.Reason != policy.ReasonDeadline {
			t.Errorf("last event = %+v, want give up (deadline)", e)
		}
	})
}

func TestHedgeAdaptiveDelay(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := newHedgeBench(t, interceptor.WithConfig(hedgeConfig(t, 2, time.Second, `, "adaptive": true`)))
		// Until 20 calls are seen the policy's 1s delay applies.
		for i := 0; i < 20; i++ {
			if err := b.get(&testingv1.Script{Delay: durationpb.New(20 * time.Millisecond)}); err != nil {
				t.Fatalf("Get: %v", err)
			}
		}
		if h := b.hooks.kinds(interceptor.EventHedge); len(h) != 0 {
			t.Fatalf("hedges while learning: %+v", h)
		}
		// Now p95 is 20ms, reported as its bucket's upper bound (at most
		// 25% above): the slow call is hedged after that, not after 1s.
		if err := b.get(&testingv1.Script{Key: "slow", AttemptDelays: durations(10*time.Second, 20*time.Millisecond)}); err != nil {
			t.Fatalf("Get: %v", err)
		}
		g := gaps(b.srv.Attempts("slow"))
		if len(g) != 1 || g[0] < 20*time.Millisecond || g[0] > 25*time.Millisecond {
			t.Errorf("hedge sent after %v, want the p95 of 20ms (20ms to 25ms)", g)
		}
	})
}

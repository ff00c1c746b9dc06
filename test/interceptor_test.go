//go:build go1.25

// The one //go:debug line of the package's tests (a second one anywhere in
// the package's _test.go files breaks the build): synctest needs the Go 1.23
// timer channels while go.mod says go 1.22. It lives in a go1.25 file because
// older toolchains reject the setting's name.
//
//go:debug asynctimerchan=0

package test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors/retry"
	"github.com/stagger-go/stagger"
	"github.com/stagger-go/stagger/budget"
	"github.com/stagger-go/stagger/interceptor"
	"github.com/stagger-go/stagger/policy"
	testingv1 "github.com/stagger-go/stagger/proto/stagger/testing/v1"
	"github.com/stagger-go/stagger/testserver"
)

// The end-to-end tests run real gRPC over bufconn against testserver inside a
// testing/synctest bubble: time is virtual, so pauses are asserted exactly
// from the server's arrival times, and no test sleeps.

const (
	getMethod   = testingv1.TestService_Get_FullMethodName
	putMethod   = testingv1.TestService_Put_FullMethodName
	writeMethod = testingv1.TestService_Write_FullMethodName
)

// retryFile retries UNAVAILABLE up to 4 attempts with pauses of exactly 1s,
// 2s, 4s (no jitter), for every method of the test service.
const retryFile = `{"methodConfig": [{
	"name": [{"service": "stagger.testing.v1.TestService"}],
	"retryPolicy": {"maxAttempts": 4, "initialBackoff": "1s", "maxBackoff": "10s",
		"backoffMultiplier": 2, "retryableStatusCodes": ["UNAVAILABLE"], "jitter": "NONE"}
}]}`

func parse(t *testing.T, file string) *policy.Config {
	t.Helper()
	cfg, err := policy.ParseConfig([]byte(file))
	if err != nil {
		t.Fatalf("ParseConfig: %v", err)
	}
	return cfg
}

// bench is one server and one client connection with stagger's unary
// interceptor built from opts, then the extra dial options.
type bench struct {
	srv    *testserver.Server
	client testingv1.TestServiceClient
	cc     *grpc.ClientConn
}

func newBench(t *testing.T, opts []interceptor.Option, dial ...grpc.DialOption) *bench {
	t.Helper()
	srv := testserver.New()
	t.Cleanup(srv.Close)
	all := append([]grpc.DialOption{
		grpc.WithChainUnaryInterceptor(interceptor.UnaryClientInterceptor(opts...)),
		grpc.WithDisableRetry(),
	}, dial...)
	cc := srv.ClientConn(t, all...)
	return &bench{srv: srv, client: testingv1.NewTestServiceClient(cc), cc: cc}
}

// get calls Get with the script sc, keyed by the test's name.
func (b *bench) get(ctx context.Context, sc *testingv1.Script, opts ...grpc.CallOption) error {
	_, err := b.client.Get(ctx, &testingv1.GetRequest{Script: sc}, opts...)
	return err
}

func (b *bench) attempts(t *testing.T, key string) []testserver.AttemptRecord {
	t.Helper()
	return b.srv.Attempts(key)
}

// gaps returns the time between consecutive arrivals.
func gaps(recs []testserver.AttemptRecord) []time.Duration {
	var out []time.Duration
	for i := 1; i < len(recs); i++ {
		out = append(out, recs[i].Arrived.Sub(recs[i-1].Arrived))
	}
	return out
}

func equalDurations(a, b []time.Duration) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// hookLog collects events.
type hookLog struct {
	mu     sync.Mutex
	events []interceptor.Event
}

func (h *hookLog) hook(e interceptor.Event) {
	h.mu.Lock()
	h.events = append(h.events, e)
	h.mu.Unlock()
}

func (h *hookLog) all() []interceptor.Event {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]interceptor.Event(nil), h.events...)
}

// kinds returns the events of kind k.
func (h *hookLog) kinds(k interceptor.EventKind) []interceptor.Event {
	var out []interceptor.Event
	for _, e := range h.all() {
		if e.Kind == k {
			out = append(out, e)
		}
	}
	return out
}

// last returns the last event, or a zero one.
func (h *hookLog) last() interceptor.Event {
	ev := h.all()
	if len(ev) == 0 {
		return interceptor.Event{}
	}
	return ev[len(ev)-1]
}

func TestAttemptsCountedAndPreviousAttemptsHeader(t *testing.T) {
	tests := []struct {
		name         string
		failAttempts int32
		wantAttempts int
		wantCode     codes.Code
		wantHeaders  []string
		wantGaps     []time.Duration
	}{
		{"success at once", 0, 1, codes.OK, []string{""}, nil},
		{"two failures then success", 2, 3, codes.OK, []string{"", "1", "2"}, []time.Duration{time.Second, 2 * time.Second}},
		{"every attempt fails", 10, 4, codes.Unavailable, []string{"", "1", "2", "3"}, []time.Duration{time.Second, 2 * time.Second, 4 * time.Second}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				var h hookLog
				b := newBench(t, []interceptor.Option{interceptor.WithConfig(parse(t, retryFile)), interceptor.WithHook(h.hook)})
				err := b.get(context.Background(), &testingv1.Script{Key: "k", FailAttempts: tt.failAttempts})
				if got := status.Code(err); got != tt.wantCode {
					t.Fatalf("code = %v, want %v (err %v)", got, tt.wantCode, err)
				}
				recs := b.attempts(t, "k")
				if len(recs) != tt.wantAttempts {
					t.Fatalf("server saw %d attempts, want %d", len(recs), tt.wantAttempts)
				}
				for i, r := range recs {
					if r.PreviousAttempts != tt.wantHeaders[i] {
						t.Errorf("attempt %d: grpc-previous-rpc-attempts = %q, want %q", i+1, r.PreviousAttempts, tt.wantHeaders[i])
					}
				}
				if g := gaps(recs); !equalDurations(g, tt.wantGaps) {
					t.Errorf("pauses = %v, want %v", g, tt.wantGaps)
				}
				if err != nil {
					if n := interceptor.Attempts(err); n != tt.wantAttempts {
						t.Errorf("Attempts(err) = %d, want %d", n, tt.wantAttempts)
					}
					if e := h.last(); e.Kind != interceptor.EventGiveUp || e.Reason != policy.ReasonAttempts || e.Attempt != tt.wantAttempts {
						t.Errorf("last event = %+v, want give up, reason attempts, attempt %d", e, tt.wantAttempts)
					}
				}
				retries := 0
				for _, e := range h.all() {
					if e.Kind == interceptor.EventRetry {
						retries++
						if e.Method != getMethod || e.Code != codes.Unavailable || e.Pause != time.Duration(1<<(retries-1))*time.Second {
							t.Errorf("retry event %d = %+v", retries, e)
						}
					}
				}
				if retries != tt.wantAttempts-1 {
					t.Errorf("%d retry events, want %d", retries, tt.wantAttempts-1)
				}
			})
		})
	}
}

func TestRetryOnlyPolicyCodes(t *testing.T) {
	fileABORTED := `{"methodConfig": [{"name": [{"service": "stagger.testing.v1.TestService"}],
		"retryPolicy": {"maxAttempts": 3, "initialBackoff": "0.1s", "maxBackoff": "1s",
		"backoffMultiplier": 2, "retryableStatusCodes": ["ABORTED"]}}]}`
	inCode := policy.Policy{MaxAttempts: 3, Backoff: policy.Backoff{Initial: 100 * time.Millisecond, Max: time.Second, Multiplier: 2}}
	tests := []struct {
		name         string
		opt          interceptor.Option
		code         codes.Code
		wantAttempts int
	}{
		{"file lists ABORTED: ABORTED retried", interceptor.WithConfig(parse(t, fileABORTED)), codes.Aborted, 3},
		{"file lists ABORTED: UNAVAILABLE not retried", interceptor.WithConfig(parse(t, fileABORTED)), codes.Unavailable, 1},
		{"file: INVALID_ARGUMENT not retried", interceptor.WithConfig(parse(t, retryFile)), codes.InvalidArgument, 1},
		{"default codes: UNAVAILABLE retried", interceptor.WithPolicy(inCode), codes.Unavailable, 3},
		{"default codes: server RESOURCE_EXHAUSTED retried", interceptor.WithPolicy(inCode), codes.ResourceExhausted, 3},
		{"default codes: INTERNAL not retried", interceptor.WithPolicy(inCode), codes.Internal, 1},
		{"default codes: DEADLINE_EXCEEDED from the server not retried", interceptor.WithPolicy(inCode), codes.DeadlineExceeded, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				var h hookLog
				b := newBench(t, []interceptor.Option{tt.opt, interceptor.WithHook(h.hook)})
				err := b.get(context.Background(), &testingv1.Script{Key: "k", FailAttempts: 10, Code: int32(tt.code)})
				if status.Code(err) != tt.code {
					t.Fatalf("code = %v, want %v", status.Code(err), tt.code)
				}
				if n := len(b.attempts(t, "k")); n != tt.wantAttempts {
					t.Fatalf("server saw %d attempts, want %d", n, tt.wantAttempts)
				}
				want := policy.ReasonAttempts
				if tt.wantAttempts == 1 {
					want = policy.ReasonNotRetryable
				}
				if e := h.last(); e.Kind != interceptor.EventGiveUp || e.Reason != want {
					t.Errorf("last event = %+v, want give up with reason %v", e, want)
				}
			})
		})
	}
}

func TestCommittedAttemptNotRetried(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var h hookLog
		b := newBench(t, []interceptor.Option{interceptor.WithConfig(parse(t, retryFile)), interceptor.WithHook(h.hook)})
		var header metadata.MD
		err := b.get(context.Background(), &testingv1.Script{Key: "k", FailAttempts: 1, HeadersFirst: true}, grpc.Header(&header))
		if status.Code(err) != codes.Unavailable {
			t.Fatalf("code = %v, want UNAVAILABLE", status.Code(err))
		}
		recs := b.attempts(t, "k")
		if len(recs) != 1 || !recs[0].HeadersSent {
			t.Fatalf("server saw %+v, want one attempt that sent headers", recs)
		}
		if e := h.last(); e.Reason != policy.ReasonCommitted {
			t.Errorf("reason = %v, want committed", e.Reason)
		}
		// The caller's own Header option still receives the headers.
		if got := header.Get(testserver.HeadersFirstHeader); len(got) != 1 {
			t.Errorf("caller's header = %v, want %s", header, testserver.HeadersFirstHeader)
		}
		// Without headers first, the same failure is retried.
		if err := b.get(context.Background(), &testingv1.Script{Key: "k2", FailAttempts: 1}); err != nil {
			t.Fatalf("Trailers-Only failure then success: %v", err)
		}
	})
}

// A unary call with an idempotency key is not committed by headers: the
// application has seen nothing of the attempt, and the key lets the server
// replay. The same failure after headers is retried, on the same key.
func TestKeyedUnaryCallNotCommitted(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := newBench(t, []interceptor.Option{interceptor.WithConfig(parse(t, retryFile)), interceptor.WithIdempotencyKey(interceptor.DefaultIdempotencyHeader)})
		var header metadata.MD
		if err := b.get(context.Background(), &testingv1.Script{Key: "k", FailAttempts: 1, HeadersFirst: true}, grpc.Header(&header)); err != nil {
			t.Fatalf("keyed call, failure after headers then success: %v", err)
		}
		recs := b.attempts(t, "k")
		if len(recs) != 2 || !recs[0].HeadersSent || recs[0].IdempotencyKey == "" || recs[1].IdempotencyKey != recs[0].IdempotencyKey {
			t.Fatalf("server saw %+v, want two attempts with headers sent, one key", recs)
		}
		// The caller's Header option holds the last attempt's headers.
		if got := header.Get(testserver.HeadersFirstHeader); len(got) != 1 {
			t.Errorf("caller's header = %v, want %s", header, testserver.HeadersFirstHeader)
		}
	})
}

func TestPushback(t *testing.T) {
	ceiling := policy.Policy{MaxAttempts: 3, PushbackCeiling: 2 * time.Second,
		Backoff: policy.Backoff{Initial: time.Second, Max: time.Second, Multiplier: 1, Jitter: policy.JitterNone}}
	tests := []struct {
		name       string
		pushback   []string
		retryInfo  time.Duration
		wantGaps   []time.Duration
		wantReason policy.Reason
	}{
		{"valid: exact wait", []string{"2000"}, 0, []time.Duration{2 * time.Second, 2 * time.Second}, policy.ReasonAttempts},
		{"zero: at once", []string{"0"}, 0, []time.Duration{0, 0}, policy.ReasonAttempts},
		{"RetryInfo detail", nil, 1500 * time.Millisecond, []time.Duration{1500 * time.Millisecond, 1500 * time.Millisecond}, policy.ReasonAttempts},
		{"negative stops", []string{"-1"}, 0, nil, policy.ReasonPushback},
		{"malformed stops", []string{"x"}, 0, nil, policy.ReasonPushback},
		{"repeated stops", []string{"1", "2"}, 0, nil, policy.ReasonPushback},
		{"above the ceiling stops", []string{"2001"}, 0, nil, policy.ReasonPushback},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				var h hookLog
				b := newBench(t, []interceptor.Option{interceptor.WithPolicy(ceiling), interceptor.WithHook(h.hook)})
				sc := &testingv1.Script{Key: "k", FailAttempts: 10, Pushback: tt.pushback}
				if tt.retryInfo > 0 {
					sc.RetryInfoDelay = durationpb.New(tt.retryInfo)
				}
				err := b.get(context.Background(), sc)
				if status.Code(err) != codes.Unavailable {
					t.Fatalf("code = %v, want UNAVAILABLE", status.Code(err))
				}
				if g := gaps(b.attempts(t, "k")); !equalDurations(g, tt.wantGaps) {
					t.Errorf("pauses = %v, want %v", g, tt.wantGaps)
				}
				if e := h.last(); e.Reason != tt.wantReason {
					t.Errorf("reason = %v, want %v", e.Reason, tt.wantReason)
				}
			})
		})
	}
}

func TestPushbackRestartsBackoff(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := policy.Policy{MaxAttempts: 5, Backoff: policy.Backoff{Initial: time.Second, Max: time.Minute, Multiplier: 3, Jitter: policy.JitterNone}}
		b := newBench(t, []interceptor.Option{interceptor.WithPolicy(p)})
		// Every failure carries a 500 ms pushback: each pause is exactly the
		// pushback, never the backoff's, which would grow 1s, 3s, 9s.
		if err := b.get(context.Background(), &testingv1.Script{Key: "k", FailAttempts: 4, Pushback: []string{"500"}}); err != nil {
			t.Fatalf("call: %v", err)
		}
		want := []time.Duration{500 * time.Millisecond, 500 * time.Millisecond, 500 * time.Millisecond, 500 * time.Millisecond}
		if g := gaps(b.attempts(t, "k")); !equalDurations(g, want) {
			t.Errorf("pauses = %v, want %v", g, want)
		}
	})
}

func TestDeadlineAware(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var h hookLog
		b := newBench(t, []interceptor.Option{interceptor.WithConfig(parse(t, retryFile)), interceptor.WithHook(h.hook)})
		// Pauses are 1s then 2s: the first fits in 2.5s, the second does not.
		ctx, cancel := context.WithTimeout(context.Background(), 2500*time.Millisecond)
		defer cancel()
		start := time.Now()
		err := b.get(ctx, &testingv1.Script{Key: "k", FailAttempts: 10, Message: "shard 7 is down"})
		if took := time.Since(start); took != time.Second {
			t.Errorf("call took %v, want 1s: it must not sleep towards the deadline", took)
		}
		st, _ := status.FromError(err)
		if st.Code() != codes.Unavailable || st.Message() != "shard 7 is down" {
			t.Errorf("status = %v %q, want the server's UNAVAILABLE and message", st.Code(), st.Message())
		}
		if n := len(b.attempts(t, "k")); n != 2 {
			t.Errorf("server saw %d attempts, want 2", n)
		}
		if e := h.last(); e.Reason != policy.ReasonDeadline {
			t.Errorf("reason = %v, want deadline", e.Reason)
		}
	})
}

func TestCancelEndsPause(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var h hookLog
		b := newBench(t, []interceptor.Option{interceptor.WithConfig(parse(t, retryFile)), interceptor.WithHook(h.hook)})
		cancelInPause(t, b, 0)
		if e := h.last(); e.Reason != policy.ReasonCaller || e.Kind != interceptor.EventGiveUp {
			t.Errorf("last event = %+v, want give up, reason caller", e)
		}
	})
}

// cancelInPause calls key "k", which fails every attempt, cancels the call
// after into its first pause (in a synctest bubble), and checks that it
// returned CANCELED at once, after one attempt.
func cancelInPause(t *testing.T, b *bench, after time.Duration, opts ...grpc.CallOption) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- b.get(ctx, &testingv1.Script{Key: "k", FailAttempts: 10}, opts...) }()
	if _, err := b.srv.AwaitAttempts(context.Background(), "k", 1); err != nil {
		t.Fatal(err)
	}
	synctest.Wait() // the client is in its pause
	time.Sleep(after)
	at := time.Now()
	cancel()
	err := <-done
	if took := time.Since(at); took != 0 {
		t.Errorf("call returned %v after cancel, want at once", took)
	}
	if status.Code(err) != codes.Canceled {
		t.Errorf("code = %v, want CANCELED", status.Code(err))
	}
	if n := len(b.attempts(t, "k")); n != 1 {
		t.Errorf("server saw %d attempts, want 1", n)
	}
}

// perAttemptFile cuts attempts of every method off after 1s, pauses 100ms.
const perAttemptFile = `{"methodConfig": [{
	"name": [{"service": "stagger.testing.v1.TestService"}],
	"retryPolicy": {"maxAttempts": 3, "initialBackoff": "0.1s", "maxBackoff": "0.1s",
		"backoffMultiplier": 1, "retryableStatusCodes": ["UNAVAILABLE"], "jitter": "NONE",
		"perAttemptRecvTimeout": "1s"}
}]}`

func TestPerAttemptTimeout(t *testing.T) {
	slowFirst := []*durationpb.Duration{durationpb.New(5 * time.Second), durationpb.New(0)}
	tests := []struct {
		name     string
		method   string
		callOpts []grpc.CallOption
		deadline time.Duration // the caller's own; 0: none
		wantCode codes.Code
		wantGaps []time.Duration // between arrivals
		notice   bool
	}{
		{"idempotent by proto: cut off and retried", getMethod, nil, 0, codes.OK, []time.Duration{1100 * time.Millisecond}, false},
		{"IDEMPOTENT by proto", putMethod, nil, 0, codes.OK, []time.Duration{1100 * time.Millisecond}, false},
		{"not idempotent: runs without the timer", writeMethod, nil, 0, codes.OK, nil, true},
		{"not idempotent, marked per call", writeMethod, []grpc.CallOption{interceptor.Idempotent()}, 0, codes.OK, []time.Duration{1100 * time.Millisecond}, false},
		{"caller's deadline is never retried", getMethod, nil, 500 * time.Millisecond, codes.DeadlineExceeded, nil, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				var h hookLog
				b := newBench(t, []interceptor.Option{interceptor.WithConfig(parse(t, perAttemptFile)), interceptor.WithHook(h.hook)})
				ctx := context.Background()
				if tt.deadline > 0 {
					var cancel context.CancelFunc
					ctx, cancel = context.WithTimeout(ctx, tt.deadline)
					defer cancel()
				}
				sc := &testingv1.Script{Key: "k", AttemptDelays: slowFirst}
				var err error
				switch tt.method {
				case getMethod:
					_, err = b.client.Get(ctx, &testingv1.GetRequest{Script: sc}, tt.callOpts...)
				case putMethod:
					_, err = b.client.Put(ctx, &testingv1.PutRequest{Script: sc}, tt.callOpts...)
				case writeMethod:
					_, err = b.client.Write(ctx, &testingv1.WriteRequest{Script: sc}, tt.callOpts...)
				}
				if status.Code(err) != tt.wantCode {
					t.Fatalf("code = %v, want %v (%v)", status.Code(err), tt.wantCode, err)
				}
				synctest.Wait() // let the server record the cut-off attempt's end
				recs := b.attempts(t, "k")
				if g := gaps(recs); !equalDurations(g, tt.wantGaps) {
					t.Errorf("pauses between arrivals = %v, want %v", g, tt.wantGaps)
				}
				if len(recs) > 1 && !recs[0].Cancelled {
					t.Errorf("first attempt %+v, want cancelled by the per-attempt timer", recs[0])
				}
				var notices int
				for _, e := range h.all() {
					if e.Kind == interceptor.EventNotice {
						notices++
						if e.Reason != policy.ReasonNotIdempotent || e.Method != tt.method {
							t.Errorf("notice = %+v", e)
						}
					}
				}
				if want := map[bool]int{true: 1, false: 0}[tt.notice]; notices != want {
					t.Errorf("%d notices, want %d", notices, want)
				}
				if tt.notice {
					// Said once per method, not once per call.
					if _, err := b.client.Write(ctx, &testingv1.WriteRequest{Script: &testingv1.Script{}}); err != nil {
						t.Fatal(err)
					}
					for _, e := range h.all()[1:] {
						if e.Kind == interceptor.EventNotice {
							t.Errorf("second notice for the same method: %+v", e)
						}
					}
				}
				if tt.deadline > 0 {
					if e := h.last(); e.Reason != policy.ReasonCaller {
						t.Errorf("reason = %v, want caller", e.Reason)
					}
				}
			})
		})
	}
}

func TestLocalResourceExhaustedNotRetried(t *testing.T) {
	file := `{"methodConfig": [{"name": [{"service": "stagger.testing.v1.TestService"}],
		"maxRequestMessageBytes": 1024, "maxResponseMessageBytes": 1024,
		"retryPolicy": {"maxAttempts": 3, "initialBackoff": "0.1s", "maxBackoff": "1s",
		"backoffMultiplier": 2, "retryableStatusCodes": ["RESOURCE_EXHAUSTED"]}}]}`
	synctest.Test(t, func(t *testing.T) {
		var h hookLog
		b := newBench(t, []interceptor.Option{interceptor.WithConfig(parse(t, file)), interceptor.WithHook(h.hook)})
		// A request over the file's limit: grpc-go refuses to send it.
		_, err := b.client.Put(context.Background(), &testingv1.PutRequest{Script: &testingv1.Script{Key: "req"}, Payload: make([]byte, 4096)})
		if status.Code(err) != codes.ResourceExhausted {
			t.Fatalf("code = %v, want RESOURCE_EXHAUSTED (%v)", status.Code(err), err)
		}
		if n := interceptor.Attempts(err); n != 1 {
			t.Errorf("local RESOURCE_EXHAUSTED on send: %d attempts, want 1", n)
		}
		if e := h.last(); e.Reason != policy.ReasonNotRetryable {
			t.Errorf("reason = %v, want not retryable", e.Reason)
		}
		// A response over the limit: grpc-go raises it after the response
		// arrived (so the attempt is committed too).
		err = b.get(context.Background(), &testingv1.Script{Key: "resp", PayloadBytes: 4096})
		if status.Code(err) != codes.ResourceExhausted {
			t.Fatalf("code = %v, want RESOURCE_EXHAUSTED (%v)", status.Code(err), err)
		}
		if n := len(b.attempts(t, "resp")); n != 1 {
			t.Errorf("local RESOURCE_EXHAUSTED on receive: server saw %d attempts, want 1", n)
		}
		// The server's own RESOURCE_EXHAUSTED is retried, as the file lists it.
		err = b.get(context.Background(), &testingv1.Script{Key: "server", FailAttempts: 2, Code: int32(codes.ResourceExhausted)})
		if err != nil {
			t.Fatalf("server RESOURCE_EXHAUSTED twice then success: %v", err)
		}
		if n := len(b.attempts(t, "server")); n != 3 {
			t.Errorf("server RESOURCE_EXHAUSTED: %d attempts, want 3", n)
		}
	})
}

// A file's budget lives in the interceptors' State (interceptor.State), one
// per target: interceptors given one State share it across methods and
// connections, whichever Config of the same settings they follow; without
// a shared State each set of interceptors has its own, as grpc-go keeps
// one throttle per channel.
func TestBudgetSharedAcrossMethodsAndConnections(t *testing.T) {
	// A6 throttle of 10 tokens: retries allowed while tokens > 5; each
	// failure takes one.
	file := `{"methodConfig": [{"name": [{"service": "stagger.testing.v1.TestService"}],
		"retryPolicy": {"maxAttempts": 5, "initialBackoff": "0.1s", "maxBackoff": "0.1s",
		"backoffMultiplier": 1, "retryableStatusCodes": ["UNAVAILABLE"]}}],
		"retryThrottling": {"maxTokens": 10, "tokenRatio": 0.1}}`
	tests := []struct {
		name string
		// second returns the second interceptor's options, given the
		// first's Config and State.
		second     func(t *testing.T, cfg *policy.Config, st *interceptor.State) []interceptor.Option
		wantSecond int
		wantReason policy.Reason
	}{
		{"same State shares the budget", func(_ *testing.T, cfg *policy.Config, st *interceptor.State) []interceptor.Option {
			return []interceptor.Option{interceptor.WithConfig(cfg), interceptor.WithState(st)}
		}, 1, policy.ReasonBudget},
		{"same State, a Config parsed again: the same settings, the same budget", func(t *testing.T, _ *policy.Config, st *interceptor.State) []interceptor.Option {
			return []interceptor.Option{interceptor.WithConfig(parse(t, file)), interceptor.WithState(st)}
		}, 1, policy.ReasonBudget},
		{"same Config, a State of its own: its own budget", func(_ *testing.T, cfg *policy.Config, _ *interceptor.State) []interceptor.Option {
			return []interceptor.Option{interceptor.WithConfig(cfg)}
		}, 5, policy.ReasonAttempts},
		{"WithBudget(nil) overrides: unlimited", func(_ *testing.T, cfg *policy.Config, st *interceptor.State) []interceptor.Option {
			return []interceptor.Option{interceptor.WithConfig(cfg), interceptor.WithState(st), interceptor.WithBudget(nil)}
		}, 5, policy.ReasonAttempts},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				cfg := parse(t, file)
				st := interceptor.NewState()
				b1 := newBench(t, []interceptor.Option{interceptor.WithConfig(cfg), interceptor.WithState(st)})
				// Call 1 (Get, connection 1): 5 failed attempts, tokens 10 -> 5.
				if err := b1.get(context.Background(), &testingv1.Script{Key: "a", FailAttempts: 10}); status.Code(err) != codes.Unavailable {
					t.Fatalf("first call: %v", err)
				}
				if n := len(b1.attempts(t, "a")); n != 5 {
					t.Fatalf("first call made %d attempts, want 5", n)
				}
				var h hookLog
				b2 := newBench(t, append(tt.second(t, cfg, st), interceptor.WithHook(h.hook)))
				// Call 2: another method on another connection and interceptor.
				_, err := b2.client.Put(context.Background(), &testingv1.PutRequest{Script: &testingv1.Script{Key: "b", FailAttempts: 10}})
				if status.Code(err) != codes.Unavailable {
					t.Fatalf("second call: %v", err)
				}
				if n := len(b2.attempts(t, "b")); n != tt.wantSecond {
					t.Errorf("second call made %d attempts, want %d", n, tt.wantSecond)
				}
				if e := h.last(); e.Reason != tt.wantReason || e.Method != putMethod {
					t.Errorf("last event = %+v, want reason %v", e, tt.wantReason)
				}
				if got := interceptor.Attempts(err); got != tt.wantSecond {
					t.Errorf("Attempts(err) = %d, want %d", got, tt.wantSecond)
				}
			})
		})
	}
}

func TestFinalErrorKeepsServerStatus(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := newBench(t, []interceptor.Option{interceptor.WithConfig(parse(t, retryFile))})
		// Not retryable, with a detail: returned after one attempt.
		err := b.get(context.Background(), &testingv1.Script{Key: "k", FailAttempts: 1, Code: int32(codes.Aborted),
			Message: "conflict on row 12", RetryInfoDelay: durationpb.New(3 * time.Second)})
		st, ok := status.FromError(err)
		if !ok || st.Code() != codes.Aborted || st.Message() != "conflict on row 12" {
			t.Fatalf("status = %v, %v %q; want ABORTED %q", ok, st.Code(), st.Message(), "conflict on row 12")
		}
		var ri *errdetails.RetryInfo
		for _, d := range st.Details() {
			if x, ok := d.(*errdetails.RetryInfo); ok {
				ri = x
			}
		}
		if ri == nil || !proto.Equal(ri.GetRetryDelay(), durationpb.New(3*time.Second)) {
			t.Errorf("details = %v, want the server's RetryInfo", st.Details())
		}
		if err.Error() != "rpc error: code = Aborted desc = conflict on row 12" {
			t.Errorf("Error() = %q", err.Error())
		}
		var se *interceptor.Error
		if !errors.As(err, &se) || se.Attempts != 1 || se.Reason != policy.ReasonNotRetryable {
			t.Errorf("*interceptor.Error = %+v", se)
		}
		if errors.Unwrap(err) == nil {
			t.Error("Unwrap = nil")
		}
		// After retries, the last attempt's status.
		err = b.get(context.Background(), &testingv1.Script{Key: "k2", FailAttempts: 10})
		if st := status.Convert(err); st.Message() != "testserver: scripted failure of attempt 4" {
			t.Errorf("message = %q, want the last attempt's", st.Message())
		}
		if interceptor.Attempts(err) != 4 {
			t.Errorf("Attempts = %d, want 4", interceptor.Attempts(err))
		}
	})
}

func TestFileTimeout(t *testing.T) {
	file := `{"methodConfig": [{"name": [{"service": "stagger.testing.v1.TestService"}], "timeout": "2s"}]}`
	tests := []struct {
		name     string
		deadline time.Duration
		want     time.Duration
	}{
		{"no caller deadline: the file's", 0, 2 * time.Second},
		{"later caller deadline: the file's", 10 * time.Second, 2 * time.Second},
		{"earlier caller deadline: the caller's", 500 * time.Millisecond, 500 * time.Millisecond},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				b := newBench(t, []interceptor.Option{interceptor.WithConfig(parse(t, file))})
				ctx := context.Background()
				if tt.deadline > 0 {
					var cancel context.CancelFunc
					ctx, cancel = context.WithTimeout(ctx, tt.deadline)
					defer cancel()
				}
				start := time.Now()
				err := b.get(ctx, &testingv1.Script{Key: "k", Delay: durationpb.New(time.Minute)})
				if status.Code(err) != codes.DeadlineExceeded {
					t.Fatalf("code = %v, want DEADLINE_EXCEEDED", status.Code(err))
				}
				if took := time.Since(start); took != tt.want {
					t.Errorf("call took %v, want %v", took, tt.want)
				}
			})
		})
	}
}

func TestFileWaitForReady(t *testing.T) {
	tests := []struct {
		name     string
		wfr      string
		wantCode codes.Code
		wantTook time.Duration
	}{
		{"waitForReady true: waits until the deadline", "true", codes.DeadlineExceeded, 3 * time.Second},
		{"waitForReady false: fails fast", "false", codes.Unavailable, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				file := `{"methodConfig": [{"name": [{"service": "stagger.testing.v1.TestService"}], "timeout": "3s", "waitForReady": ` + tt.wfr + `}]}`
				srv := testserver.New()
				srv.Close() // nothing listens: the connection cannot become ready
				cc, err := srv.Dial(grpc.WithChainUnaryInterceptor(interceptor.UnaryClientInterceptor(interceptor.WithConfig(parse(t, file)))))
				if err != nil {
					t.Fatal(err)
				}
				defer cc.Close()
				start := time.Now()
				_, err = testingv1.NewTestServiceClient(cc).Get(context.Background(), &testingv1.GetRequest{Script: &testingv1.Script{}})
				if status.Code(err) != tt.wantCode {
					t.Fatalf("code = %v, want %v (%v)", status.Code(err), tt.wantCode, err)
				}
				if took := time.Since(start); took != tt.wantTook {
					t.Errorf("call took %v, want %v", took, tt.wantTook)
				}
			})
		})
	}
}

func TestChainRunsPerAttemptAndKeepsMetadata(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		type seen struct {
			attempt  int
			marked   bool
			user     []string
			previous []string
			ours     bool
		}
		var mu sync.Mutex
		var inner []seen
		innerInterceptor := func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
			n, ok := interceptor.AttemptFromContext(ctx)
			md, _ := metadata.FromOutgoingContext(ctx)
			s := seen{attempt: n, marked: ok, user: md.Get("x-user"), previous: md.Get("grpc-previous-rpc-attempts")}
			for _, o := range opts {
				if _, isOurs := o.(interceptor.Option); isOurs {
					s.ours = true
				}
			}
			mu.Lock()
			inner = append(inner, s)
			mu.Unlock()
			return invoker(ctx, method, req, reply, cc, opts...)
		}
		var outerCalls int
		outer := func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
			outerCalls++
			return invoker(ctx, method, req, reply, cc, opts...)
		}
		srv := testserver.New()
		t.Cleanup(srv.Close)
		cc := srv.ClientConn(t, grpc.WithChainUnaryInterceptor(outer,
			interceptor.UnaryClientInterceptor(interceptor.WithConfig(parse(t, retryFile))), innerInterceptor), grpc.WithDisableRetry())
		client := testingv1.NewTestServiceClient(cc)
		ctx := metadata.AppendToOutgoingContext(context.Background(), "x-user", "ada")
		if _, err := client.Get(ctx, &testingv1.GetRequest{Script: &testingv1.Script{Key: "k", FailAttempts: 2}}, interceptor.WithMaxAttempts(3)); err != nil {
			t.Fatal(err)
		}
		if outerCalls != 1 {
			t.Errorf("outer interceptor ran %d times, want once per call", outerCalls)
		}
		if len(inner) != 3 {
			t.Fatalf("inner interceptor ran %d times, want once per attempt (3)", len(inner))
		}
		for i, s := range inner {
			n := i + 1
			wantPrev := []string(nil)
			if n > 1 {
				wantPrev = []string{fmt.Sprint(n - 1)}
			}
			if s.attempt != n || s.marked != (n > 1) {
				t.Errorf("attempt %d: AttemptFromContext = %d, %v", n, s.attempt, s.marked)
			}
			if strings.Join(s.user, ",") != "ada" {
				t.Errorf("attempt %d: x-user = %v, want the caller's", n, s.user)
			}
			if strings.Join(s.previous, ",") != strings.Join(wantPrev, ",") {
				t.Errorf("attempt %d: grpc-previous-rpc-attempts = %v, want %v", n, s.previous, wantPrev)
			}
			if s.ours {
				t.Errorf("attempt %d: stagger's per-call option reached the inner interceptor", n)
			}
		}
	})
}

func TestIdempotencyKey(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := newBench(t, []interceptor.Option{interceptor.WithConfig(parse(t, retryFile)), interceptor.WithIdempotencyKey("idempotency-key")})
		for _, key := range []string{"a", "b"} {
			if _, err := b.client.Write(context.Background(), &testingv1.WriteRequest{Script: &testingv1.Script{Key: key, FailAttempts: 2}}); err != nil {
				t.Fatal(err)
			}
		}
		a, bb := b.attempts(t, "a"), b.attempts(t, "b")
		if len(a) != 3 || len(bb) != 3 {
			t.Fatalf("attempts: %d and %d, want 3 each", len(a), len(bb))
		}
		for _, recs := range [][]testserver.AttemptRecord{a, bb} {
			for _, r := range recs {
				if len(r.IdempotencyKey) != 32 || r.IdempotencyKey != recs[0].IdempotencyKey {
					t.Errorf("keys of one call: %q vs %q, want one 32-hex-digit key on every attempt", r.IdempotencyKey, recs[0].IdempotencyKey)
				}
			}
		}
		if a[0].IdempotencyKey == bb[0].IdempotencyKey {
			t.Error("two calls share an idempotency key")
		}
		// A key the caller set (its request's own ID) is sent as it is, on
		// every attempt, and stagger adds none.
		ctx := metadata.AppendToOutgoingContext(context.Background(), "Idempotency-Key", "order-42")
		if _, err := b.client.Write(ctx, &testingv1.WriteRequest{Script: &testingv1.Script{Key: "c", FailAttempts: 2}}); err != nil {
			t.Fatal(err)
		}
		for _, r := range b.attempts(t, "c") {
			if r.IdempotencyKey != "order-42" {
				t.Errorf("attempt %d sent key %q, want the caller's alone, \"order-42\"", r.Attempt, r.IdempotencyKey)
			}
		}
	})
}

func TestPredicate(t *testing.T) {
	queueFull := func(err error) (retry, decided bool) {
		if strings.Contains(status.Convert(err).Message(), "queue full") {
			return true, true
		}
		return false, false
	}
	tests := []struct {
		msg  string
		want int
	}{{"queue full, try later", 3}, {"bad row", 1}}
	for _, tt := range tests {
		t.Run(tt.msg, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				b := newBench(t, []interceptor.Option{interceptor.WithConfig(parse(t, retryFile)), interceptor.WithPredicate(queueFull)})
				_ = b.get(context.Background(), &testingv1.Script{Key: "k", FailAttempts: 2, Code: int32(codes.Unknown), Message: tt.msg})
				if n := len(b.attempts(t, "k")); n != tt.want {
					t.Errorf("%d attempts, want %d", n, tt.want)
				}
			})
		})
	}
}

func TestPerCallOptions(t *testing.T) {
	tests := []struct {
		name string
		opts []grpc.CallOption
		want int
	}{
		{"none", nil, 4},
		{"Disable", []grpc.CallOption{interceptor.Disable()}, 1},
		{"WithMaxAttempts(2)", []grpc.CallOption{interceptor.WithMaxAttempts(2)}, 2},
		{"WithMaxAttempts(1)", []grpc.CallOption{interceptor.WithMaxAttempts(1)}, 1},
		{"beside grpc options", []grpc.CallOption{grpc.WaitForReady(false), interceptor.WithMaxAttempts(3), grpc.MaxCallRecvMsgSize(1 << 20)}, 3},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				b := newBench(t, []interceptor.Option{interceptor.WithConfig(parse(t, retryFile))})
				_ = b.get(context.Background(), &testingv1.Script{Key: "k", FailAttempts: 10}, tt.opts...)
				if n := len(b.attempts(t, "k")); n != tt.want {
					t.Errorf("%d attempts, want %d", n, tt.want)
				}
			})
		})
	}
}

// benchGets measures a Get that succeeds at once, over bufconn, on a
// connection dialled with dial.
func benchGets(b *testing.B, dial []grpc.DialOption) {
	srv := testserver.New()
	defer srv.Close()
	cc, err := srv.Dial(dial...)
	if err != nil {
		b.Fatal(err)
	}
	defer cc.Close()
	client := testingv1.NewTestServiceClient(cc)
	req := &testingv1.GetRequest{Script: &testingv1.Script{}}
	ctx := context.Background()
	if _, err := client.Get(ctx, req); err != nil { // connect
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := client.Get(ctx, req); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkEndToEnd: a Get that succeeds at once, over bufconn, without an
// interceptor, with stagger (DialOptions and a file with a retry policy and
// the A6 throttle), and with go-grpc-middleware v2's retry interceptor;
// what interceptor.HeaderWatch costs (grpc-go's stats events): stagger's
// interceptors alone, and the handler alone.
func BenchmarkEndToEnd(b *testing.B) {
	file := `{"methodConfig": [{"name": [{"service": "stagger.testing.v1.TestService"}],
		"retryPolicy": {"maxAttempts": 4, "initialBackoff": "0.1s", "maxBackoff": "1s",
		"backoffMultiplier": 2, "retryableStatusCodes": ["UNAVAILABLE"]}}],
		"retryThrottling": {"maxTokens": 100, "tokenRatio": 0.1}}`
	cfg, err := policy.ParseConfig([]byte(file))
	if err != nil {
		b.Fatal(err)
	}
	cases := []struct {
		name string
		dial []grpc.DialOption
	}{
		{"none", []grpc.DialOption{grpc.WithDisableRetry()}},
		{"stagger", stagger.DialOptions(cfg)},
		{"stagger-without-headerwatch", []grpc.DialOption{grpc.WithDisableRetry(), grpc.WithChainUnaryInterceptor(interceptor.UnaryClientInterceptor(
			interceptor.WithConfig(cfg), interceptor.WithDefaultBudgets(budget.DefaultBackends())))}},
		{"none-with-headerwatch", []grpc.DialOption{grpc.WithDisableRetry(), grpc.WithStatsHandler(interceptor.HeaderWatch())}},
		{"middleware-retry", []grpc.DialOption{grpc.WithDisableRetry(), grpc.WithChainUnaryInterceptor(
			retry.UnaryClientInterceptor(retry.WithMax(4), retry.WithCodes(codes.Unavailable)))}},
	}
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) { benchGets(b, c.dial) })
	}
}

// defaultBudgetState is the state of stagger's default budget for the Get
// method of cc's target (budget.DefaultBackends): its Allowed and Refused
// are the target's tokens'.
func defaultBudgetState(cc *grpc.ClientConn) budget.State {
	return budget.DefaultBackends().Get(cc.Target(), testingv1.TestService_Get_FullMethodName).State()
}

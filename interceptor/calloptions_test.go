package interceptor_test

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors/logging"
	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors/retry"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/stagger-go/stagger/interceptor"
	"github.com/stagger-go/stagger/policy"
	testingv1 "github.com/stagger-go/stagger/proto/stagger/testing/v1"
)

// slogLines records what slog.Default() hears while a test runs: one
// string per record, its message then its attributes as key=value.
type slogLines struct {
	mu    sync.Mutex
	lines []string
}

func (h *slogLines) Enabled(context.Context, slog.Level) bool { return true }
func (h *slogLines) WithAttrs([]slog.Attr) slog.Handler       { return h }
func (h *slogLines) WithGroup(string) slog.Handler            { return h }
func (h *slogLines) Handle(_ context.Context, r slog.Record) error {
	var b strings.Builder
	b.WriteString(r.Level.String() + " " + r.Message)
	r.Attrs(func(a slog.Attr) bool {
		fmt.Fprintf(&b, " %s=%v", a.Key, a.Value)
		return true
	})
	h.mu.Lock()
	h.lines = append(h.lines, b.String())
	h.mu.Unlock()
	return nil
}

// with returns the lines that contain every one of subs.
func (h *slogLines) with(subs ...string) []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []string
next:
	for _, l := range h.lines {
		for _, s := range subs {
			if !strings.Contains(l, s) {
				continue next
			}
		}
		out = append(out, l)
	}
	return out
}

// captureSlog makes slog.Default() a slogLines until the test ends.
func captureSlog(t *testing.T) *slogLines {
	t.Helper()
	h := &slogLines{}
	old := slog.Default()
	slog.SetDefault(slog.New(h))
	t.Cleanup(func() { slog.SetDefault(old) })
	return h
}

// TestCallOptionsNeverSilent: the middleware guide's setup (a file whose
// service-wide entry matches every method, no logger, no hook) and each
// per-call option that cannot take effect as given: slog.Default() hears
// of each once per method, at warn level, with its method and reason,
// however many calls carry it.
func TestCallOptionsNeverSilent(t *testing.T) {
	timerFile := `{"methodConfig": [{"name": [{"service": "stagger.testing.v1.TestService", "method": "Write"}],
  "retryPolicy": {"maxAttempts": 3, "initialBackoff": "0.001s", "maxBackoff": "1s", "backoffMultiplier": 2,
    "retryableStatusCodes": ["UNAVAILABLE"], "perAttemptRecvTimeout": "1s"}}]}`
	cases := []struct {
		name    string
		file    string
		perCall []grpc.CallOption
		method  string // "Get", "Put" or "Write"
		want    []string
	}{
		{"WithPolicy under the file's entry", migrateFile,
			[]grpc.CallOption{interceptor.WithPolicy(policy.Policy{MaxAttempts: 3})}, "Get",
			[]string{"the call's WithPolicy not applied", "stagger.reason=overridden"}},
		{"WithMaxAttempts above the cap", migrateFile,
			[]grpc.CallOption{interceptor.WithMaxAttempts(8)}, "Get",
			[]string{"WithMaxAttempts above the cap", "stagger.attempt=5", "stagger.reason=attempts"}},
		{"WithMaxAttempts without a policy", timerFile,
			[]grpc.CallOption{interceptor.WithMaxAttempts(3)}, "Get",
			[]string{"no retry policy for the method", "stagger.reason=no policy"}},
		{"WithCodes without a policy", timerFile,
			[]grpc.CallOption{interceptor.WithCodes(codes.Unavailable)}, "Get",
			[]string{"no retry policy for the method", "stagger.reason=no policy"}},
		{"WithBackoff without a policy", timerFile,
			[]grpc.CallOption{interceptor.WithBackoff(policy.Backoff{Initial: time.Millisecond, Max: time.Millisecond, Multiplier: 1})}, "Get",
			[]string{"no retry policy for the method", "stagger.reason=no policy"}},
		{"file's timer, method not idempotent", timerFile, nil, "Write",
			[]string{"per-attempt timeout not applied: method not known to be idempotent", "stagger.reason=not idempotent"}},
		{"WithPerAttemptTimeout, method not idempotent", migrateFile,
			[]grpc.CallOption{interceptor.WithPerAttemptTimeout(time.Second)}, "Write",
			[]string{"per-attempt timeout not applied: method not known to be idempotent", "stagger.reason=not idempotent"}},
		{"WithBackoff that breaks a rule", migrateFile,
			[]grpc.CallOption{interceptor.WithBackoff(policy.Backoff{Initial: time.Millisecond})}, "Get",
			[]string{"WithBackoff or WithPerAttemptTimeout not applied", "stagger.reason=invalid option", "maxBackoff: must be > 0, got 0s"}},
		{"WithPerAttemptTimeout below 0", migrateFile,
			[]grpc.CallOption{interceptor.WithPerAttemptTimeout(-time.Second)}, "Get",
			[]string{"WithBackoff or WithPerAttemptTimeout not applied", "stagger.reason=invalid option", "perAttemptRecvTimeout: must be >= 0, got -1s"}},
		{"the middleware's retry.WithMax left over", migrateFile,
			[]grpc.CallOption{retry.WithMax(5)}, "Get",
			[]string{"a go-grpc-middleware retry option on the call", "stagger.reason=foreign option"}},
		{"the middleware's option beside stagger's", migrateFile,
			[]grpc.CallOption{interceptor.WithMaxAttempts(2), retry.WithCodes(codes.Aborted)}, "Get",
			[]string{"a go-grpc-middleware retry option on the call", "stagger.reason=foreign option"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			rec := captureSlog(t)
			_, client, closeAll := migrateClient(interceptor.WithConfig(mustParse(tc.file)))
			defer closeAll()
			method := "/stagger.testing.v1.TestService/" + tc.method
			for range 3 {
				var err error
				switch tc.method {
				case "Get":
					_, err = client.Get(context.Background(), &testingv1.GetRequest{}, tc.perCall...)
				case "Put":
					_, err = client.Put(context.Background(), &testingv1.PutRequest{}, tc.perCall...)
				case "Write":
					_, err = client.Write(context.Background(), &testingv1.WriteRequest{}, tc.perCall...)
				}
				if err != nil {
					t.Fatal(err)
				}
			}
			want := append([]string{"WARN stagger: ", "grpc.method=" + method, "stagger.event=notice"}, tc.want...)
			if got := rec.with(want...); len(got) != 1 {
				t.Fatalf("slog.Default() heard %d lines with %q, want 1; all:\n%s", len(got), want, strings.Join(rec.with(), "\n"))
			}
			if got := rec.with("stagger.event=notice"); len(got) != 1 {
				t.Fatalf("slog.Default() heard %d notices, want 1:\n%s", len(got), strings.Join(got, "\n"))
			}
		})
	}

	// What applies says nothing: grpc's own options, and stagger's that
	// take effect.
	t.Run("options that apply", func(t *testing.T) {
		rec := captureSlog(t)
		_, client, closeAll := migrateClient(interceptor.WithConfig(mustParse(migrateFile)))
		defer closeAll()
		var header grpc.CallOption = grpc.Header(new(metadata.MD))
		for _, opts := range [][]grpc.CallOption{
			{grpc.WaitForReady(true), grpc.StaticMethod()},
			{interceptor.WithMaxAttempts(2), interceptor.WithCodes(codes.Unavailable)},
			{interceptor.WithBackoff(policy.Backoff{Initial: time.Millisecond, Max: time.Millisecond, Multiplier: 1}), header},
			{interceptor.WithPerAttemptTimeout(time.Second), interceptor.Idempotent()},
		} {
			if _, err := client.Get(context.Background(), &testingv1.GetRequest{}, opts...); err != nil {
				t.Fatal(err)
			}
		}
		if got := rec.with(); len(got) != 0 {
			t.Fatalf("slog.Default() heard %q, want nothing", got)
		}
	})

	// Given a logger, the logger hears it and slog.Default() does not.
	t.Run("with a logger", func(t *testing.T) {
		rec := captureSlog(t)
		var mu sync.Mutex
		var heard []string
		logger := interceptor.WithLogger(loggerFunc(func(msg string) {
			mu.Lock()
			heard = append(heard, msg)
			mu.Unlock()
		}))
		_, client, closeAll := migrateClient(interceptor.WithConfig(mustParse(migrateFile)), logger)
		defer closeAll()
		if _, err := client.Get(context.Background(), &testingv1.GetRequest{}, retry.WithMax(5)); err != nil {
			t.Fatal(err)
		}
		if got := rec.with(); len(got) != 0 {
			t.Fatalf("slog.Default() heard %q, want nothing", got)
		}
		mu.Lock()
		defer mu.Unlock()
		if len(heard) != 1 || !strings.Contains(heard[0], "go-grpc-middleware retry option") {
			t.Fatalf("the logger heard %q, want the foreign option's notice", heard)
		}
	})
}

// TestNoticesBounded: a caller that makes up method names, each call with
// an option that cannot apply, gets at most 1,024 notices from one
// interceptor: the set that remembers them does not grow without end.
func TestNoticesBounded(t *testing.T) {
	rec := captureSlog(t)
	ui := interceptor.UnaryClientInterceptor()
	ok := func(context.Context, string, any, any, *grpc.ClientConn, ...grpc.CallOption) error { return nil }
	for i := range 3000 {
		method := fmt.Sprintf("/made.up.Service/M%d", i)
		if err := ui(context.Background(), method, nil, nil, nil, ok, interceptor.WithMaxAttempts(3), retry.WithMax(2)); err != nil {
			t.Fatal(err)
		}
	}
	if n := len(rec.with("stagger.event=notice")); n != 1024 {
		t.Fatalf("%d notices for 3,000 methods with 2 each, want the bound, 1024", n)
	}
}

// TestPerCallBackoffAndTimeout: WithBackoff and WithPerAttemptTimeout take
// effect on a call whatever the file's entry for its method says, as
// go-grpc-middleware's per-call WithBackoff and WithPerRetryTimeout did;
// the per-attempt timer is the client's own (the server sees the caller's
// deadline on every attempt).
func TestPerCallBackoffAndTimeout(t *testing.T) {
	// The file's pauses are 1s then 2s, and it has no per-attempt timeout.
	const slowFile = `{"methodConfig": [{"name": [{"service": "stagger.testing.v1.TestService"}],
  "retryPolicy": {"maxAttempts": 3, "initialBackoff": "1s", "maxBackoff": "10s", "backoffMultiplier": 2,
    "jitter": "NONE", "retryableStatusCodes": ["UNAVAILABLE"]}}]}`
	var mu sync.Mutex
	var pauses []time.Duration
	hook := interceptor.WithHook(func(e interceptor.Event) {
		if e.Kind == interceptor.EventRetry {
			mu.Lock()
			pauses = append(pauses, e.Pause)
			mu.Unlock()
		}
	})
	srv, client, closeAll := migrateClient(interceptor.WithConfig(mustParse(slowFile)), hook)
	defer closeAll()

	backoff := interceptor.WithBackoff(policy.Backoff{Initial: 2 * time.Millisecond, Max: time.Second, Multiplier: 3, Jitter: policy.JitterNone})
	if _, err := client.Get(context.Background(), &testingv1.GetRequest{Script: &testingv1.Script{Key: "backoff", FailAttempts: 2}}, backoff); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	if want := []time.Duration{2 * time.Millisecond, 6 * time.Millisecond}; fmt.Sprint(pauses) != fmt.Sprint(want) {
		t.Errorf("pauses %v, want the call's backoff's %v", pauses, want)
	}
	pauses = nil
	mu.Unlock()

	// The first attempt takes 5s; the call's timer (50ms) cuts it off and
	// the retry, after the call's 2ms pause, is served at once.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	script := &testingv1.Script{Key: "timer", AttemptDelays: []*durationpb.Duration{durationpb.New(5 * time.Second)}}
	start := time.Now()
	_, err := client.Get(ctx, &testingv1.GetRequest{Script: script},
		interceptor.WithPerAttemptTimeout(50*time.Millisecond), interceptor.Idempotent(), backoff)
	if err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); took > 3*time.Second {
		t.Errorf("the call took %v: the per-attempt timeout did not cut the slow attempt off", took)
	}
	attempts := srv.Attempts("timer")
	if len(attempts) != 2 {
		t.Fatalf("%d attempts, want 2", len(attempts))
	}
	want, _ := ctx.Deadline()
	for i, a := range attempts {
		if d := a.Deadline.Sub(want); d < -time.Second || d > time.Second {
			t.Errorf("attempt %d reached the server with deadline %v, want the caller's, %v", i+1, a.Deadline, want)
		}
	}

	// WithPerAttemptTimeout(0) turns a file's timer off for the call.
	const timerFile = `{"methodConfig": [{"name": [{"service": "stagger.testing.v1.TestService"}], "idempotent": true,
  "retryPolicy": {"maxAttempts": 3, "initialBackoff": "0.001s", "maxBackoff": "1s", "backoffMultiplier": 2,
    "retryableStatusCodes": ["UNAVAILABLE"], "perAttemptRecvTimeout": "0.1s"}}]}`
	srv2, client2, closeAll2 := migrateClient(interceptor.WithConfig(mustParse(timerFile)))
	defer closeAll2()
	script = &testingv1.Script{Key: "off", AttemptDelays: []*durationpb.Duration{durationpb.New(300 * time.Millisecond)}}
	if _, err := client2.Get(context.Background(), &testingv1.GetRequest{Script: script}, interceptor.WithPerAttemptTimeout(0)); err != nil {
		t.Fatal(err)
	}
	if n := len(srv2.Attempts("off")); n != 1 {
		t.Errorf("%d attempts with the timer off, want 1", n)
	}
	if _, err := client2.Get(context.Background(), &testingv1.GetRequest{Script: &testingv1.Script{Key: "on",
		AttemptDelays: []*durationpb.Duration{durationpb.New(time.Second)}}}); status.Code(err) != codes.OK {
		t.Fatal(err)
	}
	if n := len(srv2.Attempts("on")); n != 2 {
		t.Errorf("%d attempts with the file's timer, want 2", n)
	}
}

// loggerFunc is a logger that hands each message to f.
func loggerFunc(f func(msg string)) logging.Logger {
	return logging.LoggerFunc(func(_ context.Context, _ logging.Level, msg string, _ ...any) { f(msg) })
}

// TestMisspeltServiceOncePerService: a file that misspells the service
// leaves every method of it without its policy; slog.Default() hears of it
// once for the service, however many of its methods are called, and once
// per method for a misspelt method of a service the file spells right.
func TestMisspeltServiceOncePerService(t *testing.T) {
	rec := captureSlog(t)
	const file = `{"methodConfig": [{"name": [{"service": "stagger.testing.v1.TestServce"}, {"service": "stagger.testing.v2.TestService", "method": "Gett"}],
  "retryPolicy": {"maxAttempts": 3, "initialBackoff": "0.001s", "maxBackoff": "1s", "backoffMultiplier": 2,
    "retryableStatusCodes": ["UNAVAILABLE"]}}]}`
	ui := interceptor.UnaryClientInterceptor(interceptor.WithConfig(mustParse(file)))
	ok := func(context.Context, string, any, any, *grpc.ClientConn, ...grpc.CallOption) error { return nil }
	for _, m := range []string{"Get", "Put", "Write", "Get"} {
		for _, svc := range []string{"stagger.testing.v1.TestService", "stagger.testing.v2.TestService"} {
			if err := ui(context.Background(), "/"+svc+"/"+m, nil, nil, nil, ok); err != nil {
				t.Fatal(err)
			}
		}
	}
	if got := rec.with("nearly names", "stagger.name=/stagger.testing.v1.TestServce/"); len(got) != 1 {
		t.Errorf("the misspelt service was said %d times, want once:\n%s", len(got), strings.Join(rec.with(), "\n"))
	}
	if got := rec.with("nearly names", "stagger.name=/stagger.testing.v2.TestService/Gett"); len(got) != 1 || !strings.Contains(got[0], "grpc.method=/stagger.testing.v2.TestService/Get ") {
		t.Errorf("the misspelt method was said %d times, want once, for Get:\n%s", len(got), strings.Join(rec.with(), "\n"))
	}
}

// TestNoPolicyNoticeNamesEachOption: the call's retry options on a method
// without a retry policy are reported once per method and option, each
// named: a later call with another option is heard of, one with the same
// is not.
func TestNoPolicyNoticeNamesEachOption(t *testing.T) {
	var mu sync.Mutex
	var errs []string
	hook := interceptor.WithHook(func(e interceptor.Event) {
		if e.Kind == interceptor.EventNotice && e.Reason == policy.ReasonNoPolicy {
			mu.Lock()
			errs = append(errs, e.Err.Error())
			mu.Unlock()
		}
	})
	ui := interceptor.UnaryClientInterceptor(hook)
	ok := func(context.Context, string, any, any, *grpc.ClientConn, ...grpc.CallOption) error { return nil }
	backoff := interceptor.WithBackoff(policy.Backoff{Initial: time.Millisecond, Max: time.Millisecond, Multiplier: 1})
	for _, opts := range [][]grpc.CallOption{
		{interceptor.WithMaxAttempts(3)},
		{interceptor.WithMaxAttempts(3)},
		{interceptor.WithCodes(codes.Aborted), backoff, interceptor.WithMaxAttempts(4)},
		{interceptor.WithPerAttemptTimeout(time.Second), backoff},
	} {
		if err := ui(context.Background(), "/a.B/Get", nil, nil, nil, ok, opts...); err != nil {
			t.Fatal(err)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	want := []string{
		"interceptor: WithMaxAttempts not applied: no retry policy for the method",
		"interceptor: WithCodes, WithBackoff not applied: no retry policy for the method",
		"interceptor: WithPerAttemptTimeout not applied: no retry policy for the method",
	}
	if fmt.Sprint(errs) != fmt.Sprint(want) {
		t.Fatalf("notices %q, want %q", errs, want)
	}
}

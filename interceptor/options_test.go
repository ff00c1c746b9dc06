package interceptor_test

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors/logging"

	"github.com/stagger-go/stagger/interceptor"
	"github.com/stagger-go/stagger/policy"
)

// swappable is a ConfigSource whose file a test replaces, as a reload would.
type swappable struct{ cfg atomic.Pointer[policy.Config] }

func (s *swappable) Config() *policy.Config { return s.cfg.Load() }

func fileWithAttempts(t *testing.T, n string) *policy.Config {
	t.Helper()
	cfg, err := policy.ParseConfig([]byte(`{"methodConfig": [{"name": [{"service": "stagger.testing.v1.TestService"}],
		"retryPolicy": {"maxAttempts": ` + n + `, "initialBackoff": "0.000000001s", "maxBackoff": "0.000000001s",
		"backoffMultiplier": 1, "retryableStatusCodes": ["UNAVAILABLE"], "jitter": "FULL"}}]}`))
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

func TestConfigSourceReloadAppliesToNextCall(t *testing.T) {
	var src swappable
	src.cfg.Store(fileWithAttempts(t, "2"))
	icpt := interceptor.UnaryClientInterceptor(interceptor.WithConfigSource(&src), interceptor.WithRandom(zero))
	run := func() int {
		s := &script{errs: []error{errUnavailable, errUnavailable, errUnavailable, errUnavailable}}
		_ = icpt(context.Background(), method, nil, nil, nil, s.invoke)
		return len(s.ctxs)
	}
	if n := run(); n != 2 {
		t.Errorf("first file: %d attempts, want 2", n)
	}
	src.cfg.Store(fileWithAttempts(t, "4"))
	if n := run(); n != 4 {
		t.Errorf("reloaded file: %d attempts, want 4", n)
	}
	src.cfg.Store(nil)
	if n := run(); n != 1 {
		t.Errorf("no file: %d attempts, want 1", n)
	}
}

func TestLoggerHearsRetriesGiveUpsAndNotices(t *testing.T) {
	var lines []string
	logger := logging.LoggerFunc(func(_ context.Context, level logging.Level, msg string, fields ...any) {
		var b strings.Builder
		b.WriteString(fmt.Sprint(level) + " " + msg)
		for i := 0; i+1 < len(fields); i += 2 {
			b.WriteString(" " + fields[i].(string) + "=")
			b.WriteString(fmt.Sprint(fields[i+1]))
		}
		lines = append(lines, b.String())
	})
	cfg, err := policy.ParseConfig([]byte(`{"methodConfig": [{"name": [{"service": "stagger.testing.v1.TestService"}],
		"retryPolicy": {"maxAttempts": 2, "initialBackoff": "0.000000001s", "maxBackoff": "0.000000001s",
		"backoffMultiplier": 1, "retryableStatusCodes": ["UNAVAILABLE"], "jitter": "FULL",
		"perAttemptRecvTimeout": "1s"}}]}`))
	if err != nil {
		t.Fatal(err)
	}
	icpt := interceptor.UnaryClientInterceptor(interceptor.WithConfig(cfg), interceptor.WithLogger(logger), interceptor.WithRandom(zero))
	s := &script{errs: []error{errUnavailable, errUnavailable}}
	write := "/stagger.testing.v1.TestService/Write" // not idempotent: the timer is not applied
	_ = icpt(context.Background(), write, nil, nil, nil, s.invoke)
	want := []string{
		"4 stagger: per-attempt timeout not applied: method not known to be idempotent grpc.method=" + write,
		"-4 stagger: retrying grpc.method=" + write + " stagger.event=retry stagger.attempt=1 grpc.code=Unavailable stagger.pause=0s",
		"-4 stagger: giving up grpc.method=" + write + " stagger.event=give up stagger.attempt=2 grpc.code=Unavailable",
	}
	if len(lines) != len(want) {
		t.Fatalf("log lines:\n%s\nwant %d", strings.Join(lines, "\n"), len(want))
	}
	for i := range want {
		if !strings.HasPrefix(lines[i], want[i]) {
			t.Errorf("line %d = %q, want prefix %q", i, lines[i], want[i])
		}
	}
	if !strings.HasSuffix(lines[2], "stagger.reason=attempts") {
		t.Errorf("give-up line %q does not name the reason", lines[2])
	}
}

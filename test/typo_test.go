//go:build go1.25

package test

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"

	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors/logging"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"

	"github.com/stagger-go/stagger/interceptor"
)

// slogRecords is a slog.Handler that keeps each record: its level, message
// and attributes ("WARN msg k=v k=v").
type slogRecords struct {
	mu   sync.Mutex
	msgs []string
}

func (h *slogRecords) Enabled(context.Context, slog.Level) bool { return true }
func (h *slogRecords) WithAttrs([]slog.Attr) slog.Handler       { return h }
func (h *slogRecords) WithGroup(string) slog.Handler            { return h }
func (h *slogRecords) Handle(_ context.Context, r slog.Record) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	line := r.Level.String() + " " + r.Message
	r.Attrs(func(a slog.Attr) bool {
		line += " " + a.String()
		return true
	})
	h.msgs = append(h.msgs, line)
	return nil
}

// with returns the messages that contain every part.
func (h *slogRecords) with(parts ...string) []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []string
next:
	for _, m := range h.msgs {
		for _, p := range parts {
			if !strings.Contains(m, p) {
				continue next
			}
		}
		out = append(out, m)
	}
	return out
}

// TestTypoIsLoudWithoutLogger: a file naming grpc.testing.TestServce, with
// the interop protos linked and no option set, turns the service's retries
// off; slog.Default() hears of it once, with the name meant, and once that
// the calls to the service are not covered; a misspelt optional key too.
// Given a logger, the logger hears them instead.
func TestTypoIsLoudWithoutLogger(t *testing.T) {
	rec := &slogRecords{}
	old := slog.Default()
	slog.SetDefault(slog.New(rec))
	t.Cleanup(func() { slog.SetDefault(old) })
	const file = `{"methodConfig": [{"name": [{"service": "grpc.testing.TestServce"}],
  "retryPolicy": {"maxAttempts": 3, "initialBackoff": "0.1s", "maxBackoff": "1s", "backoffMultiplier": 2,
    "retryableStatusCodes": ["UNAVAILABLE"], "perAttemptRecvTimout": "1s"}}]}`
	srv := &portUnaryServer{answer: func(int) error { return nil }}
	client := portClientFile(t, srv, file)
	for i := 0; i < 3; i++ {
		if _, err := client.EmptyCall(context.Background(), &testgrpc.Empty{}); err != nil {
			t.Fatal(err)
		}
	}
	for _, want := range [][]string{
		{"WARN stagger: policy file warning", `"grpc.testing.TestServce"`, `did you mean "grpc.testing.TestService"?`},
		{"WARN stagger: policy file warning", "stagger.warning=unknown key", `did you mean "perAttemptRecvTimeout"?`},
		{"WARN stagger: the policy file nearly names the method", "grpc.method=/grpc.testing.TestService/EmptyCall", "stagger.name=/grpc.testing.TestServce/"},
	} {
		if got := rec.with(want...); len(got) != 1 {
			t.Errorf("slog.Default() heard %d lines with %q, want 1; all:\n%s", len(got), want, strings.Join(rec.with(), "\n"))
		}
	}

	var heard []string
	var mu sync.Mutex
	logger := logging.LoggerFunc(func(_ context.Context, lvl logging.Level, msg string, fields ...any) {
		mu.Lock()
		defer mu.Unlock()
		if lvl == logging.LevelWarn {
			heard = append(heard, fmt.Sprint(msg, fields))
		}
	})
	rec = &slogRecords{}
	slog.SetDefault(slog.New(rec))
	client = portClientFile(t, srv, file, interceptor.WithLogger(logger))
	if _, err := client.EmptyCall(context.Background(), &testgrpc.Empty{}); err != nil {
		t.Fatal(err)
	}
	if got := rec.with(); len(got) != 0 {
		t.Errorf("with a logger, slog.Default() heard %q", got)
	}
	mu.Lock()
	defer mu.Unlock()
	if n := strings.Count(strings.Join(heard, "\n"), `did you mean "grpc.testing.TestService"?`); n != 1 {
		t.Errorf("with a logger, it heard %q", heard)
	}
}

// TestTypoIsSaidOncePerFile: the unary and the stream interceptor of one
// stagger.DialOptions share what they said: a file's typo reaches
// slog.Default() once, not once per interceptor (a program making unary
// and stream calls heard each warning twice).
func TestTypoIsSaidOncePerFile(t *testing.T) {
	rec := &slogRecords{}
	old := slog.Default()
	slog.SetDefault(slog.New(rec))
	t.Cleanup(func() { slog.SetDefault(old) })
	const file = `{"methodConfig": [{"name": [{"service": "grpc.testing.TestServce"}],
  "retryPolicy": {"maxAttempts": 3, "initialBackoff": "0.1s", "maxBackoff": "1s", "backoffMultiplier": 2,
    "retryableStatusCodes": ["UNAVAILABLE"], "perAttemptRecvTimout": "1s"}}]}`
	srv := &portUnaryServer{answer: func(int) error { return nil }}
	client := portClientFile(t, srv, file)
	if _, err := client.EmptyCall(context.Background(), &testgrpc.Empty{}); err != nil {
		t.Fatal(err)
	}
	stream, err := client.FullDuplexCall(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := stream.Recv(); err == nil {
		t.Fatal("FullDuplexCall: a message from a server that does not implement it")
	}
	for _, want := range [][]string{
		{"WARN stagger: policy file warning", `did you mean "grpc.testing.TestService"?`},
		{"WARN stagger: policy file warning", `did you mean "perAttemptRecvTimeout"?`},
	} {
		if got := rec.with(want...); len(got) != 1 {
			t.Errorf("slog.Default() heard %d lines with %q, want 1; all:\n%s", len(got), want, strings.Join(rec.with(), "\n"))
		}
	}
}

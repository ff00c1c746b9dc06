//go:build go1.25

package test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors/logging"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/stagger-go/stagger"
	"github.com/stagger-go/stagger/interceptor"
	"github.com/stagger-go/stagger/policy"
	testingv1 "github.com/stagger-go/stagger/proto/stagger/testing/v1"
	"github.com/stagger-go/stagger/testserver"
)

// logLines is a logging.Logger that keeps "LEVEL message [fields]" lines.
type logLines struct {
	mu    sync.Mutex
	lines []string
}

func (l *logLines) logger() logging.Logger {
	return logging.LoggerFunc(func(_ context.Context, lvl logging.Level, msg string, fields ...any) {
		l.mu.Lock()
		defer l.mu.Unlock()
		l.lines = append(l.lines, fmt.Sprintf("%v %s %v", lvl, msg, fields))
	})
}

// at returns the lines logged at lvl that contain part.
func (l *logLines) at(lvl logging.Level, part string) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	for _, s := range l.lines {
		if strings.HasPrefix(s, fmt.Sprintf("%v ", lvl)) && strings.Contains(s, part) {
			out = append(out, s)
		}
	}
	return out
}

// A write (not known to be idempotent) whose connection resets after the
// request left is not retried, though the file lists UNAVAILABLE: the
// caller's error says why, its status stays the server's (the transport's),
// and the logger hears it at warning level once per method.
func TestAmbiguousGiveUpIsLoud(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var log logLines
		b := newBench(t, []interceptor.Option{interceptor.WithConfig(parse(t, retryFile)), interceptor.WithLogger(log.logger())})
		for i := range 2 {
			key := fmt.Sprint("reset-", i)
			var r interceptor.Report
			_, err := b.client.Write(context.Background(), &testingv1.WriteRequest{Script: &testingv1.Script{Key: key, ResetAttempts: 1}}, interceptor.WithReport(&r))
			if r.Reason != policy.ReasonAmbiguous || r.Attempts != 1 {
				t.Fatalf("call %d: report %+v, want 1 attempt, reason ambiguous", i, r)
			}
			st, ok := status.FromError(err)
			if !ok || st.Code() != codes.Unavailable {
				t.Fatalf("call %d: %v: status %v, want the transport's UNAVAILABLE", i, err, st)
			}
			if strings.Contains(st.Message(), "stagger") {
				t.Errorf("call %d: the status message %q is not the transport's", i, st.Message())
			}
			if !strings.HasPrefix(err.Error(), "stagger: gave up: not retried: ") || !strings.HasSuffix(err.Error(), st.Err().Error()) {
				t.Errorf("call %d: error %q does not say why it was not retried beside the status", i, err)
			}
		}
		if got := log.at(logging.LevelWarn, "not retried"); len(got) != 1 {
			t.Errorf("%d warnings of an ambiguous give-up, want 1 (the method's first): %q", len(got), got)
		}
	})
}

// A reload that fails to parse reaches the interceptor's logger at error
// level, once, with the parse error; a good reload afterwards logs nothing.
func TestRefusedReloadIsLogged(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		src, _, write := watchedFile(t, sourceFile(2, ""))
		srv := testserver.New()
		defer srv.Close()
		var log logLines
		cc, err := srv.Dial(stagger.DialOptionsFromSource(src, interceptor.WithLogger(log.logger()))...)
		if err != nil {
			t.Fatal(err)
		}
		defer cc.Close()
		if _, err := getAttempts(t, srv, cc, "before", 0); err != nil {
			t.Fatal(err)
		}
		write(`{"methodConfig": [{"retryPolicy": {"maxAttempts": 1}}]}`)
		if err := src.Reload(); err == nil {
			t.Fatal("a bad file reloaded without error")
		}
		for i := range 2 {
			if _, err := getAttempts(t, srv, cc, fmt.Sprint("bad-", i), 0); err != nil {
				t.Fatal(err)
			}
		}
		got := log.at(logging.LevelError, "policy: ")
		if len(got) != 1 || !strings.Contains(got[0], "not reloaded") {
			t.Fatalf("errors logged after a refused reload: %q, want one naming the parse error", got)
		}
		write(sourceFile(3, ""))
		if err := src.Reload(); err != nil {
			t.Fatal(err)
		}
		if _, err := getAttempts(t, srv, cc, "fixed", 0); err != nil {
			t.Fatal(err)
		}
		if got := log.at(logging.LevelError, ""); len(got) != 1 {
			t.Errorf("errors logged after a good reload: %q, want only the first", got)
		}
	})
}

// A call of a method the file does not cover ends with reason "no policy",
// not "attempts": it was never a candidate for a retry.
func TestUncoveredMethodReportsNoPolicy(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		putOnly := `{"methodConfig": [{
			"name": [{"service": "stagger.testing.v1.TestService", "method": "Put"}],
			"retryPolicy": {"maxAttempts": 3, "initialBackoff": "1s", "maxBackoff": "1s",
				"backoffMultiplier": 2, "retryableStatusCodes": ["UNAVAILABLE"]}}]}`
		var got ends
		b := newBench(t, []interceptor.Option{interceptor.WithConfig(parse(t, putOnly)), interceptor.WithCallHook(got.hook)})
		var r interceptor.Report
		err := b.get(context.Background(), &testingv1.Script{Key: "uncovered", FailAttempts: 1}, interceptor.WithReport(&r))
		if status.Code(err) != codes.Unavailable {
			t.Fatalf("%v, want UNAVAILABLE", err)
		}
		if want := (interceptor.Report{Attempts: 1, Reason: policy.ReasonNoPolicy, Code: codes.Unavailable, Target: testserver.BufnetTarget}); r != want {
			t.Errorf("report %+v, want %+v", r, want)
		}
		if evs, _ := got.all(); len(evs) != 1 || evs[0].Reason != policy.ReasonNoPolicy {
			t.Errorf("end events %+v, want one with reason no policy", evs)
		}
		if policy.ReasonNoPolicy.String() != "no policy" {
			t.Errorf("ReasonNoPolicy.String() = %q", policy.ReasonNoPolicy.String())
		}
	})
}

// Without a logger, a reload the Source refused reaches slog.Default() at
// error level once per change: not once per poll that finds the same bad
// file, nor once per connection or interceptor that follows the Source.
func TestRefusedReloadIsLoggedWithoutLogger(t *testing.T) {
	rec := &slogRecords{}
	old := slog.Default()
	slog.SetDefault(slog.New(rec))
	t.Cleanup(func() { slog.SetDefault(old) })
	synctest.Test(t, func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "retry.json")
		write := func(content string) {
			t.Helper()
			if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
				t.Fatal(err)
			}
		}
		write(sourceFile(2, ""))
		ticks := make(chan time.Time)
		src, err := policy.WatchFile(path, policy.WithPollTicks(ticks))
		if err != nil {
			t.Fatal(err)
		}
		defer src.Close()
		poll := func() {
			ticks <- time.Now()
			time.Sleep(time.Second) // past the Source's look again at a broken file
			synctest.Wait()
		}
		srv := testserver.New()
		defer srv.Close()
		var ccs []*grpc.ClientConn
		for range 2 {
			cc, err := srv.Dial(stagger.DialOptionsFromSource(src)...)
			if err != nil {
				t.Fatal(err)
			}
			defer cc.Close()
			ccs = append(ccs, cc)
		}
		calls := func(round string) {
			t.Helper()
			for i, cc := range ccs {
				if _, err := getAttempts(t, srv, cc, fmt.Sprint(round, "-", i), 0); err != nil {
					t.Fatal(err)
				}
				stream, err := testingv1.NewTestServiceClient(cc).ListItems(context.Background(), &testingv1.ListItemsRequest{})
				if err != nil {
					t.Fatal(err)
				}
				for {
					if _, err := stream.Recv(); err != nil {
						break
					}
				}
			}
		}
		refusals := func() []string { return rec.with("ERROR stagger: policy file not reloaded") }

		write(`{"methodConfig": [{"retryPolicy": {"maxAttempts": 1}}]}`)
		for round := range 3 { // three polls of the same bad file
			poll()
			calls(fmt.Sprint("bad-", round))
		}
		if got := refusals(); len(got) != 1 || !strings.Contains(got[0], "maxAttempts") || !strings.Contains(got[0], "stagger.file="+path) {
			t.Fatalf("slog.Default() heard %q after three polls of one bad file, want one error naming it", got)
		}
		write(`{"methodConfig": [`) // another bad file: a new refusal
		poll()
		calls("worse")
		if got := refusals(); len(got) != 2 {
			t.Fatalf("slog.Default() heard %d refusals after a second bad file, want 2: %q", len(got), got)
		}
		write(sourceFile(3, ""))
		poll()
		calls("fixed")
		if got := refusals(); len(got) != 2 {
			t.Fatalf("a good reload logged a refusal: %q", got)
		}
	})
}

//go:build go1.25

package test

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"testing/synctest"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/stagger-go/stagger"
	"github.com/stagger-go/stagger/interceptor"
	"github.com/stagger-go/stagger/policy"
	testingv1 "github.com/stagger-go/stagger/proto/stagger/testing/v1"
	"github.com/stagger-go/stagger/testserver"
)

// sourceFile is a policy file for every method of the test service: at most
// attempts attempts on UNAVAILABLE, 1s apart, and the top-level budget given
// ("" for none).
func sourceFile(attempts int, budget string) string {
	f := `{"methodConfig": [{
		"name": [{"service": "stagger.testing.v1.TestService"}],
		"retryPolicy": {"maxAttempts": ` + strconv.Itoa(attempts) + `, "initialBackoff": "1s", "maxBackoff": "1s",
			"backoffMultiplier": 2, "retryableStatusCodes": ["UNAVAILABLE"], "jitter": "NONE"}
	}]`
	if budget != "" {
		f += `, ` + budget
	}
	return f + `}`
}

// refusingThrottle is gRFC A6's throttle at its smallest: the first failure
// leaves 0 tokens, not above half of 1, so it refuses every retry (and A6's
// throttle refuses at once: no deferral).
const refusingThrottle = `"retryThrottling": {"maxTokens": 1, "tokenRatio": 0.1}`

// watchedFile writes content to a policy file of the test's own and
// returns the Source that watches it (it reloads when told: no polling),
// the file's path, and write, which rewrites the file. The Source closes
// when the test ends.
func watchedFile(t *testing.T, content string) (src *policy.Source, path string, write func(string)) {
	t.Helper()
	path = filepath.Join(t.TempDir(), "retry.json")
	write = func(content string) {
		t.Helper()
		if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write(content)
	src, err := policy.WatchFile(path, policy.WithPollInterval(0))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { src.Close() })
	return src, path, write
}

// getAttempts calls Get once with a script failing the first fail attempts
// and returns the call's error and the attempts the server saw.
func getAttempts(t *testing.T, srv *testserver.Server, cc *grpc.ClientConn, key string, fail int32) (int, error) {
	t.Helper()
	_, err := testingv1.NewTestServiceClient(cc).Get(context.Background(),
		&testingv1.GetRequest{Script: &testingv1.Script{Key: key, FailAttempts: fail}})
	return len(srv.Attempts(key)), err
}

// A file rewritten on disk, once reloaded, changes the retries of the next
// call through a connection dialed with its Source; a file that does not
// parse leaves the last good one in force.
func TestDialOptionsFromSourceFollowsFile(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		src, _, write := watchedFile(t, sourceFile(2, ""))
		srv := testserver.New()
		defer srv.Close()
		// Unlimited budget: this test is about the methods' policy.
		cc, err := srv.Dial(stagger.DialOptionsFromSource(src, interceptor.WithBudget(nil))...)
		if err != nil {
			t.Fatal(err)
		}
		defer cc.Close()

		if n, err := getAttempts(t, srv, cc, "v1", 2); status.Code(err) != codes.Unavailable || n != 2 {
			t.Fatalf("first file (2 attempts): %v after %d attempts, want UNAVAILABLE after 2", err, n)
		}
		write(sourceFile(4, ""))
		if err := src.Reload(); err != nil {
			t.Fatal(err)
		}
		if n, err := getAttempts(t, srv, cc, "v2", 2); err != nil || n != 3 {
			t.Fatalf("second file (4 attempts): %v after %d attempts, want success at the third", err, n)
		}
		write(`{"methodConfig": [{"retryPolicy": {"maxAttempts": 1}}]}`)
		if err := src.Reload(); err == nil {
			t.Fatal("a bad file reloaded without error")
		}
		if n, err := getAttempts(t, srv, cc, "bad", 2); err != nil || n != 3 {
			t.Fatalf("after a bad file: %v after %d attempts, want the last good file's success at the third", err, n)
		}
	})
}

// A reload that adds a budget moves the next calls to the file's; one that
// removes it moves them to the process default budget, never to none; a
// budget given in code outlasts every reload.
func TestDialOptionsFromSourceBudgetFollowsReload(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		throttled := parse(t, sourceFile(4, refusingThrottle))
		src := policy.NewSource(throttled)
		srv := testserver.New()
		defer srv.Close()
		cc, err := srv.Dial(stagger.DialOptionsFromSource(src)...)
		if err != nil {
			t.Fatal(err)
		}
		defer cc.Close()
		pinned, err := srv.Dial(stagger.DialOptionsFromSource(src, interceptor.WithBudget(nil))...)
		if err != nil {
			t.Fatal(err)
		}
		defer pinned.Close()

		steps := []struct {
			name    string
			file    *policy.Config
			cc      *grpc.ClientConn
			wantN   int  // attempts the call makes (its script fails the first)
			deflt   bool // the default budget admits its retry
			wantErr codes.Code
		}{
			{"file's throttle refuses", throttled, cc, 1, false, codes.Unavailable},
			{"budget removed: default budget", parse(t, sourceFile(4, "")), cc, 2, true, codes.OK},
			{"budget added again: the file's, fresh", parse(t, sourceFile(4, refusingThrottle)), cc, 1, false, codes.Unavailable},
			{"WithBudget(nil) outlasts the file", nil, pinned, 2, false, codes.OK},
		}
		for i, st := range steps {
			if st.file != nil {
				if err := src.Update(st.file); err != nil {
					t.Fatal(err)
				}
			}
			before := defaultBudgetState(cc).Allowed
			n, err := getAttempts(t, srv, st.cc, "step"+strconv.Itoa(i), 1)
			if status.Code(err) != st.wantErr || n != st.wantN {
				t.Errorf("%s: %v after %d attempts, want %v after %d", st.name, err, n, st.wantErr, st.wantN)
			}
			admitted := defaultBudgetState(cc).Allowed - before
			if want := map[bool]uint64{true: 1, false: 0}[st.deflt]; admitted != want {
				t.Errorf("%s: the default budget admitted %d retries, want %d", st.name, admitted, want)
			}
		}
	})
}

// A Source that holds no config is no file: calls go out once, unretried.
func TestDialOptionsFromSourceWithoutConfig(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := testserver.New()
		defer srv.Close()
		cc, err := srv.Dial(stagger.DialOptionsFromSource(policy.NewSource(nil))...)
		if err != nil {
			t.Fatal(err)
		}
		defer cc.Close()
		if n, err := getAttempts(t, srv, cc, "k", 1); status.Code(err) != codes.Unavailable || n != 1 {
			t.Errorf("%v after %d attempts, want UNAVAILABLE after 1", err, n)
		}
		if n, err := getAttempts(t, srv, cc, "ok", 0); err != nil || n != 1 {
			t.Errorf("%v after %d attempts, want success at the first", err, n)
		}
	})
}

// A nil source, or the nil *policy.Source of a WatchFile whose error was not
// checked, panics nowhere: every call fails at once, naming the cause, and
// reaches no server.
func TestDialOptionsFromSourceNil(t *testing.T) {
	var unchecked *policy.Source
	for name, src := range map[string]interceptor.ConfigSource{"nil": nil, "nil *policy.Source": unchecked} {
		t.Run(name, func(t *testing.T) {
			srv := testserver.New()
			defer srv.Close()
			cc, err := srv.Dial(stagger.DialOptionsFromSource(src)...)
			if err != nil {
				t.Fatal(err)
			}
			defer cc.Close()
			client := testingv1.NewTestServiceClient(cc)
			_, err = client.Get(context.Background(), &testingv1.GetRequest{Script: &testingv1.Script{Key: "k"}})
			if s := status.Convert(err); s.Code() != codes.FailedPrecondition || !strings.Contains(s.Message(), "nil source") {
				t.Errorf("unary: %v, want FailedPrecondition naming the nil source", err)
			}
			stream, err := client.ListItems(context.Background(), &testingv1.ListItemsRequest{})
			if err == nil {
				_, err = stream.Recv()
			}
			if status.Code(err) != codes.FailedPrecondition {
				t.Errorf("stream: %v, want FailedPrecondition", err)
			}
			if n := len(srv.Attempts("k")); n != 0 {
				t.Errorf("the server saw %d attempts, want 0", n)
			}
		})
	}
}

// BenchmarkDialOptionsFromSource: a Get that succeeds at once, over bufconn,
// through DialOptions and through DialOptionsFromSource on the same file
// (the source adds an atomic load per call).
func BenchmarkDialOptionsFromSource(b *testing.B) {
	cfg, err := policy.ParseConfig([]byte(sourceFile(4, `"retryThrottling": {"maxTokens": 100, "tokenRatio": 0.1}`)))
	if err != nil {
		b.Fatal(err)
	}
	for _, c := range []struct {
		name string
		dial []grpc.DialOption
	}{
		{"impl=file", stagger.DialOptions(cfg)},
		{"impl=source", stagger.DialOptionsFromSource(policy.NewSource(cfg))},
	} {
		b.Run(c.name, func(b *testing.B) { benchGets(b, c.dial) })
	}
}

package interceptor_test

import (
	"context"
	"strings"
	"testing"

	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors/retry"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/stagger-go/stagger/interceptor"
	"github.com/stagger-go/stagger/policy"
	testingv1 "github.com/stagger-go/stagger/proto/stagger/testing/v1"
)

// TestLeftoverMiddlewareOptionsLower: a go-grpc-middleware retry option
// left on a call after the migration takes its safe reading under stagger:
// retry.Disable() makes one attempt, WithMax(n) at most n (it counts
// attempts), and neither raises the file's 3 (the server counts the
// attempts of each call); each is still reported, once per method, naming
// stagger's option.
func TestLeftoverMiddlewareOptionsLower(t *testing.T) {
	rec := captureSlog(t)
	srv, client, closeAll := migrateClient(interceptor.WithConfig(mustParse(migrateFile)))
	defer closeAll()
	cases := []struct {
		key  string
		opts []grpc.CallOption
		want int
	}{
		{"disable", []grpc.CallOption{retry.Disable()}, 1},
		{"max0", []grpc.CallOption{retry.WithMax(0)}, 1},
		{"max1", []grpc.CallOption{retry.WithMax(1)}, 1},
		{"max2", []grpc.CallOption{retry.WithMax(2)}, 2},
		{"max5", []grpc.CallOption{retry.WithMax(5)}, 3},                                          // never raises the file's 3
		{"codes", []grpc.CallOption{retry.WithCodes(codes.Aborted)}, 3},                           // says nothing of attempts
		{"last wins", []grpc.CallOption{retry.WithMax(2), retry.Disable()}, 1},                    // as the middleware applies them
		{"with stagger's", []grpc.CallOption{interceptor.WithMaxAttempts(5), retry.Disable()}, 1}, // lowers WithMaxAttempts too
	}
	for _, tc := range cases {
		_, err := client.Get(context.Background(), &testingv1.GetRequest{Script: &testingv1.Script{Key: tc.key, FailAttempts: 10, Code: int32(codes.Unavailable)}}, tc.opts...)
		if status.Code(err) != codes.Unavailable {
			t.Fatalf("%s: %v, want UNAVAILABLE", tc.key, err)
		}
		if n := len(srv.Attempts(tc.key)); n != tc.want {
			t.Errorf("%s: the server saw %d attempts, want %d", tc.key, n, tc.want)
		}
	}
	lines := rec.with("go-grpc-middleware", "stagger.reason=foreign option")
	if len(lines) != 1 {
		t.Fatalf("slog.Default() heard %d foreign-option notices, want 1 (once per method): %q", len(lines), lines)
	}
	for _, name := range []string{"interceptor.Disable", "WithMaxAttempts"} {
		if !strings.Contains(lines[0], name) {
			t.Errorf("the notice %q does not name %s", lines[0], name)
		}
	}
}

// TestDisableReportSaysSo: a call with interceptor.Disable, which stagger
// hands to grpc untouched, has a Report that says so: one attempt, reason
// "disabled", its code and backend; not the zero Report, whose Reason
// prints as "retry".
func TestDisableReportSaysSo(t *testing.T) {
	srv, client, closeAll := migrateClient(interceptor.WithConfig(mustParse(migrateFile)))
	defer closeAll()
	for _, fail := range []int32{0, 1} {
		var r interceptor.Report
		key := "disabled-" + string(rune('0'+fail))
		_, err := client.Get(context.Background(), &testingv1.GetRequest{Script: &testingv1.Script{Key: key, FailAttempts: fail, Code: int32(codes.Unavailable)}},
			interceptor.Disable(), interceptor.WithReport(&r))
		if n := len(srv.Attempts(key)); n != 1 {
			t.Fatalf("%s: the server saw %d attempts, want 1", key, n)
		}
		if r.Attempts != 1 || r.Reason.String() != "disabled" || r.Code != status.Code(err) || r.Target == "" || r.Disabled {
			t.Errorf("%s: %v, report %+v; want 1 attempt, reason disabled, the call's code, its target, not the process's switch", key, err, r)
		}
		if s := r.String(); !strings.Contains(s, "ended: disabled") {
			t.Errorf("%s: the report reads %q, want it to say disabled", key, s)
		}
	}
}

// TestLeftoverMiddlewareOptionsLowerHedges: on a hedged method, a leftover
// retry.Disable() sends no hedge and WithMax(2) at most one (the server
// counts the attempts of a call whose every attempt fails UNAVAILABLE,
// non-fatal: the file's 3 otherwise).
func TestLeftoverMiddlewareOptionsLowerHedges(t *testing.T) {
	const hedgeFile = `{"methodConfig": [{"name": [{"service": "stagger.testing.v1.TestService"}], "idempotent": true,
  "hedgingPolicy": {"maxAttempts": 3, "hedgingDelay": "0.001s", "nonFatalStatusCodes": ["UNAVAILABLE"]}}]}`
	srv, client, closeAll := migrateClient(interceptor.WithConfig(mustParse(hedgeFile)), interceptor.WithBudget(nil))
	defer closeAll()
	for _, tc := range []struct {
		key  string
		opts []grpc.CallOption
		want int
	}{
		{"hedge-disable", []grpc.CallOption{retry.Disable()}, 1},
		{"hedge-max2", []grpc.CallOption{retry.WithMax(2)}, 2},
		{"hedge-none", nil, 3},
	} {
		_, err := client.Get(context.Background(), &testingv1.GetRequest{Script: &testingv1.Script{Key: tc.key, FailAttempts: 10, Code: int32(codes.Unavailable)}}, tc.opts...)
		if status.Code(err) != codes.Unavailable {
			t.Fatalf("%s: %v, want UNAVAILABLE", tc.key, err)
		}
		if n := len(srv.Attempts(tc.key)); n != tc.want {
			t.Errorf("%s: the server saw %d attempts, want %d", tc.key, n, tc.want)
		}
	}
}

// TestStateDisabledFollowsTheFile: State.Disabled says whether the file the
// interceptors follow turns stagger off, as of the latest call that
// followed a new file; a source that goes back to no file turns it off.
func TestStateDisabledFollowsTheFile(t *testing.T) {
	var src swappable
	st := interceptor.NewState()
	icpt := interceptor.UnaryClientInterceptor(interceptor.WithConfigSource(&src), interceptor.WithState(st))
	call := func() {
		t.Helper()
		if err := icpt(context.Background(), method, nil, nil, nil, okInvoker); err != nil {
			t.Fatal(err)
		}
	}
	for _, step := range []struct {
		file string
		want bool
	}{
		{migrateFile, false},
		{`{"disabled": true}`, true},
		{"", false}, // no file
		{`{"disabled": true}`, true},
		{migrateFile, false},
	} {
		var cfg *policy.Config
		if step.file != "" {
			cfg = mustParse(step.file)
		}
		src.cfg.Store(cfg)
		call()
		if got := st.Disabled(); got != step.want {
			t.Fatalf("after a call that follows %q: State.Disabled() = %v, want %v", step.file, got, step.want)
		}
	}
}

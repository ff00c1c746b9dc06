package staggerconnect_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/durationpb"

	staggerconnect "github.com/stagger-go/stagger/connect"
	"github.com/stagger-go/stagger/interceptor"
	"github.com/stagger-go/stagger/policy"
	testingv1 "github.com/stagger-go/stagger/proto/stagger/testing/v1"
)

// retryFile retries UNAVAILABLE for every method of the test service, 5
// attempts, with backoff short enough for tests; no budget.
const retryFile = `{
  "methodConfig": [{
    "name": [{"service": "stagger.testing.v1.TestService"}],
    "retryPolicy": {
      "maxAttempts": 5,
      "initialBackoff": "0.001s",
      "maxBackoff": "0.002s",
      "backoffMultiplier": 2,
      "retryableStatusCodes": ["UNAVAILABLE"]
    }
  }]
}`

func parse(t *testing.T, file string) *policy.Config {
	t.Helper()
	cfg, err := policy.ParseConfig([]byte(file))
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

func newClient(t *testing.T, file string, opts ...interceptor.Option) *staggerconnect.Client {
	t.Helper()
	c, err := staggerconnect.NewClient(parse(t, file), opts...)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func forEachProtocol(t *testing.T, fn func(t *testing.T, p protocol)) {
	for _, p := range protocols {
		t.Run(p.name, func(t *testing.T) { fn(t, p) })
	}
}

func TestRetriesUnavailable(t *testing.T) {
	forEachProtocol(t, func(t *testing.T, p protocol) {
		ts := newTestServer(t, p.h2c, nil)
		var rep interceptor.Report
		client := ts.testClient(p, newClient(t, retryFile))
		ctx := staggerconnect.WithCallOptions(context.Background(), interceptor.WithReport(&rep))
		// Write is not idempotent: a status from the server is retried
		// all the same.
		resp, err := client.Write(ctx, connect.NewRequest(&testingv1.WriteRequest{Script: &testingv1.Script{Key: "k", FailAttempts: 2}}))
		if err != nil {
			t.Fatal(err)
		}
		if got := resp.Msg.GetReply().GetAttempt(); got != 3 {
			t.Errorf("answered by attempt %d, want 3", got)
		}
		if rep.Attempts != 3 || rep.Retries != 2 {
			t.Errorf("report: %d attempts, %d retries; want 3, 2", rep.Attempts, rep.Retries)
		}
		rec := ts.svc.Record("k")
		for i, h := range rec.Headers {
			want := ""
			if i > 0 {
				want = fmt.Sprint(i)
			}
			if got := h.Get("grpc-previous-rpc-attempts"); got != want {
				t.Errorf("attempt %d: grpc-previous-rpc-attempts %q, want %q", i+1, got, want)
			}
		}
	})
}

func TestGivesUpWithConnectError(t *testing.T) {
	forEachProtocol(t, func(t *testing.T, p protocol) {
		ts := newTestServer(t, p.h2c, nil)
		client := ts.testClient(p, newClient(t, retryFile))
		_, err := client.Get(context.Background(), connect.NewRequest(&testingv1.GetRequest{Script: &testingv1.Script{Key: "k", FailAttempts: 9, Message: "down"}}))
		var cerr *connect.Error
		if !errors.As(err, &cerr) {
			t.Fatalf("error %T %v is no *connect.Error", err, err)
		}
		if cerr.Code() != connect.CodeUnavailable || cerr.Message() != "down" {
			t.Errorf("error %v: want unavailable: down", err)
		}
		var ie *interceptor.Error
		if !errors.As(err, &ie) || ie.Attempts != 5 || ie.Reason != policy.ReasonAttempts {
			t.Errorf("stagger's error: %+v, want 5 attempts, reason attempts", ie)
		}
		if got := ts.svc.Record("k").Attempts; got != 5 {
			t.Errorf("server saw %d attempts, want 5", got)
		}
	})
}

func TestPushback(t *testing.T) {
	for _, tc := range []struct {
		name     string
		script   *testingv1.Script
		attempts int
		reason   policy.Reason
	}{
		{name: "trailer stops", script: &testingv1.Script{FailAttempts: 9, Pushback: []string{"-1"}}, attempts: 1, reason: policy.ReasonPushback},
		{name: "trailer delays", script: &testingv1.Script{FailAttempts: 1, Pushback: []string{"30"}}, attempts: 2},
		{name: "RetryInfo delays", script: &testingv1.Script{FailAttempts: 1, RetryInfoDelay: durationpb.New(30 * time.Millisecond)}, attempts: 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			forEachProtocol(t, func(t *testing.T, p protocol) {
				ts := newTestServer(t, p.h2c, nil)
				var rep interceptor.Report
				client := ts.testClient(p, newClient(t, retryFile))
				ctx := staggerconnect.WithCallOptions(context.Background(), interceptor.WithReport(&rep))
				tc.script.Key = "k"
				_, err := client.Get(ctx, connect.NewRequest(&testingv1.GetRequest{Script: tc.script}))
				if rep.Attempts != tc.attempts {
					t.Errorf("%d attempts, want %d (err %v)", rep.Attempts, tc.attempts, err)
				}
				if tc.reason != 0 {
					if rep.Reason != tc.reason {
						t.Errorf("reason %q, want %q", rep.Reason, tc.reason)
					}
					return
				}
				if err != nil {
					t.Fatal(err)
				}
				// The backoff is at most 2 ms: the pause is the server's.
				if rep.Delay < 30*time.Millisecond {
					t.Errorf("paused %v, want the server's 30ms", rep.Delay)
				}
			})
		})
	}
}

func TestAmbiguousReset(t *testing.T) {
	forEachProtocol(t, func(t *testing.T, p protocol) {
		t.Run("not idempotent: refused", func(t *testing.T) {
			ts := newTestServer(t, p.h2c, nil)
			var rep interceptor.Report
			client := ts.testClient(p, newClient(t, retryFile))
			ctx := staggerconnect.WithCallOptions(context.Background(), interceptor.WithReport(&rep))
			_, err := client.Write(ctx, connect.NewRequest(&testingv1.WriteRequest{Script: &testingv1.Script{Key: "k", ResetAttempts: 1}}))
			if err == nil {
				t.Fatal("a reset call succeeded")
			}
			if rep.Reason != policy.ReasonAmbiguous || rep.Attempts != 1 {
				t.Errorf("report %+v, want 1 attempt, reason ambiguous (err %v)", rep, err)
			}
			if rec := ts.svc.Record("k"); rec.Runs != 1 {
				t.Errorf("ran %d times, want 1", rec.Runs)
			}
		})
		t.Run("idempotent by spec: retried", func(t *testing.T) {
			ts := newTestServer(t, p.h2c, nil)
			client := ts.testClient(p, newClient(t, retryFile))
			resp, err := client.Put(context.Background(), connect.NewRequest(&testingv1.PutRequest{Script: &testingv1.Script{Key: "k", ResetAttempts: 1}}))
			if err != nil {
				t.Fatal(err)
			}
			if got := resp.Msg.GetReply().GetAttempt(); got != 2 {
				t.Errorf("answered by attempt %d, want 2", got)
			}
		})
		t.Run("keyed: retried", func(t *testing.T) {
			ts := newTestServer(t, p.h2c, nil)
			client := ts.testClient(p, newClient(t, retryFile, interceptor.WithIdempotencyKey("idempotency-key")))
			resp, err := client.Write(context.Background(), connect.NewRequest(&testingv1.WriteRequest{Script: &testingv1.Script{Key: "k", ResetAttempts: 1}}))
			if err != nil {
				t.Fatal(err)
			}
			if got := resp.Msg.GetReply().GetAttempt(); got != 2 {
				t.Errorf("answered by attempt %d, want 2", got)
			}
			rec := ts.svc.Record("k")
			if len(rec.Headers) != 2 || rec.Headers[0].Get("idempotency-key") == "" || rec.Headers[0].Get("idempotency-key") != rec.Headers[1].Get("idempotency-key") {
				t.Errorf("the attempts' keys differ or are missing: %v", rec.Headers)
			}
		})
	})
}

func TestNilConfig(t *testing.T) {
	if _, err := staggerconnect.NewClient(nil); !errors.Is(err, staggerconnect.ErrNilConfig) {
		t.Errorf("NewClient(nil): %v, want ErrNilConfig", err)
	}
	if _, err := staggerconnect.NewClientFromSource(nil); !errors.Is(err, staggerconnect.ErrNilConfig) {
		t.Errorf("NewClientFromSource(nil): %v, want ErrNilConfig", err)
	}
	var src *policy.Source
	if _, err := staggerconnect.NewClientFromSource(src); !errors.Is(err, staggerconnect.ErrNilConfig) {
		t.Errorf("NewClientFromSource((*policy.Source)(nil)): %v, want ErrNilConfig", err)
	}
}

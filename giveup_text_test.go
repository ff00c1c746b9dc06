package stagger_test

import (
	"context"
	"strings"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	testingv1 "github.com/stagger-go/stagger/proto/stagger/testing/v1"
	"github.com/stagger-go/stagger/testserver"
)

// TestGiveUpTextAsTheGuideSays checks docs/migrating-from-grpc-go.md's
// difference 7 on the grpc-go this test is built with (the oldest lane:
// v1.64.1; the newest: v1.85.0): a call that used its every attempt
// returns, from stagger, "stagger: gave up: max retries exhausted: failed
// after N attempts: " and the attempt's error, with the server's status
// unchanged; from grpc-go v1.64 the attempt's error as it is, from v1.85
// that error wrapped as "max retries exhausted: failed after N attempts:
// ...", which status.FromError puts in the status message. The file has
// its own throttle: the process's default budget (budget.DefaultBackends)
// is shared with the package's Examples.
func TestGiveUpTextAsTheGuideSays(t *testing.T) {
	const sc = `{"methodConfig": [{"name": [{"service": "stagger.testing.v1.TestService"}],
	  "retryPolicy": {"maxAttempts": 2, "initialBackoff": "0.001s", "maxBackoff": "0.001s",
	    "backoffMultiplier": 1, "retryableStatusCodes": ["UNAVAILABLE"]}}],
	  "retryThrottling": {"maxTokens": 10, "tokenRatio": 0.1}}`
	srv := testserver.New()
	defer srv.Close()
	grpcgo, withStagger := dialBoth(srv, sc)
	defer grpcgo.Close()
	defer withStagger.Close()
	call := func(conn *grpc.ClientConn, key string) error {
		_, err := testingv1.NewTestServiceClient(conn).Get(context.Background(), &testingv1.GetRequest{
			Script: &testingv1.Script{Key: key, FailAttempts: 100, Message: "down"}})
		return err
	}
	const attemptErr = "rpc error: code = Unavailable desc = down"

	err := call(withStagger, "stagger")
	if got, want := err.Error(), "stagger: gave up: max retries exhausted: failed after 2 attempts: "+attemptErr; got != want {
		t.Errorf("stagger's text %q, want %q", got, want)
	}
	if s := status.Convert(err); s.Code() != codes.Unavailable || s.Message() != "down" {
		t.Errorf("stagger's status %v %q, want the server's, Unavailable \"down\"", s.Code(), s.Message())
	}

	err = call(grpcgo, "grpc-go")
	if n := len(srv.Attempts("grpc-go")); n != 2 {
		t.Fatalf("grpc-go made %d attempts, want 2", n)
	}
	switch grpc.Version {
	case "1.64.1":
		if err.Error() != attemptErr || status.Convert(err).Message() != "down" {
			t.Errorf("grpc-go %s: %q (status message %q), want the attempt's error as it is", grpc.Version, err, status.Convert(err).Message())
		}
	case "1.85.0":
		want := "max retries exhausted: failed after 2 attempts: " + attemptErr
		if !strings.Contains(err.Error(), want) || status.Convert(err).Message() != want {
			t.Errorf("grpc-go %s: %q (status message %q), want it wrapped as %q", grpc.Version, err, status.Convert(err).Message(), want)
		}
	default:
		t.Skipf("grpc-go %s: the guide states v1.64's and v1.85's texts only", grpc.Version)
	}
}

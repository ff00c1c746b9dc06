package stagger_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/stagger-go/stagger"
	"github.com/stagger-go/stagger/policy"
	testingv1 "github.com/stagger-go/stagger/proto/stagger/testing/v1"
	"github.com/stagger-go/stagger/testserver"
)

// The examples of docs/migrating-from-grpc-go.md: one service config, given
// to grpc-go's own retry and to stagger, against the same scripted failures.

// serviceConfig is a plain gRPC service config, as grpc-go users write it.
const serviceConfig = `{
  "methodConfig": [{
    "name": [{"service": "stagger.testing.v1.TestService"}],
    "retryPolicy": {
      "maxAttempts": 4, "initialBackoff": "0.01s", "maxBackoff": "0.1s",
      "backoffMultiplier": 2, "retryableStatusCodes": ["UNAVAILABLE"]
    }
  }],
  "retryThrottling": {"maxTokens": 10, "tokenRatio": 0.1}
}`

// dialBoth dials srv twice: with grpc-go's retry configured by the service
// config sc (grpc.WithDefaultServiceConfig), and with stagger following the
// same JSON (policy.ParseConfig, stagger.DialOptions).
func dialBoth(srv *testserver.Server, sc string) (grpcgo, withStagger *grpc.ClientConn) {
	creds := grpc.WithTransportCredentials(insecure.NewCredentials())
	grpcgo, err := grpc.NewClient(testserver.BufnetTarget, srv.DialOption(), creds,
		grpc.WithDefaultServiceConfig(sc))
	if err != nil {
		log.Fatal(err)
	}
	cfg, err := policy.ParseConfig([]byte(sc)) // the same JSON
	if err != nil {
		log.Fatal(err)
	}
	withStagger, err = grpc.NewClient(testserver.BufnetTarget,
		append(stagger.DialOptions(cfg), srv.DialOption(), creds)...)
	if err != nil {
		log.Fatal(err)
	}
	return grpcgo, withStagger
}

// The same service config heals the same failure with grpc-go's retry and
// with stagger: the server fails the first two attempts with UNAVAILABLE.
func Example_sameServiceConfig() {
	srv := testserver.New()
	defer srv.Close()
	grpcgo, withStagger := dialBoth(srv, serviceConfig)
	defer grpcgo.Close()
	defer withStagger.Close()

	for _, c := range []struct {
		name string
		conn *grpc.ClientConn
	}{{"grpc-go", grpcgo}, {"stagger", withStagger}} {
		resp, err := testingv1.NewTestServiceClient(c.conn).Get(context.Background(), &testingv1.GetRequest{
			Script: &testingv1.Script{Key: c.name, FailAttempts: 2},
		})
		fmt.Printf("%s: served by attempt %d of %d, error %v\n", c.name, resp.GetReply().GetAttempt(), len(srv.Attempts(c.name)), err)
	}
	// Output:
	// grpc-go: served by attempt 3 of 3, error <nil>
	// stagger: served by attempt 3 of 3, error <nil>
}

// A hedgingPolicy is not read by grpc-go (its service config has no such
// field): its call waits for the slow first attempt. stagger sends a second attempt after hedgingDelay
// and takes the first answer (Get is marked idempotent in its proto, as
// hedging requires).
func Example_hedging() {
	const hedgingConfig = `{
	  "methodConfig": [{
	    "name": [{"service": "stagger.testing.v1.TestService", "method": "Get"}],
	    "hedgingPolicy": {"maxAttempts": 2, "hedgingDelay": "0.01s"}
	  }]
	}`
	srv := testserver.New()
	defer srv.Close()
	grpcgo, withStagger := dialBoth(srv, hedgingConfig)
	defer grpcgo.Close()
	defer withStagger.Close()

	for _, c := range []struct {
		name string
		conn *grpc.ClientConn
	}{{"grpc-go", grpcgo}, {"stagger", withStagger}} {
		// The first attempt takes 300ms, the others answer at once.
		resp, err := testingv1.NewTestServiceClient(c.conn).Get(context.Background(), &testingv1.GetRequest{
			Script: &testingv1.Script{Key: c.name, AttemptDelays: []*durationpb.Duration{durationpb.New(300 * time.Millisecond)}},
		})
		fmt.Printf("%s: served by attempt %d, error %v\n", c.name, resp.GetReply().GetAttempt(), err)
	}
	// Output:
	// grpc-go: served by attempt 1, error <nil>
	// stagger: served by attempt 2, error <nil>
}

// Deadline awareness (difference 4): a pause that cannot end before the
// caller's deadline is not taken. The server fails every attempt with
// UNAVAILABLE; the pause before a retry is about 1s; the caller gives the
// call 200ms. grpc-go starts the pause and returns DEADLINE_EXCEEDED when
// the deadline cuts it; stagger returns the attempt's UNAVAILABLE at once.
func Example_deadlineAwareness() {
	const slowBackoff = `{
	  "methodConfig": [{
	    "name": [{"service": "stagger.testing.v1.TestService"}],
	    "retryPolicy": {
	      "maxAttempts": 5, "initialBackoff": "1s", "maxBackoff": "10s",
	      "backoffMultiplier": 2, "retryableStatusCodes": ["UNAVAILABLE"]
	    }
	  }]
	}`
	srv := testserver.New()
	defer srv.Close()
	grpcgo, withStagger := dialBoth(srv, slowBackoff)
	defer grpcgo.Close()
	defer withStagger.Close()

	for _, c := range []struct {
		name string
		conn *grpc.ClientConn
	}{{"grpc-go", grpcgo}, {"stagger", withStagger}} {
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		start := time.Now()
		_, err := testingv1.NewTestServiceClient(c.conn).Get(ctx, &testingv1.GetRequest{
			Script: &testingv1.Script{Key: c.name, FailAttempts: 100},
		})
		cancel()
		fmt.Printf("%s: %v, at once: %v\n", c.name, status.Code(err), time.Since(start) < 100*time.Millisecond)
	}
	// Output:
	// grpc-go: DeadlineExceeded, at once: false
	// stagger: Unavailable, at once: true
}

// Ambiguity (difference 8): the server runs Write, which is not known to be
// idempotent, and its connection drops before the answer leaves: the client
// cannot know whether the write happened. grpc-go sends it again; stagger
// returns the failure (reason ambiguous) rather than run it twice.
func Example_ambiguity() {
	srv := testserver.New()
	defer srv.Close()
	grpcgo, withStagger := dialBoth(srv, serviceConfig)
	defer grpcgo.Close()
	defer withStagger.Close()

	for _, c := range []struct {
		name string
		conn *grpc.ClientConn
	}{{"grpc-go", grpcgo}, {"stagger", withStagger}} {
		_, err := testingv1.NewTestServiceClient(c.conn).Write(context.Background(), &testingv1.WriteRequest{
			Script: &testingv1.Script{Key: c.name, ResetAttempts: 1},
		})
		fmt.Printf("%s: %v, the server ran it %d times\n", c.name, status.Code(err), len(srv.Attempts(c.name)))
	}
	// Output:
	// grpc-go: OK, the server ran it 2 times
	// stagger: Unavailable, the server ran it 1 times
}

// A reply larger than the call's limit (grpc.MaxCallRecvMsgSize) fails the
// call with a RESOURCE_EXHAUSTED that grpc-go raised itself, after the
// response headers: neither grpc-go nor stagger retries it, though the
// service config lists the code (the reply will not shrink).
func Example_messageTooLarge() {
	const exhaustedConfig = `{
	  "methodConfig": [{
	    "name": [{"service": "stagger.testing.v1.TestService"}],
	    "retryPolicy": {
	      "maxAttempts": 4, "initialBackoff": "0.01s", "maxBackoff": "0.1s",
	      "backoffMultiplier": 2, "retryableStatusCodes": ["RESOURCE_EXHAUSTED"]
	    }
	  }],
	  "retryThrottling": {"maxTokens": 10, "tokenRatio": 0.1}
	}`
	srv := testserver.New()
	defer srv.Close()
	grpcgo, withStagger := dialBoth(srv, exhaustedConfig)
	defer grpcgo.Close()
	defer withStagger.Close()

	for _, c := range []struct {
		name string
		conn *grpc.ClientConn
	}{{"grpc-go", grpcgo}, {"stagger", withStagger}} {
		_, err := testingv1.NewTestServiceClient(c.conn).Get(context.Background(), &testingv1.GetRequest{
			Script: &testingv1.Script{Key: c.name},
		}, grpc.MaxCallRecvMsgSize(1))
		fmt.Printf("%s: %v after %d attempts\n", c.name, status.Code(err), len(srv.Attempts(c.name)))
	}
	// Output:
	// grpc-go: ResourceExhausted after 1 attempts
	// stagger: ResourceExhausted after 1 attempts
}

package stagger_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
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

// A hedgingPolicy is parsed by grpc-go but not applied: its call waits for
// the slow first attempt. stagger sends a second attempt after hedgingDelay
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

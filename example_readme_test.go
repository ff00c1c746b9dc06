package stagger_test

import (
	"context"
	"fmt"
	"log"
	"os"
	"path/filepath"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/stagger-go/stagger"
	"github.com/stagger-go/stagger/policy"
	testingv1 "github.com/stagger-go/stagger/proto/stagger/testing/v1"
	"github.com/stagger-go/stagger/testserver"
)

// The README's usage example, line for line, against the test server on
// loopback TCP: load a policy file, dial with DialOptions, call.
func ExampleDialOptions() {
	srv := testserver.New(testserver.WithTCP())
	defer srv.Close()
	target := srv.Addr()

	cfg, err := policy.LoadFile("examples/policies/retry.json") // a gRPC service config, JSON or YAML
	if err != nil {
		log.Fatal(err) // every error at once, each naming its field
	}
	opts := append(stagger.DialOptions(cfg), grpc.WithTransportCredentials(insecure.NewCredentials()))
	conn, err := grpc.NewClient(target, opts...)
	if err != nil {
		log.Fatal(err)
	}
	defer conn.Close()
	client := testingv1.NewTestServiceClient(conn) // every method retries per retry.json
	ctx := context.Background()
	resp, err := client.Get(ctx, &testingv1.GetRequest{})

	fmt.Println(resp.GetReply().GetAttempt(), err)
	// Output: 1 <nil>
}

// The README's reload example: a policy file watched on disk, a connection
// dialed with DialOptionsFromSource, and the file raised from 2 attempts to
// 4 between two calls that fail twice. Reload applies the change at once (the
// Source's own polling would within a second).
func ExampleDialOptionsFromSource() {
	srv := testserver.New(testserver.WithTCP())
	defer srv.Close()
	target := srv.Addr()
	dir, err := os.MkdirTemp("", "stagger-example")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "retry.json")
	file := func(attempts int) []byte {
		return []byte(fmt.Sprintf(`{
		  "methodConfig": [{
		    "name": [{"service": "stagger.testing.v1.TestService"}],
		    "retryPolicy": {"maxAttempts": %d, "initialBackoff": "0.01s", "maxBackoff": "0.1s",
		      "backoffMultiplier": 2, "retryableStatusCodes": ["UNAVAILABLE"]}
		  }],
		  "retryThrottling": {"maxTokens": 10, "tokenRatio": 0.1}
		}`, attempts))
	}
	if err := os.WriteFile(path, file(2), 0o600); err != nil {
		log.Fatal(err)
	}

	src, err := policy.WatchFile(path) // polls every second (policy.WithPollInterval); a bad file keeps the last good one
	if err != nil {
		log.Fatal(err)
	}
	defer src.Close()
	opts := append(stagger.DialOptionsFromSource(src), grpc.WithTransportCredentials(insecure.NewCredentials()))
	conn, err := grpc.NewClient(target, opts...)
	if err != nil {
		log.Fatal(err)
	}
	defer conn.Close()
	client := testingv1.NewTestServiceClient(conn) // every call follows the file as it is when the call starts

	failTwice := func(key string) {
		resp, err := client.Get(context.Background(), &testingv1.GetRequest{
			Script: &testingv1.Script{Key: key, FailAttempts: 2},
		})
		fmt.Printf("%d attempts, code %v, served by attempt %d\n", len(srv.Attempts(key)), status.Code(err), resp.GetReply().GetAttempt())
	}
	failTwice("before")
	if err := os.WriteFile(path, file(4), 0o600); err != nil {
		log.Fatal(err)
	}
	if err := src.Reload(); err != nil {
		log.Fatal(err)
	}
	failTwice("after")
	// Output:
	// 2 attempts, code Unavailable, served by attempt 0
	// 3 attempts, code OK, served by attempt 3
}

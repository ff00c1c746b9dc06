package stagger_test

import (
	"context"
	"fmt"
	"testing"

	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/stagger-go/stagger"
	"github.com/stagger-go/stagger/interceptor"
	"github.com/stagger-go/stagger/policy"
	testingv1 "github.com/stagger-go/stagger/proto/stagger/testing/v1"
	"github.com/stagger-go/stagger/testserver"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// The setup of README.md: a policy file, DialOptions, a call that heals.
func Example() {
	srv := testserver.New()
	defer srv.Close()

	cfg, err := policy.ParseConfig([]byte(`{
	  "methodConfig": [{
	    "name": [{"service": "stagger.testing.v1.TestService"}],
	    "retryPolicy": {
	      "maxAttempts": 4, "initialBackoff": "0.01s", "maxBackoff": "0.1s",
	      "backoffMultiplier": 2, "retryableStatusCodes": ["UNAVAILABLE"]
	    }
	  }],
	  "retryThrottling": {"maxTokens": 100, "tokenRatio": 0.1}
	}`))
	if err != nil {
		fmt.Println(err)
		return
	}
	opts := append(stagger.DialOptions(cfg,
		interceptor.WithHook(func(e interceptor.Event) {
			fmt.Printf("%s after attempt %d: %v\n", e.Kind, e.Attempt, e.Code)
		}),
	), srv.DialOption(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	conn, err := grpc.NewClient(testserver.BufnetTarget, opts...)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer conn.Close()

	client := testingv1.NewTestServiceClient(conn)
	// The server fails the first two attempts with UNAVAILABLE.
	resp, err := client.Get(context.Background(), &testingv1.GetRequest{
		Script: &testingv1.Script{Key: "example", FailAttempts: 2},
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("served by attempt", resp.GetReply().GetAttempt())
	// Output:
	// retry after attempt 1: Unavailable
	// retry after attempt 2: Unavailable
	// served by attempt 3
}

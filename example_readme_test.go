package stagger_test

import (
	"context"
	"fmt"
	"log"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

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

	cfg, err := policy.LoadFile("examples/policies/retry.json")
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
	resp, err := client.Get(context.Background(), &testingv1.GetRequest{})

	fmt.Println(resp.GetReply().GetAttempt(), err)
	// Output: 1 <nil>
}

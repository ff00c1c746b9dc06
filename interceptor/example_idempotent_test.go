package interceptor_test

import (
	"context"
	"fmt"
	"time"

	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/stagger-go/stagger/interceptor"
	testingv1 "github.com/stagger-go/stagger/proto/stagger/testing/v1"
)

// WithIdempotentMethods says in code which methods are safe to repeat, where
// the protos carry no idempotency_level: here Write, so its per-attempt
// timeout cuts the slow first attempt and retries it.
func ExampleWithIdempotentMethods() {
	const file = `{"methodConfig": [{
	  "name": [{"service": "stagger.testing.v1.TestService"}],
	  "retryPolicy": {
	    "maxAttempts": 3, "initialBackoff": "0.001s", "maxBackoff": "1s",
	    "backoffMultiplier": 2, "jitter": "NONE", "retryableStatusCodes": ["UNAVAILABLE"],
	    "perAttemptRecvTimeout": "0.1s"
	  }
	}]}`
	safe := func(method string) bool { return method == testingv1.TestService_Write_FullMethodName }
	srv, client, closeAll := migrateClient(interceptor.WithConfig(mustParse(file)),
		interceptor.WithIdempotentMethods(safe), printRetries)
	defer closeAll()

	// The first attempt takes 1s, the others answer at once.
	_, err := client.Write(context.Background(), &testingv1.WriteRequest{
		Script: &testingv1.Script{Key: "w", AttemptDelays: []*durationpb.Duration{durationpb.New(time.Second)}},
	})
	fmt.Println(status.Code(err), "after", len(srv.Attempts("w")), "attempts")
	// Output:
	// retry after attempt 1 (DeadlineExceeded), pause 1ms
	// OK after 2 attempts
}

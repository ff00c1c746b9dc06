package interceptor_test

import (
	"context"
	"errors"
	"fmt"
	"io"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"

	"github.com/stagger-go/stagger/interceptor"
	"github.com/stagger-go/stagger/policy"
	testingv1 "github.com/stagger-go/stagger/proto/stagger/testing/v1"
	"github.com/stagger-go/stagger/testserver"
)

// A paginated list resumes where it broke. ListItems takes start_after, as
// a list method takes a page token; the resume function asks for the items
// after the last one the application received. The server breaks the
// stream twice, after three items each time; the application reads every
// item once, in order.
func ExampleWithResume() {
	srv := testserver.New()
	defer srv.Close()
	cfg, err := policy.ParseConfig([]byte(`{"methodConfig": [{
		"name": [{"service": "stagger.testing.v1.TestService", "method": "ListItems"}],
		"retryPolicy": {"maxAttempts": 3, "initialBackoff": "0.001s", "maxBackoff": "0.001s",
			"backoffMultiplier": 1, "retryableStatusCodes": ["UNAVAILABLE"]}
	}]}`))
	if err != nil {
		fmt.Println(err)
		return
	}
	resume := interceptor.TypedResume(func(req *testingv1.ListItemsRequest, last *testingv1.ListItemsResponse) (*testingv1.ListItemsRequest, error) {
		if last.GetReply() == nil {
			return nil, interceptor.ErrCannotResume // nothing to continue after
		}
		next := proto.Clone(req).(*testingv1.ListItemsRequest)
		next.StartAfter = last.GetReply().GetSeq()
		return next, nil
	})
	cc, err := srv.Dial(grpc.WithDisableRetry(), grpc.WithChainStreamInterceptor(interceptor.StreamClientInterceptor(
		interceptor.WithConfig(cfg),
		interceptor.WithResume(testingv1.TestService_ListItems_FullMethodName, resume),
		interceptor.WithHook(func(e interceptor.Event) {
			fmt.Printf("%s after %v\n", e.Kind, e.Code)
		}),
	)))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer cc.Close()
	client := testingv1.NewTestServiceClient(cc)

	script := &testingv1.Script{Key: "list", ResponseCount: 8, FailAttempts: 2, MessagesBeforeFailure: 3}
	stream, err := client.ListItems(context.Background(), &testingv1.ListItemsRequest{Script: script})
	if err != nil {
		fmt.Println(err)
		return
	}
	for {
		item, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			fmt.Println(err)
			return
		}
		fmt.Printf("item %d (attempt %d)\n", item.GetReply().GetSeq(), item.GetReply().GetAttempt())
	}
	fmt.Println("attempts on the server:", len(srv.Attempts("list")))
	// Output:
	// item 1 (attempt 1)
	// item 2 (attempt 1)
	// item 3 (attempt 1)
	// resume after Unavailable
	// item 4 (attempt 2)
	// item 5 (attempt 2)
	// item 6 (attempt 2)
	// resume after Unavailable
	// item 7 (attempt 3)
	// item 8 (attempt 3)
	// attempts on the server: 3
}

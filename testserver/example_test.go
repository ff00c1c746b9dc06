package testserver_test

import (
	"context"
	"fmt"

	"google.golang.org/grpc"
	"google.golang.org/grpc/status"

	testingv1 "github.com/stagger-go/stagger/proto/stagger/testing/v1"
	"github.com/stagger-go/stagger/testserver"
)

// A script fails the first two attempts of its key; the records show what a
// retrying client would have to prove.
func Example() {
	s := testserver.New()
	defer s.Close()
	cc, err := s.Dial(grpc.WithDisableRetry())
	if err != nil {
		fmt.Println(err)
		return
	}
	defer cc.Close()
	client := testingv1.NewTestServiceClient(cc)

	script := &testingv1.Script{Key: "order-1", FailAttempts: 2, Pushback: []string{"100"}}
	for i := 0; i < 3; i++ {
		_, err := client.Write(context.Background(), &testingv1.WriteRequest{Script: script})
		fmt.Println(status.Code(err))
	}
	for _, r := range s.Attempts("order-1") {
		fmt.Println(r.Attempt, r.Code)
	}
	fmt.Println("executions:", s.Executions(testingv1.TestService_Write_FullMethodName))
	// Output:
	// Unavailable
	// Unavailable
	// OK
	// 1 Unavailable
	// 2 Unavailable
	// 3 OK
	// executions: 1
}

// The server-wide modes change while serving, for load tests.
func ExampleServer_SetOutage() {
	s := testserver.New()
	defer s.Close()
	cc, err := s.Dial(grpc.WithDisableRetry())
	if err != nil {
		fmt.Println(err)
		return
	}
	defer cc.Close()
	client := testingv1.NewTestServiceClient(cc)
	call := func() {
		_, err := client.Get(context.Background(), &testingv1.GetRequest{})
		fmt.Println(status.Code(err))
	}
	call()
	s.SetOutage(true)
	call()
	s.SetOutage(false)
	call()
	st := s.Stats()
	fmt.Println(st.Received, st.Rejected, st.Served)
	// Output:
	// OK
	// Unavailable
	// OK
	// 3 1 2
}

package interceptor_test

import (
	"context"
	"errors"
	"io"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"

	"github.com/stagger-go/stagger/budget"
	"github.com/stagger-go/stagger/interceptor"
	testingv1 "github.com/stagger-go/stagger/proto/stagger/testing/v1"
	"github.com/stagger-go/stagger/testserver"
)

// TestResumeCost checks the figures docs/recipes.md gives ("Resume a
// server stream: what it costs the budget") with stagger's default
// budget (budget.DefaultSettings: 100 tokens, starting at 9, a retry 5, a
// first attempt's success +1): a stream that succeeds at once adds 1; one
// resumed once pays 5 for the resume and, as the resumed attempt delivered
// a message and so counts as a first attempt (WithResume, "Counting"),
// gets 1 back, not the 5 a retry that heals gets back: 4 tokens net; k
// resumes, 5k - 1. A resumed attempt that ends without a message is a
// retry that healed, paid back, as is a unary call healed by one retry.
func TestResumeCost(t *testing.T) {
	srv := testserver.New()
	defer srv.Close()
	cfg := mustParse(`{"methodConfig": [{
		"name": [{"service": "stagger.testing.v1.TestService"}],
		"retryPolicy": {"maxAttempts": 3, "initialBackoff": "0.001s", "maxBackoff": "0.001s",
			"backoffMultiplier": 1, "retryableStatusCodes": ["UNAVAILABLE"]}}]}`)
	b, err := budget.New(budget.DefaultSettings())
	if err != nil {
		t.Fatal(err)
	}
	resume := interceptor.TypedResume(func(req *testingv1.ListItemsRequest, last *testingv1.ListItemsResponse) (*testingv1.ListItemsRequest, error) {
		next := proto.Clone(req).(*testingv1.ListItemsRequest)
		next.StartAfter = last.GetReply().GetSeq()
		return next, nil
	})
	opts := []interceptor.Option{interceptor.WithConfig(cfg), interceptor.WithBudget(b),
		interceptor.WithResume(testingv1.TestService_ListItems_FullMethodName, resume)}
	cc, err := srv.Dial(grpc.WithDisableRetry(),
		grpc.WithChainUnaryInterceptor(interceptor.UnaryClientInterceptor(opts...)),
		grpc.WithChainStreamInterceptor(interceptor.StreamClientInterceptor(opts...)))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	client := testingv1.NewTestServiceClient(cc)

	level := func() float64 { return b.State().Level }
	// stream reads a stream of count messages whose first fail attempts
	// each deliver 3, then fail with UNAVAILABLE.
	stream := func(key string, count, fail int32) {
		t.Helper()
		var rep interceptor.Report
		s, err := client.ListItems(context.Background(), &testingv1.ListItemsRequest{Script: &testingv1.Script{
			Key: key, ResponseCount: count, FailAttempts: fail, MessagesBeforeFailure: 3}}, interceptor.WithReport(&rep))
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for {
			if _, err := s.Recv(); errors.Is(err, io.EOF) {
				break
			} else if err != nil {
				t.Fatal(err)
			}
			n++
		}
		if n != int(count) || rep.Attempts != int(fail)+1 {
			t.Fatalf("%s: %d messages in %d attempts, want %d in %d", key, n, rep.Attempts, count, fail+1)
		}
	}
	steps := []struct {
		what   string
		run    func()
		change float64
	}{
		{"a stream served at once", func() { stream("clean", 6, 0) }, +1},
		{"a stream resumed once", func() { stream("resumed-once", 6, 1) }, -5 + 1},
		{"a stream resumed twice", func() { stream("resumed-twice", 9, 2) }, -5 - 5 + 1},
		// The resumed attempt delivers nothing (the 3 messages were all):
		// it is a retry that healed, paid back.
		{"a stream resumed to its end", func() { stream("resumed-empty", 3, 1) }, -5 + 5},
		{"a unary call healed by one retry", func() {
			if _, err := client.Get(context.Background(), &testingv1.GetRequest{Script: &testingv1.Script{Key: "healed", FailAttempts: 1}}); err != nil {
				t.Fatal(err)
			}
		}, 0},
	}
	// Fill the bucket enough for every step (it starts at 9).
	for i := range 20 {
		if _, err := client.Get(context.Background(), &testingv1.GetRequest{Script: &testingv1.Script{Key: "fill" + string(rune('a'+i))}}); err != nil {
			t.Fatal(err)
		}
	}
	if got := level(); got != 29 {
		t.Fatalf("after 20 first-attempt successes the bucket holds %v, want 9 + 20 = 29", got)
	}
	for _, s := range steps {
		before := level()
		s.run()
		if got := level() - before; got != s.change {
			t.Errorf("%s: the bucket changed by %+v, want %+v", s.what, got, s.change)
		}
	}
}

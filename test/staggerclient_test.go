//go:build go1.25

package test

import (
	"context"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/stagger-go/stagger/interceptor"
	testingv1 "github.com/stagger-go/stagger/proto/stagger/testing/v1"
	"github.com/stagger-go/stagger/testserver"
)

// staggerClient is a client of srv through stagger's unary and stream
// interceptors alone, following file with opts, grpc's own retry off; dial
// adds interceptors below stagger's.
func staggerClient(t *testing.T, srv *testserver.Server, file string, opts []interceptor.Option, dial ...grpc.DialOption) testingv1.TestServiceClient {
	t.Helper()
	opts = append([]interceptor.Option{interceptor.WithConfig(parse(t, file))}, opts...)
	cc := srv.ClientConn(t, append([]grpc.DialOption{
		grpc.WithChainUnaryInterceptor(interceptor.UnaryClientInterceptor(opts...)),
		grpc.WithChainStreamInterceptor(interceptor.StreamClientInterceptor(opts...)),
		grpc.WithDisableRetry(),
	}, dial...)...)
	return testingv1.NewTestServiceClient(cc)
}

// abandonChat opens a bidi stream the server never ends, with opts, sends
// one message and reads its answer, then cancels the stream; once ending
// says the end is under way it reads the stream to its final status, which
// must be CANCELED. What the caller reads after that has no
// synchronisation beyond the stream's end. It returns how long the stream
// took, from its opening, to answer.
func abandonChat(t *testing.T, c testingv1.TestServiceClient, ending <-chan struct{}, opts ...grpc.CallOption) (answered time.Duration) {
	t.Helper()
	begun := time.Now()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	// The client does not close its side: only the cancel ends the stream.
	st, err := c.Chat(ctx, opts...)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Send(&testingv1.ChatRequest{Script: &testingv1.Script{Key: "k"}, Seq: 1}); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Recv(); err != nil {
		t.Fatal(err)
	}
	answered = time.Since(begun)
	cancel()
	<-ending
	for err == nil {
		_, err = st.Recv()
	}
	if status.Code(err) != codes.Canceled {
		t.Fatalf("Recv: %v, want CANCELED", err)
	}
	return answered
}

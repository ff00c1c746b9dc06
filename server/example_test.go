package server_test

import (
	"context"
	"fmt"
	"log"
	"net"
	"sync/atomic"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"

	"github.com/stagger-go/stagger"
	"github.com/stagger-go/stagger/interceptor"
	"github.com/stagger-go/stagger/policy"
	testingv1 "github.com/stagger-go/stagger/proto/stagger/testing/v1"
	"github.com/stagger-go/stagger/server"
)

// writes is a service whose Write counts its runs.
type writes struct {
	testingv1.UnimplementedTestServiceServer
	runs atomic.Int32
}

func (w *writes) Write(context.Context, *testingv1.WriteRequest) (*testingv1.WriteResponse, error) {
	n := w.runs.Add(1)
	return &testingv1.WriteResponse{Reply: &testingv1.Reply{Attempt: n}}, nil
}

// The README's idempotency example, both ends over loopback TCP: the client
// sends a key with every attempt of a write, the server runs each key once
// and replays its outcome to any retry.
func ExampleWithIdempotency() {
	// The server: keys in a MemoryStore (redisstore.New for a fleet).
	store, err := server.NewMemoryStore(server.MemoryOptions{})
	if err != nil {
		log.Fatal(err)
	}
	side, err := server.New(server.WithIdempotency(store, server.IdempotencyOptions{}))
	if err != nil {
		log.Fatal(err)
	}
	srv := grpc.NewServer(side.ServerOptions()...)
	svc := &writes{}
	testingv1.RegisterTestServiceServer(srv, svc)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		log.Fatal(err)
	}
	go func() { _ = srv.Serve(lis) }()
	defer srv.Stop()

	// The client: a key per call, so that a write whose reply was lost
	// (reset, EOF) is retried instead of ending "ambiguous".
	cfg, err := policy.LoadFile("../examples/policies/retry.json")
	if err != nil {
		log.Fatal(err)
	}
	opts := append(stagger.DialOptions(cfg, interceptor.WithIdempotencyKey(interceptor.DefaultIdempotencyHeader)),
		grpc.WithTransportCredentials(insecure.NewCredentials()))
	conn, err := grpc.NewClient(lis.Addr().String(), opts...)
	if err != nil {
		log.Fatal(err)
	}
	defer conn.Close()
	client := testingv1.NewTestServiceClient(conn)
	resp, err := client.Write(context.Background(), &testingv1.WriteRequest{})
	fmt.Println("run", resp.GetReply().GetAttempt(), err)

	// What a retry of one key sees: the first outcome, replayed.
	ctx := metadata.AppendToOutgoingContext(context.Background(), server.DefaultIdempotencyHeader, "order-42")
	for range 2 {
		var header metadata.MD
		resp, err := client.Write(ctx, &testingv1.WriteRequest{}, grpc.Header(&header))
		fmt.Println("run", resp.GetReply().GetAttempt(), err, "replayed:", header.Get(server.ReplayedHeader))
	}
	fmt.Println("handler runs:", svc.runs.Load())
	// Output:
	// run 1 <nil>
	// run 2 <nil> replayed: []
	// run 2 <nil> replayed: [true]
	// handler runs: 2
}

package interceptor_test

import (
	"context"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/stagger-go/stagger/interceptor"
	"github.com/stagger-go/stagger/policy"
)

// BenchmarkUnarySuccessClientConn is BenchmarkUnarySuccess's "stagger" on
// a real ClientConn (never connected: the invoker answers): the budget is
// found by the connection's canonical target (what finding it costs on
// the success path).
func BenchmarkUnarySuccessClientConn(b *testing.B) {
	cfg, err := policy.ParseConfig([]byte(benchFile))
	if err != nil {
		b.Fatal(err)
	}
	cc, err := grpc.NewClient("localhost:1", grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		b.Fatal(err)
	}
	defer cc.Close()
	icpt := interceptor.UnaryClientInterceptor(interceptor.WithConfig(cfg))
	ctx := context.Background()
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		if err := icpt(ctx, method, nil, nil, cc, okInvoker); err != nil {
			b.Fatal(err)
		}
	}
}

package server_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	"github.com/stagger-go/stagger/criticality"
	testingv1 "github.com/stagger-go/stagger/proto/stagger/testing/v1"
	"github.com/stagger-go/stagger/server"
)

// sideVariants are the server side's settings the benchmarks and the
// allocation test compare with no interceptor.
func sideVariants(t testing.TB) []struct {
	name string
	side *server.Interceptors
} {
	return []struct {
		name string
		side *server.Interceptors
	}{
		{"default", newSide(t)},
		{"all", newSide(t, server.WithConcurrencyLimit(1000), server.WithRetryAtOneLayer())},
	}
}

// TestUnaryAllocations: the unary interceptor costs a successful call at
// most one allocation (the request's chain.Request), every option on,
// for a first attempt that names no criticality; the handler is the only
// other code that runs.
func TestUnaryAllocations(t *testing.T) {
	info := &grpc.UnaryServerInfo{FullMethod: testingv1.TestService_Get_FullMethodName}
	ctx := metadata.NewIncomingContext(context.Background(), metadata.Pairs("user-agent", "x", "k", "v"))
	handler := func(ctx context.Context, req any) (any, error) { return req, nil }
	for _, v := range sideVariants(t) {
		u := v.side.Unary()
		if n := testing.AllocsPerRun(1000, func() { _, _ = u(ctx, nil, info, handler) }); n > 1 {
			t.Errorf("%s: %v allocations per call, want at most 1", v.name, n)
		}
	}
	// A request that names a criticality costs two more: the header's
	// copy (metadata.ValueFromIncomingContext) and the handler's context.
	named := metadata.NewIncomingContext(context.Background(), metadata.Pairs("user-agent", "x", criticality.Header, "SHEDDABLE"))
	for _, v := range sideVariants(t) {
		u := v.side.Unary()
		if n := testing.AllocsPerRun(1000, func() { _, _ = u(named, nil, info, handler) }); n > 3 {
			t.Errorf("%s, with a criticality: %v allocations per call, want at most 3", v.name, n)
		}
	}
}

// BenchmarkUnary is a successful unary call over bufconn with no server
// interceptor ("none") and with the server side: compare them with
// benchstat (make bench).
func BenchmarkUnary(b *testing.B) {
	h := &handlerService{get: func(context.Context, *testingv1.GetRequest) (*testingv1.GetResponse, error) {
		return &testingv1.GetResponse{}, nil
	}}
	variants := []struct {
		name string
		opts []grpc.ServerOption
	}{
		{"none", nil},
		// Any unary interceptor costs grpc's generated code 2 allocations
		// (the UnaryServerInfo and the handler's closure): "empty" passes
		// the call on, so that the server side's own cost is its
		// difference from it.
		{"empty", []grpc.ServerOption{grpc.UnaryInterceptor(func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
			return h(ctx, req)
		})}},
	}
	for _, v := range sideVariants(b) {
		variants = append(variants, struct {
			name string
			opts []grpc.ServerOption
		}{v.name, v.side.ServerOptions()})
	}
	for _, v := range variants {
		b.Run(v.name, func(b *testing.B) {
			g := grpc.NewServer(v.opts...)
			testingv1.RegisterTestServiceServer(g, h)
			lis := newListener(b)
			go func() { _ = g.Serve(lis) }()
			defer g.Stop()
			cl := testingv1.NewTestServiceClient(lis.dial(b, grpc.WithDisableRetry()))
			req := &testingv1.GetRequest{}
			ctx := context.Background()
			if _, err := cl.Get(ctx, req); err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if _, err := cl.Get(ctx, req); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkInterceptor is the unary interceptor alone around a handler that
// returns at once: its own cost, which BenchmarkUnary's noise (a call over
// bufconn takes tens of microseconds) hides.
func BenchmarkInterceptor(b *testing.B) {
	info := &grpc.UnaryServerInfo{FullMethod: testingv1.TestService_Get_FullMethodName}
	ctx := metadata.NewIncomingContext(context.Background(), metadata.Pairs("user-agent", "x", "k", "v"))
	handler := func(ctx context.Context, req any) (any, error) { return req, nil }
	empty := func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		return h(ctx, req)
	}
	variants := []struct {
		name string
		u    grpc.UnaryServerInterceptor
	}{{"empty", empty}}
	for _, v := range sideVariants(b) {
		variants = append(variants, struct {
			name string
			u    grpc.UnaryServerInterceptor
		}{v.name, v.side.Unary()})
	}
	for _, v := range variants {
		b.Run(v.name, func(b *testing.B) {
			b.ReportAllocs()
			for i := 0; i < b.N; i++ {
				_, _ = v.u(ctx, nil, info, handler)
			}
		})
	}
}

// BenchmarkDedup is the unary interceptor alone with WithIdempotency and a
// MemoryStore: a call with a fresh key (claim, run, keep the outcome), a
// repeat of a key (replay), and a call without a key, beside no
// de-duplication. Every variant's context carries a header of the same
// size, so that only the server side's work differs.
func BenchmarkDedup(b *testing.B) {
	info := &grpc.UnaryServerInfo{FullMethod: testingv1.TestService_Get_FullMethodName}
	req := &testingv1.GetRequest{Script: &testingv1.Script{Key: "some request"}}
	reply := &testingv1.GetResponse{Reply: &testingv1.Reply{Key: "a reply", Seq: 7}}
	handler := func(context.Context, any) (any, error) { return reply, nil }
	plain := newSide(b).Unary()
	dedup := newSide(b, server.WithIdempotency(memStore(b), server.IdempotencyOptions{})).Unary()
	// A store of 1,000 entries stays in the CPU's caches; the default one,
	// full at 100,000 after the first rounds, does not (its map lookups
	// miss).
	small, err := server.NewMemoryStore(server.MemoryOptions{MaxEntries: 1000})
	if err != nil {
		b.Fatal(err)
	}
	dedupSmall := newSide(b, server.WithIdempotency(small, server.IdempotencyOptions{})).Unary()
	// A fresh key for every call of every round (the benchmark runs each
	// case several times with growing b.N: i alone would repeat keys).
	var fresh atomic.Int64
	keyed := func(i int) context.Context {
		if i >= 0 {
			i = int(fresh.Add(1))
		}
		return metadata.NewIncomingContext(context.Background(), metadata.Pairs(server.DefaultIdempotencyHeader, fmt.Sprintf("key-%012d", i)))
	}
	unkeyed := func(i int) context.Context {
		return metadata.NewIncomingContext(context.Background(), metadata.Pairs("other-header", fmt.Sprintf("key-%012d", i)))
	}
	for _, v := range []struct {
		name string
		u    grpc.UnaryServerInterceptor
		ctx  func(int) context.Context
	}{
		{"none", plain, unkeyed},
		{"unkeyed", dedup, unkeyed},
		{"fresh-key", dedup, keyed},
		{"fresh-key-1k-store", dedupSmall, keyed},
		{"replay", dedup, func(int) context.Context { return keyed(-1) }},
	} {
		b.Run(v.name, func(b *testing.B) {
			b.ReportAllocs()
			for i := 0; i < b.N; i++ {
				if _, err := v.u(v.ctx(i), req, info, handler); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

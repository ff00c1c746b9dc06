package storetest

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/resolver"
	"google.golang.org/grpc/resolver/manual"
	"google.golang.org/grpc/status"

	"github.com/stagger-go/stagger"
	"github.com/stagger-go/stagger/interceptor"
	"github.com/stagger-go/stagger/policy"
	testingv1 "github.com/stagger-go/stagger/proto/stagger/testing/v1"
	"github.com/stagger-go/stagger/server"
)

// ChaosResult is what Chaos counts.
type ChaosResult struct {
	// Calls is the writes made, Healed those that succeeded.
	Calls, Healed int
	// Executions is how many times a handler ran, Duplicates how many of
	// those ran a key that had run already.
	Executions, Duplicates int
	// Dropped is the connections closed after a handler ran.
	Dropped int
	// Failures are the first few errors of calls that did not heal.
	Failures []string
}

func (r ChaosResult) String() string {
	return fmt.Sprintf("%d writes, %d healed (%.2f %%), %d executions, %d duplicates, %d connections reset after the handler ran; failures: %q",
		r.Calls, r.Healed, 100*float64(r.Healed)/float64(r.Calls), r.Executions, r.Duplicates, r.Dropped, r.Failures)
}

// chaosPolicy retries Write (not idempotent) on UNAVAILABLE; the calls carry
// an idempotency key, so stagger retries their ambiguous failures too.
const chaosPolicy = `{"methodConfig": [{
	"name": [{"service": "stagger.testing.v1.TestService", "method": "Write"}],
	"retryPolicy": {"maxAttempts": 5, "initialBackoff": "0.005s", "maxBackoff": "0.05s",
		"backoffMultiplier": 2, "retryableStatusCodes": ["UNAVAILABLE"]}
}]}`

// Chaos runs calls non-idempotent writes, 8 at a time, from a stagger
// client with interceptor.WithIdempotencyKey(interceptor.DefaultIdempotencyHeader)
// against one replica per store (each a real gRPC server on loopback TCP,
// with WithIdempotency(store) when dedup, reached round-robin). After a
// handler ran, a replica closes the attempt's connection with probability
// drop, so the reply is lost and the client sees a reset: the failure that
// runs a write twice unless the key is de-duplicated.
func Chaos(t testing.TB, stores []server.Store, dedup bool, calls int, drop float64) ChaosResult {
	t.Helper()
	var mu sync.Mutex
	execs := map[string]int{}
	var res ChaosResult
	rng := rand.New(rand.NewPCG(1, 2))
	var addrs []resolver.Address
	for i, st := range stores {
		var opts []server.Option
		if dedup {
			opts = append(opts, server.WithIdempotency(st, server.IdempotencyOptions{}))
		}
		side, err := server.New(opts...)
		if err != nil {
			t.Fatal(err)
		}
		lis, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		tl := &trackingListener{Listener: lis, conns: map[string]net.Conn{}}
		dropper := func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
			resp, err := h(ctx, req)
			mu.Lock()
			cut := rng.Float64() < drop
			if cut {
				res.Dropped++
			}
			mu.Unlock()
			if cut && tl.drop(ctx) {
				<-ctx.Done()
				return nil, status.Error(codes.Unavailable, "storetest: connection reset after the handler ran")
			}
			return resp, err
		}
		g := grpc.NewServer(grpc.ChainUnaryInterceptor(dropper, side.Unary()))
		testingv1.RegisterTestServiceServer(g, &chaosService{replica: i, count: func(key string) {
			mu.Lock()
			execs[key]++
			mu.Unlock()
		}})
		go func() { _ = g.Serve(tl) }()
		t.Cleanup(g.Stop)
		addrs = append(addrs, resolver.Address{Addr: lis.Addr().String()})
	}
	cfg, err := policy.ParseConfig([]byte(chaosPolicy))
	if err != nil {
		t.Fatal(err)
	}
	r := manual.NewBuilderWithScheme("chaos")
	r.InitialState(resolver.State{Addresses: addrs})
	opts := append(stagger.DialOptions(cfg, interceptor.WithBudget(nil), interceptor.WithIdempotencyKey(interceptor.DefaultIdempotencyHeader)),
		grpc.WithTransportCredentials(insecure.NewCredentials()), grpc.WithResolvers(r),
		grpc.WithDefaultServiceConfig(`{"loadBalancingConfig": [{"round_robin": {}}]}`))
	cc, err := grpc.NewClient(r.Scheme()+":///replicas", opts...)
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	cl := testingv1.NewTestServiceClient(cc)
	work := make(chan int)
	var wg sync.WaitGroup
	for w := 0; w < 8; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range work {
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				_, err := cl.Write(ctx, &testingv1.WriteRequest{Payload: []byte("write")})
				cancel()
				mu.Lock()
				if err == nil {
					res.Healed++
				} else if len(res.Failures) < 5 {
					var e *interceptor.Error
					reason := "-"
					if errors.As(err, &e) {
						reason = fmt.Sprintf("%v after %d attempts", e.Reason, e.Attempts)
					}
					res.Failures = append(res.Failures, fmt.Sprintf("%v (%s)", err, reason))
				}
				mu.Unlock()
			}
		}()
	}
	for i := 0; i < calls; i++ {
		work <- i
	}
	close(work)
	wg.Wait()
	mu.Lock()
	defer mu.Unlock()
	res.Calls = calls
	for _, n := range execs {
		res.Executions += n
		res.Duplicates += n - 1
	}
	return res
}

// chaosService's Write counts its runs by idempotency key.
type chaosService struct {
	testingv1.UnimplementedTestServiceServer
	replica int
	count   func(key string)
}

func (s *chaosService) Write(ctx context.Context, _ *testingv1.WriteRequest) (*testingv1.WriteResponse, error) {
	key := metadata.ValueFromIncomingContext(ctx, server.DefaultIdempotencyHeader)
	if len(key) != 1 {
		return nil, status.Error(codes.InvalidArgument, "storetest: no idempotency key")
	}
	s.count(key[0])
	return &testingv1.WriteResponse{Reply: &testingv1.Reply{Key: fmt.Sprint("replica-", s.replica)}}, nil
}

// trackingListener finds a request's connection by its peer address.
type trackingListener struct {
	net.Listener
	mu    sync.Mutex
	conns map[string]net.Conn
}

func (l *trackingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err == nil {
		l.mu.Lock()
		l.conns[c.RemoteAddr().String()] = c
		l.mu.Unlock()
	}
	return c, err
}

// drop closes the connection ctx's request came on; false when unknown.
func (l *trackingListener) drop(ctx context.Context) bool {
	p, ok := peer.FromContext(ctx)
	if !ok {
		return false
	}
	l.mu.Lock()
	c := l.conns[p.Addr.String()]
	delete(l.conns, p.Addr.String())
	l.mu.Unlock()
	if c == nil {
		return false
	}
	_ = c.Close()
	return true
}

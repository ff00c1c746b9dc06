package soak

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/status"

	testingv1 "github.com/stagger-go/stagger/proto/stagger/testing/v1"
	"github.com/stagger-go/stagger/server"
	"github.com/stagger-go/stagger/testserver"
)

// Headers of the idempotency keys: one per store, so that one fleet
// exercises both (a write carries one of them, and only that store's
// de-duplication sees it).
const (
	memoryKeyHeader = "idempotency-key"
	redisKeyHeader  = "soak-redis-idempotency-key"
)

// replica is one server of the fleet: a testserver on loopback TCP behind
// stagger's server side (shedding, propagation, de-duplication in the
// shared stores), with the soak's fault switches.
type replica struct {
	id int
	ts *testserver.Server
	// resetting: replies that the layers inside stored are lost (the
	// connection reset) with probability resetShare.
	resetting atomic.Bool
	rngMu     sync.Mutex
	rng       *rand.Rand
	hist      *history
}

// newReplica starts replica id. mem and redis are the shared stores
// (redis nil: none); led hears every write the handler applied.
// down counts the attempts it receives while every replica is down.
func newReplica(id int, seed uint64, mem server.Store, redis server.Store, led *ledger, hist *history, down *downLedger) (*replica, error) {
	r := &replica{id: id, rng: rand.New(rand.NewPCG(seed, uint64(id))), hist: hist}
	side, err := server.New(server.WithConcurrencyLimit(shedLimit),
		server.WithIdempotency(mem, server.IdempotencyOptions{Header: memoryKeyHeader, TTL: storeTTL, Scope: oneScope}))
	if err != nil {
		return nil, err
	}
	countUnary, countStream := counting(down)
	chain := []grpc.UnaryServerInterceptor{countUnary, r.lose, side.Unary()}
	if redis != nil {
		redisSide, err := server.New(server.WithoutPropagation(),
			server.WithIdempotency(redis, server.IdempotencyOptions{Header: redisKeyHeader, TTL: storeTTL, Scope: oneScope}))
		if err != nil {
			return nil, err
		}
		chain = append(chain, redisSide.Unary())
	}
	chain = append(chain, applied(led))
	r.ts = testserver.New(testserver.WithTCP(), testserver.WithServerOptions(
		grpc.ChainUnaryInterceptor(chain...),
		grpc.ChainStreamInterceptor(countStream, side.Stream()),
		grpc.KeepaliveParams(keepalive.ServerParameters{MaxConnectionAge: connectionAge, MaxConnectionAgeGrace: connectionAgeGrace}),
	))
	if r.ts.Addr() == "" {
		r.ts.Close()
		return nil, fmt.Errorf("soak: replica %d: could not listen on loopback TCP", id)
	}
	return r, nil
}

// oneScope puts every caller in one scope: the soak's clients are one
// service's, and it keeps the server side from warning about it.
func oneScope(context.Context) (string, error) { return "", nil }

// lose is the outermost interceptor: in a reset burst it drops the
// connection of a reply the layers inside finished with (the store kept
// the outcome), as a crash or a middlebox after the write would.
func (r *replica) lose(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	resp, err := handler(ctx, req)
	if err != nil || !r.resetting.Load() {
		return resp, err
	}
	r.rngMu.Lock()
	drop := r.rng.Float64() < resetShare
	r.rngMu.Unlock()
	if !drop || !r.ts.DropConnection(ctx) {
		return resp, err
	}
	<-ctx.Done()
	return nil, status.Error(codes.Unavailable, "soak: reply lost with its connection")
}

// applied is the innermost interceptor, the application's ledger: a Write
// whose handler finished (OK) was applied.
func applied(led *ledger) grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		resp, err := handler(ctx, req)
		if w, ok := req.(*testingv1.WriteRequest); ok && err == nil {
			led.apply(writeID(w.GetPayload()))
		}
		return resp, err
	}
}

func writePayload(id uint64) []byte { return binary.BigEndian.AppendUint64(nil, id) }

func writeID(p []byte) uint64 {
	if len(p) != 8 {
		return 0
	}
	return binary.BigEndian.Uint64(p)
}

// restart takes the replica off the network (every connection and
// in-flight call cut, connections refused) for d, then serves again on
// its port.
func (r *replica) restart(ctx context.Context, d time.Duration) error {
	r.ts.StopServing()
	sleep(ctx, d)
	deadline := time.Now().Add(10 * time.Second)
	for {
		err := r.ts.Resume()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return errors.Join(fmt.Errorf("soak: replica %d did not come back", r.id), err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// heal ends every fault of the replica, its base failures too: the calm
// windows are calm.
func (r *replica) heal() {
	r.ts.SetOutage(false)
	r.ts.SetCapacity(testserver.Capacity{})
	r.ts.SetDelayFactor(1)
	r.ts.SetFailureRate(0)
	r.resetting.Store(false)
}

// sleep waits d or until ctx ends.
func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}

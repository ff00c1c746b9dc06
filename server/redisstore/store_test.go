package redisstore_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	testingv1 "github.com/stagger-go/stagger/proto/stagger/testing/v1"
	"github.com/stagger-go/stagger/server"
	"github.com/stagger-go/stagger/server/redisstore"
	"github.com/stagger-go/stagger/server/storetest"
)

func newStore(t testing.TB, c redis.UniversalClient, prefix string) *redisstore.Store {
	t.Helper()
	s, err := redisstore.New(c, redisstore.Options{Prefix: prefix})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestContract(t *testing.T) {
	c := newClient(t, startRedis(t), nil)
	storetest.Run(t, func(t *testing.T) server.Store {
		return newStore(t, c, "test:"+t.Name()+":")
	})
}

// TestLayout: one string per key under the prefix, with the lease or the
// TTL as its expiry, and nothing else.
func TestLayout(t *testing.T) {
	ctx := context.Background()
	c := newClient(t, startRedis(t), nil)
	s := newStore(t, c, "")
	fp := server.Fingerprint{0: 7, 31: 9}
	if ok, _, err := s.Claim(ctx, "k", fp, "tok", 90*time.Second); !ok || err != nil {
		t.Fatal(ok, err)
	}
	keys, err := c.Keys(ctx, "*").Result()
	if err != nil || len(keys) != 1 || keys[0] != redisstore.DefaultPrefix+"k" {
		t.Fatalf("keys %q, %v; want one, %q", keys, err, redisstore.DefaultPrefix+"k")
	}
	want := "\x01" + string(fp[:]) + "tok"
	if v, _ := c.Get(ctx, keys[0]).Result(); v != want {
		t.Errorf("running value %q, want %q", v, want)
	}
	if ttl := c.PTTL(ctx, keys[0]).Val(); ttl <= 89*time.Second || ttl > 90*time.Second {
		t.Errorf("running entry expires in %v, want the lease, 90s", ttl)
	}
	if err := s.Complete(ctx, "k", "tok", []byte("out\x00"), time.Hour); err != nil {
		t.Fatal(err)
	}
	want = "\x02" + string(fp[:]) + "out\x00"
	if v, _ := c.Get(ctx, keys[0]).Result(); v != want {
		t.Errorf("done value %q, want %q", v, want)
	}
	if ttl := c.PTTL(ctx, keys[0]).Val(); ttl <= 59*time.Minute || ttl > time.Hour {
		t.Errorf("done entry expires in %v, want the TTL, 1h", ttl)
	}
}

// TestReplicas: two Stores on two clients, as two replicas of a service
// sharing one Redis, see one set of keys.
func TestReplicas(t *testing.T) {
	ctx := context.Background()
	r := startRedis(t)
	replicas := []*redisstore.Store{newStore(t, newClient(t, r, nil), ""), newStore(t, newClient(t, r, nil), "")}
	for round := 0; round < 20; round++ {
		key := fmt.Sprint("k", round)
		const n = 16
		var wg sync.WaitGroup
		var winners atomic.Int32
		var winner atomic.Value
		for i := 0; i < n; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				token := fmt.Sprint("t", i)
				ok, _, err := replicas[i%2].Claim(ctx, key, server.Fingerprint{1}, token, time.Minute)
				if err != nil {
					t.Error(err)
				}
				if ok {
					winners.Add(1)
					winner.Store(token)
				}
			}()
		}
		wg.Wait()
		if winners.Load() != 1 {
			t.Fatalf("round %d: %d claims won, want 1", round, winners.Load())
		}
		token := winner.Load().(string)
		for _, s := range replicas {
			if ok, found, err := s.Claim(ctx, key, server.Fingerprint{1}, "late", time.Minute); ok || err != nil || found.Token != token {
				t.Fatalf("Claim of a running key: %v, %+v, %v; want the winner's entry (%s)", ok, found, err, token)
			}
		}
		// The token holds the key, whichever replica completes it.
		if err := replicas[round%2].Complete(ctx, key, token, []byte(key), time.Minute); err != nil {
			t.Fatal(err)
		}
		for _, s := range replicas {
			if ok, found, err := s.Claim(ctx, key, server.Fingerprint{1}, "late", time.Minute); ok || err != nil || !found.Done || string(found.Outcome) != key {
				t.Fatalf("Claim of a done key: %v, %+v, %v; want its outcome", ok, found, err)
			}
		}
	}
}

// TestClaimRetried: a Claim whose reply was lost, sent again, finds its own
// entry and reports it claimed.
func TestClaimRetried(t *testing.T) {
	ctx := context.Background()
	s := newStore(t, newClient(t, startRedis(t), nil), "")
	for _, token := range []string{"t1", "t1"} {
		if ok, found, err := s.Claim(ctx, "k", server.Fingerprint{1}, token, time.Minute); !ok || err != nil {
			t.Fatalf("Claim(%s): %v, %+v, %v; want claimed", token, ok, found, err)
		}
	}
	if ok, found, err := s.Claim(ctx, "k", server.Fingerprint{2}, "t1", time.Minute); ok || err != nil || found.Fingerprint != (server.Fingerprint{1}) {
		t.Fatalf("Claim with the token but another fingerprint: %v, %+v, %v; want the entry", ok, found, err)
	}
}

// countingHook counts the commands a client sends.
type countingHook struct{ n atomic.Int64 }

func (h *countingHook) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *countingHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.n.Add(1)
		return next(ctx, cmd)
	}
}
func (h *countingHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		h.n.Add(int64(len(cmds)))
		return next(ctx, cmds)
	}
}

// TestRoundTrips: each operation is one command (EVALSHA) once Redis knows
// the scripts; the first use of a script adds one (EVAL).
func TestRoundTrips(t *testing.T) {
	ctx := context.Background()
	c := newClient(t, startRedis(t), nil)
	var h countingHook
	c.AddHook(&h)
	s := newStore(t, c, "")
	if err := c.Ping(ctx).Err(); err != nil { // dials (HELLO)
		t.Fatal(err)
	}
	step := func(name string, want int64, op func() error) {
		t.Helper()
		h.n.Store(0)
		if err := op(); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if got := h.n.Load(); got != want {
			t.Errorf("%s: %d commands, want %d", name, got, want)
		}
	}
	claim := func(key string) func() error {
		return func() error {
			ok, _, err := s.Claim(ctx, key, server.Fingerprint{}, "t", time.Minute)
			if err == nil && !ok {
				err = errors.New("not claimed")
			}
			return err
		}
	}
	step("first Claim", 2, claim("a"))
	step("first Complete", 2, func() error { return s.Complete(ctx, "a", "t", nil, time.Minute) })
	step("first Release", 2, func() error { return s.Release(ctx, "a", "t") })
	step("Claim of a fresh key", 1, claim("b"))
	step("Complete", 1, func() error { return s.Complete(ctx, "b", "t", []byte("x"), time.Minute) })
	step("Claim of a done key", 1, func() error {
		_, found, err := s.Claim(ctx, "b", server.Fingerprint{}, "t2", time.Minute)
		if err == nil && !found.Done {
			err = errors.New("not done")
		}
		return err
	})
	step("Claim", 1, claim("c"))
	step("Release", 1, func() error { return s.Release(ctx, "c", "t") })
}

// expectStoreErrors: Claim (of key "k" with token), Complete and Release
// (of key "held", token "t") each fail within 5s with a *redisstore.Error
// naming its operation, never ErrLeaseLost (which would say the key is
// someone else's). when says what is wrong with Redis.
func expectStoreErrors(t *testing.T, s *redisstore.Store, token, when string) {
	t.Helper()
	ctx := context.Background()
	ops := []struct {
		name string
		op   func() error
	}{
		{"Claim", func() error { _, _, err := s.Claim(ctx, "k", server.Fingerprint{}, token, time.Minute); return err }},
		{"Complete", func() error { return s.Complete(ctx, "held", "t", []byte("x"), time.Minute) }},
		{"Release", func() error { return s.Release(ctx, "held", "t") }},
	}
	for _, o := range ops {
		start := time.Now()
		err := o.op()
		took := time.Since(start)
		var e *redisstore.Error
		if !errors.As(err, &e) || errors.Is(err, server.ErrLeaseLost) {
			t.Errorf("%s %s: %v, want a *redisstore.Error", o.name, when, err)
		} else if !strings.HasPrefix(err.Error(), "redisstore: "+strings.ToLower(o.name)+" ") {
			t.Errorf("%s %s: message %q, want it to start with the package and the operation", o.name, when, err)
		}
		if took > 5*time.Second { // generous: the clients' timeouts are 200ms at most
			t.Errorf("%s %s took %v", o.name, when, took)
		}
	}
}

// TestOutage: with redis-server down, every operation fails promptly with
// an *Error (never ErrLeaseLost, which would say the key is someone
// else's); once it is back, the store works again (on an empty Redis: this
// one keeps nothing across a restart).
func TestOutage(t *testing.T) {
	ctx := context.Background()
	r := startRedis(t)
	c := newClient(t, r, func(o *redis.Options) {
		o.DialTimeout, o.ReadTimeout, o.WriteTimeout = 200*time.Millisecond, 200*time.Millisecond, 200*time.Millisecond
		o.MaxRetries, o.DialerRetries = -1, 1
		// Below PoolSize failed dials the pool does not start its
		// background redial loop (which sleeps a second between tries).
		o.PoolSize = 64
	})
	s := newStore(t, c, "")
	if ok, _, err := s.Claim(ctx, "held", server.Fingerprint{}, "t", time.Minute); !ok || err != nil {
		t.Fatal(ok, err)
	}
	r.stop()
	expectStoreErrors(t, s, "t", "with Redis down")
	r.restart()
	// The first use after the restart may meet a connection the restart
	// broke; the pool drops it.
	var err error
	for try := 0; try < 3; try++ {
		var ok bool
		if ok, _, err = s.Claim(ctx, "k", server.Fingerprint{}, "t", time.Minute); err == nil && !ok {
			t.Fatal("Claim after the restart: not claimed")
		}
		if err == nil {
			break
		}
	}
	if err != nil {
		t.Fatalf("Claim after the restart: %v", err)
	}
	if err := s.Complete(ctx, "k", "t", []byte("x"), time.Minute); err != nil {
		t.Fatalf("Complete after the restart: %v", err)
	}
}

// TestHang: a redis-server that stops answering (SIGSTOP) fails every
// operation after the client's ReadTimeout; a Claim that timed out may
// still run once Redis answers again, and the same claim sent again then
// finds its own entry.
func TestHang(t *testing.T) {
	ctx := context.Background()
	r := startRedis(t)
	c := newClient(t, r, func(o *redis.Options) {
		o.ReadTimeout, o.WriteTimeout = 100*time.Millisecond, 100*time.Millisecond
		o.MaxRetries = -1
	})
	s := newStore(t, c, "")
	if ok, _, err := s.Claim(ctx, "held", server.Fingerprint{}, "t", time.Minute); !ok || err != nil {
		t.Fatal(ok, err)
	}
	if err := r.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	expectStoreErrors(t, s, "t1", "with Redis stopped")
	if err := r.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	if ok, _, err := s.Claim(ctx, "k", server.Fingerprint{}, "t1", time.Minute); !ok || err != nil {
		t.Fatalf("Claim sent again: %v, %v; want claimed", ok, err)
	}
	if ok, found, err := s.Claim(ctx, "k", server.Fingerprint{}, "t2", time.Minute); ok || err != nil || found.Token != "t1" {
		t.Fatalf("Claim of another token: %v, %+v, %v; want t1's entry", ok, found, err)
	}
}

// TestOutOfMemory: a Redis at maxmemory with noeviction refuses new keys
// (ErrStoreFull) but still replays done ones.
func TestOutOfMemory(t *testing.T) {
	ctx := context.Background()
	c := newClient(t, startRedis(t), nil)
	s := newStore(t, c, "")
	if ok, _, err := s.Claim(ctx, "done", server.Fingerprint{}, "t", time.Minute); !ok || err != nil {
		t.Fatal(ok, err)
	}
	if err := s.Complete(ctx, "done", "t", []byte("x"), time.Minute); err != nil {
		t.Fatal(err)
	}
	if ok, _, err := s.Claim(ctx, "running", server.Fingerprint{}, "t", time.Minute); !ok || err != nil {
		t.Fatal(ok, err)
	}
	if err := c.ConfigSet(ctx, "maxmemory-policy", "noeviction").Err(); err != nil {
		t.Fatal(err)
	}
	if err := c.ConfigSet(ctx, "maxmemory", "1").Err(); err != nil {
		t.Fatal(err)
	}
	_, _, err := s.Claim(ctx, "new", server.Fingerprint{}, "t", time.Minute)
	var e *redisstore.Error
	if !errors.Is(err, server.ErrStoreFull) || !errors.As(err, &e) || !redis.IsOOMError(err) {
		t.Errorf("Claim of a new key out of memory: %v, want an *Error wrapping ErrStoreFull and Redis's OOM error", err)
	}
	if ok, found, err := s.Claim(ctx, "done", server.Fingerprint{}, "t2", time.Minute); ok || err != nil || !found.Done {
		t.Errorf("Claim of a done key out of memory: %v, %+v, %v; want the done entry", ok, found, err)
	}
	if err := s.Release(ctx, "running", "t"); err != nil {
		t.Errorf("Release out of memory: %v", err)
	}
	if err := c.ConfigSet(ctx, "maxmemory", "0").Err(); err != nil {
		t.Fatal(err)
	}
	if ok, _, err := s.Claim(ctx, "running", server.Fingerprint{}, "t2", time.Minute); !ok || err != nil {
		t.Errorf("Claim after the Release out of memory: %v, %v; want claimed", ok, err)
	}
}

// TestBadValue: a key under the prefix that another program wrote is an
// error for Claim, and neither Complete nor Release touches it.
func TestBadValue(t *testing.T) {
	ctx := context.Background()
	c := newClient(t, startRedis(t), nil)
	s := newStore(t, c, "p:")
	for _, v := range []string{"", "x", "\x01short", "\x03" + strings.Repeat("f", 32) + "t"} {
		if err := c.Set(ctx, "p:k", v, 0).Err(); err != nil {
			t.Fatal(err)
		}
		if _, _, err := s.Claim(ctx, "k", server.Fingerprint{}, "t", time.Minute); !errors.Is(err, redisstore.ErrBadValue) {
			t.Errorf("Claim of %q: %v, want ErrBadValue", v, err)
		}
		if err := s.Complete(ctx, "k", "t", nil, time.Minute); !errors.Is(err, server.ErrLeaseLost) {
			t.Errorf("Complete of %q: %v, want ErrLeaseLost", v, err)
		}
		if err := s.Release(ctx, "k", "t"); err != nil {
			t.Errorf("Release of %q: %v", v, err)
		}
		if got, _ := c.Get(ctx, "p:k").Result(); got != v {
			t.Errorf("value %q became %q", v, got)
		}
	}
}

func TestDurations(t *testing.T) {
	ctx := context.Background()
	c := newClient(t, startRedis(t), nil)
	s := newStore(t, c, "")
	for _, d := range []time.Duration{0, -time.Second} {
		if _, _, err := s.Claim(ctx, "k", server.Fingerprint{}, "t", d); err == nil || !strings.Contains(err.Error(), "lease must be positive") {
			t.Errorf("Claim with lease %v: %v, want an error naming the lease", d, err)
		}
		if err := s.Complete(ctx, "k", "t", nil, d); err == nil || !strings.Contains(err.Error(), "ttl must be positive") {
			t.Errorf("Complete with ttl %v: %v, want an error naming the ttl", d, err)
		}
	}
	// Below a millisecond: one.
	if ok, _, err := s.Claim(ctx, "k", server.Fingerprint{}, "t", time.Microsecond); !ok || err != nil {
		t.Fatal(ok, err)
	}
	if ttl := c.PTTL(ctx, redisstore.DefaultPrefix+"k").Val(); ttl > time.Millisecond {
		t.Errorf("a lease of 1µs expires in %v, want at most 1ms", ttl)
	}
}

func TestNew(t *testing.T) {
	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"}) // never dialled
	t.Cleanup(func() { _ = c.Close() })
	var nilClient *redis.Client
	for _, tt := range []struct {
		name   string
		client redis.UniversalClient
		opts   redisstore.Options
		want   string // in the error; "" for none
	}{
		{"defaults", c, redisstore.Options{}, ""},
		{"prefix", c, redisstore.Options{Prefix: "svc:idem:"}, ""},
		{"nil client", nil, redisstore.Options{}, "redisstore: New: client is nil"},
		{"nil *redis.Client", nilClient, redisstore.Options{}, "redisstore: New: client is nil"},
		{"hash tag", c, redisstore.Options{Prefix: "{svc}:"}, `redisstore: Options.Prefix: must not contain '{' or '}'`},
		{"brace", c, redisstore.Options{Prefix: "svc}"}, `got "svc}"`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			s, err := redisstore.New(tt.client, tt.opts)
			switch {
			case tt.want == "" && (err != nil || s == nil):
				t.Errorf("New: %v, %v; want a Store", s, err)
			case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
				t.Errorf("New: %v, want an error with %q", err, tt.want)
			case tt.want != "" && s != nil:
				t.Errorf("New returned a Store with its error")
			}
		})
	}
}

func TestErrorUnwraps(t *testing.T) {
	cause := errors.New("cause")
	err := error(&redisstore.Error{Op: "claim", Key: "k", Err: cause})
	if !errors.Is(err, cause) || err.Error() != `redisstore: claim "k": cause` {
		t.Errorf("%v", err)
	}
}

// TestChaos: three replicas of a service behind round-robin, each with its
// own client of one Redis, over loopback TCP; connections reset after the
// handler ran, and the client retries on another replica. With the shared
// store no write runs twice; with a MemoryStore per replica (what a service
// without a shared store has), retries that land elsewhere run it again.
func TestChaos(t *testing.T) {
	r := startRedis(t)
	var shared []server.Store
	for range 3 {
		shared = append(shared, newStore(t, newClient(t, r, nil), ""))
	}
	res := storetest.Chaos(t, shared, true, 400, 0.05)
	t.Log("redis, 3 replicas:", res)
	if res.Duplicates != 0 || float64(res.Healed) < 0.99*float64(res.Calls) || res.Dropped == 0 {
		t.Errorf("redis, 3 replicas: %v; want 0 duplicates, 99 %% healed", res)
	}
	var apart []server.Store
	for range 3 {
		m, err := server.NewMemoryStore(server.MemoryOptions{})
		if err != nil {
			t.Fatal(err)
		}
		apart = append(apart, m)
	}
	off := storetest.Chaos(t, apart, true, 400, 0.05)
	t.Log("a memory store per replica:", off)
	if off.Duplicates == 0 {
		t.Errorf("a memory store per replica: %v; the chaos made no duplicate, so it proves nothing", off)
	}
}

// countingWrites counts its Write runs.
type countingWrites struct {
	testingv1.UnimplementedTestServiceServer
	runs atomic.Int32
}

func (w *countingWrites) Write(context.Context, *testingv1.WriteRequest) (*testingv1.WriteResponse, error) {
	w.runs.Add(1)
	return &testingv1.WriteResponse{}, nil
}

// TestOutageFailsRequests: behind server.WithIdempotency, a keyed request
// that meets Redis down fails with UNAVAILABLE (the client may retry) and
// its handler does not run; once Redis is back the key runs once and then
// replays.
func TestOutageFailsRequests(t *testing.T) {
	r := startRedis(t)
	c := newClient(t, r, func(o *redis.Options) {
		o.DialTimeout, o.ReadTimeout, o.WriteTimeout = 200*time.Millisecond, 200*time.Millisecond, 200*time.Millisecond
		o.MaxRetries, o.DialerRetries = -1, 1
		o.PoolSize = 64
	})
	side, err := server.New(server.WithIdempotency(newStore(t, c, ""), server.IdempotencyOptions{}))
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer(side.ServerOptions()...)
	svc := &countingWrites{}
	testingv1.RegisterTestServiceServer(srv, svc)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan struct{})
	go func() { defer close(served); _ = srv.Serve(lis) }()
	t.Cleanup(func() { srv.Stop(); <-served })
	cc, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cc.Close() })
	client := testingv1.NewTestServiceClient(cc)
	ctx := metadata.AppendToOutgoingContext(context.Background(), server.DefaultIdempotencyHeader, "order-1")

	r.stop()
	for range 3 {
		_, err := client.Write(ctx, &testingv1.WriteRequest{})
		if status.Code(err) != codes.Unavailable || !strings.Contains(status.Convert(err).Message(), "order-1") {
			t.Errorf("Write with Redis down: %v, want UNAVAILABLE naming the key", err)
		}
	}
	if n := svc.runs.Load(); n != 0 {
		t.Fatalf("the handler ran %d times with Redis down, want 0", n)
	}
	r.restart()
	for try := 0; ; try++ { // the first use may meet a connection the restart broke
		_, err := client.Write(ctx, &testingv1.WriteRequest{})
		if err == nil {
			break
		}
		if status.Code(err) != codes.Unavailable || try == 3 {
			t.Fatalf("Write with Redis back: %v", err)
		}
	}
	var header metadata.MD
	if _, err := client.Write(ctx, &testingv1.WriteRequest{}, grpc.Header(&header)); err != nil || len(header.Get(server.ReplayedHeader)) != 1 {
		t.Fatalf("Write again: %v, header %v; want a replay", err, header)
	}
	if n := svc.runs.Load(); n != 1 {
		t.Errorf("the handler ran %d times, want 1", n)
	}
}

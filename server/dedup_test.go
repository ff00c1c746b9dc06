package server_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/stagger-go/stagger/interceptor"
	testingv1 "github.com/stagger-go/stagger/proto/stagger/testing/v1"
	"github.com/stagger-go/stagger/server"
	"github.com/stagger-go/stagger/server/storetest"
)

func memStore(t testing.TB) *server.MemoryStore {
	t.Helper()
	s, err := server.NewMemoryStore(server.MemoryOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// dedupBench serves a Get whose behaviour the script's key picks, counting
// its runs, behind WithIdempotency(store).
type dedupBench struct {
	runs    atomic.Int64
	release chan struct{}
	cl      testingv1.TestServiceClient
}

func newDedupBench(t *testing.T, store server.Store, o server.IdempotencyOptions) *dedupBench {
	t.Helper()
	b := &dedupBench{release: make(chan struct{})}
	h := &handlerService{get: func(ctx context.Context, req *testingv1.GetRequest) (*testingv1.GetResponse, error) {
		n := b.runs.Add(1)
		_ = grpc.SetHeader(ctx, metadata.Pairs("run", fmt.Sprint(n)))
		_ = grpc.SetTrailer(ctx, metadata.Pairs("trailer-run", fmt.Sprint(n)))
		switch req.GetScript().GetKey() {
		case "block":
			<-b.release
		case "not-found":
			st, _ := status.New(codes.NotFound, "no such thing").WithDetails(&errdetails.ErrorInfo{Reason: "GONE"})
			return nil, st.Err()
		case "unavailable":
			return nil, status.Error(codes.Unavailable, "try again")
		case "panic":
			panic("handler panicked")
		}
		return &testingv1.GetResponse{Reply: &testingv1.Reply{Key: fmt.Sprint("run ", n), Seq: n}}, nil
	}}
	side := newSide(t, server.WithIdempotency(store, o))
	b.cl = serveHandlers(t, h, grpc.ChainUnaryInterceptor(recoveryInterceptor(), side.Unary()))
	return b
}

// recoveryInterceptor turns a panic into INTERNAL, as a production server's
// recovery interceptor would.
func recoveryInterceptor() grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (resp any, err error) {
		defer func() {
			if p := recover(); p != nil {
				err = recovered(p)
			}
		}()
		return h(ctx, req)
	}
}

type result struct {
	resp            *testingv1.GetResponse
	err             error
	header, trailer metadata.MD
}

func (b *dedupBench) get(key, script string) result {
	return b.getCtx(context.Background(), key, script)
}

// getCtx is get with ctx's outgoing metadata.
func (b *dedupBench) getCtx(ctx context.Context, key, script string) result {
	var r result
	if key != "" {
		ctx = metadata.AppendToOutgoingContext(ctx, server.DefaultIdempotencyHeader, key)
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	r.resp, r.err = b.cl.Get(ctx, &testingv1.GetRequest{Script: &testingv1.Script{Key: script}}, grpc.Header(&r.header), grpc.Trailer(&r.trailer))
	return r
}

// TestDedupReplays: a repeat of a key gets the first outcome (reply or
// status with details, header and trailer) without running the handler,
// marked as replayed; a call without a key always runs.
func TestDedupReplays(t *testing.T) {
	b := newDedupBench(t, memStore(t), server.IdempotencyOptions{})
	first := b.get("k1", "ok")
	second := b.get("k1", "ok")
	if first.err != nil || second.err != nil || b.runs.Load() != 1 {
		t.Fatalf("errors %v, %v; %d runs, want 1", first.err, second.err, b.runs.Load())
	}
	if second.resp.GetReply().GetSeq() != 1 || second.header.Get("run")[0] != "1" || second.trailer.Get("trailer-run")[0] != "1" {
		t.Errorf("replay %+v, header %v, trailer %v: want run 1's", second.resp, second.header, second.trailer)
	}
	if got := second.header.Get(server.ReplayedHeader); len(got) != 1 || got[0] != "true" {
		t.Errorf("replay header %v", second.header)
	}
	if len(first.header.Get(server.ReplayedHeader)) != 0 {
		t.Error("the first answer is marked replayed")
	}
	// A stored failure, details included.
	nf1, nf2 := b.get("k2", "not-found"), b.get("k2", "not-found")
	if status.Convert(nf2.err).String() != status.Convert(nf1.err).String() || len(status.Convert(nf2.err).Details()) != 1 || b.runs.Load() != 2 {
		t.Errorf("NOT_FOUND replay %v (first %v), %d runs", nf2.err, nf1.err, b.runs.Load())
	}
	// A failure the client may retry is not stored: the retry runs.
	b.get("k3", "unavailable")
	if r := b.get("k3", "ok"); r.err != nil || b.runs.Load() != 4 {
		t.Errorf("after UNAVAILABLE: %v, %d runs; want the handler run again", r.err, b.runs.Load())
	}
	b.get("", "ok")
	b.get("", "ok")
	if b.runs.Load() != 6 {
		t.Errorf("calls without a key: %d runs, want 6", b.runs.Load())
	}
}

// TestDedupWaitsForTheRunningOne: repeats that arrive while the first runs
// wait for it and get its outcome; one waiting past its deadline gets
// DEADLINE_EXCEEDED and no run.
func TestDedupWaitsForTheRunningOne(t *testing.T) {
	b := newDedupBench(t, memStore(t), server.IdempotencyOptions{})
	var wg sync.WaitGroup
	results := make([]result, 4)
	for i := range results {
		wg.Add(1)
		go func() { defer wg.Done(); results[i] = b.get("k", "block") }()
		if i == 0 {
			for b.runs.Load() == 0 {
				time.Sleep(time.Millisecond)
			}
		}
	}
	ctx, cancel := context.WithTimeout(metadata.AppendToOutgoingContext(context.Background(), server.DefaultIdempotencyHeader, "k"), 30*time.Millisecond)
	_, err := b.cl.Get(ctx, &testingv1.GetRequest{Script: &testingv1.Script{Key: "block"}})
	cancel()
	if status.Code(err) != codes.DeadlineExceeded {
		t.Errorf("a repeat past its deadline: %v, want DEADLINE_EXCEEDED", err)
	}
	close(b.release)
	wg.Wait()
	for i, r := range results {
		if r.err != nil || r.resp.GetReply().GetSeq() != 1 {
			t.Errorf("call %d: %v, %v; want run 1's reply", i, r.resp, r.err)
		}
	}
	if b.runs.Load() != 1 {
		t.Errorf("%d runs, want 1", b.runs.Load())
	}
}

// TestDedupRefuses: a key reused with another request, and bad keys, are
// refused with a status naming the key or the header; the handler never
// runs for them.
func TestDedupRefuses(t *testing.T) {
	b := newDedupBench(t, memStore(t), server.IdempotencyOptions{MaxKeyLength: 8})
	b.get("k", "ok")
	r := b.get("k", "other request")
	if st := status.Convert(r.err); st.Code() != codes.FailedPrecondition || !strings.Contains(st.Message(), `key "k" was used with another request`) || r.resp != nil {
		t.Errorf("reused key: %v, %v", r.resp, r.err)
	}
	if r := b.get("123456789", "ok"); status.Code(r.err) != codes.InvalidArgument || !strings.Contains(r.err.Error(), `header "idempotency-key": 9 bytes, longer than the limit of 8`) {
		t.Errorf("long key: %v", r.err)
	}
	// grpc-go's client refuses non-printable header values itself; a key
	// the application takes from the request meets the server's check.
	fromReq := newDedupBench(t, memStore(t), server.IdempotencyOptions{Key: func(_ context.Context, _ string, req any) (string, bool) {
		return req.(*testingv1.GetRequest).GetScript().GetKey(), true
	}})
	for _, tc := range []struct{ key, want string }{
		{"a\tb", `the request's key: byte 1 is 0x09, outside printable ASCII`},
		{"é", "outside printable ASCII"},
		{"", "the request's key: empty"},
	} {
		r := fromReq.get("", tc.key)
		if st := status.Convert(r.err); st.Code() != codes.InvalidArgument || !strings.Contains(st.Message(), tc.want) {
			t.Errorf("key %q: %v, want INVALID_ARGUMENT containing %q", tc.key, r.err, tc.want)
		}
	}
	if fromReq.runs.Load() != 0 {
		t.Errorf("%d runs for bad keys", fromReq.runs.Load())
	}
	ctx := metadata.AppendToOutgoingContext(context.Background(), server.DefaultIdempotencyHeader, "a", server.DefaultIdempotencyHeader, "b")
	if _, err := b.cl.Get(ctx, &testingv1.GetRequest{}); status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "want one value, got 2") {
		t.Errorf("two keys: %v", err)
	}
	if b.runs.Load() != 1 {
		t.Errorf("%d runs, want 1", b.runs.Load())
	}
}

// TestDedupPanicReleases: a handler that panics frees its key: the retry
// runs.
func TestDedupPanicReleases(t *testing.T) {
	b := newDedupBench(t, memStore(t), server.IdempotencyOptions{})
	if r := b.get("k", "panic"); status.Code(r.err) != codes.Internal {
		t.Fatalf("panic: %v", r.err)
	}
	if r := b.get("k", "panic"); status.Code(r.err) != codes.Internal || b.runs.Load() != 2 {
		t.Errorf("retry after a panic: %v, %d runs; want the handler run again", r.err, b.runs.Load())
	}
}

// TestDedupKeyFromRequest: the application supplies the key (AIP-155's
// request_id; here the script's key).
func TestDedupKeyFromRequest(t *testing.T) {
	b := newDedupBench(t, memStore(t), server.IdempotencyOptions{Key: func(_ context.Context, _ string, req any) (string, bool) {
		k := req.(*testingv1.GetRequest).GetScript().GetKey()
		return k, k != ""
	}})
	b.get("", "ok")
	if r := b.get("", "ok"); r.err != nil || r.resp.GetReply().GetSeq() != 1 || b.runs.Load() != 1 {
		t.Errorf("second call: %v, %v, %d runs; want a replay", r.resp, r.err, b.runs.Load())
	}
}

// brokenStore fails every operation, as a store whose server is down.
type brokenStore struct{}

var errDown = errors.New("connection refused")

func (brokenStore) Claim(context.Context, string, server.Fingerprint, string, time.Duration) (bool, server.Entry, error) {
	return false, server.Entry{}, errDown
}
func (brokenStore) Complete(context.Context, string, string, []byte, time.Duration) error {
	return errDown
}
func (brokenStore) Release(context.Context, string, string) error { return errDown }

// TestDedupStoreDown: a store that fails fails the keyed request with
// UNAVAILABLE and never runs the handler; unkeyed calls run.
func TestDedupStoreDown(t *testing.T) {
	b := newDedupBench(t, brokenStore{}, server.IdempotencyOptions{})
	if r := b.get("k", "ok"); status.Code(r.err) != codes.Unavailable || !strings.Contains(r.err.Error(), "connection refused") || b.runs.Load() != 0 {
		t.Errorf("store down: %v, %d runs; want UNAVAILABLE and no run", r.err, b.runs.Load())
	}
	if r := b.get("", "ok"); r.err != nil {
		t.Errorf("unkeyed: %v", r.err)
	}
}

func TestWithIdempotencyRejectsBadOptions(t *testing.T) {
	for _, tc := range []struct {
		store server.Store
		o     server.IdempotencyOptions
		want  string
	}{
		{nil, server.IdempotencyOptions{}, "WithIdempotency: store is nil"},
		{brokenStore{}, server.IdempotencyOptions{Header: "Idem Key"}, "IdempotencyOptions.Header: must be a lower-case metadata key"},
		{brokenStore{}, server.IdempotencyOptions{Header: "grpc-key"}, "not starting with grpc-"},
		{brokenStore{}, server.IdempotencyOptions{TTL: -1}, "IdempotencyOptions.TTL: must be positive"},
		{brokenStore{}, server.IdempotencyOptions{Lease: time.Hour, MaxLease: time.Minute}, "IdempotencyOptions.MaxLease: must be at least Lease (1h0m0s)"},
		{brokenStore{}, server.IdempotencyOptions{MaxKeyLength: 5000}, "IdempotencyOptions.MaxKeyLength: must be in [1, 4096]"},
	} {
		if _, err := server.New(server.WithIdempotency(tc.store, tc.o)); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: %v, want %q", tc.o, err, tc.want)
		}
	}
}

// TestRealTimeChaosDedup: over loopback TCP, connections reset after the
// handler ran; with the key de-duplicated no write runs twice and the
// calls heal; without it, writes run twice.
func TestRealTimeChaosDedup(t *testing.T) {
	res := storetest.Chaos(t, []server.Store{memStore(t)}, true, 400, 0.05)
	t.Log("dedup:", res)
	// A keyed unary call is retried after headers too, so every reset
	// heals (five attempts at 5% each); 99% leaves room for a call reset
	// on all five.
	if res.Duplicates != 0 || float64(res.Healed) < 0.99*float64(res.Calls) || res.Dropped == 0 {
		t.Errorf("dedup: %v; want 0 duplicates, 99 %% healed", res)
	}
	off := storetest.Chaos(t, []server.Store{memStore(t)}, false, 400, 0.05)
	t.Log("no dedup:", off)
	if off.Duplicates == 0 {
		t.Errorf("without dedup: %v; the chaos made no duplicate, so it proves nothing", off)
	}
}

// TestDefaultHeaderMatchesTheClient: the server reads the header the
// client's default names.
func TestDefaultHeaderMatchesTheClient(t *testing.T) {
	if server.DefaultIdempotencyHeader != interceptor.DefaultIdempotencyHeader {
		t.Errorf("server reads %q, the client sends %q", server.DefaultIdempotencyHeader, interceptor.DefaultIdempotencyHeader)
	}
}

package server_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors/retry"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/stagger-go/stagger"
	"github.com/stagger-go/stagger/interceptor"
	"github.com/stagger-go/stagger/policy"
	testingv1 "github.com/stagger-go/stagger/proto/stagger/testing/v1"
	"github.com/stagger-go/stagger/server"
	"github.com/stagger-go/stagger/testserver"
)

// threeAttempts retries UNAVAILABLE (and RESOURCE_EXHAUSTED) up to 3
// attempts, 1ms apart: every layer of the chains below.
const threeAttempts = `{"methodConfig": [{
	"name": [{"service": "stagger.testing.v1.TestService"}],
	"retryPolicy": {"maxAttempts": 3, "initialBackoff": "0.001s", "maxBackoff": "0.001s",
		"backoffMultiplier": 1, "retryableStatusCodes": ["UNAVAILABLE", "RESOURCE_EXHAUSTED"], "jitter": "NONE"}
}]}`

// grpcRetry is threeAttempts as grpc-go's built-in retry reads it.
const grpcRetry = `{"methodConfig": [{
	"name": [{"service": "stagger.testing.v1.TestService"}],
	"retryPolicy": {"maxAttempts": 3, "initialBackoff": "0.001s", "maxBackoff": "0.001s",
		"backoffMultiplier": 1, "retryableStatusCodes": ["UNAVAILABLE", "RESOURCE_EXHAUSTED"]}
}]}`

// staggerLayer is a stagger client of threeAttempts without a budget: the
// chains measure propagation alone.
func staggerLayer(t testing.TB) []grpc.DialOption {
	t.Helper()
	return staggerFile(t, threeAttempts)
}

func grpcLayer() []grpc.DialOption {
	return []grpc.DialOption{grpc.WithDefaultServiceConfig(grpcRetry)}
}

func middlewareLayer() []grpc.DialOption {
	return []grpc.DialOption{
		grpc.WithDisableRetry(),
		grpc.WithChainUnaryInterceptor(retry.UnaryClientInterceptor(retry.WithMax(3), retry.WithBackoff(retry.BackoffLinear(time.Millisecond)))),
	}
}

// transport is how the layers of a chain reach each other.
type transport struct {
	name string
	opts []testserver.Option
	dial func(*testserver.Server, ...grpc.DialOption) (*grpc.ClientConn, error)
}

var transports = []transport{
	{"bufconn", nil, (*testserver.Server).Dial},
	{"tcp", []testserver.Option{testserver.WithTCP()}, (*testserver.Server).DialTCP},
}

func dial(t testing.TB, tr transport, s *testserver.Server, opts []grpc.DialOption) testingv1.TestServiceClient {
	t.Helper()
	cc, err := tr.dial(s, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cc.Close() })
	return testingv1.NewTestServiceClient(cc)
}

// newServer starts a testserver on tr and closes it at the end of the test
// (after the clients that reach it: cleanups run last first).
func newServer(t testing.TB, tr transport, opts ...testserver.Option) *testserver.Server {
	t.Helper()
	s := testserver.New(append(append([]testserver.Option(nil), tr.opts...), opts...)...)
	t.Cleanup(s.Close)
	return s
}

// chain is user → B → C: C is down (UNAVAILABLE), B relays to C through
// bottom, the user reaches B through top; side (nil: none) is B's server
// side.
type chain struct {
	top  testingv1.TestServiceClient
	b, c *testserver.Server
}

func newChain(t *testing.T, tr transport, top, bottom []grpc.DialOption, side *server.Interceptors) chain {
	t.Helper()
	c := newServer(t, tr, testserver.WithOutage(true))
	var bOpts []testserver.Option
	if side != nil {
		bOpts = append(bOpts, testserver.WithServerOptions(side.ServerOptions()...))
	}
	b := newServer(t, tr, append(bOpts, testserver.WithRelay(dial(t, tr, c, bottom)))...)
	return chain{top: dial(t, tr, b, top), b: b, c: c}
}

func (ch chain) get(t *testing.T, key string) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err := ch.top.Get(ctx, &testingv1.GetRequest{Script: &testingv1.Script{Key: key}})
	return err
}

func newSide(t testing.TB, opts ...server.Option) *server.Interceptors {
	t.Helper()
	s, err := server.New(opts...)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestPropagationStopsEveryLayer: B's stagger client gives up on C after 3
// attempts; B's server side answers "do not retry", so the layer above (any
// gRFC A6 retry) makes one attempt: C sees 3 attempts, not 9. The status
// reaches the user unchanged.
func TestPropagationStopsEveryLayer(t *testing.T) {
	for _, tr := range transports {
		t.Run(tr.name, func(t *testing.T) {
			for _, tc := range []struct {
				name       string
				top        []grpc.DialOption
				side       bool
				wantB      int
				wantC      int
				wantReason policy.Reason
			}{
				{"stagger/server-side", staggerLayer(t), true, 1, 3, policy.ReasonPushback},
				{"grpc-go/server-side", grpcLayer(), true, 1, 3, 0},
				{"stagger/none", staggerLayer(t), false, 3, 9, policy.ReasonAttempts},
				{"grpc-go/none", grpcLayer(), false, 3, 9, 0},
				// go-grpc-middleware ignores pushback: propagation alone
				// cannot stop it (WithRetryAtOneLayer bounds it).
				{"middleware/server-side", middlewareLayer(), true, 3, 9, 0},
			} {
				t.Run(tc.name, func(t *testing.T) {
					var side *server.Interceptors
					if tc.side {
						side = newSide(t)
					}
					ch := newChain(t, tr, tc.top, staggerLayer(t), side)
					err := ch.get(t, "k")
					if status.Code(err) != codes.Unavailable {
						t.Fatalf("code %v (%v), want UNAVAILABLE", status.Code(err), err)
					}
					if msg := status.Convert(err).Message(); !strings.Contains(msg, "outage") {
						t.Errorf("message %q: want C's own, unchanged", msg)
					}
					if got := len(ch.b.Attempts("k")); got != tc.wantB {
						t.Errorf("attempts at B = %d, want %d", got, tc.wantB)
					}
					if got := len(ch.c.Attempts("k")); got != tc.wantC {
						t.Errorf("attempts at C = %d, want %d", got, tc.wantC)
					}
					var e *interceptor.Error
					if tc.wantReason != 0 && (!errors.As(err, &e) || e.Reason != tc.wantReason) {
						t.Errorf("top's error %#v, want reason %v", e, tc.wantReason)
					}
				})
			}
		})
	}
}

// TestPropagationClimbs: user → A → B → C, stagger and the server side on
// A and B: the verdict climbs two layers and C sees 3 attempts per call.
func TestPropagationClimbs(t *testing.T) {
	for _, tr := range transports {
		t.Run(tr.name, func(t *testing.T) {
			c := newServer(t, tr, testserver.WithOutage(true))
			b := newServer(t, tr, testserver.WithServerOptions(newSide(t).ServerOptions()...), testserver.WithRelay(dial(t, tr, c, staggerLayer(t))))
			a := newServer(t, tr, testserver.WithServerOptions(newSide(t).ServerOptions()...), testserver.WithRelay(dial(t, tr, b, staggerLayer(t))))
			for _, top := range []struct {
				name string
				opts []grpc.DialOption
			}{{"stagger", staggerLayer(t)}, {"grpc-go", grpcLayer()}} {
				t.Run(top.name, func(t *testing.T) {
					user := dial(t, tr, a, top.opts)
					key := "climb-" + top.name
					_, err := user.Get(context.Background(), &testingv1.GetRequest{Script: &testingv1.Script{Key: key}})
					if status.Code(err) != codes.Unavailable {
						t.Fatalf("code %v, want UNAVAILABLE", status.Code(err))
					}
					if na, nb, nc := len(a.Attempts(key)), len(b.Attempts(key)), len(c.Attempts(key)); na != 1 || nb != 1 || nc != 3 {
						t.Errorf("attempts at A, B, C = %d, %d, %d; want 1, 1, 3", na, nb, nc)
					}
				})
			}
		})
	}
}

// handlerService is a TestService whose Get and ListItems are the test's.
type handlerService struct {
	testingv1.UnimplementedTestServiceServer
	get  func(context.Context, *testingv1.GetRequest) (*testingv1.GetResponse, error)
	list func(*testingv1.ListItemsRequest, grpc.ServerStreamingServer[testingv1.ListItemsResponse]) error
}

func (h *handlerService) Get(ctx context.Context, req *testingv1.GetRequest) (*testingv1.GetResponse, error) {
	return h.get(ctx, req)
}

func (h *handlerService) ListItems(req *testingv1.ListItemsRequest, ss grpc.ServerStreamingServer[testingv1.ListItemsResponse]) error {
	return h.list(req, ss)
}

// serveHandlers serves h on bufconn (through testserver's listener) with
// opts, and returns a raw client (no retries) that records trailers.
func serveHandlers(t *testing.T, h *handlerService, opts ...grpc.ServerOption) testingv1.TestServiceClient {
	t.Helper()
	g := grpc.NewServer(opts...)
	testingv1.RegisterTestServiceServer(g, h)
	lis := newListener(t)
	go func() { _ = g.Serve(lis) }()
	t.Cleanup(g.Stop)
	return testingv1.NewTestServiceClient(lis.dial(t, grpc.WithDisableRetry()))
}

// TestHandlerWrapsDownstreamError: the handler turns the downstream failure
// into a status of its own (the chain of errors is lost); the request's
// context carries the mark, so the pushback is added all the same. A
// handler's own failure, with no downstream give-up, gets none.
func TestHandlerWrapsDownstreamError(t *testing.T) {
	tr := transports[0]
	c := newServer(t, tr, testserver.WithOutage(true))
	down := dial(t, tr, c, staggerLayer(t))
	h := &handlerService{get: func(ctx context.Context, req *testingv1.GetRequest) (*testingv1.GetResponse, error) {
		if req.GetScript().GetKey() == "own" {
			return nil, status.Error(codes.Unavailable, "handler's own failure")
		}
		if _, err := down.Get(ctx, req); err != nil {
			return nil, status.Errorf(codes.Internal, "calling C: %v", err)
		}
		return &testingv1.GetResponse{}, nil
	}}
	cl := serveHandlers(t, h, newSide(t).ServerOptions()...)
	for _, tc := range []struct {
		key, wantPushback string
		wantCode          codes.Code
	}{{"wrapped", "-1", codes.Internal}, {"own", "", codes.Unavailable}} {
		var tl metadata.MD
		_, err := cl.Get(context.Background(), &testingv1.GetRequest{Script: &testingv1.Script{Key: tc.key}}, grpc.Trailer(&tl))
		if status.Code(err) != tc.wantCode {
			t.Errorf("%s: code %v, want %v", tc.key, status.Code(err), tc.wantCode)
		}
		if got := strings.Join(tl.Get(server.PushbackKey), ","); got != tc.wantPushback {
			t.Errorf("%s: pushback %q, want %q", tc.key, got, tc.wantPushback)
		}
	}
}

// TestDontRetryExplicit: a handler asks for "do not retry" itself; a
// successful reply is never touched; with WithoutPropagation nothing is
// added.
func TestDontRetryExplicit(t *testing.T) {
	h := &handlerService{get: func(ctx context.Context, req *testingv1.GetRequest) (*testingv1.GetResponse, error) {
		marked := server.DontRetry(ctx)
		if req.GetScript().GetKey() == "ok" {
			return &testingv1.GetResponse{Reply: &testingv1.Reply{Key: fmt.Sprint(marked)}}, nil
		}
		return nil, status.Error(codes.Unavailable, "no")
	}}
	if server.DontRetry(context.Background()) {
		t.Error("DontRetry outside a served request reported true")
	}
	for _, tc := range []struct {
		name string
		opts []server.Option
		want string
	}{{"propagation", nil, "-1"}, {"without", []server.Option{server.WithoutPropagation()}, ""}} {
		t.Run(tc.name, func(t *testing.T) {
			cl := serveHandlers(t, h, newSide(t, tc.opts...).ServerOptions()...)
			var tl metadata.MD
			_, err := cl.Get(context.Background(), &testingv1.GetRequest{Script: &testingv1.Script{Key: "fail"}}, grpc.Trailer(&tl))
			if status.Code(err) != codes.Unavailable || status.Convert(err).Message() != "no" {
				t.Errorf("error %v, want UNAVAILABLE \"no\" unchanged", err)
			}
			if got := strings.Join(tl.Get(server.PushbackKey), ","); got != tc.want {
				t.Errorf("pushback %q, want %q", got, tc.want)
			}
			tl = nil
			resp, err := cl.Get(context.Background(), &testingv1.GetRequest{Script: &testingv1.Script{Key: "ok"}}, grpc.Trailer(&tl))
			if err != nil || len(tl.Get(server.PushbackKey)) != 0 {
				t.Errorf("success: %v, trailer %v; want OK without pushback", err, tl)
			}
			if want := fmt.Sprint(tc.want != ""); resp.GetReply().GetKey() != want {
				t.Errorf("DontRetry reported %s, want %s", resp.GetReply().GetKey(), want)
			}
		})
	}
}

// TestStreamPropagation: a server-streaming handler whose downstream call
// gave up ends with the pushback in its trailer, status unchanged.
func TestStreamPropagation(t *testing.T) {
	tr := transports[0]
	c := newServer(t, tr, testserver.WithOutage(true))
	down := dial(t, tr, c, staggerLayer(t))
	h := &handlerService{list: func(req *testingv1.ListItemsRequest, ss grpc.ServerStreamingServer[testingv1.ListItemsResponse]) error {
		_, err := down.Get(ss.Context(), &testingv1.GetRequest{Script: req.GetScript()})
		return status.Errorf(codes.Unavailable, "wrapped: %s", status.Convert(err).Message())
	}}
	cl := serveHandlers(t, h, newSide(t).ServerOptions()...)
	st, err := cl.ListItems(context.Background(), &testingv1.ListItemsRequest{Script: &testingv1.Script{Key: "s"}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.Recv(); status.Code(err) != codes.Unavailable || !strings.HasPrefix(status.Convert(err).Message(), "wrapped: ") {
		t.Fatalf("Recv: %v, want the handler's UNAVAILABLE", err)
	}
	if got := st.Trailer().Get(server.PushbackKey); len(got) != 1 || got[0] != "-1" {
		t.Errorf("pushback %v, want [-1]", got)
	}
	if n := len(c.Attempts("s")); n != 3 {
		t.Errorf("attempts at C = %d, want 3", n)
	}
}

// TestRetryAtOneLayer: with go-grpc-middleware at the top (which ignores
// pushback), B's retries of retried requests make one attempt each: C sees
// 3 + 1 + 1. With grpc-go at the top and propagation off, the same. Hedges
// from a stagger top count as retries.
func TestRetryAtOneLayer(t *testing.T) {
	for _, tr := range transports {
		t.Run(tr.name, func(t *testing.T) {
			for _, tc := range []struct {
				name  string
				top   []grpc.DialOption
				opts  []server.Option
				wantB int
				wantC int
			}{
				{"middleware", middlewareLayer(), []server.Option{server.WithRetryAtOneLayer()}, 3, 5},
				{"grpc-go/no-propagation", grpcLayer(), []server.Option{server.WithRetryAtOneLayer(), server.WithoutPropagation()}, 3, 5},
				{"middleware/off", middlewareLayer(), nil, 3, 9},
				{"stagger-hedging", hedgingLayer(t), []server.Option{server.WithRetryAtOneLayer()}, 3, 5},
			} {
				t.Run(tc.name, func(t *testing.T) {
					ch := newChain(t, tr, tc.top, staggerLayer(t), newSide(t, tc.opts...))
					if err := ch.get(t, "k"); status.Code(err) != codes.Unavailable {
						t.Fatalf("code %v, want UNAVAILABLE", status.Code(err))
					}
					if got := len(ch.b.Attempts("k")); got != tc.wantB {
						t.Errorf("attempts at B = %d, want %d", got, tc.wantB)
					}
					if got := len(ch.c.Attempts("k")); got != tc.wantC {
						t.Errorf("attempts at C = %d, want %d", got, tc.wantC)
					}
				})
			}
		})
	}
}

// hedgingLayer sends 3 hedges at once (idempotent Get).
func hedgingLayer(t testing.TB) []grpc.DialOption {
	t.Helper()
	return staggerFile(t, `{"methodConfig": [{
		"name": [{"service": "stagger.testing.v1.TestService", "method": "Get"}],
		"idempotent": true,
		"hedgingPolicy": {"maxAttempts": 3, "hedgingDelay": "0s", "nonFatalStatusCodes": ["UNAVAILABLE"]}
	}]}`)
}

// staggerFile is a stagger client of file, without a budget. A file with
// warnings fails the test: it would not say what the test assumes (a
// maxAttempts above the cap, a misspelt key).
func staggerFile(t testing.TB, file string) []grpc.DialOption {
	t.Helper()
	cfg, err := policy.ParseConfig([]byte(file))
	if err != nil {
		t.Fatal(err)
	}
	if ws := cfg.Warnings(); len(ws) > 0 {
		t.Fatalf("the test's policy file has warnings: %v", ws)
	}
	return stagger.DialOptions(cfg, interceptor.WithBudget(nil))
}

// TestRetryAtOneLayerClimbsDown: go-grpc-middleware at the top of user → A
// → B → C ignores the "do not retry" verdict and retries A; A's single
// attempt to B carries stagger-upstream-retry, so B makes one attempt at C
// too: C sees 3 + 1 + 1, not 3 + 3 + 3.
func TestRetryAtOneLayerClimbsDown(t *testing.T) {
	for _, tr := range transports {
		t.Run(tr.name, func(t *testing.T) {
			for _, tc := range []struct {
				name         string
				opts         []server.Option
				wantA, wantB int
				wantC        int
			}{
				{"one-layer", []server.Option{server.WithRetryAtOneLayer()}, 3, 3, 5},
				{"propagation-only", nil, 3, 3, 9},
			} {
				t.Run(tc.name, func(t *testing.T) {
					c := newServer(t, tr, testserver.WithOutage(true))
					b := newServer(t, tr, testserver.WithServerOptions(newSide(t, tc.opts...).ServerOptions()...), testserver.WithRelay(dial(t, tr, c, staggerLayer(t))))
					a := newServer(t, tr, testserver.WithServerOptions(newSide(t, tc.opts...).ServerOptions()...), testserver.WithRelay(dial(t, tr, b, staggerLayer(t))))
					user := dial(t, tr, a, middlewareLayer())
					_, err := user.Get(context.Background(), &testingv1.GetRequest{Script: &testingv1.Script{Key: "k"}})
					if status.Code(err) != codes.Unavailable {
						t.Fatalf("code %v, want UNAVAILABLE", status.Code(err))
					}
					if na, nb, nc := len(a.Attempts("k")), len(b.Attempts("k")), len(c.Attempts("k")); na != tc.wantA || nb != tc.wantB || nc != tc.wantC {
						t.Errorf("attempts at A, B, C = %d, %d, %d; want %d, %d, %d", na, nb, nc, tc.wantA, tc.wantB, tc.wantC)
					}
				})
			}
		})
	}
}

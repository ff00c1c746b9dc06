//go:build go1.25

// The package's //go:debug asynctimerchan=0, which synctest needs, is in
// interceptor_test.go.

package test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/test/bufconn"

	"github.com/stagger-go/stagger"
	"github.com/stagger-go/stagger/interceptor"
	"github.com/stagger-go/stagger/policy"
)

// Ports of go-grpc-middleware v2's own retry tests
// (interceptors/retry/retry_test.go, v2.3.4), run through
// stagger.DialOptions instead of the middleware's retry interceptor. v2.1.0,
// the version stagger's go.mod names, has the same tests but two: it lacks
// TestUnary_OnRetryCallbackNotCalledOnNonRetriableError (its unary
// interceptor calls the callback after every failed attempt, see
// TestMiddlewareRetryPort) and TestStreamClientInterceptorAttemptMetadata
// (its stream retries carry no x-retry-attempt header).
//
// The middleware's testpb suite (its ping service, with testify) is not a
// dependency of stagger's core module, so the same service is rebuilt on
// grpc-go's interop TestService: Ping is UnaryCall, PingList is
// StreamingOutputCall; the failing service is the middleware's, line for
// line. Each case gets its own server and client in a testing/synctest
// bubble instead of one shared suite, so every pause is asserted exactly
// (the middleware's tests check none), and RestartServer needs no sleep.
//
// Options, middleware -> stagger:
//
//	WithMax(n)                  maxAttempts n in the file, WithMaxAttempts(n)
//	                            per call (both count attempts, the first
//	                            included, as WithMax does despite its name;
//	                            both bounded by the file's cap, 5 unless
//	                            raised with policy.WithMaxAttemptsCap)
//	WithCodes(c...)             retryableStatusCodes in the file; per call,
//	                            WithCodes(c...)
//	WithRetriable(f)            WithPredicate(func(err) (f(err), true))
//	WithBackoff(BackoffLinear)  initialBackoff = maxBackoff, multiplier 1,
//	                            jitter NONE
//	WithOnRetryCallback(f)      WithHook, counting EventRetry
//	WithPerRetryTimeout(d)      perAttemptRecvTimeout d (idempotent methods
//	                            only; see TestMiddlewarePerRetryTimeoutPort)
//	x-retry-attempt header      grpc-previous-rpc-attempts (same numbers)
//	Disable()                   Disable()
//	no budget                   WithBudget(nil)

// mwRetryFile is the middleware suite's interceptor: WithCodes(Unavailable,
// DataLoss), WithMax(3), WithBackoff(BackoffLinear(50ms)).
const mwRetryFile = `{"methodConfig": [{
	"name": [{"service": "grpc.testing.TestService"}],
	"retryPolicy": {"maxAttempts": 3, "initialBackoff": "0.05s", "maxBackoff": "0.05s",
		"backoffMultiplier": 1, "jitter": "NONE", "retryableStatusCodes": ["UNAVAILABLE", "DATA_LOSS"]}
}]}`

// mwRetryTimeout is the middleware's retryTimeout: its linear backoff, and
// the unit of its server restarts and deadlines.
const mwRetryTimeout = 50 * time.Millisecond

// mwListResponseCount is testpb.ListResponseCount: PingList's messages.
const mwListResponseCount = 100

var (
	mwGoodPing     = &testgrpc.SimpleRequest{Payload: &testgrpc.Payload{Body: []byte("something")}}
	mwGoodPingList = &testgrpc.StreamingOutputCallRequest{Payload: &testgrpc.Payload{Body: []byte("something")}}
)

// mwFailingService is the middleware's failingService: request number n
// (from 1) succeeds when reqModulo > 0 divides it; any other request sleeps
// reqSleep and fails with reqError. It also records, per request, when it
// arrived and its grpc-previous-rpc-attempts header.
type mwFailingService struct {
	testgrpc.UnimplementedTestServiceServer
	mu sync.Mutex

	reqCounter uint
	reqModulo  uint
	reqSleep   time.Duration
	reqError   codes.Code

	arrivals []time.Time
	previous []string
	// sleeping counts the requests in their reqSleep, which outlasts a
	// call that stagger's timer cut off: the bench waits for them, since a
	// bubble whose test has returned advances no clock.
	sleeping sync.WaitGroup
}

func (s *mwFailingService) resetFailingConfiguration(modulo uint, errorCode codes.Code, sleepTime time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.reqCounter, s.reqModulo, s.reqError, s.reqSleep = 0, modulo, errorCode, sleepTime
	s.arrivals, s.previous = nil, nil
}

// record returns the arrival times and grpc-previous-rpc-attempts headers
// ("" when absent) of the requests so far; its length is the original's
// requestCount.
func (s *mwFailingService) record() ([]time.Time, []string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]time.Time(nil), s.arrivals...), append([]string(nil), s.previous...)
}

func (s *mwFailingService) maybeFailRequest(ctx context.Context) error {
	md, _ := metadata.FromIncomingContext(ctx)
	prev := strings.Join(md["grpc-previous-rpc-attempts"], ",")
	s.mu.Lock()
	s.reqCounter++
	s.arrivals = append(s.arrivals, time.Now())
	s.previous = append(s.previous, prev)
	reqModulo, reqCounter, reqSleep, reqError := s.reqModulo, s.reqCounter, s.reqSleep, s.reqError
	succeed := (reqModulo > 0) && (reqCounter%reqModulo == 0)
	if !succeed {
		// Under mu: a request recorded is one sleeping's Wait sees.
		s.sleeping.Add(1)
	}
	s.mu.Unlock()
	if succeed {
		return nil
	}
	defer s.sleeping.Done()
	time.Sleep(reqSleep)
	return status.Error(reqError, "maybeFailRequest: failing it")
}

// UnaryCall is the middleware's Ping: it echoes the request's payload.
func (s *mwFailingService) UnaryCall(ctx context.Context, req *testgrpc.SimpleRequest) (*testgrpc.SimpleResponse, error) {
	if err := s.maybeFailRequest(ctx); err != nil {
		return nil, err
	}
	return &testgrpc.SimpleResponse{Payload: req.GetPayload()}, nil
}

// StreamingOutputCall is the middleware's PingList: mwListResponseCount
// messages, each the request's body followed by its counter.
func (s *mwFailingService) StreamingOutputCall(req *testgrpc.StreamingOutputCallRequest, stream testgrpc.TestService_StreamingOutputCallServer) error {
	if err := s.maybeFailRequest(stream.Context()); err != nil {
		return err
	}
	for i := 0; i < mwListResponseCount; i++ {
		body := fmt.Appendf(nil, "%s %d", req.GetPayload().GetBody(), i)
		if err := stream.Send(&testgrpc.StreamingOutputCallResponse{Payload: &testgrpc.Payload{Body: body}}); err != nil {
			return err
		}
	}
	return nil
}

// mwBench is testpb.InterceptorTestSuite's part the ports need: the service
// served over bufconn, which RestartServer stops and starts again, and a
// client of it.
type mwBench struct {
	t      *testing.T
	svc    *mwFailingService
	client testgrpc.TestServiceClient

	mu     sync.Mutex
	lis    *bufconn.Listener // nil while the server is stopped
	gs     *grpc.Server
	served chan struct{}
}

// newMWBench serves a fresh mwFailingService and connects to it with dial
// (stagger.DialOptions and whatever interceptors a case chains around it).
func newMWBench(t *testing.T, dial ...grpc.DialOption) *mwBench {
	t.Helper()
	b := &mwBench{t: t, svc: &mwFailingService{}}
	b.startServer()
	t.Cleanup(func() {
		b.svc.sleeping.Wait()
		b.stopServer()
	})
	b.client = testgrpc.NewTestServiceClient(b.dial(dial...))
	return b
}

// dial connects to the bench's server with dial and closes the connection
// when the test ends.
func (b *mwBench) dial(dial ...grpc.DialOption) *grpc.ClientConn {
	b.t.Helper()
	dial = append(dial,
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) {
			b.mu.Lock()
			lis := b.lis
			b.mu.Unlock()
			if lis == nil {
				return nil, errors.New("mwBench: connection refused (server stopped)")
			}
			return lis.DialContext(ctx)
		}))
	cc, err := grpc.NewClient("passthrough:///bufnet", dial...)
	if err != nil {
		b.t.Fatal(err)
	}
	b.t.Cleanup(func() { cc.Close() })
	return cc
}

func (b *mwBench) startServer() {
	b.mu.Lock()
	defer b.mu.Unlock()
	lis, gs, served := bufconn.Listen(1<<20), grpc.NewServer(), make(chan struct{})
	testgrpc.RegisterTestServiceServer(gs, b.svc)
	go func() {
		defer close(served)
		_ = gs.Serve(lis)
	}()
	b.lis, b.gs, b.served = lis, gs, served
}

func (b *mwBench) stopServer() {
	b.mu.Lock()
	gs, served := b.gs, b.served
	b.lis, b.gs = nil, nil
	b.mu.Unlock()
	if gs != nil {
		gs.Stop()
		<-served
	}
}

// restartServer is the suite's RestartServer: the server stops now and
// serves again delayedStart later; the channel is closed then. The
// original sleeps 10ms so that the client sees its connection end;
// synctest.Wait waits exactly until it has.
func (b *mwBench) restartServer(delayedStart time.Duration) <-chan struct{} {
	b.stopServer()
	synctest.Wait()
	restarted := make(chan struct{})
	go func() {
		defer close(restarted)
		time.Sleep(delayedStart)
		b.startServer()
	}()
	return restarted
}

// mwSimpleCtx is the suite's SimpleCtx: a 2s deadline.
func mwSimpleCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// mwHooks records a call's events and when each came, from the call's start.
type mwHooks struct {
	mu     sync.Mutex
	start  time.Time
	events []interceptor.Event
	at     []time.Duration
}

func newMWHooks() *mwHooks { return &mwHooks{start: time.Now()} }

func (h *mwHooks) hook(e interceptor.Event) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.events = append(h.events, e)
	h.at = append(h.at, time.Since(h.start))
}

// kinds returns the events of kind k and when each came.
func (h *mwHooks) kinds(k interceptor.EventKind) ([]interceptor.Event, []time.Duration) {
	h.mu.Lock()
	defer h.mu.Unlock()
	var es []interceptor.Event
	var at []time.Duration
	for i, e := range h.events {
		if e.Kind == k {
			es, at = append(es, e), append(at, h.at[i])
		}
	}
	return es, at
}

// mwRetriable is the middleware's WithRetriable(f).
func mwRetriable(f func(error) bool) interceptor.Option {
	return interceptor.WithPredicate(func(err error) (retry, decided bool) { return f(err), true })
}

// mwCheckRequests checks the requests the server saw: their number, the
// pause before each (from the one before it), and that retry n carried
// grpc-previous-rpc-attempts n (the middleware's x-retry-attempt).
func mwCheckRequests(t *testing.T, svc *mwFailingService, n int, pause time.Duration) {
	t.Helper()
	arrivals, previous := svc.record()
	if len(arrivals) != n {
		t.Fatalf("the server saw %d requests; want %d", len(arrivals), n)
	}
	for i := range arrivals {
		want := ""
		if i > 0 {
			want = fmt.Sprint(i)
			if gap := arrivals[i].Sub(arrivals[i-1]); gap != pause {
				t.Errorf("pause before request %d = %v; want %v exactly", i+1, gap, pause)
			}
		}
		if previous[i] != want {
			t.Errorf("request %d: grpc-previous-rpc-attempts %q; want %q", i+1, previous[i], want)
		}
	}
}

// mwCheckFinal checks that err is stagger's final error: code, number of
// attempts and the reason it stopped.
func mwCheckFinal(t *testing.T, err error, code codes.Code, attempts int, reason policy.Reason) {
	t.Helper()
	if status.Code(err) != code {
		t.Fatalf("error %v; want code %v", err, code)
	}
	var se *interceptor.Error
	if !errors.As(err, &se) {
		t.Fatalf("error %T %v is not an *interceptor.Error", err, err)
	}
	if se.Attempts != attempts || se.Reason != reason {
		t.Errorf("stopped after %d attempts, reason %v; want %d, reason %v", se.Attempts, se.Reason, attempts, reason)
	}
}

// mwAssertPingListWasCorrect is the suite's assertPingListWasCorrect: every
// message, in order, none twice, then io.EOF.
func mwAssertPingListWasCorrect(t *testing.T, stream testgrpc.TestService_StreamingOutputCallClient) {
	t.Helper()
	count := 0
	for {
		pong, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("no errors during receive on client side: %v", err)
		}
		if want := fmt.Sprintf("%s %d", mwGoodPingList.GetPayload().GetBody(), count); string(pong.GetPayload().GetBody()) != want {
			t.Fatalf("message %d = %q; want %q", count, pong.GetPayload().GetBody(), want)
		}
		count++
	}
	if count != mwListResponseCount {
		t.Fatalf("received %d messages; want %d", count, mwListResponseCount)
	}
}

// mwSuiteDial is the RetrySuite's client: stagger.DialOptions with
// mwRetryFile and no budget (the middleware has none). The file's cap is
// raised to 40: the middleware's WithMax has no cap, and
// TestServerStream_CallRetrySucceeds asks for 40 attempts per call, which
// WithMaxAttempts would otherwise lower to gRFC A6's 5.
func mwSuiteDial(t *testing.T) []grpc.DialOption {
	t.Helper()
	cfg, err := policy.ParseConfig([]byte(mwRetryFile), policy.WithMaxAttemptsCap(40))
	if err != nil {
		t.Fatal(err)
	}
	return stagger.DialOptions(cfg, interceptor.WithBudget(nil))
}

// TestMiddlewareRetryPort ports the middleware's RetrySuite, one subtest per
// suite method, named as in the original. Every case also checks what the
// original cannot: the exact pauses (50ms), the attempt header, and stagger's
// final error (attempts and reason).
//
// Differences from the middleware, each asserted in its case:
//   - Retry callbacks: stagger's EventRetry is emitted when the retry is
//     decided, before the pause, with Attempt the number of the attempt
//     that failed; the middleware (v2.3.4) calls its callback after the
//     pause, just before the retry, with the number of the retry. Both count
//     one per retry, so the counts are the original's. v2.1.0's unary
//     interceptor called it after every failed attempt, a non-retryable or
//     last one included (1 call where v2.3.4 and stagger make 0); stagger
//     reports such an attempt as one EventGiveUp instead.
//   - TestServerStream_CallFailsOnDeadlineExceeded: the middleware waits its
//     50ms pause until the 50ms deadline cuts it and returns
//     DEADLINE_EXCEEDED. stagger does not take a pause that cannot end
//     before the deadline (interceptor's package doc, "Model"): it returns
//     the last attempt's real status, UNAVAILABLE, at once (reason
//     deadline).
//   - Failed stream creation: both retry it inside the interceptor, so
//     PingList itself returns the final error, as in the original.
func TestMiddlewareRetryPort(t *testing.T) {
	cases := []struct {
		name string
		run  func(t *testing.T, b *mwBench)
	}{{
		"TestUnary_FailsOnNonRetriableError", func(t *testing.T, b *mwBench) {
			b.svc.resetFailingConfiguration(5, codes.Internal, 0)
			_, err := b.client.UnaryCall(mwSimpleCtx(t), mwGoodPing)
			mwCheckFinal(t, err, codes.Internal, 1, policy.ReasonNotRetryable)
			mwCheckRequests(t, b.svc, 1, 0)
		},
	}, {
		// A CANCELED the server wrote, while the caller's context is alive,
		// is a status like any other: not listed, so not retried, and
		// returned as the server wrote it.
		"TestUnary_FailsOnNonRetriableContextError", func(t *testing.T, b *mwBench) {
			b.svc.resetFailingConfiguration(5, codes.Canceled, 0)
			_, err := b.client.UnaryCall(mwSimpleCtx(t), mwGoodPing)
			mwCheckFinal(t, err, codes.Canceled, 1, policy.ReasonNotRetryable)
			if msg := status.Convert(err).Message(); msg != "maybeFailRequest: failing it" {
				t.Errorf("message %q; want the server's", msg)
			}
			mwCheckRequests(t, b.svc, 1, 0)
		},
	}, {
		// stagger's Options embed grpc.EmptyCallOption, so grpc ignores them
		// on a connection without stagger: no panic, and no retry either.
		// The middleware's WithBackoff, WithCodes and WithPerRetryTimeout
		// have no per-call equivalents of their own; a per-call WithPolicy
		// holds all three.
		"TestCallOptionsDontPanicWithoutInterceptor", func(t *testing.T, b *mwBench) {
			b.svc.resetFailingConfiguration(100, codes.DataLoss, 0)
			nonMiddlewareClient := testgrpc.NewTestServiceClient(b.dial())
			_, err := nonMiddlewareClient.UnaryCall(mwSimpleCtx(t), mwGoodPing,
				interceptor.WithMaxAttempts(5),
				interceptor.WithPolicy(policy.Policy{
					MaxAttempts:           5,
					Backoff:               policy.Backoff{Initial: time.Millisecond, Max: time.Millisecond, Multiplier: 1, Jitter: policy.JitterNone},
					RetryableCodes:        policy.NewCodeSet(codes.DataLoss),
					PerAttemptRecvTimeout: time.Millisecond,
				}),
				interceptor.Idempotent(),
			)
			if status.Code(err) != codes.DataLoss {
				t.Fatalf("error %v; want code DataLoss", err)
			}
			if interceptor.Attempts(err) != 0 {
				t.Errorf("error %v comes from stagger; want grpc's own", err)
			}
			mwCheckRequests(t, b.svc, 1, 0)
		},
	}, {
		"TestServerStream_FailsOnNonRetriableError", func(t *testing.T, b *mwBench) {
			b.svc.resetFailingConfiguration(5, codes.Internal, 0)
			stream, err := b.client.StreamingOutputCall(mwSimpleCtx(t), mwGoodPingList)
			if err != nil {
				t.Fatalf("should not fail on establishing the stream: %v", err)
			}
			_, err = stream.Recv()
			mwCheckFinal(t, err, codes.Internal, 1, policy.ReasonNotRetryable)
			mwCheckRequests(t, b.svc, 1, 0)
		},
	}, {
		"TestUnary_SucceedsOnRetriableError", func(t *testing.T, b *mwBench) {
			b.svc.resetFailingConfiguration(3, codes.DataLoss, 0)
			out, err := b.client.UnaryCall(mwSimpleCtx(t), mwGoodPing)
			if err != nil || out == nil {
				t.Fatalf("the third invocation should succeed: %v, %v", out, err)
			}
			mwCheckRequests(t, b.svc, 3, mwRetryTimeout)
		},
	}, {
		"TestUnary_OverrideFromDialOpts", func(t *testing.T, b *mwBench) {
			b.svc.resetFailingConfiguration(5, codes.ResourceExhausted, 0)
			out, err := b.client.UnaryCall(mwSimpleCtx(t), mwGoodPing,
				interceptor.WithCodes(codes.ResourceExhausted), interceptor.WithMaxAttempts(5))
			if err != nil || out == nil {
				t.Fatalf("the fifth invocation should succeed: %v, %v", out, err)
			}
			mwCheckRequests(t, b.svc, 5, mwRetryTimeout)
		},
	}, {
		"TestUnary_OverrideFromDialOpts2", func(t *testing.T, b *mwBench) {
			b.svc.resetFailingConfiguration(5, codes.ResourceExhausted, 0)
			out, err := b.client.UnaryCall(mwSimpleCtx(t), mwGoodPing,
				mwRetriable(func(err error) bool { return strings.Contains(err.Error(), "maybeFailRequest") }),
				interceptor.WithMaxAttempts(5))
			if err != nil || out == nil {
				t.Fatalf("the fifth invocation should succeed: %v, %v", out, err)
			}
			mwCheckRequests(t, b.svc, 5, mwRetryTimeout)
		},
	}, {
		"TestUnary_OnRetryCallbackCalled", func(t *testing.T, b *mwBench) {
			b.svc.resetFailingConfiguration(3, codes.Unavailable, 0)
			h := newMWHooks()
			out, err := b.client.UnaryCall(mwSimpleCtx(t), mwGoodPing, interceptor.WithHook(h.hook))
			if err != nil || out == nil {
				t.Fatalf("the third invocation should succeed: %v, %v", out, err)
			}
			mwCheckRetryEvents(t, h, codes.Unavailable)
			mwCheckRequests(t, b.svc, 3, mwRetryTimeout)
		},
	}, {
		"TestUnary_OnRetryCallbackNotCalledOnNonRetriableError", func(t *testing.T, b *mwBench) {
			b.svc.resetFailingConfiguration(3, codes.Internal, 0)
			h := newMWHooks()
			out, err := b.client.UnaryCall(mwSimpleCtx(t), mwGoodPing, interceptor.WithHook(h.hook))
			if err == nil || out != nil {
				t.Fatalf("should result in an error: %v, %v", out, err)
			}
			if retries, _ := h.kinds(interceptor.EventRetry); len(retries) != 0 {
				t.Errorf("retry events %v; want none", retries)
			}
			giveUps, _ := h.kinds(interceptor.EventGiveUp)
			if len(giveUps) != 1 || giveUps[0].Attempt != 1 || giveUps[0].Code != codes.Internal || giveUps[0].Reason != policy.ReasonNotRetryable {
				t.Errorf("give-up events %+v; want one, attempt 1, Internal, not retryable", giveUps)
			}
			mwCheckRequests(t, b.svc, 1, 0)
		},
	}, {
		"TestServerStream_SucceedsOnRetriableError", func(t *testing.T, b *mwBench) {
			b.svc.resetFailingConfiguration(3, codes.DataLoss, 0)
			stream, err := b.client.StreamingOutputCall(mwSimpleCtx(t), mwGoodPingList)
			if err != nil {
				t.Fatalf("establishing the connection must always succeed: %v", err)
			}
			mwAssertPingListWasCorrect(t, stream)
			mwCheckRequests(t, b.svc, 3, mwRetryTimeout)
		},
	}, {
		"TestServerStream_OverrideFromContext", func(t *testing.T, b *mwBench) {
			b.svc.resetFailingConfiguration(5, codes.ResourceExhausted, 0)
			stream, err := b.client.StreamingOutputCall(mwSimpleCtx(t), mwGoodPingList,
				interceptor.WithCodes(codes.ResourceExhausted), interceptor.WithMaxAttempts(5))
			if err != nil {
				t.Fatalf("establishing the connection must always succeed: %v", err)
			}
			mwAssertPingListWasCorrect(t, stream)
			mwCheckRequests(t, b.svc, 5, mwRetryTimeout)
		},
	}, {
		"TestServerStream_OverrideFromContext2", func(t *testing.T, b *mwBench) {
			b.svc.resetFailingConfiguration(5, codes.ResourceExhausted, 0)
			stream, err := b.client.StreamingOutputCall(mwSimpleCtx(t), mwGoodPingList,
				mwRetriable(func(err error) bool { return strings.Contains(err.Error(), "maybeFailRequest") }),
				interceptor.WithMaxAttempts(5))
			if err != nil {
				t.Fatalf("establishing the connection must always succeed: %v", err)
			}
			mwAssertPingListWasCorrect(t, stream)
			mwCheckRequests(t, b.svc, 5, mwRetryTimeout)
		},
	}, {
		"TestServerStream_OnRetryCallbackCalled", func(t *testing.T, b *mwBench) {
			b.svc.resetFailingConfiguration(3, codes.Unavailable, 0)
			h := newMWHooks()
			stream, err := b.client.StreamingOutputCall(mwSimpleCtx(t), mwGoodPingList, interceptor.WithHook(h.hook))
			if err != nil {
				t.Fatalf("establishing the connection must always succeed: %v", err)
			}
			mwAssertPingListWasCorrect(t, stream)
			mwCheckRetryEvents(t, h, codes.Unavailable)
			mwCheckRequests(t, b.svc, 3, mwRetryTimeout)
		},
	}, {
		// The server is down for 150ms; the three attempts, 50ms apart,
		// find no server (grpc fails them fast: the method is not
		// waitForReady) and never reach it.
		"TestServerStream_CallFailsOnOutOfRetries", func(t *testing.T, b *mwBench) {
			restarted := b.restartServer(3 * mwRetryTimeout)
			start := time.Now()
			_, err := b.client.StreamingOutputCall(mwSimpleCtx(t), mwGoodPingList)
			mwCheckFinal(t, err, codes.Unavailable, 3, policy.ReasonAttempts)
			if elapsed := time.Since(start); elapsed != 2*mwRetryTimeout {
				t.Errorf("gave up after %v; want %v exactly (two pauses)", elapsed, 2*mwRetryTimeout)
			}
			mwCheckRequests(t, b.svc, 0, 0)
			<-restarted
		},
	}, {
		// The deliberate difference: see the test's comment.
		"TestServerStream_CallFailsOnDeadlineExceeded", func(t *testing.T, b *mwBench) {
			restarted := b.restartServer(3 * mwRetryTimeout)
			ctx, cancel := context.WithTimeout(context.Background(), mwRetryTimeout)
			defer cancel()
			start := time.Now()
			_, err := b.client.StreamingOutputCall(ctx, mwGoodPingList)
			mwCheckFinal(t, err, codes.Unavailable, 1, policy.ReasonDeadline)
			if elapsed := time.Since(start); elapsed != 0 {
				t.Errorf("gave up after %v; want at once", elapsed)
			}
			if ctx.Err() != nil {
				t.Errorf("the caller's context ended (%v) before the call returned", ctx.Err())
			}
			<-restarted
		},
	}, {
		// The server is back after 50ms, but grpc reconnects only after its
		// connection backoff (about 1s, with grpc's own jitter), so the
		// number of attempts is grpc's to choose; what is stagger's is
		// asserted: every failed attempt UNAVAILABLE, every pause 50ms,
		// within WithMaxAttempts(40), and the one attempt that reached the
		// server delivers the whole stream.
		"TestServerStream_CallRetrySucceeds", func(t *testing.T, b *mwBench) {
			restarted := b.restartServer(mwRetryTimeout)
			h := newMWHooks()
			stream, err := b.client.StreamingOutputCall(mwSimpleCtx(t), mwGoodPingList,
				interceptor.WithMaxAttempts(40), interceptor.WithHook(h.hook))
			if err != nil {
				t.Fatalf("establishing the connection should succeed: %v", err)
			}
			<-restarted
			mwAssertPingListWasCorrect(t, stream)
			retries, at := h.kinds(interceptor.EventRetry)
			if len(retries) == 0 || len(retries) > 39 {
				t.Fatalf("%d retries; want 1 to 39", len(retries))
			}
			for i, e := range retries {
				if e.Attempt != i+1 || e.Code != codes.Unavailable || e.Pause != mwRetryTimeout || at[i] != time.Duration(i)*mwRetryTimeout {
					t.Errorf("retry event %d: attempt %d, %v, pause %v, at %v; want attempt %d, Unavailable, pause %v, at %v",
						i, e.Attempt, e.Code, e.Pause, at[i], i+1, mwRetryTimeout, time.Duration(i)*mwRetryTimeout)
				}
			}
			if giveUps, _ := h.kinds(interceptor.EventGiveUp); len(giveUps) != 0 {
				t.Errorf("give-up events %+v; want none", giveUps)
			}
			// Only the last attempt reached the server, numbered as such.
			_, previous := b.svc.record()
			if want := []string{fmt.Sprint(len(retries))}; fmt.Sprint(previous) != fmt.Sprint(want) {
				t.Errorf("the server saw grpc-previous-rpc-attempts %q; want %q", previous, want)
			}
		},
	}}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				tc.run(t, newMWBench(t, mwSuiteDial(t)...))
			})
		})
	}
}

// mwCheckRetryEvents checks the events of a call that succeeded on its third
// attempt: two EventRetry, for attempts 1 and 2, each before its 50ms pause
// (at 0 and 50ms from the start), and nothing else.
func mwCheckRetryEvents(t *testing.T, h *mwHooks, code codes.Code) {
	t.Helper()
	retries, at := h.kinds(interceptor.EventRetry)
	if len(retries) != 2 {
		t.Fatalf("%d retry events; want 2", len(retries))
	}
	for i, e := range retries {
		if e.Attempt != i+1 || e.Code != code || e.Pause != mwRetryTimeout || at[i] != time.Duration(i)*mwRetryTimeout {
			t.Errorf("retry event %d: attempt %d, %v, pause %v, at %v; want attempt %d, %v, pause %v, at %v",
				i, e.Attempt, e.Code, e.Pause, at[i], i+1, code, mwRetryTimeout, time.Duration(i)*mwRetryTimeout)
		}
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.events) != 2 {
		t.Errorf("events %+v; want the two retries only", h.events)
	}
}

// mwTracked is the middleware's trackedInterceptor, which also records the
// attempt number stagger gives each call it sees.
type mwTracked struct {
	mu       sync.Mutex
	called   int
	attempts []int
}

func (ti *mwTracked) track(ctx context.Context) {
	n, _ := interceptor.AttemptFromContext(ctx)
	ti.mu.Lock()
	defer ti.mu.Unlock()
	ti.called++
	ti.attempts = append(ti.attempts, n)
}

func (ti *mwTracked) UnaryClientInterceptor(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	ti.track(ctx)
	return invoker(ctx, method, req, reply, cc, opts...)
}

func (ti *mwTracked) StreamClientInterceptor(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
	ti.track(ctx)
	return streamer(ctx, desc, cc, method, opts...)
}

func (ti *mwTracked) calls() (int, []int) {
	ti.mu.Lock()
	defer ti.mu.Unlock()
	return ti.called, append([]int(nil), ti.attempts...)
}

// TestMiddlewareChainedRetryPort ports the middleware's ChainedRetrySuite:
// an interceptor before the retrying one runs once per call, one after it
// once per attempt. The middleware's UnaryClientInterceptor() without
// options retries nothing until a call says WithMax; stagger's nearest is a
// policy in code with MaxAttempts 1 (no retry) and stagger's default codes
// (UNAVAILABLE, RESOURCE_EXHAUSTED: the middleware's defaults too), which a
// per-call WithMaxAttempts turns on. The middleware's default backoff,
// 50ms ±10%, becomes 50ms without jitter (stagger's proportional jitter is
// ±20%; none keeps the pauses exact). The chain is built as a user would:
// the "pre" interceptor's dial option before stagger.DialOptions, the
// "post" one after. The inner interceptor also checks the attempt number
// stagger gives it (AttemptFromContext).
func TestMiddlewareChainedRetryPort(t *testing.T) {
	cases := []struct {
		name   string
		modulo uint // 0: never fail
		stream bool
		// requests is both the server's count and the post interceptor's.
		requests int
	}{
		{"TestUnaryWithChainedInterceptors_NoFailure", 0, false, 1},
		{"TestUnaryWithChainedInterceptors_WithRetry", 2, false, 2},
		{"TestStreamWithChainedInterceptors_NoFailure", 0, true, 1},
		{"TestStreamWithChainedInterceptors_WithRetry", 2, true, 2},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				pre, post := &mwTracked{}, &mwTracked{}
				dial := []grpc.DialOption{
					grpc.WithChainUnaryInterceptor(pre.UnaryClientInterceptor),
					grpc.WithChainStreamInterceptor(pre.StreamClientInterceptor),
				}
				dial = append(dial, stagger.DialOptions(nil,
					interceptor.WithPolicy(policy.Policy{
						MaxAttempts: 1,
						Backoff:     policy.Backoff{Initial: mwRetryTimeout, Max: mwRetryTimeout, Multiplier: 1, Jitter: policy.JitterNone},
					}),
					interceptor.WithBudget(nil))...)
				dial = append(dial,
					grpc.WithChainUnaryInterceptor(post.UnaryClientInterceptor),
					grpc.WithChainStreamInterceptor(post.StreamClientInterceptor))
				b := newMWBench(t, dial...)
				code := codes.Unavailable
				if tc.modulo == 0 {
					code = codes.OK // the suite's SetupTest: status.Error(OK, ...) is nil
				}
				b.svc.resetFailingConfiguration(tc.modulo, code, 0)

				if tc.stream {
					stream, err := b.client.StreamingOutputCall(mwSimpleCtx(t), mwGoodPingList, interceptor.WithMaxAttempts(2))
					if err != nil {
						t.Fatalf("the invocation should succeed: %v", err)
					}
					if _, err := stream.Recv(); err != nil {
						t.Fatalf("the Recv should succeed: %v", err)
					}
				} else if _, err := b.client.UnaryCall(mwSimpleCtx(t), mwGoodPing, interceptor.WithMaxAttempts(2)); err != nil {
					t.Fatalf("the invocation should succeed: %v", err)
				}

				mwCheckRequests(t, b.svc, tc.requests, mwRetryTimeout)
				if n, _ := pre.calls(); n != 1 {
					t.Errorf("pre-retry interceptor called %d times; want once", n)
				}
				wantAttempts := []int{1, 2}[:tc.requests]
				if n, attempts := post.calls(); n != tc.requests || fmt.Sprint(attempts) != fmt.Sprint(wantAttempts) {
					t.Errorf("post-retry interceptor called %d times, attempts %v; want %d, %v", n, attempts, tc.requests, wantAttempts)
				}
			})
		})
	}
}

// mwFailingClientStream is the middleware's failingClientStream: every
// RecvMsg fails with RecvMsgErr; no headers (so nothing commits).
type mwFailingClientStream struct {
	RecvMsgErr error
}

func (s *mwFailingClientStream) Header() (metadata.MD, error) { return nil, nil }
func (s *mwFailingClientStream) Trailer() metadata.MD         { return nil }
func (s *mwFailingClientStream) CloseSend() error             { return nil }
func (s *mwFailingClientStream) Context() context.Context     { return context.Background() }
func (s *mwFailingClientStream) SendMsg(any) error            { return nil }
func (s *mwFailingClientStream) RecvMsg(any) error            { return s.RecvMsgErr }

// TestMiddlewareStreamAttemptMetadataPort ports the middleware's
// TestStreamClientInterceptorAttemptMetadata (v2.3.4). The original calls
// the interceptor with a fake streamer; here the fake streamer is an
// interceptor chained after stagger.DialOptions, so it stands where grpc's
// streamer would and nothing reaches the server. Every attempt after the
// first must carry the header naming how many came before: the
// middleware's x-retry-attempt, stagger's grpc-previous-rpc-attempts (gRFC
// A6), with the same numbers. The middleware's interceptor (WithCodes
// UNAVAILABLE, WithMax 5, its default 50ms backoff) becomes a policy in code;
// the pauses are checked exactly.
func TestMiddlewareStreamAttemptMetadataPort(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const retryCount = 5
		recvMsgErr := status.Error(codes.Unavailable, "unavailable")
		var (
			mu       sync.Mutex
			attempt  int
			starts   []time.Time
			problems []string
		)
		testStreamer := func(ctx context.Context, _ *grpc.StreamDesc, _ *grpc.ClientConn, _ string, _ grpc.Streamer, _ ...grpc.CallOption) (grpc.ClientStream, error) {
			md, _ := metadata.FromOutgoingContext(ctx)
			raw := md.Get("grpc-previous-rpc-attempts")
			mu.Lock()
			defer mu.Unlock()
			want := []string{fmt.Sprint(attempt)}
			if attempt == 0 {
				want = nil
			}
			if fmt.Sprint(raw) != fmt.Sprint(want) {
				problems = append(problems, fmt.Sprintf("attempt %d: header %q; want %q", attempt+1, raw, want))
			}
			attempt++
			starts = append(starts, time.Now())
			return &mwFailingClientStream{RecvMsgErr: recvMsgErr}, nil
		}
		b := newMWBench(t, append(stagger.DialOptions(nil,
			interceptor.WithPolicy(policy.Policy{
				MaxAttempts:    retryCount,
				Backoff:        policy.Backoff{Initial: mwRetryTimeout, Max: mwRetryTimeout, Multiplier: 1, Jitter: policy.JitterNone},
				RetryableCodes: policy.NewCodeSet(codes.Unavailable),
			}),
			interceptor.WithBudget(nil)),
			grpc.WithChainStreamInterceptor(testStreamer))...)

		clientStream, err := b.client.StreamingOutputCall(mwSimpleCtx(t), mwGoodPingList)
		if err != nil {
			t.Fatalf("StreamingOutputCall: %v", err)
		}
		_, err = clientStream.Recv()
		if !errors.Is(err, recvMsgErr) {
			t.Fatalf("Recv: %v; want the fake stream's own error", err)
		}
		mwCheckFinal(t, err, codes.Unavailable, retryCount, policy.ReasonAttempts)
		mu.Lock()
		defer mu.Unlock()
		if attempt != retryCount {
			t.Fatalf("%d attempts; want %d", attempt, retryCount)
		}
		for _, p := range problems {
			t.Error(p)
		}
		for i := 1; i < len(starts); i++ {
			if gap := starts[i].Sub(starts[i-1]); gap != mwRetryTimeout {
				t.Errorf("pause before attempt %d = %v; want %v", i+1, gap, mwRetryTimeout)
			}
		}
		mwCheckRequests(t, b.svc, 0, 0)
	})
}

// TestMiddlewareJitterUpPort ports the middleware's TestJitterUp: 1000
// pauses of a 10s backoff with jitter stay within the bounds and reach
// within 2% of both ends. The middleware's jitterUp is ±10% (within [9s,
// 11s]); stagger has no ±10% kind: its proportional jitter, gRFC A6's and
// the default, is ×U(0.8, 1.2), so the bounds are [8s, 12s] (u just below
// 1 rounds to 12s). The draws come from a seeded policy.Random, so the test
// is deterministic, and the ends are pinned (u = 0 gives 8s exactly).
// Then the same pauses, end to end: a call through stagger.DialOptions with
// WithRandom pauses exactly Delay of the u it drew.
func TestMiddlewareJitterUpPort(t *testing.T) {
	b := policy.Backoff{Initial: 10 * time.Second, Max: 10 * time.Second, Multiplier: 1, Jitter: policy.JitterProportional}
	const maxD, minD = 12 * time.Second, 8 * time.Second
	high := time.Duration(float64(maxD) * 0.98)
	low := time.Duration(float64(minD) * 1.02)
	if got := b.Delay(1, b.Initial, 0); got != minD {
		t.Errorf("Delay(u=0) = %v; want %v", got, minD)
	}
	if got := b.Delay(1, b.Initial, 0.5); got != b.Initial {
		t.Errorf("Delay(u=0.5) = %v; want %v", got, b.Initial)
	}
	if got := b.Delay(1, b.Initial, 1); got > maxD || got < high {
		t.Errorf("Delay(u→1) = %v; want at most %v, within 2%%", got, maxD)
	}
	random := policy.NewSeededRandom(1)
	highCount, lowCount := 0, 0
	for i := 0; i < 1000; i++ {
		out := b.Delay(1, b.Initial, random.Float64())
		if out > maxD || out < minD {
			t.Fatalf("value %s must be in [%s, %s]", out, minD, maxD)
		}
		if out > high {
			highCount++
		}
		if out < low {
			lowCount++
		}
	}
	if highCount == 0 || lowCount == 0 {
		t.Errorf("%d samples above %s and %d below %s; want some of each", highCount, high, lowCount, low)
	}

	synctest.Test(t, func(t *testing.T) {
		us := []float64{0, 0.5, 0.999}
		var mu sync.Mutex
		next := func() float64 {
			mu.Lock()
			defer mu.Unlock()
			if len(us) == 0 {
				t.Error("stagger drew more numbers than retries")
				return 0.5
			}
			u := us[0]
			us = us[1:]
			return u
		}
		cfg, err := policy.ParseConfig([]byte(`{"methodConfig": [{
			"name": [{"service": "grpc.testing.TestService"}],
			"retryPolicy": {"maxAttempts": 4, "initialBackoff": "10s", "maxBackoff": "10s",
				"backoffMultiplier": 1, "jitter": "PROPORTIONAL", "retryableStatusCodes": ["UNAVAILABLE"]}
		}]}`))
		if err != nil {
			t.Fatal(err)
		}
		bench := newMWBench(t, stagger.DialOptions(cfg, interceptor.WithBudget(nil), interceptor.WithRandom(next))...)
		bench.svc.resetFailingConfiguration(4, codes.Unavailable, 0)
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if _, err := bench.client.UnaryCall(ctx, mwGoodPing); err != nil {
			t.Fatalf("the fourth attempt should succeed: %v", err)
		}
		arrivals, _ := bench.svc.record()
		if len(arrivals) != 4 {
			t.Fatalf("%d attempts; want 4", len(arrivals))
		}
		for i, u := range []float64{0, 0.5, 0.999} {
			if gap, want := arrivals[i+1].Sub(arrivals[i]), b.Delay(i+1, b.Initial, u); gap != want {
				t.Errorf("pause before attempt %d = %v; want Delay(u=%v) = %v", i+2, gap, u, want)
			}
		}
	})
}

// TestMiddlewarePerRetryTimeoutPort covers the middleware's WithPerRetryTimeout,
// which its retry_test.go only passes to a client without the interceptor
// (TestCallOptionsDontPanicWithoutInterceptor), and its failingService's
// reqSleep, which no test there sets. stagger's nearest feature is
// perAttemptRecvTimeout (gRFC A6 / grpc C-core), with two deliberate
// differences, each a subtest:
//   - it is stagger's own timer, not a context deadline: the server sees
//     only the caller's deadline (the middleware gives each attempt a
//     context with its own deadline);
//   - it applies only to methods known to be idempotent (here the per-call
//     Idempotent option); for others the call runs without it, as if the
//     option were absent, and an EventNotice says so. The middleware cuts
//     every method's attempts.
//
// The server sleeps 100ms and then fails each request but every third; the
// timeout is 30ms, the pause 50ms, 3 attempts.
func TestMiddlewarePerRetryTimeoutPort(t *testing.T) {
	const file = `{"methodConfig": [{
		"name": [{"service": "grpc.testing.TestService"}],
		"retryPolicy": {"maxAttempts": 3, "initialBackoff": "0.05s", "maxBackoff": "0.05s",
			"backoffMultiplier": 1, "jitter": "NONE", "retryableStatusCodes": ["UNAVAILABLE"],
			"perAttemptRecvTimeout": "0.03s"}
	}]}`
	cases := []struct {
		name       string
		idempotent bool
		// arrivals of the three requests; the call ends with the third.
		arrivals []time.Duration
		notice   bool
	}{
		// Cut at 30ms, pause 50ms: requests at 0, 80ms, 160ms.
		{"idempotent", true, []time.Duration{0, 80 * time.Millisecond, 160 * time.Millisecond}, false},
		// No timer: each failure takes the server's 100ms, then 50ms pause.
		{"not known idempotent", false, []time.Duration{0, 150 * time.Millisecond, 300 * time.Millisecond}, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				cfg, err := policy.ParseConfig([]byte(file))
				if err != nil {
					t.Fatal(err)
				}
				b := newMWBench(t, stagger.DialOptions(cfg, interceptor.WithBudget(nil))...)
				b.svc.resetFailingConfiguration(3, codes.Unavailable, 100*time.Millisecond)
				h := newMWHooks()
				opts := []grpc.CallOption{interceptor.WithHook(h.hook)}
				if tc.idempotent {
					opts = append(opts, interceptor.Idempotent())
				}
				ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
				defer cancel()
				start := time.Now()
				if _, err := b.client.UnaryCall(ctx, mwGoodPing, opts...); err != nil {
					t.Fatalf("the third attempt should succeed: %v", err)
				}
				if elapsed, want := time.Since(start), tc.arrivals[2]; elapsed != want {
					t.Errorf("call took %v; want %v exactly", elapsed, want)
				}
				arrivals, _ := b.svc.record()
				if len(arrivals) != len(tc.arrivals) {
					t.Fatalf("%d requests; want %d", len(arrivals), len(tc.arrivals))
				}
				for i, at := range arrivals {
					if got := at.Sub(start); got != tc.arrivals[i] {
						t.Errorf("request %d arrived at %v; want %v", i+1, got, tc.arrivals[i])
					}
				}
				retries, _ := h.kinds(interceptor.EventRetry)
				wantCode := codes.Unavailable // the server's status
				if tc.idempotent {
					wantCode = codes.DeadlineExceeded // stagger's timer cut it off
				}
				for i, e := range retries {
					if e.Code != wantCode {
						t.Errorf("retry %d after %v; want %v", i+1, e.Code, wantCode)
					}
				}
				if len(retries) != 2 {
					t.Errorf("%d retries; want 2", len(retries))
				}
				notices, _ := h.kinds(interceptor.EventNotice)
				if got := len(notices) == 1 && notices[0].Reason == policy.ReasonNotIdempotent; got != tc.notice || len(notices) > 1 {
					t.Errorf("notices %+v; want a not-idempotent notice: %v", notices, tc.notice)
				}
				// The server's handlers sleep through the cut-off attempts;
				// the bubble waits for them.
			})
		})
	}
}

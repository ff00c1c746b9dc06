package interceptor

import (
	"context"
	"errors"
	"io"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/emptypb"

	"github.com/stagger-go/stagger/breaker"
	"github.com/stagger-go/stagger/budget"
	"github.com/stagger-go/stagger/policy"
)

// Issue 90: a stream ends once, as a unary call does. Real gRPC over
// bufconn, in real time.

const end90Method = "/stagger.testing.v1.TestService/ListItems"

var end90Desc = &grpc.StreamDesc{StreamName: "ListItems", ServerStreams: true}

// end90Config is a file whose one entry, for the test service, is entry
// (JSON members after "name").
func end90Config(t *testing.T, entry string) *policy.Config {
	t.Helper()
	cfg, err := policy.ParseConfig([]byte(`{"methodConfig": [{"name": [{"service": "stagger.testing.v1.TestService"}], ` + entry + `}]}`))
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// end90File is a file of members (JSON, without the braces).
func end90File(t *testing.T, members string) *policy.Config {
	t.Helper()
	cfg, err := policy.ParseConfig([]byte(`{` + members + `}`))
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// serverAttempt is the number of the attempt ss serves, from 1.
func serverAttempt(ss grpc.ServerStream) int {
	md, _ := metadata.FromIncomingContext(ss.Context())
	if v := md.Get(previousAttemptsKey); len(v) > 0 {
		n, _ := strconv.Atoi(v[0])
		return n + 1
	}
	return 1
}

func streamerOf(cc *grpc.ClientConn) grpc.Streamer {
	return func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, opts ...grpc.CallOption) (grpc.ClientStream, error) {
		return cc.NewStream(ctx, desc, method, opts...)
	}
}

func invokeOf(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, opts ...grpc.CallOption) error {
	return cc.Invoke(ctx, method, req, reply, opts...)
}

// finishes records the errors the caller's grpc.OnFinish was given.
type finishes struct {
	mu   sync.Mutex
	errs []error
}

func (f *finishes) option() grpc.CallOption {
	return grpc.OnFinish(func(err error) {
		f.mu.Lock()
		f.errs = append(f.errs, err)
		f.mu.Unlock()
	})
}

// once checks that OnFinish ran exactly once, with want's status.
func (f *finishes) once(t *testing.T, what string, want error) {
	t.Helper()
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.errs) != 1 {
		t.Errorf("%s: OnFinish ran %d times (%v), want once", what, len(f.errs), f.errs)
		return
	}
	if got := f.errs[0]; status.Code(got) != status.Code(want) || (got == nil) != (want == nil) {
		t.Errorf("%s: OnFinish got %v, want the caller's %v", what, got, want)
	}
}

// openBreaker returns a breaker set whose breaker for cc's method is open.
func openBreaker(t *testing.T, cc *grpc.ClientConn, method string) *breaker.Set {
	t.Helper()
	bs, err := breaker.NewSet(breaker.Settings{FailureRatio: 0.5, MinimumThroughput: 2, BreakDuration: time.Hour}, nil)
	if err != nil {
		t.Fatal(err)
	}
	br := bs.Get(cc.CanonicalTarget(), method)
	for range 2 {
		br.Record(budget.Failure, true, 0, nil)
	}
	if br.Closed() {
		t.Fatal("breaker closed after two failures, want open")
	}
	return bs
}

// The breaker refuses the first attempt: the call ends UNAVAILABLE, and
// the caller's OnFinish runs once with it, as grpc-go runs it for a call
// that fails before any stream opens.
func TestBreakerRefusalRunsOnFinish(t *testing.T) {
	cc := bufconnServe(t, func(any, grpc.ServerStream) error { return nil })
	ctx := context.Background()
	t.Run("unary", func(t *testing.T) {
		var f finishes
		var rep Report
		err := UnaryClientInterceptor(WithBreakers(openBreaker(t, cc, end90Method)))(ctx, end90Method, &emptypb.Empty{}, &emptypb.Empty{}, cc, invokeOf, f.option(), WithReport(&rep))
		if status.Code(err) != codes.Unavailable || rep.Reason != policy.ReasonBreaker {
			t.Fatalf("call: %v, reason %v; want UNAVAILABLE, %v", err, rep.Reason, policy.ReasonBreaker)
		}
		f.once(t, "unary", err)
	})
	t.Run("stream", func(t *testing.T) {
		var f finishes
		var rep Report
		cs, err := StreamClientInterceptor(WithBreakers(openBreaker(t, cc, end90Method)))(ctx, end90Desc, cc, end90Method, streamerOf(cc), f.option(), WithReport(&rep))
		if cs != nil || status.Code(err) != codes.Unavailable || rep.Reason != policy.ReasonBreaker {
			t.Fatalf("stream: %v, %v, reason %v; want nil, UNAVAILABLE, %v", cs, err, rep.Reason, policy.ReasonBreaker)
		}
		f.once(t, "stream", err)
	})
}

// A stream that succeeds, of a method the file gives a timeout, passes
// OnFinish the OK its caller got, never the CANCELED of the call's context,
// which the end cancels.
func TestStreamTimeoutOnFinishOK(t *testing.T) {
	cfg := end90Config(t, `"timeout": "30s", "retryPolicy": {"maxAttempts": 2, "initialBackoff": "0.01s", "maxBackoff": "0.01s", "backoffMultiplier": 1, "retryableStatusCodes": ["UNAVAILABLE"]}`)
	cc := bufconnServe(t, func(_ any, ss grpc.ServerStream) error {
		if err := ss.RecvMsg(new(emptypb.Empty)); err != nil {
			return err
		}
		return ss.SendMsg(&emptypb.Empty{})
	})
	k := StreamClientInterceptor(WithConfig(cfg))
	for i := range 200 {
		var f finishes
		var rep Report
		cs, err := k(context.Background(), end90Desc, cc, end90Method, streamerOf(cc), f.option(), WithReport(&rep))
		if err != nil {
			t.Fatal(err)
		}
		if err := readAll(cs); err != nil {
			t.Fatalf("stream %d: %v", i, err)
		}
		if rep.Code != codes.OK {
			t.Fatalf("stream %d: Report %v, want OK", i, rep.Code)
		}
		f.once(t, "stream "+strconv.Itoa(i), nil)
		if t.Failed() {
			return
		}
	}
}

// slowEnd is an attempt's stream behind a slow per-attempt interceptor:
// once the attempt's context ended, Header and RecvMsg return late.
// active counts the calls in it.
type slowEnd struct {
	grpc.ClientStream
	ctx    context.Context
	active *atomic.Int32
	delay  time.Duration
}

func (s slowEnd) slow() {
	if s.ctx.Err() != nil {
		time.Sleep(s.delay)
	}
	s.active.Add(-1)
}

func (s slowEnd) Header() (metadata.MD, error) {
	s.active.Add(1)
	defer s.slow()
	return s.ClientStream.Header()
}

func (s slowEnd) RecvMsg(m any) error {
	s.active.Add(1)
	defer s.slow()
	return s.ClientStream.RecvMsg(m)
}

// recordCounter is a budget that admits every retry and counts records.
type recordCounter struct{ n atomic.Int32 }

func (b *recordCounter) Allow(budget.Request) bool { return true }
func (b *recordCounter) Record(budget.Attempt)     { b.n.Add(1) }
func (b *recordCounter) State() budget.State       { return budget.State{Kind: "counting"} }

// A hedged stream ends once every attempt has ended: after RecvMsg
// returned io.EOF nothing of the stream runs (a loser still in its slow
// interceptor, the driver waiting for it), and the budget has heard every
// attempt, the loser's too.
func TestHedgedStreamEndWaitsForAttempts(t *testing.T) {
	cfg := end90Config(t, `"idempotent": true, "hedgingPolicy": {"maxAttempts": 2, "hedgingDelay": "0.01s", "nonFatalStatusCodes": ["UNAVAILABLE"]}`)
	cc := bufconnServe(t, func(_ any, ss grpc.ServerStream) error {
		if serverAttempt(ss) == 1 {
			<-ss.Context().Done()
			return status.FromContextError(ss.Context().Err()).Err()
		}
		if err := ss.SendHeader(nil); err != nil {
			return err
		}
		return ss.SendMsg(&emptypb.Empty{})
	})
	var active atomic.Int32
	var opened atomic.Int32
	streamer := func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, opts ...grpc.CallOption) (grpc.ClientStream, error) {
		opened.Add(1)
		cs, err := cc.NewStream(ctx, desc, method, opts...)
		if err != nil {
			return nil, err
		}
		return slowEnd{cs, ctx, &active, 20 * time.Millisecond}, nil
	}
	for i := range 20 {
		b := new(recordCounter)
		opened.Store(0)
		cs, err := StreamClientInterceptor(WithConfig(cfg), WithBudget(b))(context.Background(), end90Desc, cc, end90Method, streamer)
		if err != nil {
			t.Fatal(err)
		}
		if err := readAll(cs); err != nil {
			t.Fatalf("stream %d: %v", i, err)
		}
		if n := active.Load(); n != 0 {
			t.Fatalf("stream %d: %d calls still in an attempt's stream after RecvMsg returned io.EOF", i, n)
		}
		if got, want := b.n.Load(), opened.Load(); got != want {
			t.Fatalf("stream %d: the budget heard %d attempts of %d after RecvMsg returned io.EOF", i, got, want)
		}
	}
}

// readAll sends cs its one request and reads it to its end: nil after
// io.EOF, else the stream's error.
func readAll(cs grpc.ClientStream) error {
	if err := cs.SendMsg(&emptypb.Empty{}); err != nil {
		return err
	}
	if err := cs.CloseSend(); err != nil {
		return err
	}
	for {
		if err := cs.RecvMsg(new(emptypb.Empty)); err != nil {
			if errors.Is(err, io.EOF) {
				return nil
			}
			return err
		}
	}
}

// TestUnaryCommitsAtItsEnd pins the package doc's deliberate difference:
// grpc-go shows a unary call's interceptor the response headers only with
// the attempt's end, so an attempt whose headers arrived and that then
// hangs is still cut off by its per-attempt timer and retried, or raced by
// a hedge that wins (grpc C-core's timer, and gRFC A6's commit, would stop
// at the headers).
func TestUnaryCommitsAtItsEnd(t *testing.T) {
	cc := bufconnServe(t, func(_ any, ss grpc.ServerStream) error {
		if err := ss.RecvMsg(new(emptypb.Empty)); err != nil {
			return err
		}
		if err := ss.SendHeader(metadata.Pairs("x-attempt", strconv.Itoa(serverAttempt(ss)))); err != nil {
			return err
		}
		if serverAttempt(ss) == 1 {
			<-ss.Context().Done()
			return status.FromContextError(ss.Context().Err()).Err()
		}
		return ss.SendMsg(&emptypb.Empty{})
	})
	for _, tc := range []struct{ name, entry string }{
		{"timer", `"idempotent": true, "retryPolicy": {"maxAttempts": 2, "initialBackoff": "0.001s", "maxBackoff": "0.001s", "backoffMultiplier": 1, "retryableStatusCodes": ["UNAVAILABLE"], "perAttemptRecvTimeout": "0.05s"}`},
		{"hedge", `"idempotent": true, "hedgingPolicy": {"maxAttempts": 2, "hedgingDelay": "0.02s", "nonFatalStatusCodes": ["UNAVAILABLE"]}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var rep Report
			var header metadata.MD
			k := UnaryClientInterceptor(WithConfig(end90Config(t, tc.entry)), WithBudget(nil))
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			err := k(ctx, end90Method, &emptypb.Empty{}, new(emptypb.Empty), cc, invokeOf, grpc.Header(&header), WithReport(&rep))
			if got := header.Get("x-attempt"); err != nil || rep.Attempts != 2 || len(got) != 1 || got[0] != "2" {
				t.Errorf("call: %v after %d attempts, headers %v; want the second attempt's answer", err, rep.Attempts, header)
			}
		})
	}
}

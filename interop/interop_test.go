package interop

import (
	"context"
	"errors"
	"io"
	"net"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/grpclog"
	"google.golang.org/grpc/interop"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"google.golang.org/protobuf/proto"

	"github.com/stagger-go/stagger"
	"github.com/stagger-go/stagger/interceptor"
	"github.com/stagger-go/stagger/policy"
)

// The configs every case runs under: a retry policy and a hedging policy
// on every method (the default entry), both retrying or hedging past
// UNAVAILABLE and RESOURCE_EXHAUSTED; the methods are marked idempotent so
// that stagger hedges them and retries them after a reset.
var configs = map[string]string{
	"retry": `{"methodConfig": [{"name": [{}], "idempotent": true,
		"retryPolicy": {"maxAttempts": 4, "initialBackoff": "0.01s", "maxBackoff": "0.05s",
			"backoffMultiplier": 2, "retryableStatusCodes": ["UNAVAILABLE", "RESOURCE_EXHAUSTED"]}}]}`,
	"hedging": `{"methodConfig": [{"name": [{}], "idempotent": true,
		"hedgingPolicy": {"maxAttempts": 4, "hedgingDelay": "0.5s",
			"nonFatalStatusCodes": ["UNAVAILABLE", "RESOURCE_EXHAUSTED"]}}]}`,
}

// A pattern is a failure a retry layer meets, injected before the
// server's handler runs, by the attempt's number (from
// grpc-previous-rpc-attempts).
type pattern struct {
	// fail returns the failure of attempt n, nil to let it through.
	fail func(n int) error
	// conn, for attempt 1, acts on its connection instead: the first
	// connection's server resets it (reset) or sends GOAWAY (goaway)
	// before the handler runs, and every later connection reaches a
	// second server.
	conn string
	// throttle adds grpc-go's retryThrottling (10 tokens, ratio 0.1) to
	// the config: the default budget lets a fresh process whose every
	// attempt failed make one retry (budget.DefaultSettings), and the pattern
	// needs two.
	throttle bool
	// only, when set, is the one case/config the pattern applies to.
	only string
	// resume makes the client resume server_streaming's stream
	// (interceptor.WithResume) and requires that it did.
	resume bool
}

var patterns = map[string]pattern{
	"plain": {fail: func(int) error { return nil }},
	// Every call's first attempt fails with UNAVAILABLE (Trailers-Only).
	"first-failed": {fail: func(n int) error {
		if n == 1 {
			return status.Error(codes.Unavailable, "interop: first attempt refused")
		}
		return nil
	}},
	// The first two attempts fail.
	"two-failed": {throttle: true, fail: func(n int) error {
		if n <= 2 {
			return status.Error(codes.Unavailable, "interop: attempt "+strconv.Itoa(n)+" refused")
		}
		return nil
	}},
	// The first attempt is refused with RESOURCE_EXHAUSTED and a pushback
	// of 20 ms (serve sets the trailer).
	"pushback": {fail: func(n int) error {
		if n == 1 {
			return errPushback
		}
		return nil
	}},
	// The first call's first attempt has its connection reset before the
	// handler runs; the retry goes over a new connection.
	"reset": {conn: "reset", fail: func(int) error { return nil }},
	// The first call's first attempt fails with UNAVAILABLE and its
	// server sends GOAWAY and drains; the retry goes over a new
	// connection (or, if it beat the GOAWAY, is refused by the draining
	// server and retried by grpc-go).
	"goaway": {conn: "goaway", fail: func(int) error { return nil }},
	// A resumable server stream: the first call's connection is reset
	// after the server sent two of its four messages; the client resumes
	// the stream from the last message it received (interceptor.WithResume)
	// over a new connection, and the case reads the four in order.
	"resume-reset": {conn: "reset-after", only: "server_streaming/retry", resume: true, fail: func(int) error { return nil }},
}

// resumeAfter is how many messages resume-reset lets through before the
// reset, and resumeFlush how long it waits for them to reach the client.
const (
	resumeAfter = 2
	resumeFlush = 100 * time.Millisecond
)

// resumeStreaming continues grpc-go's interop StreamingOutputCall after
// last: the responses are the request's response_parameters in order,
// each its own size (DoServerStreaming's sizes differ), so the next
// request asks for those after last's.
var resumeStreaming = interceptor.TypedResume(func(req *testgrpc.StreamingOutputCallRequest, last *testgrpc.StreamingOutputCallResponse) (*testgrpc.StreamingOutputCallRequest, error) {
	size := len(last.GetPayload().GetBody())
	for i, p := range req.GetResponseParameters() {
		if int(p.GetSize()) == size {
			next := proto.Clone(req).(*testgrpc.StreamingOutputCallRequest)
			next.ResponseParameters = next.ResponseParameters[i+1:]
			return next, nil
		}
	}
	return nil, interceptor.ErrCannotResume
})

var errPushback = status.Error(codes.ResourceExhausted, "interop: overloaded, retry in 20ms")

// cases are grpc-go's interop cases that need no credentials and no
// second server, by name.
var cases = map[string]func(ctx context.Context, cc *grpc.ClientConn){
	"empty_unary": func(ctx context.Context, cc *grpc.ClientConn) {
		interop.DoEmptyUnaryCall(ctx, testgrpc.NewTestServiceClient(cc))
	},
	"large_unary": func(ctx context.Context, cc *grpc.ClientConn) {
		interop.DoLargeUnaryCall(ctx, testgrpc.NewTestServiceClient(cc))
	},
	"client_streaming": func(ctx context.Context, cc *grpc.ClientConn) {
		interop.DoClientStreaming(ctx, testgrpc.NewTestServiceClient(cc))
	},
	"server_streaming": func(ctx context.Context, cc *grpc.ClientConn) {
		interop.DoServerStreaming(ctx, testgrpc.NewTestServiceClient(cc))
	},
	"ping_pong": func(ctx context.Context, cc *grpc.ClientConn) {
		interop.DoPingPong(ctx, testgrpc.NewTestServiceClient(cc))
	},
	"empty_stream": func(ctx context.Context, cc *grpc.ClientConn) {
		interop.DoEmptyStream(ctx, testgrpc.NewTestServiceClient(cc))
	},
	"timeout_on_sleeping_server": func(ctx context.Context, cc *grpc.ClientConn) {
		interop.DoTimeoutOnSleepingServer(ctx, testgrpc.NewTestServiceClient(cc))
	},
	"cancel_after_begin": func(ctx context.Context, cc *grpc.ClientConn) {
		interop.DoCancelAfterBegin(ctx, testgrpc.NewTestServiceClient(cc))
	},
	"cancel_after_first_response": func(ctx context.Context, cc *grpc.ClientConn) {
		interop.DoCancelAfterFirstResponse(ctx, testgrpc.NewTestServiceClient(cc))
	},
	"custom_metadata": func(ctx context.Context, cc *grpc.ClientConn) {
		interop.DoCustomMetadata(ctx, testgrpc.NewTestServiceClient(cc))
	},
	"status_code_and_message": func(ctx context.Context, cc *grpc.ClientConn) {
		interop.DoStatusCodeAndMessage(ctx, testgrpc.NewTestServiceClient(cc))
	},
	"special_status_message": func(ctx context.Context, cc *grpc.ClientConn) {
		interop.DoSpecialStatusMessage(ctx, testgrpc.NewTestServiceClient(cc))
	},
	"unimplemented_method": func(ctx context.Context, cc *grpc.ClientConn) { interop.DoUnimplementedMethod(ctx, cc) },
	"unimplemented_service": func(ctx context.Context, cc *grpc.ClientConn) {
		interop.DoUnimplementedService(ctx, testgrpc.NewUnimplementedServiceClient(cc))
	},
	// Not grpc-go's: calls stagger gives up on (gaveUp). grpc-go's
	// status_code_and_message and special_status_message check that a
	// call ending on the server's non-retryable answer prints grpc-go's
	// text unchanged; this one checks the text of a give-up.
	"stagger_gave_up": doGaveUp,
}

// gaveUpText is the text of a call stagger gave up on: what it gave up on,
// after how many attempts, then the last attempt's error as grpc-go prints
// it (interceptor.Error).
var gaveUpText = regexp.MustCompile(`^stagger: gave up: ([^:]+): failed after ([1-4]) attempts?: (rpc error: code = Unavailable desc = .*)$`)

// doGaveUp makes a unary call and two bidi streams (the second sends its
// message late) whose every attempt the server fails with UNAVAILABLE
// (interop's EchoStatus): stagger retries or hedges each until its attempts
// or its budget run out, and gives up. Each error must say so (gaveUpText),
// with the attempts stagger counted, the last attempt's text as grpc-go
// prints it, and the server's status unchanged under status.FromError. It
// ends the process (grpclog.Fatal, as grpc-go's cases do) when a check
// fails.
func doGaveUp(ctx context.Context, cc *grpc.ClientConn) {
	tc := testgrpc.NewTestServiceClient(cc)
	down := &testgrpc.EchoStatus{Code: int32(codes.Unavailable), Message: "interop: always down"}
	_, unaryErr := tc.UnaryCall(ctx, &testgrpc.SimpleRequest{ResponseStatus: down})
	// A stream sends its message at once, or after its attempts may have
	// ended (late): then Send returns io.EOF, as grpc-go's own stream does
	// once the server ended it, and Recv has the status.
	streamErr := func(late bool) error {
		stream, err := tc.FullDuplexCall(ctx)
		if err != nil {
			return err
		}
		if late {
			time.Sleep(100 * time.Millisecond)
		}
		if err := stream.Send(&testgrpc.StreamingOutputCallRequest{ResponseStatus: down}); err != nil && err != io.EOF {
			return err
		}
		_, err = stream.Recv()
		return err
	}
	for what, err := range map[string]error{"UnaryCall": unaryErr, "FullDuplexCall": streamErr(false), "FullDuplexCall, a late Send": streamErr(true)} {
		var e *interceptor.Error
		if !errors.As(err, &e) || !e.GaveUp() {
			grpclog.Fatalf("%s: error %v, want one stagger gave up on", what, err)
		}
		st, ok := status.FromError(err)
		m := gaveUpText.FindStringSubmatch(err.Error())
		switch {
		case m == nil:
			grpclog.Fatalf("%s: Error() = %q, want it to say stagger gave up", what, err)
		case m[2] != strconv.Itoa(e.Attempts):
			grpclog.Fatalf("%s: Error() = %q says %s attempts, stagger made %d", what, err, m[2], e.Attempts)
		case !ok || st.Code() != codes.Unavailable || m[3] != st.Err().Error() || strings.Contains(st.Message(), "stagger"):
			grpclog.Fatalf("%s: status.FromError = %v, %v; Error() = %q: want the last attempt's status, unchanged", what, st, ok, err)
		}
		if e.Attempts > 1 && st.Message() != down.Message && !strings.HasPrefix(st.Message(), "interop: ") {
			grpclog.Fatalf("%s: status message %q, want the server's", what, st.Message())
		}
	}
}

const (
	envCase    = "STAGGER_INTEROP_CASE"
	envConfig  = "STAGGER_INTEROP_CONFIG"
	envPattern = "STAGGER_INTEROP_PATTERN"
)

// TestInterop runs every case under every config and pattern, each in a
// process of its own (the interop helpers end the process on a failed
// check), and reports the cases that failed with their output.
func TestInterop(t *testing.T) {
	if os.Getenv(envCase) != "" {
		t.Skip("a case's own process")
	}
	for name := range cases {
		for cfg := range configs {
			for pat := range patterns {
				if only := patterns[pat].only; only != "" && only != name+"/"+cfg {
					continue
				}
				t.Run(name+"/"+cfg+"/"+pat, func(t *testing.T) {
					t.Parallel()
					ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
					defer cancel()
					cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestInteropCase$", "-test.v", "-test.count=1")
					cmd.Env = append(os.Environ(), envCase+"="+name, envConfig+"="+cfg, envPattern+"="+pat)
					out, err := cmd.CombinedOutput()
					if name == "timeout_on_sleeping_server" && deadlineAware(string(out), patterns[pat]) {
						t.Logf("the injected failure came before the 1 ms deadline, and stagger returned it at once: %s", out)
						return
					}
					if err != nil || !strings.Contains(string(out), "--- PASS: TestInteropCase") {
						t.Errorf("%s under %s, %s: %v\n%s", name, cfg, pat, err, out)
					}
				})
			}
		}
	}
}

// deadlineAware reports whether a case failed only by stagger's
// deliberate difference from grpc-go (DESIGN.md, deadline awareness): it
// wanted DEADLINE_EXCEEDED (DoTimeoutOnSleepingServer, 1 ms deadline), and
// got the failure pat injected, which came before the deadline and which
// stagger returns at once when no retry can end before the deadline,
// where grpc-go waits out the deadline: a status serve returned
// ("interop: ..."), or, for a pattern that acts on the connection, the
// UNAVAILABLE of the reset or GOAWAY itself (grpc-go's reader sees the
// reset before the status serve returns). Without a retry layer the call
// ends the same.
func deadlineAware(out string, pat pattern) bool {
	if !strings.Contains(out, "want error code 4") {
		return false
	}
	return strings.Contains(out, "desc = interop: ") || (pat.conn != "" && strings.Contains(out, "code = Unavailable desc = "))
}

// TestInteropCase is one case's process: grpc-go's interop server on
// loopback TCP behind the pattern's failures, and a client dialed with
// stagger.DialOptions and the config.
func TestInteropCase(t *testing.T) {
	name := os.Getenv(envCase)
	if name == "" {
		t.Skip("run by TestInterop in a process of its own")
	}
	run, ok := cases[name]
	cfgText, okCfg := configs[os.Getenv(envConfig)]
	pat, okPat := patterns[os.Getenv(envPattern)]
	if !ok || !okCfg || !okPat {
		t.Fatalf("unknown case %q, config %q or pattern %q", name, os.Getenv(envConfig), os.Getenv(envPattern))
	}
	switch {
	case pat.throttle:
		cfgText = strings.Replace(cfgText, `{"methodConfig"`, `{"retryThrottling": {"maxTokens": 10, "tokenRatio": 0.1}, "methodConfig"`, 1)
	case name == "stagger_gave_up":
		// A throttle never defers a retry: stagger gives up as soon as
		// the attempts run out, whatever the Gate of the default budget
		// would make of a backend whose every attempt fails.
		cfgText = strings.Replace(cfgText, `{"methodConfig"`, `{"retryThrottling": {"maxTokens": 1000, "tokenRatio": 1}, "methodConfig"`, 1)
	}
	cfg, err := policy.ParseConfig([]byte(cfgText))
	if err != nil {
		t.Fatal(err)
	}
	addr := serve(t, pat)
	var resumes atomic.Int32
	var opts []interceptor.Option
	if pat.resume {
		opts = append(opts, interceptor.WithResume(testgrpc.TestService_StreamingOutputCall_FullMethodName, resumeStreaming),
			interceptor.WithHook(func(e interceptor.Event) {
				if e.Kind == interceptor.EventResume {
					resumes.Add(1)
				}
			}))
	}
	cc, err := grpc.NewClient("passthrough:///"+addr, append(stagger.DialOptions(cfg, opts...), grpc.WithTransportCredentials(insecure.NewCredentials()))...)
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	run(ctx, cc)
	if os.Getenv(envPattern) != "plain" && !unserved[name] && injected.Load() == 0 {
		t.Errorf("pattern %s injected nothing: the case proves nothing of it", os.Getenv(envPattern))
	}
	if pat.resume && resumes.Load() == 0 {
		t.Errorf("pattern %s: the stream was not resumed", os.Getenv(envPattern))
	}
}

// unserved are the cases whose calls end before the server's handler, or
// its interceptors, may run: the caller cancels at once or its deadline
// is 1 ms, or the service is unknown (grpc-go answers UNIMPLEMENTED without
// interceptors). They prove that stagger changes nothing of such an end.
var unserved = map[string]bool{"cancel_after_begin": true, "timeout_on_sleeping_server": true, "unimplemented_service": true}

// injected counts the failures serve injected, in a case's process.
var injected atomic.Int32

// serve starts grpc-go's interop test server on loopback TCP behind pat,
// stopped when the test ends, and returns its address. A pattern that
// acts on a connection gets two servers behind one listener: the first
// connection's, which resets it or sends GOAWAY on the first attempt, and
// every later connection's.
func serve(t *testing.T, pat pattern) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	first, later := newConnListener(lis.Addr()), newConnListener(lis.Addr())
	go func() {
		for n := 0; ; n++ {
			c, err := lis.Accept()
			if err != nil {
				first.close()
				later.close()
				return
			}
			to := first
			if n > 0 && pat.conn != "" {
				to = later
			}
			select {
			case to.conns <- c:
			case <-to.done:
				c.Close()
			}
		}
	}()
	var stopFirst func()
	inject := func(ctx context.Context, setTrailer func(metadata.MD)) error {
		n := 1
		if md, _ := metadata.FromIncomingContext(ctx); len(md.Get("grpc-previous-rpc-attempts")) == 1 {
			prev, err := strconv.Atoi(md.Get("grpc-previous-rpc-attempts")[0])
			if err == nil {
				n = prev + 1
			}
		}
		if n == 1 {
			switch pat.conn {
			case "reset":
				if first.once.CompareAndSwap(false, true) {
					// Counted first: the client may have its answer
					// before reset returns.
					injected.Add(1)
					first.reset()
					return status.Error(codes.Unavailable, "interop: connection reset")
				}
			case "goaway":
				if first.once.CompareAndSwap(false, true) {
					injected.Add(1)
					go stopFirst()
					return status.Error(codes.Unavailable, "interop: server going away")
				}
			}
		}
		err := pat.fail(n)
		if err != nil {
			injected.Add(1)
		}
		if err == errPushback {
			setTrailer(metadata.Pairs("grpc-retry-pushback-ms", "20"))
		}
		return err
	}
	newServer := func() *grpc.Server {
		s := grpc.NewServer(
			grpc.ChainUnaryInterceptor(func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
				if err := inject(ctx, func(md metadata.MD) { _ = grpc.SetTrailer(ctx, md) }); err != nil {
					return nil, err
				}
				return h(ctx, req)
			}),
			grpc.ChainStreamInterceptor(func(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, h grpc.StreamHandler) error {
				if err := inject(ss.Context(), ss.SetTrailer); err != nil {
					return err
				}
				if pat.conn == "reset-after" && !first.once.Load() {
					ss = &resetAfter{ServerStream: ss, l: first}
				}
				return h(srv, ss)
			}),
		)
		testgrpc.RegisterTestServiceServer(s, interop.NewTestServer())
		return s
	}
	s1, s2 := newServer(), newServer()
	stopFirst = s1.GracefulStop
	go func() { _ = s1.Serve(first) }()
	go func() { _ = s2.Serve(later) }()
	t.Cleanup(func() {
		lis.Close()
		s1.Stop()
		s2.Stop()
	})
	return lis.Addr().String()
}

// resetAfter is a server stream that resets its listener's connections
// (once per listener) after it sent resumeAfter messages and gave them
// resumeFlush to reach the client.
type resetAfter struct {
	grpc.ServerStream
	l    *connListener
	sent int
}

func (s *resetAfter) SendMsg(m any) error {
	if err := s.ServerStream.SendMsg(m); err != nil {
		return err
	}
	if s.sent++; s.sent == resumeAfter && s.l.once.CompareAndSwap(false, true) {
		time.Sleep(resumeFlush)
		injected.Add(1)
		s.l.reset()
		return status.Error(codes.Unavailable, "interop: connection reset after "+strconv.Itoa(resumeAfter)+" messages")
	}
	return nil
}

// connListener is a net.Listener fed the connections of one real listener
// (serve's accept loop); it keeps them, so that a test can reset them.
type connListener struct {
	addr  net.Addr
	conns chan net.Conn
	done  chan struct{}
	stop  sync.Once
	// once: the first attempt's connection was reset or sent GOAWAY.
	once atomic.Bool

	mu   sync.Mutex
	kept []net.Conn
}

func newConnListener(addr net.Addr) *connListener {
	return &connListener{addr: addr, conns: make(chan net.Conn), done: make(chan struct{})}
}

func (l *connListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		l.mu.Lock()
		l.kept = append(l.kept, c)
		l.mu.Unlock()
		return c, nil
	case <-l.done:
		return nil, net.ErrClosed
	}
}

func (l *connListener) close() { l.stop.Do(func() { close(l.done) }) }

func (l *connListener) Close() error { l.close(); return nil }

func (l *connListener) Addr() net.Addr { return l.addr }

// reset closes every connection the listener gave, with an RST (no
// lingering).
func (l *connListener) reset() {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, c := range l.kept {
		if tc, ok := c.(*net.TCPConn); ok {
			_ = tc.SetLinger(0)
		}
		_ = c.Close()
	}
}

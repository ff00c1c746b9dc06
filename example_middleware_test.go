package stagger_test

// docs/migrating-from-go-grpc-middleware.md, followed as a user would: the
// "before" program (go-grpc-middleware v2's retry interceptor) and its
// migrated "after" (stagger) run the same calls against one scripted server,
// and each prints what the guide says of its side. The guide's Go blocks
// are lines of these Examples, its JSON block is
// examples/policies/from-middleware.json, and its text blocks are their
// outputs (TestMiddlewareGuideMatchesExamples).

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"time"

	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors/retry"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/stagger-go/stagger"
	"github.com/stagger-go/stagger/budget"
	"github.com/stagger-go/stagger/interceptor"
	"github.com/stagger-go/stagger/policy"
	testingv1 "github.com/stagger-go/stagger/proto/stagger/testing/v1"
	"github.com/stagger-go/stagger/testserver"
)

// The "before" program: the middleware's retry interceptor.
func Example_middlewareBefore() {
	srv := testserver.New() // the scripted server, over bufconn
	defer srv.Close()
	target, creds := testserver.BufnetTarget, grpc.WithTransportCredentials(insecure.NewCredentials())

	conn, err := grpc.NewClient(target, creds, srv.DialOption(),
		grpc.WithChainUnaryInterceptor(retry.UnaryClientInterceptor(
			retry.WithMax(3),
			retry.WithBackoff(retry.BackoffExponential(10*time.Millisecond)),
			retry.WithCodes(codes.Unavailable),
		)),
		grpc.WithChainStreamInterceptor(retry.StreamClientInterceptor(
			retry.WithMax(3),
			retry.WithBackoff(retry.BackoffExponential(10*time.Millisecond)),
			retry.WithCodes(codes.Unavailable),
		)),
	)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer conn.Close()
	g := guideRun{srv: srv, client: testingv1.NewTestServiceClient(conn)}

	g.unavailableTwice()
	g.deadlineFromServer(retry.WithCodes(codes.Unavailable, codes.DeadlineExceeded))
	g.slowFirstAttempt("Put", retry.WithPerRetryTimeout(50*time.Millisecond))
	g.slowFirstAttempt("Write", retry.WithPerRetryTimeout(50*time.Millisecond))
	g.streamFailsAfter(2)
	g.streamFailsAfter(0)
	g.clientStream()
	g.afterHeaders()
	g.connectionDropped()
	g.serverDown(20)
	// Output:
	// Get, UNAVAILABLE twice: OK after 3 attempts
	// Get, DEADLINE_EXCEEDED from the server, listed: DeadlineExceeded after 1 attempts
	// Put, first attempt slow, per-retry timeout: OK after 2 attempts
	// Write, first attempt slow, per-retry timeout: OK after 2 attempts
	// ListItems, fails after 2 of 4 messages: OK after 2 attempts, 6 messages received
	// ListItems, fails after 0 of 4 messages: OK after 2 attempts, 4 messages received
	// Upload, UNAVAILABLE once: Unimplemented after 0 attempts
	// Get, UNAVAILABLE after response headers: OK after 2 attempts
	// ListItems, connection dropped after the server ran it: OK after 2 attempts
	// 20 calls, the server down: 60 attempts
}

// The "after" program: the same calls through stagger.DialOptions and the
// policy file examples/policies/from-middleware.json.
func Example_middlewareAfter() {
	srv := testserver.New() // the scripted server, over bufconn
	defer srv.Close()
	target, creds := testserver.BufnetTarget, grpc.WithTransportCredentials(insecure.NewCredentials())

	cfg, err := policy.LoadFile("examples/policies/from-middleware.json")
	if err != nil {
		fmt.Println(err)
		return
	}
	conn, err := grpc.NewClient(target, append(stagger.DialOptions(cfg), creds, srv.DialOption())...)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer conn.Close()
	g := guideRun{srv: srv, client: testingv1.NewTestServiceClient(conn)}

	g.unavailableTwice()
	g.deadlineFromServer(interceptor.WithCodes(codes.Unavailable, codes.DeadlineExceeded))
	// Put has no entry in the file: a call gives it a whole policy.
	perCall := interceptor.WithPolicy(policy.Policy{
		MaxAttempts:           3,
		Backoff:               policy.Backoff{Initial: 10 * time.Millisecond, Max: 10 * time.Second, Multiplier: 2, Jitter: policy.JitterNone},
		RetryableCodes:        policy.NewCodeSet(codes.Unavailable),
		PerAttemptRecvTimeout: 50 * time.Millisecond,
	})
	g.slowFirstAttempt("Put", perCall)
	g.slowFirstAttempt("Write") // the file's entry for Write has the timeout
	g.streamFailsAfter(2)
	g.streamFailsAfter(0)
	g.clientStream()
	g.afterHeaders()
	g.connectionDropped()
	g.serverDown(20)
	// Output:
	// Get, UNAVAILABLE twice: OK after 3 attempts
	// Get, DEADLINE_EXCEEDED from the server, listed: OK after 2 attempts
	// Put, first attempt slow, per-retry timeout: OK after 2 attempts
	// Write, first attempt slow, per-retry timeout: OK after 2 attempts
	// ListItems, fails after 2 of 4 messages: Unavailable after 1 attempts, 2 messages received
	// ListItems, fails after 0 of 4 messages: OK after 2 attempts, 4 messages received
	// Upload, UNAVAILABLE once: OK after 2 attempts
	// Get, UNAVAILABLE after response headers: Unavailable after 1 attempts
	// ListItems, connection dropped after the server ran it: Unavailable after 1 attempts
	// 20 calls, the server down: 48 attempts
}

// guideRun runs the guide's calls with client against srv.
type guideRun struct {
	srv    *testserver.Server
	client testingv1.TestServiceClient
}

func (g guideRun) print(what, key string, err error, extra string) {
	fmt.Printf("%s: %v after %d attempts%s\n", what, status.Code(err), len(g.srv.Attempts(key)), extra)
}

// unavailableTwice: the server fails Get's first two attempts with
// UNAVAILABLE.
func (g guideRun) unavailableTwice() {
	client := g.client
	_, err := client.Get(context.Background(), &testingv1.GetRequest{Script: &testingv1.Script{Key: "unavailable", FailAttempts: 2}})
	g.print("Get, UNAVAILABLE twice", "unavailable", err, "")
}

// deadlineFromServer: the server fails Get's first attempt with its own
// DEADLINE_EXCEEDED (the caller's context has no deadline); the call lists
// the code (listed).
func (g guideRun) deadlineFromServer(listed grpc.CallOption) {
	client := g.client
	_, err := client.Get(context.Background(), &testingv1.GetRequest{Script: &testingv1.Script{
		Key: "deadline", FailAttempts: 1, Code: int32(codes.DeadlineExceeded)}}, listed)
	g.print("Get, DEADLINE_EXCEEDED from the server, listed", "deadline", err, "")
}

// slowFirstAttempt: method's first attempt takes 200ms, the others answer
// at once; opts set the per-retry timeout (50ms) on the call.
func (g guideRun) slowFirstAttempt(method string, opts ...grpc.CallOption) {
	client := g.client
	key := "slow-" + method
	script := &testingv1.Script{Key: key, AttemptDelays: []*durationpb.Duration{durationpb.New(200 * time.Millisecond)}}
	var err error
	switch method {
	case "Get":
		_, err = client.Get(context.Background(), &testingv1.GetRequest{Script: script}, opts...)
	case "Put":
		_, err = client.Put(context.Background(), &testingv1.PutRequest{Script: script}, opts...)
	case "Write":
		_, err = client.Write(context.Background(), &testingv1.WriteRequest{Script: script}, opts...)
	}
	g.print(method+", first attempt slow, per-retry timeout", key, err, "")
}

// streamFailsAfter: ListItems' first attempt sends n of its 4 messages,
// then fails with UNAVAILABLE.
func (g guideRun) streamFailsAfter(n int32) {
	client := g.client
	key := fmt.Sprint("stream-", n)
	stream, err := client.ListItems(context.Background(), &testingv1.ListItemsRequest{Script: &testingv1.Script{
		Key: key, FailAttempts: 1, MessagesBeforeFailure: n, ResponseCount: 4}})
	received := 0
	for err == nil {
		if _, err = stream.Recv(); err == nil {
			received++
		}
	}
	if errors.Is(err, io.EOF) {
		err = nil
	}
	g.print(fmt.Sprintf("ListItems, fails after %d of 4 messages", n), key, err, fmt.Sprintf(", %d messages received", received))
}

// clientStream: Upload (a client stream) fails its first attempt with
// UNAVAILABLE after the client closed its side.
func (g guideRun) clientStream() {
	stream, err := g.client.Upload(context.Background())
	if err == nil {
		script := &testingv1.Script{Key: "upload", FailAttempts: 1}
		for i := range 3 {
			if err = stream.Send(&testingv1.UploadRequest{Script: script, Seq: int64(i)}); err != nil {
				break
			}
		}
		if err == nil {
			_, err = stream.CloseAndRecv()
		}
	}
	g.print("Upload, UNAVAILABLE once", "upload", err, "")
}

// afterHeaders: Get's first attempt sends its response headers, then
// fails with UNAVAILABLE.
func (g guideRun) afterHeaders() {
	_, err := g.client.Get(context.Background(), &testingv1.GetRequest{Script: &testingv1.Script{Key: "headers", FailAttempts: 1, HeadersFirst: true}})
	g.print("Get, UNAVAILABLE after response headers", "headers", err, "")
}

// connectionDropped: the server runs ListItems (not known to be
// idempotent), and its connection drops before its first message leaves.
func (g guideRun) connectionDropped() {
	stream, err := g.client.ListItems(context.Background(), &testingv1.ListItemsRequest{Script: &testingv1.Script{
		Key: "dropped", ResetAttempts: 1, ResponseCount: 4}})
	for err == nil {
		_, err = stream.Recv()
	}
	if errors.Is(err, io.EOF) {
		err = nil
	}
	g.print("ListItems, connection dropped after the server ran it", "dropped", err, "")
}

// serverDown: the server fails every attempt of calls Get calls with
// UNAVAILABLE.
func (g guideRun) serverDown(calls int) {
	client := g.client
	attempts := 0
	for i := range calls {
		key := fmt.Sprint("down-", i)
		_, _ = client.Get(context.Background(), &testingv1.GetRequest{Script: &testingv1.Script{Key: key, FailAttempts: 100}})
		attempts += len(g.srv.Attempts(key))
	}
	fmt.Printf("%d calls, the server down: %d attempts\n", calls, attempts)
}

// Per-call options, as the middleware's were passed on one call, under the
// "after" program's file and with no logger: an option takes effect on
// whatever policy the method has, or slog.Default() hears why not, once
// per method. The middleware's own options, left on a call, compile and do
// nothing; they are reported too. (A program keeps slog's default handler;
// this one prints the level, the message and two attributes.)
func Example_middlewarePerCall() {
	srv := testserver.New() // the scripted server, over bufconn
	defer srv.Close()
	target, creds := testserver.BufnetTarget, grpc.WithTransportCredentials(insecure.NewCredentials())
	defer slog.SetDefault(slog.Default())
	slog.SetDefault(slog.New(slog.NewTextHandler(os.Stdout, &slog.HandlerOptions{ReplaceAttr: briefAttrs})))

	cfg, err := policy.LoadFile("examples/policies/from-middleware.json")
	if err != nil {
		fmt.Println(err)
		return
	}
	conn, err := grpc.NewClient(target, append(stagger.DialOptions(cfg), creds, srv.DialOption())...)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer conn.Close()
	g := guideRun{srv: srv, client: testingv1.NewTestServiceClient(conn)}

	// Get has an entry in the file: the call's timer and backoff apply.
	g.slowFirstAttempt("Get", interceptor.WithPerAttemptTimeout(50*time.Millisecond),
		interceptor.WithBackoff(policy.Backoff{Initial: time.Millisecond, Max: time.Millisecond, Multiplier: 1, Jitter: policy.JitterNone}))
	// Above the file's cap: 5 attempts.
	g.unavailableFor("Get", 7, interceptor.WithMaxAttempts(8))
	// Put has no entry: nothing to apply the attempts to.
	g.unavailableFor("Put", 1, interceptor.WithMaxAttempts(3))
	// The middleware's options, left over: WithMax(5) does not raise the
	// file's 3 attempts; WithMax(2) lowers them to 2; Disable() makes one.
	g.unavailableFor("Get", 4, retry.WithMax(5))
	g.unavailableFor("Get", 5, retry.WithMax(2))
	g.unavailableFor("Get", 2, retry.Disable())
	// Output:
	// Get, first attempt slow, per-retry timeout: OK after 2 attempts
	// level=WARN msg="stagger: WithMaxAttempts above the cap: lowered to the cap (stagger.attempt)" grpc.method=/stagger.testing.v1.TestService/Get stagger.reason=attempts
	// Get, UNAVAILABLE 7 times: Unavailable after 5 attempts
	// level=WARN msg="stagger: the call's WithMaxAttempts, WithCodes, WithPredicate, WithBackoff or WithPerAttemptTimeout not applied: no retry policy for the method (no file entry, no WithPolicy; a hedged method takes only WithMaxAttempts and WithCodes)" grpc.method=/stagger.testing.v1.TestService/Put stagger.reason="no policy"
	// Put, UNAVAILABLE 1 times: Unavailable after 1 attempts
	// level=WARN msg="stagger: a go-grpc-middleware retry option on the call: retry.Disable() is read as one attempt and WithMax(n) as at most n, its others do nothing: use interceptor.Disable, WithMaxAttempts, WithCodes, WithBackoff, WithPerAttemptTimeout, WithPredicate" grpc.method=/stagger.testing.v1.TestService/Get stagger.reason="foreign option"
	// Get, UNAVAILABLE 4 times: Unavailable after 3 attempts
	// Get, UNAVAILABLE 5 times: Unavailable after 2 attempts
	// Get, UNAVAILABLE 2 times: Unavailable after 1 attempts
}

// briefAttrs keeps, of a log record, its level, its message, the method
// and the reason.
func briefAttrs(groups []string, a slog.Attr) slog.Attr {
	switch a.Key {
	case slog.LevelKey, slog.MessageKey, "grpc.method", "stagger.reason":
		return a
	}
	return slog.Attr{}
}

// unavailableFor: the server fails method's first n attempts with
// UNAVAILABLE; opts are the call's options.
func (g guideRun) unavailableFor(method string, n int32, opts ...grpc.CallOption) {
	key := fmt.Sprint("unavailable-", method, "-", n, "-", len(opts))
	script := &testingv1.Script{Key: key, FailAttempts: n}
	var err error
	switch method {
	case "Get":
		_, err = g.client.Get(context.Background(), &testingv1.GetRequest{Script: script}, opts...)
	case "Put":
		_, err = g.client.Put(context.Background(), &testingv1.PutRequest{Script: script}, opts...)
	}
	g.print(fmt.Sprintf("%s, UNAVAILABLE %d times", method, n), key, err, "")
}

// A ported OnRetryCallback: the middleware's callback hears the attempt
// that failed and its error; stagger's hook hears each retry when it is
// decided, with the pause before it, and, for a retry the budget deferred,
// the wait in Deferred (Pause is 0). deferSecond stands for a budget that
// cannot pay for a retry now (stagger's default budget, a Gate, defers
// such a retry): it defers each call's second retry.
func Example_middlewareOnRetry() {
	srv := testserver.New()
	defer srv.Close()
	cfg, err := policy.LoadFile("examples/policies/from-middleware.json")
	if err != nil {
		fmt.Println(err)
		return
	}
	onRetry := interceptor.WithCallHook(func(ctx context.Context, e interceptor.Event) {
		if e.Kind == interceptor.EventRetry {
			fmt.Printf("retry after attempt %d (%v): pause %v, deferred %v\n", e.Attempt, e.Code, e.Pause, e.Deferred > 0)
		}
	})
	opts := append(stagger.DialOptions(cfg, interceptor.WithBudget(deferSecond{}), onRetry), srv.DialOption(),
		grpc.WithTransportCredentials(insecure.NewCredentials()))
	conn, err := grpc.NewClient(testserver.BufnetTarget, opts...)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer conn.Close()
	_, err = testingv1.NewTestServiceClient(conn).Get(context.Background(), &testingv1.GetRequest{Script: &testingv1.Script{Key: "k", FailAttempts: 2}})
	fmt.Println(status.Code(err))
	// Output:
	// retry after attempt 1 (Unavailable): pause 10ms, deferred false
	// retry after attempt 2 (Unavailable): pause 0s, deferred true
	// OK
}

// deferSecond is a budget.Deferrer that refuses each call's second retry
// when asked and admits it 5ms after its pause.
type deferSecond struct{}

func (deferSecond) Record(budget.Attempt)       {}
func (deferSecond) Allow(r budget.Request) bool { return r.Number != 3 }
func (deferSecond) State() budget.State         { return budget.State{Kind: "defer-second"} }
func (deferSecond) Wait(ctx context.Context, _ budget.Request, pause time.Duration) (budget.Admission, error) {
	t := time.NewTimer(pause + 5*time.Millisecond)
	defer t.Stop()
	select {
	case <-t.C:
		return budget.AdmitBudget, nil
	case <-ctx.Done():
		return budget.AdmitNone, ctx.Err()
	}
}

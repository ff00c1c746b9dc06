package stagger_test

import (
	"context"
	"fmt"
	"log"
	"log/slog"
	"os"

	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors/logging"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/stagger-go/stagger"
	"github.com/stagger-go/stagger/interceptor"
	"github.com/stagger-go/stagger/policy"
	testingv1 "github.com/stagger-go/stagger/proto/stagger/testing/v1"
	"github.com/stagger-go/stagger/testserver"
)

// The recipes of docs/recipes.md, each runnable: readme_test.go checks that
// the document's Go blocks are lines of these Examples.

// recipeFile retries stagger's test service, with no jitter (so that the
// logged pauses are the same on every run) and a budget of its own.
const recipeFile = `{"methodConfig": [{
  "name": [{"service": "stagger.testing.v1.TestService"}],
  "retryPolicy": {"maxAttempts": 3, "initialBackoff": "0.01s", "maxBackoff": "0.1s",
    "backoffMultiplier": 2, "retryableStatusCodes": ["UNAVAILABLE"], "jitter": "NONE"}
}], "retryThrottling": {"maxTokens": 100, "tokenRatio": 0.1}}`

// withoutTime drops slog's time attribute, so the Example's output is the
// same on every run.
func withoutTime(_ []string, a slog.Attr) slog.Attr {
	if a.Key == slog.TimeKey {
		return slog.Attr{}
	}
	return a
}

// Example_logger logs what stagger does through log/slog, with
// go-grpc-middleware's logging.LoggerFunc as the adapter.
func Example_logger() {
	srv := testserver.New()
	defer srv.Close()
	cfg, err := policy.ParseConfig([]byte(recipeFile))
	if err != nil {
		log.Fatal(err)
	}

	logger := slog.New(slog.NewTextHandler(os.Stdout, &slog.HandlerOptions{Level: slog.LevelDebug, ReplaceAttr: withoutTime}))
	staggerLog := logging.LoggerFunc(func(ctx context.Context, lvl logging.Level, msg string, fields ...any) {
		logger.Log(ctx, slog.Level(lvl), msg, fields...)
	})
	opts := append(stagger.DialOptions(cfg, interceptor.WithLogger(staggerLog)),
		grpc.WithTransportCredentials(insecure.NewCredentials()), srv.DialOption())

	conn, err := grpc.NewClient(testserver.BufnetTarget, opts...)
	if err != nil {
		log.Fatal(err)
	}
	defer conn.Close()
	client := testingv1.NewTestServiceClient(conn)
	_, err = client.Get(context.Background(), &testingv1.GetRequest{Script: &testingv1.Script{Key: "logger", FailAttempts: 1}})
	fmt.Println("err:", err)
	// Output:
	// level=DEBUG msg="stagger: retrying" grpc.method=/stagger.testing.v1.TestService/Get stagger.event=retry stagger.attempt=1 grpc.code=Unavailable stagger.pause=10ms
	// err: <nil>
}

// Example_strict loads a file with policy.Strict(), so that a typo fails
// the load instead of turning a setting off; without it, the typo is a
// warning (Config.Warnings), which the interceptors log.
func Example_strict() {
	const file = `{"methodConfig": [{"name": [{"service": "stagger.testing.v1.TestService"}],
  "retryPolicy": {"maxAttempts": 3, "initialBackoff": "0.01s", "maxBackoff": "0.1s",
    "backoffMultiplier": 2, "retryableStatusCodes": ["UNAVAILABLE"], "perAttemptRecvTimout": "1s"}}]}`

	_, err := policy.ParseConfig([]byte(file), policy.Strict()) // policy.LoadFile(path, policy.Strict()) alike
	fmt.Println(err)

	cfg, err := policy.ParseConfig([]byte(file))
	if err != nil {
		log.Fatal(err)
	}
	for _, w := range cfg.Warnings() {
		fmt.Printf("%s: %s\n", w.Position(), w) // LoadFile's warnings start with the file's name
	}
	// Output:
	// policy: methodConfig[0].retryPolicy.perAttemptRecvTimout: must be a known key (Strict; did you mean "perAttemptRecvTimeout"?), got "perAttemptRecvTimout"
	// 3:70: methodConfig[0].retryPolicy.perAttemptRecvTimout: unknown key, ignored (did you mean "perAttemptRecvTimeout"?)
}

// Example_middlewareChain puts stagger in a chain of go-grpc-middleware
// interceptors: per-call logging before it (once per call), a per-attempt
// interceptor after it (once per attempt, as auth that fetches a fresh
// token would be).
func Example_middlewareChain() {
	srv := testserver.New()
	defer srv.Close()
	cfg, err := policy.ParseConfig([]byte(recipeFile))
	if err != nil {
		log.Fatal(err)
	}

	perCall := logging.LoggerFunc(func(_ context.Context, _ logging.Level, msg string, _ ...any) {
		fmt.Println("per call:", msg)
	})
	perAttempt := func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		n, _ := interceptor.AttemptFromContext(ctx)
		fmt.Println("per attempt:", n)
		return invoker(ctx, method, req, reply, cc, opts...)
	}
	var opts []grpc.DialOption
	opts = append(opts, grpc.WithChainUnaryInterceptor(logging.UnaryClientInterceptor(perCall, logging.WithLogOnEvents(logging.FinishCall))))
	opts = append(opts, stagger.DialOptions(cfg)...)
	opts = append(opts, grpc.WithChainUnaryInterceptor(perAttempt))
	opts = append(opts, grpc.WithTransportCredentials(insecure.NewCredentials()), srv.DialOption())

	conn, err := grpc.NewClient(testserver.BufnetTarget, opts...)
	if err != nil {
		log.Fatal(err)
	}
	defer conn.Close()
	client := testingv1.NewTestServiceClient(conn)
	_, err = client.Get(context.Background(), &testingv1.GetRequest{Script: &testingv1.Script{Key: "chain", FailAttempts: 1}})
	fmt.Println("err:", err)
	// Output:
	// per attempt: 1
	// per attempt: 2
	// per call: finished call
	// err: <nil>
}

// Example_ranTwice tests a call whose connection resets after the server's
// handler ran: the request was executed, and no status came back. stagger
// does not retry a method not known to be idempotent then (reason
// ambiguous); an idempotent one (Put) it retries, and the server ran it
// twice. testserver's Script.ResetAttempts (one key) and Server.SetResets
// (every attempt) make such resets; Executions counts what ran.
func Example_ranTwice() {
	srv := testserver.New()
	defer srv.Close()
	cfg, err := policy.ParseConfig([]byte(recipeFile))
	if err != nil {
		log.Fatal(err)
	}
	conn, err := grpc.NewClient(testserver.BufnetTarget, append(stagger.DialOptions(cfg),
		grpc.WithTransportCredentials(insecure.NewCredentials()), srv.DialOption())...)
	if err != nil {
		log.Fatal(err)
	}
	defer conn.Close()
	client := testingv1.NewTestServiceClient(conn)
	ctx := context.Background()

	var r interceptor.Report
	_, err = client.Write(ctx, &testingv1.WriteRequest{Script: &testingv1.Script{Key: "write", ResetAttempts: 1}}, interceptor.WithReport(&r))
	fmt.Printf("Write: %v after %d attempt (reason %v), ran %d time\n", err != nil, r.Attempts, r.Reason, srv.Executions(testingv1.TestService_Write_FullMethodName))

	_, err = client.Put(ctx, &testingv1.PutRequest{Script: &testingv1.Script{Key: "put", ResetAttempts: 1}}, interceptor.WithReport(&r))
	fmt.Printf("Put: %v after %d attempts (reason %v), ran %d times\n", err, r.Attempts, r.Reason, srv.Executions(testingv1.TestService_Put_FullMethodName))
	// Output:
	// Write: true after 1 attempt (reason ambiguous), ran 1 time
	// Put: <nil> after 2 attempts (reason success), ran 2 times
}

package interceptor_test

// The examples of docs/migrating-from-go-grpc-middleware.md: each maps one
// option of go-grpc-middleware v2's retry package onto stagger, against
// testserver over bufconn.

import (
	"context"
	"fmt"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/stagger-go/stagger"
	"github.com/stagger-go/stagger/interceptor"
	"github.com/stagger-go/stagger/policy"
	testingv1 "github.com/stagger-go/stagger/proto/stagger/testing/v1"
	"github.com/stagger-go/stagger/testserver"
)

// migrateFile retries UNAVAILABLE: 3 attempts, pauses of 1ms then 2ms.
const migrateFile = `{"methodConfig": [{
  "name": [{"service": "stagger.testing.v1.TestService"}],
  "retryPolicy": {
    "maxAttempts": 3, "initialBackoff": "0.001s", "maxBackoff": "1s",
    "backoffMultiplier": 2, "jitter": "NONE",
    "retryableStatusCodes": ["UNAVAILABLE"]
  }
}]}`

// migrateClient starts a testserver and returns a client whose unary calls
// go through stagger's interceptor built from opts, as
// grpc.WithChainUnaryInterceptor(retry.UnaryClientInterceptor(...)) did,
// and the func that closes both.
func migrateClient(opts ...interceptor.Option) (*testserver.Server, testingv1.TestServiceClient, func()) {
	srv := testserver.New()
	conn, err := grpc.NewClient(testserver.BufnetTarget, srv.DialOption(),
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDisableRetry(), // one retrying layer
		grpc.WithChainUnaryInterceptor(interceptor.UnaryClientInterceptor(opts...)))
	if err != nil {
		panic(err)
	}
	return srv, testingv1.NewTestServiceClient(conn), func() {
		conn.Close()
		srv.Close()
	}
}

func mustParse(file string, opts ...policy.ParseOption) *policy.Config {
	cfg, err := policy.ParseConfig([]byte(file), opts...)
	if err != nil {
		panic(err)
	}
	return cfg
}

// printRetries prints every retry and give-up.
var printRetries = interceptor.WithHook(func(e interceptor.Event) {
	switch e.Kind {
	case interceptor.EventRetry:
		fmt.Printf("  retry after attempt %d (%v), pause %v\n", e.Attempt, e.Code, e.Pause)
	case interceptor.EventGiveUp:
		fmt.Printf("  give up after attempt %d (%v): %v\n", e.Attempt, e.Code, e.Reason)
	case interceptor.EventNotice:
		fmt.Printf("  notice: %v\n", e.Reason)
	}
})

// go-grpc-middleware:
//
//	grpc.WithChainUnaryInterceptor(retry.UnaryClientInterceptor(
//		retry.WithMax(3),
//		retry.WithBackoff(retry.BackoffExponential(time.Millisecond)),
//		retry.WithCodes(codes.Unavailable),
//	))
//
// stagger: the same policy in a file, installed by stagger.DialOptions
// (both interceptors, grpc-go's own retry off). The middleware has no retry
// budget; stagger.DialOptions installs budget.DefaultBackends unless the file
// declares one, as this one does: gRFC A6's retryThrottling.
func Example_migrate() {
	srv := testserver.New()
	defer srv.Close()
	// policy.LoadFile("retry.json") in a program.
	cfg := mustParse(strings.Replace(migrateFile, `}]}`, `}],
	  "retryThrottling": {"maxTokens": 100, "tokenRatio": 0.1}}`, 1))

	opts := append(stagger.DialOptions(cfg, printRetries),
		srv.DialOption(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	conn, err := grpc.NewClient(testserver.BufnetTarget, opts...)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer conn.Close()
	client := testingv1.NewTestServiceClient(conn)

	// The server fails the first two attempts with UNAVAILABLE.
	resp, err := client.Get(context.Background(), &testingv1.GetRequest{
		Script: &testingv1.Script{Key: "migrate", FailAttempts: 2},
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("served by attempt", resp.GetReply().GetAttempt())
	// Output:
	//   retry after attempt 1 (Unavailable), pause 1ms
	//   retry after attempt 2 (Unavailable), pause 2ms
	// served by attempt 3
}

// retry.WithMax(n) per call is WithMaxAttempts(n): both count attempts, the
// first included. WithMaxAttempts is bounded by the file's cap (5 unless the
// file was parsed with policy.WithMaxAttemptsCap); WithMax has none.
func ExampleWithMaxAttempts() {
	srv, client, closeAll := migrateClient(interceptor.WithConfig(mustParse(migrateFile)), printRetries)
	defer closeAll()

	for _, n := range []int{2, 8} {
		key := fmt.Sprint("max-", n)
		fmt.Printf("WithMaxAttempts(%d):\n", n)
		_, err := client.Get(context.Background(), &testingv1.GetRequest{
			Script: &testingv1.Script{Key: key, FailAttempts: 100},
		}, interceptor.WithMaxAttempts(n))
		fmt.Println(" ", status.Code(err), "after", len(srv.Attempts(key)), "attempts")
	}
	// Output:
	// WithMaxAttempts(2):
	//   retry after attempt 1 (Unavailable), pause 1ms
	//   give up after attempt 2 (Unavailable): attempts
	//   Unavailable after 2 attempts
	// WithMaxAttempts(8):
	//   notice: attempts
	//   retry after attempt 1 (Unavailable), pause 1ms
	//   retry after attempt 2 (Unavailable), pause 2ms
	//   retry after attempt 3 (Unavailable), pause 4ms
	//   retry after attempt 4 (Unavailable), pause 8ms
	//   give up after attempt 5 (Unavailable): attempts
	//   Unavailable after 5 attempts
}

// retry.WithCodes(c...) per call is WithCodes(c...): the codes listed
// replace the policy's for this call.
func ExampleWithCodes() {
	srv, client, closeAll := migrateClient(interceptor.WithConfig(mustParse(migrateFile)), printRetries)
	defer closeAll()

	for _, opts := range [][]grpc.CallOption{nil, {interceptor.WithCodes(codes.Aborted)}} {
		key := fmt.Sprint("codes-", len(opts))
		fmt.Println("options:", len(opts))
		// The server fails the first two attempts with ABORTED, which the
		// file does not list.
		_, err := client.Get(context.Background(), &testingv1.GetRequest{
			Script: &testingv1.Script{Key: key, FailAttempts: 2, Code: int32(codes.Aborted)},
		}, opts...)
		fmt.Println(" ", status.Code(err), "after", len(srv.Attempts(key)), "attempts")
	}
	// Output:
	// options: 0
	//   give up after attempt 1 (Aborted): not retryable
	//   Aborted after 1 attempts
	// options: 1
	//   retry after attempt 1 (Aborted), pause 1ms
	//   retry after attempt 2 (Aborted), pause 2ms
	//   OK after 3 attempts
}

// retry.WithBackoff: BackoffLinear(d) is Initial = Max = d with
// Multiplier 1; BackoffExponential(s) is Initial s with Multiplier 2 (and
// a Max above the pauses). The middleware's jitter fraction f becomes
// JitterProportional (f = 0.2), JitterFull, or JitterNone for none. Here
// with a policy written in code, for every method the file does not match.
func ExampleWithPolicy() {
	linear := policy.Policy{
		MaxAttempts: 4, // retry.WithMax(4)
		Backoff:     policy.Backoff{Initial: 3 * time.Millisecond, Max: 3 * time.Millisecond, Multiplier: 1, Jitter: policy.JitterNone},
	}
	exponential := linear
	exponential.Backoff = policy.Backoff{Initial: time.Millisecond, Max: time.Second, Multiplier: 2, Jitter: policy.JitterNone}

	for _, p := range []struct {
		name string
		p    policy.Policy
	}{{"BackoffLinear(3ms)", linear}, {"BackoffExponential(1ms)", exponential}} {
		fmt.Println(p.name)
		_, client, closeAll := migrateClient(interceptor.WithPolicy(p.p), printRetries)
		_, err := client.Get(context.Background(), &testingv1.GetRequest{
			Script: &testingv1.Script{Key: "k", FailAttempts: 3},
		})
		fmt.Println(" ", status.Code(err))
		closeAll()
	}
	// Output:
	// BackoffLinear(3ms)
	//   retry after attempt 1 (Unavailable), pause 3ms
	//   retry after attempt 2 (Unavailable), pause 3ms
	//   retry after attempt 3 (Unavailable), pause 3ms
	//   OK
	// BackoffExponential(1ms)
	//   retry after attempt 1 (Unavailable), pause 1ms
	//   retry after attempt 2 (Unavailable), pause 2ms
	//   retry after attempt 3 (Unavailable), pause 4ms
	//   OK
}

// retry.WithBackoff(f) per call is WithBackoff(b): the call's pauses, on
// top of whatever policy retries the method (here the file's entry, whose
// pauses are 1ms then 2ms).
func ExampleWithBackoff() {
	_, client, closeAll := migrateClient(interceptor.WithConfig(mustParse(migrateFile)), printRetries)
	defer closeAll()

	linear := interceptor.WithBackoff(policy.Backoff{Initial: 3 * time.Millisecond, Max: 3 * time.Millisecond, Multiplier: 1, Jitter: policy.JitterNone})
	_, err := client.Get(context.Background(), &testingv1.GetRequest{
		Script: &testingv1.Script{Key: "k", FailAttempts: 2},
	}, linear)
	fmt.Println(status.Code(err))
	// Output:
	//   retry after attempt 1 (Unavailable), pause 3ms
	//   retry after attempt 2 (Unavailable), pause 3ms
	// OK
}

// retry.WithPerRetryTimeout(d) per call is WithPerAttemptTimeout(d), on a
// method known to be idempotent (Get is NO_SIDE_EFFECTS in its proto;
// Idempotent() on the call marks another): the first attempt takes 200ms,
// the timer cuts it off at 20ms and the retry is served at once. On Write,
// not known to be idempotent, the call runs without the timer and a notice
// says so, once per method (to slog.Default() as well when no logger is
// given).
func ExampleWithPerAttemptTimeout() {
	srv, client, closeAll := migrateClient(interceptor.WithConfig(mustParse(migrateFile)), printRetries)
	defer closeAll()

	slow := &testingv1.Script{Key: "get", AttemptDelays: []*durationpb.Duration{durationpb.New(200 * time.Millisecond)}}
	_, err := client.Get(context.Background(), &testingv1.GetRequest{Script: slow}, interceptor.WithPerAttemptTimeout(20*time.Millisecond))
	fmt.Println("Get:", status.Code(err), "after", len(srv.Attempts("get")), "attempts")

	slow = &testingv1.Script{Key: "write", AttemptDelays: []*durationpb.Duration{durationpb.New(50 * time.Millisecond)}}
	_, err = client.Write(context.Background(), &testingv1.WriteRequest{Script: slow}, interceptor.WithPerAttemptTimeout(20*time.Millisecond))
	fmt.Println("Write:", status.Code(err), "after", len(srv.Attempts("write")), "attempts")
	// Output:
	//   retry after attempt 1 (DeadlineExceeded), pause 1ms
	// Get: OK after 2 attempts
	//   notice: not idempotent
	// Write: OK after 1 attempts
}

// retry.WithOnRetryCallback(f) is a call hook that passes EventRetry on:
// the caller's context, the number of the attempt that failed (the
// middleware's attempt) and its error. stagger calls it when the retry is
// decided, before the pause; the middleware after the pause.
func ExampleWithCallHook() {
	onRetry := func(_ context.Context, attempt uint, err error) {
		fmt.Printf("retry %d after %v\n", attempt, status.Code(err))
	}
	_, client, closeAll := migrateClient(interceptor.WithConfig(mustParse(migrateFile)),
		interceptor.WithCallHook(func(ctx context.Context, e interceptor.Event) {
			if e.Kind == interceptor.EventRetry {
				onRetry(ctx, uint(e.Attempt), e.Err)
			}
		}))
	defer closeAll()

	_, err := client.Get(context.Background(), &testingv1.GetRequest{
		Script: &testingv1.Script{Key: "k", FailAttempts: 2},
	})
	fmt.Println(status.Code(err))
	// Output:
	// retry 1 after Unavailable
	// retry 2 after Unavailable
	// OK
}

// retry.WithRetriable(f) is WithPredicate(func(err) (f(err), true)). A
// predicate may also leave an error to the codes (decided false), and it
// never makes stagger retry the caller's own deadline or cancellation.
func ExampleWithPredicate() {
	retriable := func(err error) bool { // the middleware's RetriableFunc
		return strings.Contains(status.Convert(err).Message(), "try again")
	}
	_, client, closeAll := migrateClient(interceptor.WithConfig(mustParse(migrateFile)), printRetries,
		interceptor.WithPredicate(func(err error) (retry, decided bool) { return retriable(err), true }))
	defer closeAll()

	_, err := client.Get(context.Background(), &testingv1.GetRequest{
		Script: &testingv1.Script{Key: "k", FailAttempts: 2, Code: int32(codes.Internal), Message: "busy, try again"},
	})
	fmt.Println(status.Code(err))
	// Output:
	//   retry after attempt 1 (Internal), pause 1ms
	//   retry after attempt 2 (Internal), pause 2ms
	// OK
}

// retry.WithPerRetryTimeout(d) is the policy's perAttemptRecvTimeout, which
// applies to methods known to be idempotent only: a cut-off attempt may
// have run on the server. Write is not marked idempotent in its proto, so
// the call says so with Idempotent (or the file's "idempotent": true).
func ExampleIdempotent() {
	const file = `{"methodConfig": [{
	  "name": [{"service": "stagger.testing.v1.TestService"}],
	  "retryPolicy": {
	    "maxAttempts": 3, "initialBackoff": "0.001s", "maxBackoff": "1s",
	    "backoffMultiplier": 2, "jitter": "NONE", "retryableStatusCodes": ["UNAVAILABLE"],
	    "perAttemptRecvTimeout": "0.1s"
	  }
	}]}`
	srv, client, closeAll := migrateClient(interceptor.WithConfig(mustParse(file)), printRetries)
	defer closeAll()

	for _, opts := range [][]grpc.CallOption{nil, {interceptor.Idempotent()}} {
		key := fmt.Sprint("write-", len(opts))
		fmt.Println("options:", len(opts))
		// The first attempt takes 1s, the others answer at once.
		_, err := client.Write(context.Background(), &testingv1.WriteRequest{
			Script: &testingv1.Script{Key: key, AttemptDelays: []*durationpb.Duration{durationpb.New(time.Second)}},
		}, opts...)
		fmt.Println(" ", status.Code(err), "after", len(srv.Attempts(key)), "attempts")
	}
	// Output:
	// options: 0
	//   notice: not idempotent
	//   OK after 1 attempts
	// options: 1
	//   retry after attempt 1 (DeadlineExceeded), pause 1ms
	//   OK after 2 attempts
}

// retry.Disable() is Disable(): the call goes to grpc once, untouched.
// WithMaxAttempts(1) also makes one attempt, and keeps the file's timeout,
// waitForReady and limits and the budget's accounting.
func ExampleDisable() {
	srv, client, closeAll := migrateClient(interceptor.WithConfig(mustParse(migrateFile)), printRetries)
	defer closeAll()

	_, err := client.Get(context.Background(), &testingv1.GetRequest{
		Script: &testingv1.Script{Key: "k", FailAttempts: 1},
	}, interceptor.Disable())
	fmt.Println(status.Code(err), "after", len(srv.Attempts("k")), "attempt")
	// Output:
	// Unavailable after 1 attempt
}

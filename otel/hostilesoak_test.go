package staggerotel

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors/logging"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"

	"github.com/stagger-go/stagger"
	"github.com/stagger-go/stagger/interceptor"
	testingv1 "github.com/stagger-go/stagger/proto/stagger/testing/v1"
	"github.com/stagger-go/stagger/testserver"
)

// hostileSoakConfig retries Get and ListItems (resumable) and hedges Put.
const hostileSoakConfig = `{"methodConfig": [
	{"name": [{"service": "stagger.testing.v1.TestService", "method": "Get"}, {"service": "stagger.testing.v1.TestService", "method": "ListItems"}],
	 "retryPolicy": {"maxAttempts": 3, "initialBackoff": "0.005s", "maxBackoff": "0.05s", "backoffMultiplier": 2, "retryableStatusCodes": ["UNAVAILABLE"]}},
	{"name": [{"service": "stagger.testing.v1.TestService", "method": "Put"}],
	 "hedgingPolicy": {"maxAttempts": 3, "hedgingDelay": "0.01s", "nonFatalStatusCodes": ["UNAVAILABLE"]}}]}`

// TestHostileSoak runs, for HOSTILE_SOAK_TIME (e.g. 30s; skipped when
// unset), hostile calls (status codes outside the 17, pushbacks, hedges
// and broken streams) beside ordinary ones, through hooks and a logger
// that panic at random: every ordinary call gets its own reply (checked
// by content), stagger.client.call.ends stays within its bound, every
// panic is counted once, and no goroutine is left.
func TestHostileSoak(t *testing.T) {
	d, err := time.ParseDuration(os.Getenv("HOSTILE_SOAK_TIME"))
	if err != nil || d <= 0 {
		t.Skip("set HOSTILE_SOAK_TIME (e.g. 30s) to run")
	}
	ignore := goleak.IgnoreCurrent()
	defer goleak.VerifyNone(t, ignore)
	srv := testserver.New()
	defer srv.Close()
	reader := sdkmetric.NewManualReader()
	metrics, err := Option(Options{MeterProvider: sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))})
	if err != nil {
		t.Fatal(err)
	}
	var panics atomic.Int64
	maybePanic := func() {
		if rand.N(4) == 0 {
			panics.Add(1)
			panic("soak")
		}
	}
	resume := interceptor.TypedResume(func(req *testingv1.ListItemsRequest, last *testingv1.ListItemsResponse) (*testingv1.ListItemsRequest, error) {
		next := proto.Clone(req).(*testingv1.ListItemsRequest)
		next.StartAfter = last.GetReply().GetSeq()
		return next, nil
	})
	cc, err := srv.Dial(stagger.DialOptions(parseConfig(t, hostileSoakConfig), metrics,
		interceptor.WithHook(func(interceptor.Event) { maybePanic() }),
		interceptor.WithLogger(logging.LoggerFunc(func(context.Context, logging.Level, string, ...any) { maybePanic() })),
		interceptor.WithResume(testingv1.TestService_ListItems_FullMethodName, resume))...)
	if err != nil {
		t.Fatal(err)
	}
	client := testingv1.NewTestServiceClient(cc)
	before := interceptor.RecoveredPanics()
	end := time.Now().Add(d)
	var wg sync.WaitGroup
	var ordinary, hostile atomic.Int64
	for w := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; time.Now().Before(end); i++ {
				key := fmt.Sprintf("w%d-%d", w, i)
				if w%2 == 0 {
					hostileCall(client, key)
					hostile.Add(1)
					continue
				}
				if err := ordinaryCall(client, key, i%3); err != nil {
					t.Errorf("ordinary call %s: %v", key, err)
					return
				}
				ordinary.Add(1)
			}
		}()
	}
	wg.Wait()
	ms := collect(t, reader)
	ends := sum(t, ms, MetricCallEnds)
	if bound := 3 * 24 * 18 * 4; len(ends) > bound {
		t.Errorf("%d stagger.client.call.ends series, want at most %d (3 methods)", len(ends), bound)
	}
	if err := cc.Close(); err != nil {
		t.Fatal(err)
	}
	if got, want := interceptor.RecoveredPanics()-before, panics.Load(); got != want {
		t.Errorf("RecoveredPanics grew by %d; the callbacks panicked %d times", got, want)
	}
	t.Logf("%v: %d ordinary calls, %d hostile, %d panics recovered, %d end series", d, ordinary.Load(), hostile.Load(), panics.Load(), len(ends))
}

// hostileCall makes one hostile call of key; its outcome is the server's.
func hostileCall(client testingv1.TestServiceClient, key string) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	switch rand.N(4) {
	case 0: // a status code outside the 17
		_, _ = client.Get(ctx, &testingv1.GetRequest{Script: &testingv1.Script{Key: key, FailAttempts: 1, Code: int32(17 + rand.N(1<<31-18))}})
	case 1: // a pushback, then an answer
		_, _ = client.Get(ctx, &testingv1.GetRequest{Script: &testingv1.Script{Key: key, FailAttempts: 1, Pushback: []string{fmt.Sprint(rand.N(50))}}})
	case 2: // hedged, the first attempt slow
		_, _ = client.Put(ctx, &testingv1.PutRequest{Script: &testingv1.Script{Key: key, AttemptDelays: durations(30*time.Millisecond, 0)}})
	default: // a stream broken after two messages, resumed
		st, err := client.ListItems(ctx, &testingv1.ListItemsRequest{Script: &testingv1.Script{Key: key, FailAttempts: 1, MessagesBeforeFailure: 2, ResponseCount: 4}})
		for err == nil {
			_, err = st.Recv()
		}
	}
}

// ordinaryCall makes one ordinary call of key (kind 0: Get, 1: a hedged
// Put, 2: a stream): nil when it got its own reply.
func ordinaryCall(client testingv1.TestServiceClient, key string, kind int) error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	sc := &testingv1.Script{Key: key, ResponseCount: 3}
	var got *testingv1.Reply
	switch kind {
	case 0:
		resp, err := client.Get(ctx, &testingv1.GetRequest{Script: sc})
		if err != nil {
			return err
		}
		got = resp.GetReply()
	case 1:
		resp, err := client.Put(ctx, &testingv1.PutRequest{Script: sc}, grpc.WaitForReady(true))
		if err != nil {
			return err
		}
		got = resp.GetReply()
	default:
		st, err := client.ListItems(ctx, &testingv1.ListItemsRequest{Script: sc})
		for n := int64(1); err == nil; n++ {
			var m *testingv1.ListItemsResponse
			if m, err = st.Recv(); err == nil && (m.GetReply().GetKey() != key || m.GetReply().GetSeq() != n) {
				return fmt.Errorf("message %d is %v", n, m.GetReply())
			}
			if err == io.EOF && n != 4 {
				return fmt.Errorf("%d messages, want 3", n-1)
			}
		}
		if err != io.EOF {
			return err
		}
		return nil
	}
	if got.GetKey() != key {
		return fmt.Errorf("reply %v, not its own", got)
	}
	return nil
}

package interceptor_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors/logging"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/stagger-go/stagger/breaker"
	"github.com/stagger-go/stagger/budget"
	"github.com/stagger-go/stagger/interceptor"
	testingv1 "github.com/stagger-go/stagger/proto/stagger/testing/v1"
	"github.com/stagger-go/stagger/testserver"
)

// fenceRetryFile retries every method of the test service, quickly.
const fenceRetryFile = `{"methodConfig": [{"name": [{"service": "stagger.testing.v1.TestService"}],
	"retryPolicy": {"maxAttempts": 3, "initialBackoff": "0.001s", "maxBackoff": "0.001s",
		"backoffMultiplier": 1, "retryableStatusCodes": ["UNAVAILABLE"]}}]}`

// fenceTimerFile cuts Get's attempts off after 50 ms, to retry them.
const fenceTimerFile = `{"methodConfig": [{"name": [{"service": "stagger.testing.v1.TestService", "method": "Get"}],
	"retryPolicy": {"maxAttempts": 3, "initialBackoff": "0.001s", "maxBackoff": "0.001s",
		"backoffMultiplier": 1, "retryableStatusCodes": ["UNAVAILABLE"], "perAttemptRecvTimeout": "0.05s"}}]}`

// refuseRetries lets every first attempt go and refuses every retry.
type refuseRetries struct{}

func (refuseRetries) Record(budget.Attempt)       {}
func (refuseRetries) Allow(r budget.Request) bool { return r.Number < 2 }
func (refuseRetries) State() budget.State         { return budget.State{Kind: "refusing"} }

// fencedCallback is one place where stagger calls user code, made to
// panic each time it is called.
type fencedCallback struct {
	name string
	// opts installs the panicking callback, counting each panic in n.
	opts func(n *atomic.Int64, kinds *sync.Map) []interceptor.Option
	// onChange is the breaker.Set's listener, callOpt each call's option.
	onChange func(n *atomic.Int64) func(breaker.Change)
	callOpt  func(n *atomic.Int64) grpc.CallOption
	// fails names the scenarios whose call ends with an error because the
	// callback panicked (the rest succeed, each with its own reply).
	fails map[string]bool
}

// A panicking callback at every point where stagger calls user code (each
// hook event, the logger, a predicate, WithIdempotentMethods, a resume
// function, grpc.OnFinish, a breaker.Set's onChange), in unary, stream,
// resumed, hedged unary and hedged stream calls, a stream hedging does not
// apply to, a hedged call whose hedging stops and a breaker that opens:
// nothing crashes; each call ends as it would without the callback but
// for what the panic decides (a predicate's "no retry", a resume
// function's error), with its own reply; an ordinary call after it gets
// its own; each panic is counted once; no goroutine is left.
func TestPanickingCallbacksAreFenced(t *testing.T) {
	resumeOK := interceptor.TypedResume(func(req *testingv1.ListItemsRequest, last *testingv1.ListItemsResponse) (*testingv1.ListItemsRequest, error) {
		next := proto.Clone(req).(*testingv1.ListItemsRequest)
		next.StartAfter = last.GetReply().GetSeq()
		return next, nil
	})
	panicking := func(n *atomic.Int64) { n.Add(1); panic("user code") }
	callbacks := []fencedCallback{
		{name: "hook", opts: func(n *atomic.Int64, kinds *sync.Map) []interceptor.Option {
			return []interceptor.Option{interceptor.WithHook(func(e interceptor.Event) { kinds.Store(e.Kind, true); panicking(n) })}
		}},
		{name: "call hook", opts: func(n *atomic.Int64, kinds *sync.Map) []interceptor.Option {
			return []interceptor.Option{interceptor.WithCallHook(func(_ context.Context, e interceptor.Event) { kinds.Store(e.Kind, true); panicking(n) })}
		}},
		{name: "logger", opts: func(n *atomic.Int64, _ *sync.Map) []interceptor.Option {
			return []interceptor.Option{interceptor.WithLogger(logging.LoggerFunc(func(context.Context, logging.Level, string, ...any) { panicking(n) }))}
		}},
		{name: "predicate", fails: map[string]bool{"unary": true, "stream": true, "resumed": true}, opts: func(n *atomic.Int64, _ *sync.Map) []interceptor.Option {
			return []interceptor.Option{interceptor.WithPredicate(func(error) (bool, bool) { panicking(n); return true, true })}
		}},
		{name: "idempotent methods", opts: func(n *atomic.Int64, _ *sync.Map) []interceptor.Option {
			return []interceptor.Option{interceptor.WithIdempotentMethods(func(string) bool { panicking(n); return true })}
		}},
		{name: "resume", fails: map[string]bool{"resumed": true}, opts: func(n *atomic.Int64, _ *sync.Map) []interceptor.Option {
			return []interceptor.Option{interceptor.WithResume(testingv1.TestService_ListItems_FullMethodName, func(proto.Message, proto.Message) (proto.Message, error) {
				panicking(n)
				return nil, nil
			})}
		}},
		{name: "OnFinish", callOpt: func(n *atomic.Int64) grpc.CallOption { return grpc.OnFinish(func(error) { panicking(n) }) }},
		{name: "breaker onChange", onChange: func(n *atomic.Int64) func(breaker.Change) { return func(breaker.Change) { panicking(n) } }},
	}
	quietPanics(t)
	kinds := new(sync.Map)
	for _, cb := range callbacks {
		t.Run(cb.name, func(t *testing.T) {
			noLeakAfter(t)
			srv := testserver.New()
			defer srv.Close()
			var n atomic.Int64
			var onChange func(breaker.Change)
			if cb.onChange != nil {
				onChange = cb.onChange(&n)
			}
			set, err := breaker.NewSet(breaker.Settings{ConsecutiveFailures: 3, BreakDuration: time.Minute, MaxBreakDuration: time.Minute}, onChange)
			if err != nil {
				t.Fatal(err)
			}
			common := []interceptor.Option{interceptor.WithBreakers(set), interceptor.WithResume(testingv1.TestService_ListItems_FullMethodName, resumeOK)}
			var own []interceptor.Option
			if cb.opts != nil {
				own = cb.opts(&n, kinds)
			}
			// The callback's option comes last: it replaces resumeOK.
			retried := fencedClient(t, srv, append(append([]interceptor.Option{interceptor.WithConfig(mustParse(fenceRetryFile))}, common...), own...)...)
			hedged := fencedClient(t, srv, append(append([]interceptor.Option{interceptor.WithConfig(mustParse(hedgeFile))}, common...), own...)...)
			// refusing refuses every retry: the per-attempt timer's runs
			// on; deferring holds them in a Gate, within the call's deadline.
			gate, err := budget.Deferring(refuseRetries{}, budget.DeferSettings{})
			if err != nil {
				t.Fatal(err)
			}
			refusing := fencedClient(t, srv, append(append([]interceptor.Option{interceptor.WithConfig(mustParse(fenceTimerFile)), interceptor.WithBudget(refuseRetries{})}, common...), own...)...)
			deferring := fencedClient(t, srv, append(append([]interceptor.Option{interceptor.WithConfig(mustParse(fenceRetryFile)), interceptor.WithBudget(gate)}, common...), own...)...)
			var callOpts []grpc.CallOption
			if cb.callOpt != nil {
				callOpts = append(callOpts, cb.callOpt(&n))
			}
			before := interceptor.RecoveredPanics()
			scenarios := []struct {
				name string
				run  func(key string) error
			}{
				{"unary", func(key string) error {
					return getKey(retried, key, &testingv1.Script{FailAttempts: 1}, callOpts...)
				}},
				{"stream", func(key string) error {
					return streamKey(retried, &testingv1.Script{Key: key, FailAttempts: 1, ResponseCount: 3}, 3, callOpts...)
				}},
				{"resumed", func(key string) error {
					return streamKey(retried, &testingv1.Script{Key: key, FailAttempts: 1, MessagesBeforeFailure: 2, ResponseCount: 4}, 4, callOpts...)
				}},
				{"hedged", func(key string) error {
					return getKey(hedged, key, &testingv1.Script{AttemptDelays: durations(300*time.Millisecond, 0)}, callOpts...)
				}},
				{"hedged stream", func(key string) error {
					sc := &testingv1.Script{Key: key, ResponseCount: 3, AttemptDelays: durations(300*time.Millisecond, 0)}
					return streamKey(hedged, sc, 3, append(callOpts, interceptor.Idempotent())...)
				}},
				{"not idempotent", func(key string) error {
					// Hedging does not apply (a notice): the stream runs once.
					return streamKey(hedged, &testingv1.Script{Key: key, ResponseCount: 2}, 2, callOpts...)
				}},
				{"hedge stopped", func(key string) error {
					// A pushback that is no number stops hedging: the
					// call ends with the attempt's UNAVAILABLE.
					err := getKey(hedged, key, &testingv1.Script{FailAttempts: 1, Pushback: []string{"x"}}, callOpts...)
					if status.Code(err) != codes.Unavailable {
						return fmt.Errorf("%v, want the attempt's UNAVAILABLE", err)
					}
					return nil
				}},
				{"timer ran on", func(key string) error {
					return getKey(refusing, key, &testingv1.Script{AttemptDelays: durations(150 * time.Millisecond)}, callOpts...)
				}},
				{"deferred", func(key string) error {
					ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
					defer cancel()
					// The Gate may let the retry go (as its probe) or not.
					resp, err := deferring.Get(ctx, &testingv1.GetRequest{Script: &testingv1.Script{Key: key, FailAttempts: 1}}, callOpts...)
					switch status.Code(err) {
					case codes.OK:
						if resp.GetReply().GetKey() != key {
							return fmt.Errorf("reply %v, not its own", resp.GetReply())
						}
					case codes.Unavailable, codes.DeadlineExceeded:
					default:
						return fmt.Errorf("%v, want its reply, the attempt's UNAVAILABLE or the deadline", err)
					}
					return nil
				}},
				{"breaker", func(key string) error {
					// Three first attempts fail: the breaker opens; the
					// fourth call is refused.
					for i := range 4 {
						_, err := retried.Write(context.Background(), &testingv1.WriteRequest{Script: &testingv1.Script{Key: key, FailAttempts: 100}}, callOpts...)
						if i == 3 && !errors.Is(err, breaker.ErrOpen) {
							return fmt.Errorf("the fourth Write: %v, want the open breaker's refusal", err)
						}
					}
					return nil
				}},
			}
			for _, sc := range scenarios {
				err := sc.run(cb.name + "/" + sc.name)
				if (err != nil) != cb.fails[sc.name] {
					t.Errorf("%s: %v; want failed %v", sc.name, err, cb.fails[sc.name])
				}
				if err := getKey(hedged, "ordinary after "+sc.name, nil); err != nil {
					t.Errorf("an ordinary call after %s: %v", sc.name, err)
				}
			}
			if got, want := interceptor.RecoveredPanics()-before, n.Load(); got != want || want == 0 {
				t.Errorf("RecoveredPanics grew by %d; the callback panicked %d times (want > 0, each counted once)", got, want)
			}
		})
	}
	for _, k := range []interceptor.EventKind{interceptor.EventRetry, interceptor.EventGiveUp, interceptor.EventNotice, interceptor.EventHedge,
		interceptor.EventHedgeStop, interceptor.EventHedgeWon, interceptor.EventDeferred, interceptor.EventBreaker, interceptor.EventEnd,
		interceptor.EventResume, interceptor.EventTimerRanOn} {
		if _, ok := kinds.Load(k); !ok {
			t.Errorf("no hook panicked on %v", k)
		}
	}
}

// getKey makes a Get of key: nil when it succeeds with its own reply.
func getKey(client testingv1.TestServiceClient, key string, sc *testingv1.Script, opts ...grpc.CallOption) error {
	if sc == nil {
		sc = &testingv1.Script{}
	}
	sc.Key = key
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := client.Get(ctx, &testingv1.GetRequest{Script: sc}, opts...)
	if err == nil && resp.GetReply().GetKey() != key {
		err = status.Errorf(codes.DataLoss, "reply %v, not %q's", resp.GetReply(), key)
	}
	return err
}

// streamKey reads sc's stream: nil when it ends with want messages, its own.
func streamKey(client testingv1.TestServiceClient, sc *testingv1.Script, want int, opts ...grpc.CallOption) error {
	got, err := readStream(client, sc, opts...)
	if err == nil && got != want {
		err = fmt.Errorf("%d messages, want %d", got, want)
	}
	return err
}

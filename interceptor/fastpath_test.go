package interceptor_test

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/stagger-go/stagger/breaker"
	"github.com/stagger-go/stagger/criticality"
	"github.com/stagger-go/stagger/interceptor"
	"github.com/stagger-go/stagger/policy"
)

// A unary call under the interceptor's own options takes a fast path to the
// end of its first attempt; the same call with an Option of its own (even
// one that sets nothing) takes the general one. Both must tell the budget,
// the breaker, the hooks, the report and the server the same things: this
// runs one sequence of calls through each and compares what they heard.
func TestUnaryFastPathMatchesGeneralPath(t *testing.T) {
	const timeoutFile = `{"methodConfig": [{"name": [{"service": "stagger.testing.v1.TestService"}],
		"timeout": "10s", "waitForReady": false,
		"retryPolicy": {"maxAttempts": 3, "initialBackoff": "0.000001s", "maxBackoff": "0.000001s",
		"backoffMultiplier": 1, "retryableStatusCodes": ["UNAVAILABLE"]}}]}`
	noRetryFile := `{"methodConfig": [{"name": [{"service": "stagger.testing.v1.TestService"}], "timeout": "10s"}]}`
	errInvalid := status.Error(codes.InvalidArgument, "bad")
	// Each call's attempts, in order; nil past the end is success.
	calls := [][]error{
		nil,
		{errUnavailable},
		{errInvalid},
		{errUnavailable, errUnavailable, errUnavailable},
		nil,
		{errUnavailable, errUnavailable, errUnavailable},
		{errUnavailable},
		nil,
	}
	newSet := func(t *testing.T, s breaker.Settings) *breaker.Set {
		// Throttling draws: a fixed sequence, the same on both paths; and a
		// clock that stands still, so that a refusal's message (the next
		// probe's time) is the same too.
		var draws int
		now := time.Date(2026, 11, 25, 12, 0, 0, 0, time.UTC)
		bs, err := breaker.NewSet(s, nil, breaker.WithRandom(func() float64 {
			draws++
			return float64(draws%10) / 10
		}), breaker.WithClock(func() time.Time { return now }))
		if err != nil {
			t.Fatal(err)
		}
		return bs
	}
	tripLate := breaker.Settings{ConsecutiveFailures: 3, BreakDuration: time.Hour, MaxBreakDuration: time.Hour}
	setups := []struct {
		name string
		// opts are the interceptor's options; bs its breakers, if any.
		opts func(t *testing.T) (opts []interceptor.Option, bs *breaker.Set)
	}{
		{"policy", func(*testing.T) ([]interceptor.Option, *breaker.Set) { return []interceptor.Option{zeroPause(3)}, nil }},
		{"no policy", func(*testing.T) ([]interceptor.Option, *breaker.Set) { return nil, nil }},
		{"file with timeout", func(t *testing.T) ([]interceptor.Option, *breaker.Set) {
			return []interceptor.Option{interceptor.WithConfig(parseFile(t, timeoutFile))}, nil
		}},
		{"file without retry", func(t *testing.T) ([]interceptor.Option, *breaker.Set) {
			return []interceptor.Option{interceptor.WithConfig(parseFile(t, noRetryFile))}, nil
		}},
		{"criticality", func(*testing.T) ([]interceptor.Option, *breaker.Set) {
			return []interceptor.Option{zeroPause(3), interceptor.WithCriticality(criticality.Sheddable)}, nil
		}},
		{"breaker", func(t *testing.T) ([]interceptor.Option, *breaker.Set) {
			bs := newSet(t, tripLate)
			return []interceptor.Option{zeroPause(3), interceptor.WithBreakers(bs)}, bs
		}},
		{"breaker without retry", func(t *testing.T) ([]interceptor.Option, *breaker.Set) {
			s := tripLate
			s.ConsecutiveFailures = 2
			bs := newSet(t, s)
			return []interceptor.Option{interceptor.WithBreakers(bs)}, bs
		}},
		{"throttling", func(t *testing.T) ([]interceptor.Option, *breaker.Set) {
			s := tripLate
			s.ThrottleK = 2
			bs := newSet(t, s)
			return []interceptor.Option{zeroPause(3), interceptor.WithBreakers(bs), interceptor.WithCriticality(criticality.SheddablePlus)}, bs
		}},
	}
	for _, setup := range setups {
		for _, refuse := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/budget allows %v", setup.name, !refuse), func(t *testing.T) {
				run := func(general bool) []string {
					var log []string
					b := &countingBudget{allow: !refuse}
					var report interceptor.Report
					opts, bs := setup.opts(t)
					opts = append(opts, interceptor.WithRandom(zero), interceptor.WithBudget(b),
						interceptor.WithReport(&report),
						interceptor.WithHook(func(e interceptor.Event) { log = append(log, "hook "+eventLine(e)) }),
						interceptor.WithCallHook(func(_ context.Context, e interceptor.Event) { log = append(log, "call hook "+eventLine(e)) }))
					icpt := interceptor.UnaryClientInterceptor(opts...)
					for i, errs := range calls {
						s := &script{errs: errs}
						var callOpts []grpc.CallOption
						if general {
							callOpts = append(callOpts, interceptor.Option{})
						}
						err := icpt(context.Background(), method, nil, nil, nil, s.invoke, callOpts...)
						log = append(log, fmt.Sprintf("call %d: err %v, code %v, attempts %d, gave up %v", i, err, status.Code(err), interceptor.Attempts(err), giveUp(err)))
						for j, ctx := range s.ctxs {
							md, _ := metadata.FromOutgoingContext(ctx)
							_, hasDeadline := ctx.Deadline()
							log = append(log, fmt.Sprintf("  attempt %d: metadata %v, %d options, deadline %v", j+1, md, len(s.opts[j]), hasDeadline))
						}
						// Delay is measured: compare only whether there was one.
						paused := report.Delay > 0
						report.Delay = 0
						log = append(log, fmt.Sprintf("  report %+v, paused %v", report, paused))
					}
					// A call's number (budget.Request.Call) is the
					// process's count of calls that asked for a retry: the
					// two runs' differ.
					for i := range b.records {
						b.records[i].Call = 0
					}
					log = append(log, fmt.Sprintf("records %+v", b.records))
					if bs != nil {
						for _, sn := range bs.Snapshots() {
							log = append(log, fmt.Sprintf("breaker %s %v: requests %d accepts %d failures %d opened %d rejected %d throttled %d p %v",
								sn.Key, sn.State, sn.Requests, sn.Accepts, sn.Failures, sn.Opened, sn.Rejected, sn.Throttled, sn.ThrottleP))
						}
					}
					for _, r := range b.requests {
						// The Guard's listener is the call's options: a copy
						// on the general path.
						guarded := r.Guard != nil
						r.Guard, r.Call = nil, 0
						log = append(log, fmt.Sprintf("request %+v guarded %v", r, guarded))
					}
					return log
				}
				fast, general := run(false), run(true)
				if !reflect.DeepEqual(fast, general) {
					for i := range max(len(fast), len(general)) {
						var f, g string
						if i < len(fast) {
							f = fast[i]
						}
						if i < len(general) {
							g = general[i]
						}
						if f != g {
							t.Errorf("line %d:\nfast:    %s\ngeneral: %s", i, f, g)
						}
					}
				}
			})
		}
	}
}

func parseFile(t *testing.T, file string) *policy.Config {
	t.Helper()
	cfg, err := policy.ParseConfig([]byte(file))
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

func eventLine(e interceptor.Event) string {
	return fmt.Sprintf("%v %s attempt %d code %v err %v reason %v pause %v retries %d target %q criticality %v deferred %v budget %q",
		e.Kind, e.Method, e.Attempt, e.Code, e.Err, e.Reason, e.Pause, e.Retries, e.Target, e.Criticality, e.Deferred, e.Budget.Kind)
}

func giveUp(err error) bool {
	var e *interceptor.Error
	return errors.As(err, &e) && e.GaveUp()
}

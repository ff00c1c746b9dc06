package interceptor_test

import (
	"context"
	"sync/atomic"
	"testing"

	"google.golang.org/grpc"

	"github.com/stagger-go/stagger/interceptor"
	"github.com/stagger-go/stagger/policy"
)

// configBox is a ConfigSource the test swaps, as a reload would.
type configBox struct{ cfg atomic.Pointer[policy.Config] }

func (b *configBox) Config() *policy.Config { return b.cfg.Load() }

func retryFileWith(t *testing.T, maxAttempts string) *policy.Config {
	t.Helper()
	cfg, err := policy.ParseConfig([]byte(`{"methodConfig": [{"name": [{"service": "stagger.testing.v1.TestService"}],
		"retryPolicy": {"maxAttempts": ` + maxAttempts + `, "initialBackoff": "0.000000001s", "maxBackoff": "0.000000001s",
		"backoffMultiplier": 1, "retryableStatusCodes": ["UNAVAILABLE"], "jitter": "FULL"}}]}`))
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// planStep is one call: under file cfg, with callOpts, it must make
// wantAttempts attempts.
type planStep struct {
	cfg          *policy.Config
	callOpts     []grpc.CallOption
	wantAttempts int
}

// TestPlanPerCallAndReload: each method's plan is resolved once per file
// under the interceptor's own options; a call's own Options must apply to
// that call only, and a reloaded file to every call after it, in any order.
func TestPlanPerCallAndReload(t *testing.T) {
	four, three := retryFileWith(t, "4"), retryFileWith(t, "3")
	box := new(configBox)
	box.cfg.Store(four)
	tests := []struct {
		name     string
		interOpt []interceptor.Option
		steps    []planStep
	}{
		{"file only", nil, []planStep{
			{four, nil, 4},
			{four, []grpc.CallOption{interceptor.WithMaxAttempts(2)}, 2},
			{four, nil, 4},
			{three, nil, 3},
			{three, []grpc.CallOption{interceptor.WithMaxAttempts(5)}, 5},
			{three, nil, 3},
			{four, nil, 4},
		}},
		{"interceptor WithMaxAttempts", []interceptor.Option{interceptor.WithMaxAttempts(2)}, []planStep{
			{four, nil, 2},
			{four, []grpc.CallOption{interceptor.WithMaxAttempts(3)}, 3},
			{four, nil, 2},
			{three, nil, 2},
			{three, []grpc.CallOption{interceptor.Disable()}, 1},
			{three, nil, 2},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			opts := append([]interceptor.Option{interceptor.WithConfigSource(box), interceptor.WithRandom(zero)}, tt.interOpt...)
			icpt := interceptor.UnaryClientInterceptor(opts...)
			for i, st := range tt.steps {
				box.cfg.Store(st.cfg)
				// Always failing: the number of attempts is the limit in force.
				s := &script{errs: []error{errUnavailable, errUnavailable, errUnavailable, errUnavailable, errUnavailable}}
				if err := icpt(context.Background(), method, nil, nil, nil, s.invoke, st.callOpts...); err == nil {
					t.Fatalf("step %d: no error", i)
				}
				if len(s.ctxs) != st.wantAttempts {
					t.Errorf("step %d: %d attempts, want %d", i, len(s.ctxs), st.wantAttempts)
				}
			}
		})
	}
}

package interceptor_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/stagger-go/stagger/interceptor"
	"github.com/stagger-go/stagger/policy"
	testingv1 "github.com/stagger-go/stagger/proto/stagger/testing/v1"
)

// TestPolicyThatCannotApplyIsLoud: a WithPolicy that cannot take effect (a
// call's, on a method the file's entry decides; one with fewer than 2
// attempts that sets a per-attempt timeout or codes), and a call's retry
// options on a method without a policy, are reported once per method, as
// a capped WithMaxAttempts is, never silently ignored; what applies, or
// says "no retry" with one attempt, is not.
func TestPolicyThatCannotApplyIsLoud(t *testing.T) {
	timeout := policy.Policy{PerAttemptRecvTimeout: 10 * time.Millisecond}
	withAttempts := policy.Policy{MaxAttempts: 3, RetryableCodes: policy.NewCodeSet(codes.Unavailable)}
	cases := []struct {
		name    string
		build   []interceptor.Option
		perCall []grpc.CallOption
		want    []policy.Reason // the notices, in order, over two calls of each of two methods
	}{
		{"call's policy under a file entry", []interceptor.Option{interceptor.WithConfig(mustParse(migrateFile))},
			[]grpc.CallOption{interceptor.WithPolicy(withAttempts)}, []policy.Reason{policy.ReasonOverridden, policy.ReasonOverridden}},
		{"call's timeout without attempts", nil,
			[]grpc.CallOption{interceptor.WithPolicy(timeout)}, []policy.Reason{policy.ReasonOneAttempt, policy.ReasonOneAttempt}},
		{"interceptor's timeout without attempts", []interceptor.Option{interceptor.WithPolicy(timeout)},
			nil, []policy.Reason{policy.ReasonOneAttempt, policy.ReasonOneAttempt}},
		{"attempts given by WithMaxAttempts", nil,
			[]grpc.CallOption{interceptor.WithPolicy(timeout), interceptor.WithMaxAttempts(2)}, []policy.Reason{policy.ReasonNotIdempotent}}, // Write's timer
		{"call's policy, no file", nil, []grpc.CallOption{interceptor.WithPolicy(withAttempts)}, nil},
		{"no retry said plainly", nil, []grpc.CallOption{interceptor.WithPolicy(policy.Policy{MaxAttempts: 1})}, nil},
		{"call's attempts without a policy", nil, []grpc.CallOption{interceptor.WithMaxAttempts(3)}, []policy.Reason{policy.ReasonNoPolicy, policy.ReasonNoPolicy}},
		{"call's codes without a policy", nil, []grpc.CallOption{interceptor.WithCodes(codes.Unavailable)}, []policy.Reason{policy.ReasonNoPolicy, policy.ReasonNoPolicy}},
		{"call's one attempt without a policy", nil, []grpc.CallOption{interceptor.WithMaxAttempts(1)}, nil},
		{"interceptor's codes without a policy", []interceptor.Option{interceptor.WithCodes(codes.Unavailable)}, nil, nil},
		{"interceptor's policy under a file entry", []interceptor.Option{interceptor.WithConfig(mustParse(migrateFile)), interceptor.WithPolicy(withAttempts)},
			nil, nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var mu sync.Mutex
			var got []policy.Reason
			hook := interceptor.WithHook(func(e interceptor.Event) {
				if e.Kind == interceptor.EventNotice {
					mu.Lock()
					got = append(got, e.Reason)
					mu.Unlock()
				}
			})
			_, client, closeAll := migrateClient(append(tc.build, hook)...)
			defer closeAll()
			for range 2 {
				if _, err := client.Get(context.Background(), &testingv1.GetRequest{}, tc.perCall...); err != nil {
					t.Fatal(err)
				}
				if _, err := client.Write(context.Background(), &testingv1.WriteRequest{}, tc.perCall...); status.Code(err) != codes.OK {
					t.Fatal(err)
				}
			}
			mu.Lock()
			defer mu.Unlock()
			if len(got) != len(tc.want) {
				t.Fatalf("notices %v, want %v", got, tc.want)
			}
			for i := range got {
				if got[i] != tc.want[i] {
					t.Fatalf("notices %v, want %v", got, tc.want)
				}
			}
		})
	}
}

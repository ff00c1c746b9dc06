package interceptor_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/stagger-go/stagger/interceptor"
	testingv1 "github.com/stagger-go/stagger/proto/stagger/testing/v1"
	"github.com/stagger-go/stagger/testserver"
)

// A file with more distinct breaker settings than a State keeps (64):
// once 70 methods have made theirs, Get's breaker (3 failures in a row)
// still guards every call, with per-call options (WithReport) as without:
// of 10 calls to a server down, 3 reach it (before: every call with an
// option got a fresh breaker, and all 10 did).
func TestBreakerPastStateCapKeepsStatePerCall(t *testing.T) {
	noLeakAfter(t)
	srv := testserver.New()
	defer srv.Close()
	var entries []string
	for i := range 70 {
		entries = append(entries, fmt.Sprintf(`{"name": [{"service": "x.S", "method": "M%d"}], "circuitBreaker": {"minimumThroughput": %d}}`, i, 100+i))
	}
	entries = append(entries, `{"name": [{"service": "stagger.testing.v1.TestService", "method": "Get"}], "circuitBreaker": {"consecutiveFailures": 3, "breakDuration": "60s", "maxBreakDuration": "60s"}}`)
	cfg := mustParse(`{"methodConfig": [` + strings.Join(entries, ",") + `]}`)
	for _, perCall := range []bool{false, true} {
		icpt := interceptor.UnaryClientInterceptor(interceptor.WithConfig(cfg))
		cc := srv.ClientConn(t, grpc.WithDisableRetry(), grpc.WithUnaryInterceptor(icpt))
		for i := range 70 {
			if err := cc.Invoke(context.Background(), fmt.Sprintf("/x.S/M%d", i), &testingv1.GetRequest{}, new(testingv1.GetResponse)); status.Code(err) != codes.Unimplemented {
				t.Fatalf("M%d: %v, want the server's UNIMPLEMENTED", i, err)
			}
		}
		key := fmt.Sprintf("down-%v", perCall)
		client := testingv1.NewTestServiceClient(cc)
		for range 10 {
			var opts []grpc.CallOption
			if perCall {
				opts = append(opts, interceptor.WithReport(new(interceptor.Report)))
			}
			if _, err := client.Get(context.Background(), &testingv1.GetRequest{Script: &testingv1.Script{Key: key, FailAttempts: 100}}, opts...); status.Code(err) != codes.Unavailable {
				t.Fatalf("per-call option %v: %v, want UNAVAILABLE", perCall, err)
			}
		}
		if got := len(srv.Attempts(key)); got != 3 {
			t.Errorf("per-call option %v: %d of 10 calls reached the server down, want 3 (the breaker opens after 3)", perCall, got)
		}
	}
}

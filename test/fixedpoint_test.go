//go:build go1.25

package test

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/stagger-go/stagger"
	"github.com/stagger-go/stagger/budget"
	"github.com/stagger-go/stagger/interceptor"
	testingv1 "github.com/stagger-go/stagger/proto/stagger/testing/v1"
	"github.com/stagger-go/stagger/testserver"
)

// fastRetryFile retries UNAVAILABLE up to 3 attempts, pauses from 20 ms.
const fastRetryFile = `{"methodConfig": [{
	"name": [{"service": "stagger.testing.v1.TestService"}],
	"retryPolicy": {"maxAttempts": 3, "initialBackoff": "0.02s", "maxBackoff": "0.2s",
		"backoffMultiplier": 2, "retryableStatusCodes": ["UNAVAILABLE"]}
}]}`

// failFirstAttempts fails every call's first attempt with UNAVAILABLE
// before its handler runs; retries (grpc-previous-rpc-attempts set) reach
// the handler.
func failFirstAttempts(ctx context.Context, req any, _ *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	if md, _ := metadata.FromIncomingContext(ctx); len(md.Get("grpc-previous-rpc-attempts")) == 0 {
		return nil, status.Error(codes.Unavailable, "first attempts fail")
	}
	return handler(ctx, req)
}

// A fresh process whose first call's retry got an answer that is not
// retried (UNKNOWN) spent the default budget's first paid retry without
// learning whether retries heal. The Gate then let no later call's retry
// go (only a call's last attempt probed, and the calls ended when their
// second attempt could not): every later call failed after one attempt,
// reason deferred. The server serves every retry: the later calls heal.
func TestFirstAttemptsFailRetriesHealAfterAnUnhealedCall(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := testserver.New(testserver.WithServerOptions(grpc.ChainUnaryInterceptor(failFirstAttempts)))
		defer srv.Close()
		fresh, err := budget.NewBackends(budget.DefaultSettings())
		if err != nil {
			t.Fatal(err)
		}
		cc, err := srv.Dial(stagger.DialOptions(parse(t, fastRetryFile), interceptor.WithDefaultBudgets(fresh))...)
		if err != nil {
			t.Fatal(err)
		}
		defer cc.Close()
		client := testingv1.NewTestServiceClient(cc)
		get := func(script *testingv1.Script) (interceptor.Report, error) {
			var rep interceptor.Report
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			defer cancel()
			_, err := client.Get(ctx, &testingv1.GetRequest{Script: script}, interceptor.WithReport(&rep))
			return rep, err
		}
		// The retry reaches the handler, which answers UNKNOWN.
		if _, err := get(&testingv1.Script{Key: "unhealed", FailAttempts: 1, Code: int32(codes.Unknown)}); status.Code(err) != codes.Unknown {
			t.Fatalf("the unhealed call: %v, want UNKNOWN", err)
		}
		healed := 0
		for i := range 20 {
			rep, err := get(&testingv1.Script{})
			if err == nil {
				healed++
			} else {
				t.Logf("call %d: %v after %d attempts, reason %v", i, err, rep.Attempts, rep.Reason)
			}
			time.Sleep(50 * time.Millisecond)
		}
		if healed < 19 {
			t.Errorf("%d of 20 calls after the unhealed one healed, want 19 at least", healed)
		}
	})
}

package staggerconnect_test

import (
	"context"
	"testing"
	"time"

	"connectrpc.com/connect"

	staggerconnect "github.com/stagger-go/stagger/connect"
	"github.com/stagger-go/stagger/interceptor"
	testingv1 "github.com/stagger-go/stagger/proto/stagger/testing/v1"
)

// hedgeFile hedges Get (no side effects): 2 attempts, the second after
// delay or at once after a non-fatal UNAVAILABLE.
func hedgeFile(delay string) string {
	return `{"methodConfig": [{
	  "name": [{"service": "stagger.testing.v1.TestService", "method": "Get"}],
	  "hedgingPolicy": {"maxAttempts": 2, "hedgingDelay": "` + delay + `", "nonFatalStatusCodes": ["UNAVAILABLE"]}}]}`
}

func TestHedging(t *testing.T) {
	forEachProtocol(t, func(t *testing.T, p protocol) {
		t.Run("the second attempt wins", func(t *testing.T) {
			ts := newTestServer(t, p.h2c, nil)
			var rep interceptor.Report
			client := ts.testClient(p, newClient(t, hedgeFile("10s")))
			ctx := staggerconnect.WithCallOptions(context.Background(), interceptor.WithReport(&rep))
			resp, err := client.Get(ctx, connect.NewRequest(&testingv1.GetRequest{Script: &testingv1.Script{Key: "k", FailAttempts: 1}}))
			if err != nil {
				t.Fatal(err)
			}
			if got := resp.Msg.GetReply().GetAttempt(); got != 2 || rep.Hedges != 1 {
				t.Errorf("answer of attempt %d after %d hedges, want 2 after 1", got, rep.Hedges)
			}
		})
		t.Run("two attempts at once", func(t *testing.T) {
			ts := newTestServer(t, p.h2c, nil)
			release := ts.svc.Hold("k")
			go func() {
				for ts.svc.Record("k").Attempts < 2 {
					time.Sleep(time.Millisecond)
				}
				release()
			}()
			var rep interceptor.Report
			client := ts.testClient(p, newClient(t, hedgeFile("0s")))
			ctx := staggerconnect.WithCallOptions(context.Background(), interceptor.WithReport(&rep))
			req := connect.NewRequest(&testingv1.GetRequest{Script: &testingv1.Script{Key: "k"}})
			req.Header().Set("x-app", "mine")
			resp, err := client.Get(ctx, req)
			if err != nil {
				t.Fatal(err)
			}
			if a := resp.Msg.GetReply().GetAttempt(); a != 1 && a != 2 {
				t.Errorf("answer of attempt %d", a)
			}
			rec := ts.svc.Record("k")
			if rec.Attempts != 2 || rep.Hedges != 1 {
				t.Errorf("server saw %d attempts, report %d hedges; want 2, 1", rec.Attempts, rep.Hedges)
			}
			for i, h := range rec.Headers {
				if h.Get("x-app") != "mine" {
					t.Errorf("attempt %d lost the caller's header", i+1)
				}
			}
			if got := req.Header().Get("grpc-previous-rpc-attempts"); got != "" {
				t.Errorf("the caller's request was written: grpc-previous-rpc-attempts %q", got)
			}
		})
	})
}

package staggerconnect_test

import (
	"context"
	"fmt"
	"log"
	"net/http"
	"net/http/httptest"

	"connectrpc.com/connect"

	staggerconnect "github.com/stagger-go/stagger/connect"
	"github.com/stagger-go/stagger/connect/internal/proto/stagger/testing/v1/testingv1connect"
	"github.com/stagger-go/stagger/connect/internal/testservice"
	"github.com/stagger-go/stagger/interceptor"
	"github.com/stagger-go/stagger/policy"
	testingv1 "github.com/stagger-go/stagger/proto/stagger/testing/v1"
	"github.com/stagger-go/stagger/server"
)

// A Connect client that retries, and a Connect server whose side
// de-duplicates by idempotency key: the first attempt of a Write (not
// idempotent) runs and loses its answer to a dropped connection; the retry,
// with the same key, gets the first run's answer, and the handler ran once.
func ExampleNewClient() {
	svc := testservice.New()
	store, err := server.NewMemoryStore(server.MemoryOptions{})
	if err != nil {
		log.Fatal(err)
	}
	side, err := staggerconnect.NewHandler(server.WithIdempotency(store, server.IdempotencyOptions{Header: "idempotency-key"}))
	if err != nil {
		log.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle(testingv1connect.NewTestServiceHandler(svc, connect.WithInterceptors(side)))
	srv := httptest.NewUnstartedServer(testservice.Middleware(mux))
	srv.Config.ConnContext = testservice.ConnContext
	srv.Start()
	defer srv.Close()

	cfg, err := policy.ParseConfig([]byte(`{"methodConfig": [{
	  "name": [{"service": "stagger.testing.v1.TestService"}],
	  "retryPolicy": {"maxAttempts": 3, "initialBackoff": "0.01s", "maxBackoff": "0.1s",
	    "backoffMultiplier": 2, "retryableStatusCodes": ["UNAVAILABLE"]}}]}`))
	if err != nil {
		log.Fatal(err)
	}
	retry, err := staggerconnect.NewClient(cfg, interceptor.WithIdempotencyKey("idempotency-key"))
	if err != nil {
		log.Fatal(err)
	}
	client := testingv1connect.NewTestServiceClient(srv.Client(), srv.URL, connect.WithInterceptors(retry))

	var r interceptor.Report // optional: what stagger did for this call
	ctx := staggerconnect.WithCallOptions(context.Background(), interceptor.WithReport(&r))
	resp, err := client.Write(ctx, connect.NewRequest(&testingv1.WriteRequest{
		Script: &testingv1.Script{Key: "order-1", ResetAttempts: 1}, // the first run's answer is lost
	}))
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("Write: %d attempts (reason %v), answer of run %d, replayed %s\n",
		r.Attempts, r.Reason, resp.Msg.GetReply().GetAttempt(), resp.Header().Get(server.ReplayedHeader))
	fmt.Printf("the handler ran %d time\n", svc.Record("order-1").Runs)
	// Output:
	// Write: 2 attempts (reason success), answer of run 1, replayed true
	// the handler ran 1 time
}

package test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/stagger-go/stagger"
	"github.com/stagger-go/stagger/interceptor"
	testingv1 "github.com/stagger-go/stagger/proto/stagger/testing/v1"
	"github.com/stagger-go/stagger/testserver"
)

// A first attempt whose connection is refused never left the client: the
// server said nothing, so its breaker does not count it as a failure (grpc
// already fails such calls fast). Until issue 88 it did: a breaker opened
// on the client's own refused connections, and after the server came back
// kept its calls out while its probes failed on a channel not yet
// reconnected (the lab's refused scenario: below a client that does not
// retry). Real time and loopback TCP: unsent is read from the connection's
// real state.
func TestRealTimeBreakerIgnoresRefusedConnections(t *testing.T) {
	srv := testserver.New(testserver.WithTCP())
	t.Cleanup(srv.Close)
	cfg := rtConfig(t, `{"circuitBreaker": {"consecutiveFailures": 3}, "methodConfig": [{"name": [{"service": "stagger.testing.v1.TestService"}]}]}`)
	var hooks hookLog
	cc, err := srv.DialTCP(append(stagger.DialOptions(cfg, interceptor.WithBudget(nil), interceptor.WithHook(hooks.hook)), fastReconnect())...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	client := testingv1.NewTestServiceClient(cc)
	get := func(key string) error {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_, err := client.Get(ctx, &testingv1.GetRequest{Script: &testingv1.Script{Key: key}})
		return err
	}
	if err := get("before"); err != nil {
		t.Fatal(err)
	}
	srv.StopServing()
	// (The channel goes idle; each call dials, and the dial is refused.)
	for i := range 10 {
		err := get(fmt.Sprint("gone-", i))
		if status.Code(err) != codes.Unavailable || reasonOf(err) == "breaker" {
			t.Fatalf("call %d to a server gone: %v (reason %q), want UNAVAILABLE from the connection, not the breaker", i, err, reasonOf(err))
		}
	}
	if err := srv.Resume(); err != nil {
		t.Fatal(err)
	}
	var last error
	for i := range 100 {
		if last = get(fmt.Sprint("back-", i)); last == nil {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	if last != nil {
		t.Fatalf("no call served after the server came back: %v (reason %q)", last, reasonOf(last))
	}
	for _, e := range hooks.all() {
		if e.Kind == interceptor.EventBreaker {
			t.Fatalf("the breaker changed on refused connections: %+v", e.Breaker)
		}
	}
}

//go:build go1.25

package test

import (
	"context"
	"errors"
	"io"
	"math"
	"net"
	"sync/atomic"
	"syscall"
	"testing"
	"testing/synctest"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/stagger-go/stagger"
	"github.com/stagger-go/stagger/budget"
	"github.com/stagger-go/stagger/interceptor"
	testingv1 "github.com/stagger-go/stagger/proto/stagger/testing/v1"
	"github.com/stagger-go/stagger/testserver"
)

// refusingClient dials srv over bufconn, its connections refused while
// refusing is set, with a Gate over log (a refusingBudget that allows
// all: every attempt told, every retry asked for) and grpc's reconnect
// backoff at 50 ms.
func refusingClient(t *testing.T, srv *testserver.Server, refusing *atomic.Bool, log *refusingBudget) testingv1.TestServiceClient {
	t.Helper()
	gate, err := budget.Deferring(log, budget.DeferSettings{Mode: budget.DeferOn})
	if err != nil {
		t.Fatal(err)
	}
	dial := grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) {
		if refusing.Load() {
			return nil, &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}
		}
		return srv.DialContext(ctx)
	})
	fast := grpc.WithConnectParams(grpc.ConnectParams{Backoff: backoff.Config{BaseDelay: 50 * time.Millisecond, Multiplier: 1, MaxDelay: 50 * time.Millisecond}, MinConnectTimeout: time.Second})
	opts := append(stagger.DialOptions(parse(t, deferFile), interceptor.WithBudget(gate)), dial, fast)
	return testingv1.NewTestServiceClient(srv.ClientConn(t, opts...))
}

// While the connection is refused, a unary call's and a server stream's
// attempts never leave the client: each retry waits for the connection
// (asking the budget nothing, the attempts told as Other) and goes when it
// is back, so the server sees each call once. A call without a deadline
// whose connection never comes back ends after 10 s in all (reason
// deferred), its status the attempt's UNAVAILABLE.
func TestUnsentRetryWaitsForConnection(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := testserver.New()
		defer srv.Close()
		var refusing atomic.Bool
		refusing.Store(true)
		log := &refusingBudget{allow: math.MaxInt}
		client := refusingClient(t, srv, &refusing, log)
		const back = 2 * time.Second
		go func() {
			time.Sleep(back)
			refusing.Store(false)
		}()
		start := time.Now()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		done := make(chan error, 1)
		go func() {
			_, err := client.Get(ctx, &testingv1.GetRequest{Script: &testingv1.Script{Key: "unary"}})
			done <- err
		}()
		stream, err := client.ListItems(ctx, &testingv1.ListItemsRequest{Script: &testingv1.Script{Key: "stream", ResponseCount: 2}})
		if err != nil {
			t.Fatalf("the stream: %v (reason %q)", err, reasonOf(err))
		}
		n := 0
		for ; ; n++ {
			if _, err = stream.Recv(); err != nil {
				break
			}
		}
		if !errors.Is(err, io.EOF) || n != 2 {
			t.Fatalf("the stream ended with %v after %d messages (reason %q), want 2 then EOF", err, n, reasonOf(err))
		}
		if err := <-done; err != nil {
			t.Fatalf("the unary call: %v (reason %q)", err, reasonOf(err))
		}
		if took := time.Since(start); took < back || took > back+100*time.Millisecond {
			t.Errorf("the calls took %v, want within 100 ms after the connection came back at %v", took, back)
		}
		for _, key := range []string{"unary", "stream"} {
			if got := len(srv.Attempts(key)); got != 1 {
				t.Errorf("%s: the server saw %d attempts, want 1", key, got)
			}
		}
		atts, reqs := log.take()
		if len(reqs) != 0 {
			t.Errorf("the budget was asked for %d retries, want none", len(reqs))
		}
		others, ok := 0, 0
		for _, a := range atts {
			switch {
			case a.Outcome == budget.Other:
				others++
			case a.Outcome == budget.Success && a.Number == 1:
				ok++
			default:
				t.Errorf("attempt told as %v number %d, want other, or success number 1", a.Outcome, a.Number)
			}
		}
		if others < 2 || ok != 2 {
			t.Errorf("%d attempts told as other and %d as first successes, want at least 2 and 2", others, ok)
		}

		// Refused for good: a call without a deadline ends after 10 s.
		refusing.Store(true)
		srv.Close()
		start = time.Now()
		_, err = client.Get(context.Background(), &testingv1.GetRequest{Script: &testingv1.Script{Key: "gone"}})
		took := time.Since(start)
		if status.Code(err) != codes.Unavailable || reasonOf(err) != "deferred" {
			t.Fatalf("a call whose connection never came back: %v (reason %q), want UNAVAILABLE, deferred", err, reasonOf(err))
		}
		if took < 10*time.Second || took > 11*time.Second {
			t.Errorf("it ended after %v, want about 10 s (connready.MaxWait)", took)
		}
		if _, reqs := log.take(); len(reqs) != 0 {
			t.Errorf("the budget was asked for %d retries, want none", len(reqs))
		}
	})
}

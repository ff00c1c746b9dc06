//go:build go1.25

package test

import (
	"context"
	"io"
	"strconv"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/stagger-go/stagger/budget"
	"github.com/stagger-go/stagger/interceptor"
	testingv1 "github.com/stagger-go/stagger/proto/stagger/testing/v1"
	"github.com/stagger-go/stagger/testserver"
)

// orderingBudget records what it hears; as it hears the first attempt's
// failure (on the hedged stream's driver, before it cancels the others) it
// lets the second attempt's server answer and waits until that answer
// reached the client (synctest.Wait), so that the race has failed and its
// loser has ended OK: real events, in an order the test sets.
type orderingBudget struct {
	mu      sync.Mutex
	heard   map[int]budget.Outcome
	release chan struct{}
}

func (b *orderingBudget) Allow(budget.Request) bool { return true }
func (b *orderingBudget) State() budget.State       { return budget.State{Kind: "ordering"} }
func (b *orderingBudget) Record(a budget.Attempt) {
	if a.Number == 1 {
		close(b.release)
		synctest.Wait()
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.heard[a.Number] = a.Outcome
}

// TestHedgedStreamFailedRaceLoserOK: a hedged stream's race fails (its
// first attempt's code is fatal) while its hedge has ended OK: the hedge is
// told to the budget as a success, as the unary drain tells such a loser
// (a success for its backend's health, whoever won), where the failed race
// told every loser as Other.
func TestHedgedStreamFailedRaceLoserOK(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := &orderingBudget{heard: map[int]budget.Outcome{}, release: make(chan struct{})}
		script := func(_ any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, _ grpc.StreamHandler) error {
			md, _ := metadata.FromIncomingContext(ss.Context())
			if v := md.Get("grpc-previous-rpc-attempts"); len(v) == 1 {
				if n, _ := strconv.Atoi(v[0]); n == 1 {
					<-b.release
					return nil // OK without headers or messages
				}
			}
			time.Sleep(50 * time.Millisecond)
			return status.Error(codes.Internal, "fatal")
		}
		srv := testserver.New(testserver.WithServerOptions(grpc.ChainStreamInterceptor(script)))
		t.Cleanup(srv.Close)
		c := staggerClient(t, srv, `{"methodConfig": [{
			"name": [{"service": "stagger.testing.v1.TestService"}], "idempotent": true,
			"hedgingPolicy": {"maxAttempts": 2, "hedgingDelay": "10ms", "nonFatalStatusCodes": ["UNAVAILABLE"]}
		}]}`, []interceptor.Option{interceptor.WithBudget(b)})
		st, err := c.ListItems(context.Background(), &testingv1.ListItemsRequest{Script: &testingv1.Script{Key: "k"}})
		for err == nil {
			_, err = st.Recv()
		}
		if err == io.EOF || status.Code(err) != codes.Internal {
			t.Fatalf("stream ended with %v, want the first attempt's INTERNAL", err)
		}
		synctest.Wait()
		b.mu.Lock()
		defer b.mu.Unlock()
		if b.heard[1] != budget.Other || b.heard[2] != budget.Success {
			t.Errorf("budget heard %v, want attempt 1 Other (fatal), attempt 2 Success (it answered OK)", b.heard)
		}
	})
}

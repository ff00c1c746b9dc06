package test

import (
	"context"
	"testing"
	"time"

	"github.com/stagger-go/stagger"
	"github.com/stagger-go/stagger/budget"
	"github.com/stagger-go/stagger/interceptor"
	testingv1 "github.com/stagger-go/stagger/proto/stagger/testing/v1"
	"github.com/stagger-go/stagger/testserver"
)

// The channel's own news, on real time over loopback TCP: a retry whose
// attempt failed because the connection was refused (the request never
// left the client) tells the budget so (Request.Unsent, which the Gate's
// futility rule weighs); one whose attempt the server answered UNAVAILABLE
// does not. Repeated: the connectivity state is read after the failure,
// racing grpc's publishing it.
func TestRealTimeUnsentRetries(t *testing.T) {
	srv := testserver.New(testserver.WithTCP())
	t.Cleanup(srv.Close)
	b := &requestLog{} // criticality_test.go
	seen := 0
	// take returns the requests asked since it was last called.
	take := func() []budget.Request {
		all := b.all()
		out := all[seen:]
		seen = len(all)
		return out
	}
	cc, err := srv.DialTCP(stagger.DialOptions(rtConfig(t, rtNoTimerFile), interceptor.WithBudget(b))...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	client := testingv1.NewTestServiceClient(cc)
	get := func() error {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_, err := client.Get(ctx, &testingv1.GetRequest{Script: &testingv1.Script{}})
		return err
	}
	for round := range 5 {
		// The server answers UNAVAILABLE: its retries were sent.
		srv.SetOutage(true)
		if err := get(); err == nil {
			t.Fatalf("round %d: a call in an outage succeeded", round)
		}
		reqs := take()
		if len(reqs) != 2 {
			t.Fatalf("round %d, server answering UNAVAILABLE: %d retries asked, want 2", round, len(reqs))
		}
		for _, r := range reqs {
			if r.Unsent {
				t.Fatalf("round %d, server answering UNAVAILABLE: retry %d said unsent", round, r.Number)
			}
		}
		// The server is gone: connections are refused.
		srv.StopServing()
		srv.SetOutage(false)
		if err := get(); err == nil {
			t.Fatalf("round %d: a call to a server gone succeeded", round)
		}
		reqs = take()
		unsent := 0
		for _, r := range reqs {
			if r.Unsent {
				unsent++
			}
		}
		// The first attempt may have raced the closing connection; the
		// last retry asked followed an attempt refused at once.
		if len(reqs) == 0 || !reqs[len(reqs)-1].Unsent {
			t.Fatalf("round %d, connections refused: %d retries asked, %d unsent; want the last unsent", round, len(reqs), unsent)
		}
		if err := srv.Resume(); err != nil {
			t.Fatal(err)
		}
		// Back: a call succeeds once the channel reconnects (its own
		// backoff, about a second), and asks nothing.
		deadline := time.Now().Add(10 * time.Second)
		for get() != nil {
			if time.Now().After(deadline) {
				t.Fatalf("round %d: no call succeeded 10 s after the server was back", round)
			}
			time.Sleep(50 * time.Millisecond)
		}
		take()
	}
}

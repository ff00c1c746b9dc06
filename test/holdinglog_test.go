//go:build go1.25

package test

import (
	"context"
	"log/slog"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stagger-go/stagger"
	"github.com/stagger-go/stagger/budget"
	"github.com/stagger-go/stagger/interceptor"
	testingv1 "github.com/stagger-go/stagger/proto/stagger/testing/v1"
	"github.com/stagger-go/stagger/testserver"
)

// An outage that holds calls is said at info level when the backend begins
// to hold them, while they are held, not only by the warn summary as they
// end: one line per outage (the deferrals after the first within 10 s add
// none), and one again for an outage a minute later. Before, the first
// line of a held outage came as its calls ended, up to 10 s later.
func TestHoldingIsLoggedWhenItBegins(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const msg = "stagger: a backend begins to hold calls: their retries wait for the budget (grpc.target)"
		rec := &slogLines{}
		srv := testserver.New()
		defer srv.Close()
		bs, err := budget.NewBackends(budget.DefaultSettings())
		if err != nil {
			t.Fatal(err)
		}
		cc, err := srv.Dial(stagger.DialOptions(parse(t, deferFile),
			interceptor.WithDefaultBudgets(bs), interceptor.WithLogger(slogLogger(slog.New(rec))))...)
		if err != nil {
			t.Fatal(err)
		}
		defer cc.Close()
		client := testingv1.NewTestServiceClient(cc)
		holding := func() []slogLine {
			var out []slogLine
			for _, l := range rec.all() {
				if l.msg == msg {
					out = append(out, l)
				}
			}
			return out
		}
		outage := func(round int) {
			t.Helper()
			// A success, then a calm second: the failures that follow
			// make an outage.
			if _, err := client.Get(context.Background(), &testingv1.GetRequest{}); err != nil {
				t.Fatal(err)
			}
			time.Sleep(time.Second)
			srv.SetOutage(true)
			start := time.Now()
			var wg sync.WaitGroup
			for range 20 {
				wg.Go(func() { _, _ = client.Get(context.Background(), &testingv1.GetRequest{}) })
				time.Sleep(100 * time.Millisecond)
			}
			synctest.Wait()
			if got := holding(); len(got) != round {
				t.Errorf("outage %d, 2 s in, calls held: %d info lines that the backend holds calls, want %d", round, len(got), round)
			} else if l := got[round-1]; l.level != slog.LevelInfo || l.attrs["grpc.target"].String() != cc.Target() || l.attrs["grpc.method"].String() != "/stagger.testing.v1.TestService/Get" || l.at.Sub(start) > time.Second {
				t.Errorf("outage %d: %v %s %v at %v into it; want info, the target %s and the method, within a second", round, l.level, l.msg, l.attrs, l.at.Sub(start), cc.Target())
			}
			if n := bs.States()[0].Waiting; n == 0 {
				t.Errorf("outage %d, 2 s in: no call held", round)
			}
			srv.SetOutage(false)
			wg.Wait()
			time.Sleep(time.Minute)
		}
		outage(1)
		outage(2)
	})
}

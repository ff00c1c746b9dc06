//go:build go1.25

// synctest needs the Go 1.23 timer channels; go.mod's go 1.22 directive would
// otherwise select the old ones for this test binary.
//go:debug asynctimerchan=0

package testserver_test

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	testingv1 "github.com/stagger-go/stagger/proto/stagger/testing/v1"
	"github.com/stagger-go/stagger/testserver"
)

// bubbleClient starts a server inside the calling test's synctest bubble and
// dials it without gRPC's own retries. Cleanup runs inside the bubble, closing
// the connection before the server.
func bubbleClient(t *testing.T, opts ...testserver.Option) (*testserver.Server, testingv1.TestServiceClient) {
	t.Helper()
	s := testserver.New(opts...)
	t.Cleanup(s.Close)
	cc, err := s.Dial(grpc.WithDisableRetry())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cc.Close() })
	return s, testingv1.NewTestServiceClient(cc)
}

// In a synctest bubble the default clock is the bubble's virtual clock, so a
// scripted delay takes exactly its virtual time and costs no real time.
func TestDelayInSynctestBubble(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s, client := bubbleClient(t)
		ctx := context.Background()

		start := time.Now()
		sc := &testingv1.Script{Key: "delay", Delay: durationpb.New(2 * time.Second), FailAttempts: 1}
		if _, err := client.Get(ctx, &testingv1.GetRequest{Script: sc}); status.Code(err) != codes.Unavailable {
			t.Fatalf("attempt 1: got %v, want UNAVAILABLE", err)
		}
		if got := time.Since(start); got != 2*time.Second {
			t.Errorf("attempt 1 took %v, want exactly 2s", got)
		}
		if _, err := client.Get(ctx, &testingv1.GetRequest{Script: sc}); err != nil {
			t.Fatalf("attempt 2: %v", err)
		}
		recs := s.Attempts("delay")
		if len(recs) != 2 || recs[0].Arrived != start || recs[1].Arrived != start.Add(2*time.Second) {
			t.Errorf("records %+v, want arrivals at 0s and 2s", recs)
		}

		// The client gives up after 1s: the server sees the cancellation at
		// that very instant.
		cctx, cancel := context.WithTimeout(ctx, time.Second)
		defer cancel()
		hedgeStart := time.Now()
		_, err := client.Put(cctx, &testingv1.PutRequest{Script: &testingv1.Script{Key: "cancel", Delay: durationpb.New(time.Minute)}})
		if status.Code(err) != codes.DeadlineExceeded {
			t.Fatalf("got %v, want DEADLINE_EXCEEDED", err)
		}
		synctest.Wait()
		recs = s.Attempts("cancel")
		if len(recs) != 1 || !recs[0].Cancelled || recs[0].Ended.Sub(hedgeStart) != time.Second {
			t.Errorf("records %+v, want one cancelled after exactly 1s", recs)
		}
	})
}

// The per-second capacity and the outage window on the bubble's clock.
func TestModesInSynctestBubble(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		start := time.Now()
		s, client := bubbleClient(t,
			testserver.WithCapacity(testserver.Capacity{PerSecond: 2, Pushback: "1000"}),
			testserver.WithOutageWindow(start.Add(3*time.Second), start.Add(4*time.Second)),
		)
		var got []codes.Code
		for second := 0; second < 5; second++ {
			for i := 0; i < 3; i++ {
				_, err := client.Get(context.Background(), &testingv1.GetRequest{Script: &testingv1.Script{}})
				got = append(got, status.Code(err))
			}
			time.Sleep(time.Until(start.Add(time.Duration(second+1) * time.Second)))
		}
		ok, re, un := codes.OK, codes.ResourceExhausted, codes.Unavailable
		want := []codes.Code{ok, ok, re, ok, ok, re, ok, ok, re, un, un, un, ok, ok, re}
		if len(got) != len(want) {
			t.Fatalf("got %v, want %v", got, want)
		}
		for i := range want {
			if got[i] != want[i] {
				t.Fatalf("got %v, want %v", got, want)
			}
		}
		if a := s.Arrivals(); len(a) != 41 || a[0] != 3 || a[10] != 3 || a[40] != 3 {
			t.Errorf("arrivals per 100ms %v, want 3 at 0, 10, ..., 40", a)
		}
	})
}

// headers_first on a successful attempt: the headers arrive at once, the
// messages only after the delay (what a per-attempt receive timer watches).
func TestHeadersBeforeDelayInSynctestBubble(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		_, client := bubbleClient(t)
		start := time.Now()
		stream, err := client.ListItems(context.Background(), &testingv1.ListItemsRequest{Script: &testingv1.Script{
			HeadersFirst: true, Delay: durationpb.New(5 * time.Second), ResponseCount: 1,
		}})
		if err != nil {
			t.Fatal(err)
		}
		md, err := stream.Header()
		if err != nil || len(md.Get(testserver.HeadersFirstHeader)) == 0 {
			t.Fatalf("Header() = %v, %v; want the headers-first marker", md, err)
		}
		if got := time.Since(start); got != 0 {
			t.Errorf("headers took %v, want 0", got)
		}
		if _, err := stream.Recv(); err != nil {
			t.Fatal(err)
		}
		if got := time.Since(start); got != 5*time.Second {
			t.Errorf("message took %v, want 5s", got)
		}
	})
}

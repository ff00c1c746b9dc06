package testserver_test

import (
	"context"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	testingv1 "github.com/stagger-go/stagger/proto/stagger/testing/v1"
	"github.com/stagger-go/stagger/testserver"
)

// getAsync starts a Get and returns the channel its error arrives on.
func getAsync(ctx context.Context, client testingv1.TestServiceClient, sc *testingv1.Script) <-chan error {
	done := make(chan error, 1)
	go func() {
		_, err := client.Get(ctx, &testingv1.GetRequest{Script: sc})
		done <- err
	}()
	return done
}

func TestDelayOnInjectedClock(t *testing.T) {
	clock := newFakeClock()
	forEachTransport(t, []testserver.Option{testserver.WithClock(clock)}, func(t *testing.T, s *testserver.Server, cc *grpc.ClientConn) {
		client := testingv1.NewTestServiceClient(cc)
		key := t.Name()
		sc := &testingv1.Script{
			Key:           key,
			Delay:         durationpb.New(5 * time.Second),
			AttemptDelays: []*durationpb.Duration{durationpb.New(3 * time.Second)},
		}
		start := clock.Now()
		done := getAsync(callCtx(t), client, sc)
		clock.awaitSleepers(t, 1)
		clock.Advance(3*time.Second - time.Nanosecond)
		if recs := s.Attempts(key); len(recs) != 1 || recs[0].Done {
			t.Fatalf("attempt ended before its delay: %+v", recs)
		}
		clock.Advance(time.Nanosecond)
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		// Attempt 2 has no attempt_delays entry, so it waits delay.
		done = getAsync(callCtx(t), client, sc)
		clock.awaitSleepers(t, 1)
		clock.Advance(5 * time.Second)
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		recs := s.Attempts(key)
		if len(recs) != 2 {
			t.Fatalf("got %d records, want 2", len(recs))
		}
		want := []struct{ arrived, ended time.Duration }{{0, 3 * time.Second}, {3 * time.Second, 8 * time.Second}}
		for i, w := range want {
			if got := recs[i].Arrived.Sub(start); got != w.arrived {
				t.Errorf("attempt %d arrived at %v, want %v", i+1, got, w.arrived)
			}
			if got := recs[i].Ended.Sub(start); got != w.ended {
				t.Errorf("attempt %d ended at %v, want %v", i+1, got, w.ended)
			}
		}
	})
}

func TestDelayCancelledByClient(t *testing.T) {
	clock := newFakeClock()
	forEachTransport(t, []testserver.Option{testserver.WithClock(clock)}, func(t *testing.T, s *testserver.Server, cc *grpc.ClientConn) {
		client := testingv1.NewTestServiceClient(cc)
		key := t.Name()
		ctx, cancel := context.WithCancel(callCtx(t))
		done := getAsync(ctx, client, &testingv1.Script{Key: key, Delay: durationpb.New(time.Hour)})
		clock.awaitSleepers(t, 1)
		cancel()
		if err := <-done; status.Code(err) != codes.Canceled {
			t.Fatalf("client got %v, want CANCELED", err)
		}
		recs, err := s.AwaitAttempts(callCtx(t), key, 1)
		if err != nil {
			t.Fatalf("server did not see the cancellation: %v (records %+v)", err, recs)
		}
		if r := recs[0]; !r.Cancelled || r.Code != codes.Canceled || r.Rejected {
			t.Errorf("record %+v, want cancelled", r)
		}
		if got := s.Executions(testingv1.TestService_Get_FullMethodName); got != 0 {
			t.Errorf("Executions(Get) = %d, want 0", got)
		}
		if st := s.Stats(); st.Cancelled != 1 || st.InFlight != 0 {
			t.Errorf("stats %+v, want 1 cancelled, none in flight", st)
		}
	})
}

func TestCloseEndsInFlightAttempts(t *testing.T) {
	for _, tr := range transports {
		t.Run(tr.name, func(t *testing.T) {
			clock := newFakeClock()
			s := testserver.New(append([]testserver.Option{testserver.WithClock(clock)}, tr.opts...)...)
			cc, err := tr.dial(s, grpc.WithDisableRetry())
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = cc.Close() }()
			done := getAsync(callCtx(t), testingv1.NewTestServiceClient(cc), &testingv1.Script{Key: "k", Delay: durationpb.New(time.Hour)})
			clock.awaitSleepers(t, 1)
			s.Close()
			s.Close() // a second Close is harmless
			if err := <-done; status.Code(err) != codes.Unavailable {
				t.Errorf("in-flight call got %v, want UNAVAILABLE", err)
			}
			if recs := s.Attempts("k"); len(recs) != 1 || !recs[0].Cancelled {
				t.Errorf("records %+v, want one cancelled attempt", recs)
			}
		})
	}
}

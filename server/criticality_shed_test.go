//go:build go1.25

package server_test

import (
	"context"
	"strconv"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/stagger-go/stagger/criticality"
	"github.com/stagger-go/stagger/interceptor"
	testingv1 "github.com/stagger-go/stagger/proto/stagger/testing/v1"
	"github.com/stagger-go/stagger/server"
)

// withLevel is the call option that sends l (none for Unset): a stagger
// client's per-call WithCriticality.
func withLevel(l criticality.Level) []grpc.CallOption {
	if l == criticality.Unset {
		return nil
	}
	return []grpc.CallOption{interceptor.WithCriticality(l)}
}

// shedServer serves newSlow(d) with a concurrency limit and opts, to a
// stagger client that does not retry, so that every refusal reaches the
// test.
func shedServer(t *testing.T, d time.Duration, opts ...server.Option) (*server.Interceptors, testingv1.TestServiceClient) {
	t.Helper()
	side := newSide(t, opts...)
	g := grpc.NewServer(side.ServerOptions()...)
	testingv1.RegisterTestServiceServer(g, newSlow(d).handlers())
	lis := newListener(t)
	go func() { _ = g.Serve(lis) }()
	t.Cleanup(g.Stop)
	return side, testingv1.NewTestServiceClient(lis.dial(t, staggerFile(t, `{}`)...))
}

// TestShedByCriticality: with 7 to 10 calls running under a limit of 10, a
// call of each criticality (none first) is admitted or shed by its share
// (the defaults: 8, 9, 10, 10 calls; with a reserve for CRITICAL_PLUS, 8,
// 9, 9, 10); ShedLevel counts the refusals by criticality, Shed all of
// them, and the refusal names the limit.
func TestShedByCriticality(t *testing.T) {
	levels := []criticality.Level{criticality.Unset, criticality.Sheddable, criticality.SheddablePlus, criticality.Critical, criticality.CriticalPlus}
	const limit = 10
	for _, tc := range []struct {
		name string
		opts []server.Option
		// admitted[n-7][i]: with n calls running, a call of levels[i] runs.
		admitted [4][5]bool
	}{
		{"default shares", nil, [4][5]bool{
			{true, true, true, true, true},
			{true, false, true, true, true},
			{true, false, false, true, true},
			{false, false, false, false, false},
		}},
		{"reserve for CRITICAL_PLUS", []server.Option{server.WithCriticalityShares(server.CriticalityShares{Critical: 0.9})}, [4][5]bool{
			{true, true, true, true, true},
			{true, false, true, true, true},
			{false, false, false, false, true},
			{false, false, false, false, false},
		}},
	} {
		for row := range tc.admitted {
			running := row + 7
			for i, l := range levels {
				t.Run(tc.name+"/"+strconv.Itoa(running)+" running/"+l.String(), func(t *testing.T) {
					synctest.Test(t, func(t *testing.T) {
						side, cl := shedServer(t, time.Second, append([]server.Option{server.WithConcurrencyLimit(limit)}, tc.opts...)...)
						var wg sync.WaitGroup
						for j := 0; j < running; j++ {
							wg.Add(1)
							go func() {
								defer wg.Done()
								if err := getKey(context.Background(), cl, "running", withLevel(criticality.CriticalPlus)...); err != nil {
									t.Error(err)
								}
							}()
						}
						synctest.Wait()
						err := getKey(context.Background(), cl, "probe", withLevel(l)...)
						wg.Wait()
						if got := err == nil; got != tc.admitted[row][i] {
							t.Fatalf("admitted %v (%v), want %v", got, err, tc.admitted[row][i])
						}
						var want [4]uint64
						if err != nil {
							want[l.Index()] = 1
							if st := status.Convert(err); st.Code() != codes.ResourceExhausted || !strings.Contains(st.Message(), "limit 10") {
								t.Errorf("refusal %v", st)
							}
						}
						for k, kl := range criticality.Levels() {
							if got := side.ShedLevel(kl); got != want[k] {
								t.Errorf("ShedLevel(%v) = %d, want %d", kl, got, want[k])
							}
						}
						if side.Shed() != want[0]+want[1]+want[2]+want[3] {
							t.Errorf("Shed() = %d", side.Shed())
						}
					})
				})
			}
		}
	}
}

// TestShedCriticalAtSaturation: 12 SHEDDABLE callers loop on a server
// with a limit of 10, which they would fill, while a CRITICAL call arrives
// every 11ms (2 at most at once), for a virtual second: every CRITICAL call
// is admitted (the SHEDDABLE fill at most 8 slots of 10), many SHEDDABLE
// ones are shed, and a shed SHEDDABLE call's pushback is twice a CRITICAL
// one's would be (service time 20ms × [0.5, 1.5) × 2).
func TestShedCriticalAtSaturation(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		side, cl := shedServer(t, 20*time.Millisecond, server.WithConcurrencyLimit(10))
		for i := 0; i < 3; i++ { // the service time: 20ms
			if err := getKey(context.Background(), cl, "prime"); err != nil {
				t.Fatal(err)
			}
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		var wg sync.WaitGroup
		for i := 0; i < 12; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for ctx.Err() == nil {
					var tl metadata.MD
					err := getKey(ctx, cl, "", interceptor.WithCriticality(criticality.Sheddable), grpc.Trailer(&tl))
					switch status.Code(err) {
					case codes.OK, codes.DeadlineExceeded:
					case codes.ResourceExhausted:
						ms, perr := strconv.Atoi(strings.Join(tl.Get(server.PushbackKey), ","))
						if perr != nil || ms < 20 || ms > 60 {
							t.Errorf("SHEDDABLE pushback %v ms, want 20-60", tl.Get(server.PushbackKey))
						}
						time.Sleep(time.Duration(ms) * time.Millisecond)
					default:
						t.Error(err)
					}
				}
			}()
		}
		var critical int
		for tick := time.NewTicker(11 * time.Millisecond); ctx.Err() == nil; <-tick.C {
			critical++
			wg.Add(1)
			go func() {
				defer wg.Done()
				if err := getKey(context.Background(), cl, "", interceptor.WithCriticality(criticality.Critical)); err != nil {
					t.Errorf("CRITICAL call: %v", err)
				}
			}()
		}
		wg.Wait()
		// A SHEDDABLE call its caller left at the deadline has a handler
		// still running (it sleeps its service time, whatever the context):
		// g.Stop does not wait for handlers, and the bubble must end with
		// none left (synctest panics then). Virtual time: no call starts
		// any more, so three service times see every handler out.
		time.Sleep(3 * 20 * time.Millisecond)
		if n := side.ShedLevel(criticality.Critical); n != 0 || critical < 80 {
			t.Errorf("%d CRITICAL calls of %d shed, want 0", n, critical)
		}
		if n := side.ShedLevel(criticality.Sheddable); n < 50 {
			t.Errorf("%d SHEDDABLE calls shed, want many", n)
		}
	})
}

// TestCriticalitySharesValidated: bad shares name the option and the
// field; shares without a limit are refused.
func TestCriticalitySharesValidated(t *testing.T) {
	for _, tc := range []struct {
		name string
		opts []server.Option
		want string
	}{
		{"above 1", []server.Option{server.WithConcurrencyLimit(10), server.WithCriticalityShares(server.CriticalityShares{Sheddable: 1.5})},
			"server: WithCriticalityShares: Sheddable must be in (0, 1] (0: the default, 0.8), got 1.5"},
		{"negative", []server.Option{server.WithConcurrencyLimit(10), server.WithCriticalityShares(server.CriticalityShares{Critical: -0.1})},
			"server: WithCriticalityShares: Critical must be in (0, 1] (0: the default, 1), got -0.1"},
		{"out of order", []server.Option{server.WithConcurrencyLimit(10), server.WithCriticalityShares(server.CriticalityShares{Sheddable: 0.95})},
			"server: WithCriticalityShares: SheddablePlus (0.9) must be at least Sheddable (0.95)"},
		{"no limit", []server.Option{server.WithCriticalityShares(server.CriticalityShares{})},
			"server: WithCriticalityShares: needs WithConcurrencyLimit"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := server.New(tc.opts...)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("New: %v, want an error containing %q", err, tc.want)
			}
		})
	}
	if _, err := server.New(server.WithConcurrencyLimit(1), server.WithCriticalityShares(server.CriticalityShares{Sheddable: 0.1, SheddablePlus: 0.1, Critical: 1})); err != nil {
		t.Errorf("valid shares: %v", err)
	}
}

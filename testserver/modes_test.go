package testserver_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand"
	"net"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	testingv1 "github.com/stagger-go/stagger/proto/stagger/testing/v1"
	"github.com/stagger-go/stagger/testserver"
)

// get makes one plain Get and returns its code and pushback trailer.
func get(t *testing.T, client testingv1.TestServiceClient, key string) (codes.Code, []string) {
	t.Helper()
	var trailer metadata.MD
	_, err := client.Get(callCtx(t), &testingv1.GetRequest{Script: &testingv1.Script{Key: key}}, grpc.Trailer(&trailer))
	return status.Code(err), trailer.Get(testserver.PushbackTrailer)
}

func TestOutageToggle(t *testing.T) {
	forEachTransport(t, []testserver.Option{testserver.WithOutage(true)}, func(t *testing.T, s *testserver.Server, cc *grpc.ClientConn) {
		client := testingv1.NewTestServiceClient(cc)
		steps := []struct {
			set  func()
			want codes.Code
		}{
			{func() {}, codes.Unavailable},
			{func() { s.SetOutage(false) }, codes.OK},
			{func() { s.SetOutage(true) }, codes.Unavailable},
			{func() { s.SetOutage(false) }, codes.OK},
		}
		for i, st := range steps {
			st.set()
			if got, _ := get(t, client, t.Name()); got != st.want {
				t.Errorf("step %d: got %v, want %v", i, got, st.want)
			}
		}
		recs := s.Attempts(t.Name())
		if len(recs) != 4 || !recs[0].Rejected || recs[1].Rejected || !recs[2].Rejected || recs[3].Rejected {
			t.Errorf("records %+v, want attempts 1 and 3 rejected", recs)
		}
		if st := s.Stats(); st.Received != 4 || st.Rejected != 2 || st.Served != 2 {
			t.Errorf("stats %+v, want 4 received, 2 rejected, 2 served", st)
		}
		if got := s.Executions(testingv1.TestService_Get_FullMethodName); got != 2 {
			t.Errorf("Executions(Get) = %d, want 2", got)
		}
	})
}

func TestOutageWindow(t *testing.T) {
	clock := newFakeClock()
	t0 := clock.Now()
	opts := []testserver.Option{testserver.WithClock(clock), testserver.WithOutageWindow(t0.Add(time.Second), t0.Add(2*time.Second))}
	forEachTransport(t, opts, func(t *testing.T, s *testserver.Server, cc *grpc.ClientConn) {
		client := testingv1.NewTestServiceClient(cc)
		steps := []struct {
			at   time.Duration
			want codes.Code
		}{
			{0, codes.OK},
			{time.Second - 1, codes.OK},
			{time.Second, codes.Unavailable},
			{2*time.Second - 1, codes.Unavailable},
			{2 * time.Second, codes.OK}, // the window's end is exclusive
		}
		for _, st := range steps {
			clock.Advance(t0.Add(st.at).Sub(clock.Now()))
			if got, _ := get(t, client, ""); got != st.want {
				t.Errorf("at %v: got %v, want %v", st.at, got, st.want)
			}
		}
		// Moving the window while serving.
		s.SetOutageWindow(t0.Add(2*time.Second), t0.Add(3*time.Second))
		if got, _ := get(t, client, ""); got != codes.Unavailable {
			t.Errorf("after moving the window: got %v, want UNAVAILABLE", got)
		}
		s.SetOutageWindow(time.Time{}, time.Time{})
		if got, _ := get(t, client, ""); got != codes.OK {
			t.Errorf("after clearing the window: got %v, want OK", got)
		}
		clock.Advance(t0.Sub(clock.Now())) // the next transport starts at t0 again
	})
}

func TestCapacityConcurrent(t *testing.T) {
	clock := newFakeClock()
	opts := []testserver.Option{testserver.WithClock(clock), testserver.WithCapacity(testserver.Capacity{MaxConcurrent: 2, Pushback: "50"})}
	forEachTransport(t, opts, func(t *testing.T, s *testserver.Server, cc *grpc.ClientConn) {
		client := testingv1.NewTestServiceClient(cc)
		slow := &testingv1.Script{Delay: durationpb.New(time.Second)}
		a := getAsync(callCtx(t), client, slow)
		b := getAsync(callCtx(t), client, slow)
		clock.awaitSleepers(t, 2)
		if st := s.Stats(); st.InFlight != 2 {
			t.Fatalf("stats %+v, want 2 in flight", st)
		}
		code, pushback := get(t, client, "third")
		if code != codes.ResourceExhausted || !slices.Equal(pushback, []string{"50"}) {
			t.Errorf("third call: got %v with pushback %q, want RESOURCE_EXHAUSTED with pushback 50", code, pushback)
		}
		clock.Advance(time.Second)
		for _, ch := range []<-chan error{a, b} {
			if err := <-ch; err != nil {
				t.Fatal(err)
			}
		}
		if code, _ := get(t, client, "fourth"); code != codes.OK {
			t.Errorf("after the slow calls ended: got %v, want OK", code)
		}
		s.SetCapacity(testserver.Capacity{MaxConcurrent: 1})
		a = getAsync(callCtx(t), client, slow)
		clock.awaitSleepers(t, 1)
		if code, pushback := get(t, client, "fifth"); code != codes.ResourceExhausted || len(pushback) != 0 {
			t.Errorf("limit 1: got %v with pushback %q, want RESOURCE_EXHAUSTED without pushback", code, pushback)
		}
		clock.Advance(time.Second)
		if err := <-a; err != nil {
			t.Fatal(err)
		}
		s.SetCapacity(testserver.Capacity{})
	})
}

func TestCapacityPerSecond(t *testing.T) {
	clock := newFakeClock()
	opts := []testserver.Option{testserver.WithClock(clock), testserver.WithCapacity(testserver.Capacity{PerSecond: 3})}
	forEachTransport(t, opts, func(t *testing.T, s *testserver.Server, cc *grpc.ClientConn) {
		client := testingv1.NewTestServiceClient(cc)
		var got []codes.Code
		for second := 0; second < 3; second++ {
			for i := 0; i < 4; i++ {
				code, _ := get(t, client, "")
				got = append(got, code)
			}
			// 999 ms after the window's start is still in it: move to the
			// next window's first instant.
			clock.Advance(999 * time.Millisecond)
			code, _ := get(t, client, "")
			got = append(got, code)
			clock.Advance(time.Millisecond)
		}
		ok, re := codes.OK, codes.ResourceExhausted
		want := []codes.Code{ok, ok, ok, re, re, ok, ok, ok, re, re, ok, ok, ok, re, re}
		if !slices.Equal(got, want) {
			t.Errorf("got %v, want %v", got, want)
		}
		if st := s.Stats(); st.Received != 15 || st.Rejected != 6 || st.Served != 9 {
			t.Errorf("stats %+v, want 15 received, 6 rejected, 9 served", st)
		}
	})
}

func TestFailureRate(t *testing.T) {
	const seed, p, n = 42, 0.3, 200
	// The server draws once per admitted attempt, so sequential calls fail
	// exactly where this source says.
	want := make([]codes.Code, n)
	rng := rand.New(rand.NewSource(seed))
	for i := range want {
		if rng.Float64() < p {
			want[i] = codes.Unavailable
		}
	}
	forEachTransport(t, []testserver.Option{testserver.WithFailureRate(p, seed)}, func(t *testing.T, s *testserver.Server, cc *grpc.ClientConn) {
		client := testingv1.NewTestServiceClient(cc)
		got := make([]codes.Code, n)
		for i := range got {
			got[i], _ = get(t, client, "")
		}
		if !slices.Equal(got, want) {
			t.Errorf("got %v, want %v", got, want)
		}
		for _, tc := range []struct {
			p    float64
			want codes.Code
		}{{0, codes.OK}, {1, codes.Unavailable}, {-3, codes.OK}, {7, codes.Unavailable}} {
			s.SetFailureRate(tc.p)
			for i := 0; i < 5; i++ {
				if code, _ := get(t, client, ""); code != tc.want {
					t.Errorf("rate %v: got %v, want %v", tc.p, code, tc.want)
				}
			}
		}
	})
}

func TestArrivalsAndStats(t *testing.T) {
	clock := newFakeClock()
	forEachTransport(t, []testserver.Option{testserver.WithClock(clock), testserver.WithArrivalBucket(50 * time.Millisecond)}, func(t *testing.T, s *testserver.Server, cc *grpc.ClientConn) {
		client := testingv1.NewTestServiceClient(cc)
		clock.Advance(s.Start().Sub(clock.Now()))
		for _, step := range []struct {
			advance time.Duration
			calls   int
		}{{0, 2}, {120 * time.Millisecond, 1}, {30 * time.Millisecond, 3}} {
			clock.Advance(step.advance)
			for i := 0; i < step.calls; i++ {
				if _, err := client.Write(callCtx(t), &testingv1.WriteRequest{Script: &testingv1.Script{Key: "w", FailAttempts: 2}}); i < 2 && err == nil && step.advance == 0 {
					t.Fatal("scripted failure did not fail")
				}
			}
		}
		if got, want := s.Arrivals(), []int64{2, 0, 1, 3}; !slices.Equal(got, want) {
			t.Errorf("Arrivals() = %v, want %v", got, want)
		}
		if s.ArrivalBucket() != 50*time.Millisecond {
			t.Errorf("ArrivalBucket() = %v", s.ArrivalBucket())
		}
		if st := s.Stats(); st != (testserver.Stats{Received: 6, Failed: 2, Served: 4}) {
			t.Errorf("Stats() = %+v, want 6 received, 2 failed, 4 served", st)
		}
		a := s.Arrivals()
		a[0] = 99
		if s.Arrivals()[0] != 2 {
			t.Error("Arrivals returned the server's own slice")
		}
		recs := s.Attempts("w")
		recs[0].Method = "changed"
		if s.Attempts("w")[0].Method != testingv1.TestService_Write_FullMethodName {
			t.Error("Attempts returned the server's own records")
		}
	})
}

func TestStopServingAndResume(t *testing.T) {
	s := testserver.New(testserver.WithTCP())
	defer s.Close()
	addr := s.Addr()
	if !strings.HasPrefix(addr, "127.0.0.1:") {
		t.Fatalf("Addr() = %q", addr)
	}
	call := func() codes.Code {
		t.Helper()
		cc, err := s.DialTCP(grpc.WithDisableRetry())
		if err != nil {
			// Not serving: dial the last address, which must refuse.
			cc, err = grpc.NewClient("passthrough:///"+addr, grpc.WithDisableRetry(), grpc.WithTransportCredentials(insecure.NewCredentials()))
			if err != nil {
				t.Fatal(err)
			}
		}
		defer func() { _ = cc.Close() }()
		code, _ := get(t, testingv1.NewTestServiceClient(cc), "")
		return code
	}
	if got := call(); got != codes.OK {
		t.Fatalf("serving: got %v", got)
	}
	// A call in flight when the server goes away is cut off.
	slow, err := s.DialTCP(grpc.WithDisableRetry())
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = slow.Close() }()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	inflight := getAsync(ctx, testingv1.NewTestServiceClient(slow), &testingv1.Script{Key: "inflight", Delay: durationpb.New(time.Hour)})
	if _, err := s.Await(callCtx(t), "inflight", func(r []testserver.AttemptRecord) bool { return len(r) == 1 }); err != nil {
		t.Fatalf("the in-flight attempt never arrived: %v", err)
	}

	s.StopServing()
	if s.Addr() != "" {
		t.Errorf("Addr() = %q after StopServing, want empty", s.Addr())
	}
	if err := <-inflight; status.Code(err) != codes.Unavailable {
		t.Errorf("in-flight call got %v, want UNAVAILABLE", err)
	}
	if _, err := net.Dial("tcp", addr); !errors.Is(err, syscall.ECONNREFUSED) {
		t.Errorf("dial after StopServing: %v, want connection refused", err)
	}
	if got := call(); got != codes.Unavailable {
		t.Errorf("stopped: got %v, want UNAVAILABLE", got)
	}
	// The bufconn side keeps serving.
	cc := s.ClientConn(t, grpc.WithDisableRetry())
	if code, _ := get(t, testingv1.NewTestServiceClient(cc), ""); code != codes.OK {
		t.Errorf("bufconn while TCP stopped: got %v", code)
	}

	if err := s.Resume(); err != nil {
		t.Fatal(err)
	}
	if s.Addr() != addr {
		t.Errorf("Addr() = %q after Resume, want %q", s.Addr(), addr)
	}
	if got := call(); got != codes.OK {
		t.Errorf("resumed: got %v", got)
	}
}

func TestResumeWithoutTCP(t *testing.T) {
	s := testserver.New()
	defer s.Close()
	if err := s.Resume(); err == nil {
		t.Error("Resume on a server that never served on TCP: no error")
	}
	if _, err := s.DialTCP(); err == nil {
		t.Error("DialTCP on a server that never served on TCP: no error")
	}
	s.Close()
	if _, err := s.StartTCP(); err == nil {
		t.Error("StartTCP after Close: no error")
	}
}

// The reset mode drops the connection of every attempt it would have answered,
// whatever its key, after the attempt ran; scripted failures still fail.
func TestResetsMode(t *testing.T) {
	forEachTransport(t, []testserver.Option{testserver.WithResets(true)}, func(t *testing.T, s *testserver.Server, cc *grpc.ClientConn) {
		client := testingv1.NewTestServiceClient(cc)
		for i := range 2 {
			key := fmt.Sprintf("%s-%d", t.Name(), i)
			if got, _ := get(t, client, key); got != codes.Unavailable {
				t.Errorf("call %d in the reset mode: got %v, want UNAVAILABLE", i, got)
			}
			if recs := s.Attempts(key); len(recs) != 1 || !recs[0].Reset || recs[0].Code != codes.OK {
				t.Errorf("call %d: records %+v, want one Reset attempt", i, recs)
			}
		}
		_, err := client.Get(callCtx(t), &testingv1.GetRequest{Script: &testingv1.Script{Key: t.Name() + "-fail", FailAttempts: 1}})
		if st := status.Convert(err); st.Code() != codes.Unavailable || !strings.Contains(st.Message(), "scripted failure") {
			t.Errorf("scripted failure in the reset mode: got %v", err)
		}
		st, err := client.ListItems(callCtx(t), &testingv1.ListItemsRequest{Script: &testingv1.Script{Key: t.Name() + "-list", ResponseCount: 5, MessagesBeforeFailure: 2}})
		if err != nil {
			t.Fatal(err)
		}
		got := 0
		for err == nil {
			if _, err = st.Recv(); err == nil {
				got++
			}
		}
		if status.Code(err) != codes.Unavailable || got > 2 {
			t.Errorf("ListItems in the reset mode: %d messages then %v, want at most 2 then UNAVAILABLE", got, err)
		}
		if recs := s.Attempts(t.Name() + "-list"); len(recs) != 1 || !recs[0].Reset {
			t.Errorf("ListItems records %+v, want one Reset attempt", recs)
		}
		if got := s.Executions(testingv1.TestService_Get_FullMethodName); got != 2 {
			t.Errorf("Executions(Get) = %d, want 2", got)
		}
		s.SetResets(false)
		if got, _ := get(t, client, t.Name()+"-after"); got != codes.OK {
			t.Errorf("after SetResets(false): got %v, want OK", got)
		}
	})
}

// A delay factor makes the scripted delays that many times as long; 1 and
// meaningless factors change nothing.
func TestDelayFactor(t *testing.T) {
	forEachTransport(t, []testserver.Option{testserver.WithDelayFactor(5)}, func(t *testing.T, s *testserver.Server, cc *grpc.ClientConn) {
		client := testingv1.NewTestServiceClient(cc)
		took := func(i int, sc *testingv1.Script) time.Duration {
			sc.Key = fmt.Sprintf("%s-%d", t.Name(), i)
			begin := time.Now()
			if _, err := client.Get(callCtx(t), &testingv1.GetRequest{Script: sc}); err != nil {
				t.Fatal(err)
			}
			return time.Since(begin)
		}
		// 100ms, so that a loaded machine's latency (130ms seen beside
		// the lab at 20ms) cannot take a factor of 1 for one of 5.
		const d = 100 * time.Millisecond
		if got := took(0, &testingv1.Script{Delay: durationpb.New(d)}); got < 5*d {
			t.Errorf("delay %v with factor 5 took %v, want at least %v", d, got, 5*d)
		}
		if got := took(1, &testingv1.Script{AttemptDelays: []*durationpb.Duration{durationpb.New(d)}}); got < 5*d {
			t.Errorf("attempt delay %v with factor 5 took %v, want at least %v", d, got, 5*d)
		}
		for _, f := range []float64{1, 0, -2, math.NaN(), math.Inf(1)} {
			s.SetDelayFactor(f)
			if got := took(2, &testingv1.Script{Delay: durationpb.New(d)}); got >= 5*d {
				t.Errorf("factor %v: delay %v took %v, want less than %v", f, d, got, 5*d)
			}
		}
	})
}

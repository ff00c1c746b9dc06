package stagger_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/stagger-go/stagger"
	"github.com/stagger-go/stagger/interceptor"
	"github.com/stagger-go/stagger/policy"
	testingv1 "github.com/stagger-go/stagger/proto/stagger/testing/v1"
	"github.com/stagger-go/stagger/testserver"
)

// The real-time lane: behaviours that depend on the order of real events
// (stagger's timer against the server's reply, the timer against the
// caller's deadline, the stream timer against the first message), over
// loopback TCP on the time package's clock, without synctest, which cannot
// see these races. Each test makes rtCalls calls at once, so one run of the
// test is rtCalls tries of the race; `make test-realtime` repeats them at
// -cpu=1,2 and beside a CPU hog. Every test is also part of `make test`.

// rtCalls is how many calls each real-time test makes at once.
const rtCalls = 50

// rtPerAttempt is the per-attempt timeout of rtFile; rtPause its pause.
const (
	rtPerAttempt = 100 * time.Millisecond
	rtPause      = 10 * time.Millisecond
)

// rtFile: every method of the test service is idempotent, retries
// UNAVAILABLE up to 3 attempts with pauses of 10ms, and cuts attempts off
// after 100ms.
//
// On a loaded machine (make test-realtime runs these beside a CPU hog) an
// attempt that should be quick can take longer than the timer too, and is
// then rightly cut off; the tests accept that outcome, checked for what it
// must be, but require most calls to show the behaviour under test, so that
// they cannot pass by timing everything out.
const rtFile = `{"methodConfig": [{
	"name": [{"service": "stagger.testing.v1.TestService"}],
	"idempotent": true,
	"retryPolicy": {"maxAttempts": 3, "initialBackoff": "0.01s", "maxBackoff": "0.01s",
		"backoffMultiplier": 1, "retryableStatusCodes": ["UNAVAILABLE"], "jitter": "NONE",
		"perAttemptRecvTimeout": "0.1s"}
}]}`

// rtNoTimerFile is rtFile without the per-attempt timeout.
const rtNoTimerFile = `{"methodConfig": [{
	"name": [{"service": "stagger.testing.v1.TestService"}],
	"retryPolicy": {"maxAttempts": 3, "initialBackoff": "0.01s", "maxBackoff": "0.01s",
		"backoffMultiplier": 1, "retryableStatusCodes": ["UNAVAILABLE"], "jitter": "NONE"}
}]}`

// rtBench is a server on loopback TCP and a client connection made with
// stagger.DialOptions for file (no budget: these tests are about timing).
func rtBench(t *testing.T, file string, opts ...interceptor.Option) (*testserver.Server, testingv1.TestServiceClient) {
	t.Helper()
	srv := testserver.New(testserver.WithTCP())
	t.Cleanup(srv.Close)
	cfg, err := policy.ParseConfig([]byte(file))
	if err != nil {
		t.Fatal(err)
	}
	opts = append([]interceptor.Option{interceptor.WithBudget(nil)}, opts...)
	cc, err := srv.DialTCP(stagger.DialOptions(cfg, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	client := testingv1.NewTestServiceClient(cc)
	// Connect outside the races.
	if _, err := client.Get(context.Background(), &testingv1.GetRequest{Script: &testingv1.Script{}}); err != nil {
		t.Fatal(err)
	}
	return srv, client
}

// parallel runs f(i) for i in [0, n) at once and returns when all ended.
func parallel(n int, f func(i int)) {
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			f(i)
		}()
	}
	wg.Wait()
}

// reasonOf is the reason stagger gave for ending the call, "" when err is
// not stagger's.
func reasonOf(err error) string {
	var se *interceptor.Error
	if errors.As(err, &se) {
		return se.Reason.String()
	}
	return ""
}

// A first attempt that hangs is cut off by stagger's timer and retried, every
// time: the server's view of the deadline never races the timer, because the
// server never sees the timer (grpc-timeout carries the caller's deadline).
func TestRealTimePerAttemptTimeout(t *testing.T) {
	srv, client := rtBench(t, rtFile)
	const callerTimeout = 5 * time.Second
	var healed atomic.Int32
	defer func() {
		if n := healed.Load(); n < rtCalls/2 {
			t.Errorf("%d of %d calls healed on their second attempt, want at least half", n, rtCalls)
		}
	}()
	parallel(rtCalls, func(i int) {
		ctx, cancel := context.WithTimeout(context.Background(), callerTimeout)
		defer cancel()
		key := fmt.Sprint("timeout-", i)
		sc := &testingv1.Script{Key: key, AttemptDelays: []*durationpb.Duration{durationpb.New(time.Minute), durationpb.New(0)}}
		_, err := client.Get(ctx, &testingv1.GetRequest{Script: sc})
		attempts := interceptor.Attempts(err)
		switch {
		case err == nil:
			attempts = 2
		case status.Code(err) == codes.DeadlineExceeded && reasonOf(err) == policy.ReasonAttempts.String() && attempts == 3:
			// Every attempt cut off: only a loaded machine makes the
			// second one that slow.
		default:
			t.Errorf("call %d: %v (reason %q, %d attempts), want OK after the first attempt was cut off", i, err, reasonOf(err), attempts)
			return
		}
		recs, werr := srv.AwaitAttempts(ctx, key, attempts)
		if werr != nil || len(recs) != attempts {
			t.Errorf("call %d: the server saw %d attempts, want %d", i, len(recs), attempts)
			return
		}
		if err == nil && len(recs) == 2 {
			healed.Add(1)
		}
		if !recs[0].Cancelled {
			t.Errorf("call %d: first attempt %+v, want cancelled by the client", i, recs[0])
		}
		for _, r := range recs {
			if left := r.Deadline.Sub(r.Arrived); r.Deadline.IsZero() || left < callerTimeout-time.Second {
				t.Errorf("call %d attempt %d: the server saw a deadline %v away, want the caller's (~%v)", i, r.Attempt, left, callerTimeout)
			}
		}
	})
}

// The caller's own deadline ends the call with DEADLINE_EXCEEDED, reason
// "caller", never "not retryable", however the server's report of it and the
// client's context race.
func TestRealTimeCallerDeadline(t *testing.T) {
	_, client := rtBench(t, rtNoTimerFile)
	parallel(rtCalls, func(i int) {
		ctx, cancel := context.WithTimeout(context.Background(), rtPerAttempt)
		defer cancel()
		sc := &testingv1.Script{Key: fmt.Sprint("deadline-", i), Delay: durationpb.New(time.Minute)}
		_, err := client.Get(ctx, &testingv1.GetRequest{Script: sc})
		if status.Code(err) != codes.DeadlineExceeded || reasonOf(err) != policy.ReasonCaller.String() {
			t.Errorf("call %d: %v (reason %q), want DEADLINE_EXCEEDED, reason caller", i, err, reasonOf(err))
		}
		if n := interceptor.Attempts(err); n != 1 {
			t.Errorf("call %d: %d attempts, want 1", i, n)
		}
	})
}

// stagger's timer meeting the caller's deadline: the call ends with
// DEADLINE_EXCEEDED, never CANCELED (the caller cancelled nothing) and
// never "not retryable". The deadlines fall on the first attempt's timer and
// on the second's (50ms, then 10ms of pause and 50ms more), a millisecond
// either side.
func TestRealTimeTimerMeetsDeadline(t *testing.T) {
	_, client := rtBench(t, rtFile)
	second := 2*rtPerAttempt + rtPause
	parallel(rtCalls, func(i int) {
		base := rtPerAttempt
		if i%2 == 1 {
			base = second
		}
		d := base + time.Duration(i%3-1)*time.Millisecond
		ctx, cancel := context.WithTimeout(context.Background(), d)
		defer cancel()
		sc := &testingv1.Script{Key: fmt.Sprint("meet-", i), Delay: durationpb.New(time.Minute)}
		_, err := client.Get(ctx, &testingv1.GetRequest{Script: sc})
		if status.Code(err) != codes.DeadlineExceeded {
			t.Errorf("call %d (deadline %v): %v (reason %q), want DEADLINE_EXCEEDED", i, d, err, reasonOf(err))
		}
		switch r := reasonOf(err); r {
		case policy.ReasonCaller.String(), policy.ReasonDeadline.String():
		default:
			t.Errorf("call %d (deadline %v): reason %q, want caller or deadline", i, d, r)
		}
	})
}

// A server stream whose first message arrives as stagger's timer fires:
// either the message wins (the stream commits and every message arrives
// once) or the timer does (nothing was delivered, the stream is retried and
// every message arrives once). Never some messages and then an error.
func TestRealTimeStreamTimerMeetsFirstMessage(t *testing.T) {
	srv, client := rtBench(t, rtFile)
	const n = 5
	var ok atomic.Int32
	defer func() {
		if got := ok.Load(); got < rtCalls/2 {
			t.Errorf("%d of %d streams delivered every message, want at least half", got, rtCalls)
		}
	}()
	parallel(rtCalls, func(i int) {
		key := fmt.Sprint("stream-", i)
		// First messages leave from 5ms before the timer to 5ms after.
		first := rtPerAttempt + time.Duration(i%11-5)*time.Millisecond
		sc := &testingv1.Script{Key: key, ResponseCount: n, AttemptDelays: []*durationpb.Duration{durationpb.New(first), durationpb.New(0)}}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		st, err := client.ListItems(ctx, &testingv1.ListItemsRequest{Script: sc})
		if err != nil {
			t.Errorf("call %d: ListItems: %v", i, err)
			return
		}
		var seqs []int64
		for {
			m, err := st.Recv()
			if err == io.EOF {
				break
			}
			if err != nil && len(seqs) == 0 && status.Code(err) == codes.DeadlineExceeded && reasonOf(err) == policy.ReasonAttempts.String() {
				// Every attempt cut off before its first message (a loaded
				// machine): nothing was delivered.
				return
			}
			if err != nil {
				t.Errorf("call %d (first message at %v): %v (reason %q) after %d messages %v, want every message once and OK", i, first, err, reasonOf(err), len(seqs), seqs)
				return
			}
			seqs = append(seqs, m.GetReply().GetSeq())
		}
		for j, s := range seqs {
			if s != int64(j+1) {
				t.Errorf("call %d: seqs %v, want 1..%d once each", i, seqs, n)
				return
			}
		}
		if len(seqs) != n {
			t.Errorf("call %d: %d messages, want %d", i, len(seqs), n)
			return
		}
		ok.Add(1)
		if recs := srv.Attempts(key); len(recs) > 3 {
			t.Errorf("call %d: %d attempts, want at most 3", i, len(recs))
		}
	})
}

// The stream's Context commits it, as in grpc-go (its TestRetryStreaming,
// "No retry after context"): the server's UNAVAILABLE is then final, and the
// context the application holds is never cancelled by a retry.
func TestRealTimeStreamContextCommits(t *testing.T) {
	srv, client := rtBench(t, rtNoTimerFile)
	parallel(rtCalls, func(i int) {
		for _, withContext := range []bool{false, true} {
			key := fmt.Sprint("context-", withContext, "-", i)
			sc := &testingv1.Script{Key: key, ResponseCount: 1, FailAttempts: 1}
			st, err := client.ListItems(context.Background(), &testingv1.ListItemsRequest{Script: sc})
			if err != nil {
				t.Errorf("call %d: ListItems: %v", i, err)
				return
			}
			var held context.Context
			if withContext {
				held = st.Context()
			}
			_, err = st.Recv()
			want, wantAttempts := codes.OK, 2
			if withContext {
				want, wantAttempts = codes.Unavailable, 1
			}
			if status.Code(err) != want {
				t.Errorf("call %d (Context called: %v): %v, want %v", i, withContext, err, want)
			}
			wctx, wcancel := context.WithTimeout(context.Background(), 5*time.Second)
			recs, _ := srv.AwaitAttempts(wctx, key, wantAttempts)
			wcancel()
			if len(recs) != wantAttempts {
				t.Errorf("call %d (Context called: %v): %d attempts, want %d", i, withContext, len(recs), wantAttempts)
			}
			if held != nil && held.Err() != nil && status.Code(err) == codes.OK {
				t.Errorf("call %d: the context Context returned was cancelled (%v) though the call succeeded", i, held.Err())
			}
		}
	})
}

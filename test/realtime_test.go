package test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/stagger-go/stagger"
	"github.com/stagger-go/stagger/budget"
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

// rtMinHealthy is how many of a test's rtCalls calls must take the quick
// path (an attempt answered within the timer) for the test to prove
// anything. On an idle machine all do; beside the CPU hog, at -cpu=1 under
// the race detector, as few as 13 of 50 did (quick attempts answered after
// 100ms), so it is a fifth, not a half.
const rtMinHealthy = rtCalls / 5

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

// rtConfig parses a test's policy file, failing the test on an error and on
// any warning: a warning means the file does not say what the test assumes
// (a maxAttempts above the cap of 5 that the parse lowered made
// TestRealTimeResumeAfterReset fail one run in a few hundred).
func rtConfig(t *testing.T, file string, opts ...policy.ParseOption) *policy.Config {
	t.Helper()
	cfg, err := policy.ParseConfig([]byte(file), opts...)
	if err != nil {
		t.Fatal(err)
	}
	if ws := cfg.Warnings(); len(ws) > 0 {
		t.Fatalf("the test's policy file has warnings: %v", ws)
	}
	return cfg
}

// rtBench is a server on loopback TCP and a client connection made with
// stagger.DialOptions for file (no budget: these tests are about timing).
func rtBench(t *testing.T, file string, opts ...interceptor.Option) (*testserver.Server, testingv1.TestServiceClient) {
	t.Helper()
	return rtBenchDial(t, file, nil, opts...)
}

// rtBenchDial is rtBench with dial options after stagger's (an interceptor
// there runs inside stagger's, once per attempt).
func rtBenchDial(t *testing.T, file string, dial []grpc.DialOption, opts ...interceptor.Option) (*testserver.Server, testingv1.TestServiceClient) {
	t.Helper()
	srv := testserver.New(testserver.WithTCP())
	t.Cleanup(srv.Close)
	cfg := rtConfig(t, file)
	opts = append([]interceptor.Option{interceptor.WithBudget(nil)}, opts...)
	cc, err := srv.DialTCP(append(stagger.DialOptions(cfg, opts...), dial...)...)
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

// rtMaxBatches bounds rtBatches.
const rtMaxBatches = 3

// rtBatches runs batches of rtCalls calls in parallel, call(i) with i unique
// across batches and reporting whether call i took the path under test,
// until rtMinHealthy calls took it, at most rtMaxBatches batches. On a
// machine loaded enough (CI's lane beside a CPU hog), every first attempt
// of a batch can be cut off before it reaches the server: the path is then
// untested, not failed, and another batch tests it. Every call's own checks
// run in every batch, and a batch is never run again for a failure.
func rtBatches(t *testing.T, what string, call func(i int) bool) {
	t.Helper()
	var healthy atomic.Int32
	for b := 0; b < rtMaxBatches && healthy.Load() < rtMinHealthy; b++ {
		parallel(rtCalls, func(j int) {
			if call(b*rtCalls + j) {
				healthy.Add(1)
			}
		})
	}
	if n := healthy.Load(); n < rtMinHealthy {
		t.Errorf("%d of at most %d %s took the path under test, want at least %d", n, rtMaxBatches*rtCalls, what, rtMinHealthy)
	}
}

// spaced is parallel with the calls spread out: f(i) starts gap×i after
// f(0), as a busy process sends them.
func spaced(n int, gap time.Duration, f func(i int)) {
	parallel(n, func(i int) {
		time.Sleep(time.Duration(i) * gap)
		f(i)
	})
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
// On a loaded machine the quick second attempt can be cut off too (its
// reply late, or the attempt cancelled) and the third heals the call, or
// every attempt is: rtMinHealthy calls must heal (rtBatches).
func TestRealTimePerAttemptTimeout(t *testing.T) {
	srv, client := rtBench(t, rtFile)
	const callerTimeout = 5 * time.Second
	rtBatches(t, "calls", func(i int) (healed bool) {
		ctx, cancel := context.WithTimeout(context.Background(), callerTimeout)
		defer cancel()
		key := fmt.Sprint("timeout-", i)
		sc := &testingv1.Script{Key: key, AttemptDelays: []*durationpb.Duration{durationpb.New(time.Minute), durationpb.New(0)}}
		_, err := client.Get(ctx, &testingv1.GetRequest{Script: sc})
		var recs []testserver.AttemptRecord
		var werr error
		switch {
		case err == nil:
			// The attempt that answered is the last one; wait until the
			// server has recorded it, and every attempt before it, as ended.
			recs, werr = srv.Await(ctx, key, func(recs []testserver.AttemptRecord) bool {
				for _, r := range recs {
					if !r.Done {
						return false
					}
				}
				return len(recs) > 0 && recs[len(recs)-1].Code == codes.OK && !recs[len(recs)-1].Cancelled
			})
			if werr == nil && (len(recs) < 2 || len(recs) > 3) {
				t.Errorf("call %d: succeeded after %d attempts, want 2 or 3", i, len(recs))
				return
			}
		case status.Code(err) == codes.DeadlineExceeded && reasonOf(err) == policy.ReasonAttempts.String() && interceptor.Attempts(err) == 3:
			// Every attempt cut off: only a loaded machine makes the
			// later ones that slow.
			recs, werr = srv.AwaitAttempts(ctx, key, 3)
		default:
			t.Errorf("call %d: %v (reason %q, %d attempts), want OK after the first attempt was cut off", i, err, reasonOf(err), interceptor.Attempts(err))
			return
		}
		if werr != nil {
			t.Errorf("call %d: the server's records %+v: %v", i, recs, werr)
			return
		}
		healed = err == nil
		// The first attempt hangs: the client's timer cancels it. A later
		// attempt that did not answer the call was either cancelled too or
		// answered OK after the timer had fired (a loaded machine delays
		// the reply on its way), never anything else.
		if !recs[0].Cancelled {
			t.Errorf("call %d: first attempt %+v, want cancelled by the client", i, recs[0])
		}
		for _, r := range recs[1:] {
			if !r.Cancelled && r.Code != codes.OK {
				t.Errorf("call %d: attempt %+v, want cancelled by the client or OK", i, r)
			}
		}
		for _, r := range recs {
			if left := r.Deadline.Sub(r.Arrived); r.Deadline.IsZero() || left < callerTimeout-time.Second {
				t.Errorf("call %d attempt %d: the server saw a deadline %v away, want the caller's (~%v)", i, r.Attempt, left, callerTimeout)
			}
		}
		return
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
// every message arrives once). Never some messages and then an error. A
// loaded machine can cut every attempt off before its first message:
// rtMinHealthy streams must deliver every message (rtBatches).
func TestRealTimeStreamTimerMeetsFirstMessage(t *testing.T) {
	srv, client := rtBench(t, rtFile)
	const n = 5
	rtBatches(t, "streams", func(i int) (delivered bool) {
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
		delivered = true
		if recs := srv.Attempts(key); len(recs) > 3 {
			t.Errorf("call %d: %d attempts, want at most 3", i, len(recs))
		}
		return
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

// rtResetFile retries UNAVAILABLE up to 5 attempts, 20ms apart, for every
// method of the test service; idempotency comes from the proto (Put is
// IDEMPOTENT, Get NO_SIDE_EFFECTS, Write not marked).
const rtResetFile = `{"methodConfig": [{
	"name": [{"service": "stagger.testing.v1.TestService"}],
	"retryPolicy": {"maxAttempts": 5, "initialBackoff": "0.02s", "maxBackoff": "0.02s",
		"backoffMultiplier": 1, "retryableStatusCodes": ["UNAVAILABLE"], "jitter": "NONE"}
}]}`

// Connection resets after the server ran the call (the ambiguity rule),
// over loopback TCP. A Write (not idempotent) runs at most once: stagger
// never retries it after a reset, whether its own reset or another call's
// killed it; it fails with reason "ambiguous", or succeeds when its reply
// got through. A Put (idempotent) is retried and heals. A Write carrying an
// idempotency key is retried too (the key is the caller's promise that the
// server de-duplicates; this server does not, so it runs twice: what the
// key is for).
//
// Alone: each call on a connection of its own, each reset after its first
// attempt ran, so the outcome of every call is exact. Shared: rtCalls calls
// at once on one connection, a third of them resetting it, so resets also
// kill calls in flight on it, the chaos of a real reset; a repeatable call
// may then meet a reset on every attempt, so only safety is exact there.
func TestRealTimeResetAfterExecution(t *testing.T) {
	for _, shared := range []bool{false, true} {
		t.Run(map[bool]string{false: "alone", true: "shared"}[shared], func(t *testing.T) {
			srv, client := rtBench(t, rtResetFile)
			cfg := rtConfig(t, rtResetFile)
			clientOf := func(int) testingv1.TestServiceClient { return client }
			if !shared {
				clientOf = func(int) testingv1.TestServiceClient {
					cc, err := srv.DialTCP(stagger.DialOptions(cfg, interceptor.WithBudget(nil))...)
					if err != nil {
						t.Fatal(err)
					}
					t.Cleanup(func() { cc.Close() })
					return testingv1.NewTestServiceClient(cc)
				}
			}
			runResetChaos(t, srv, clientOf, shared)
		})
	}
}

func runResetChaos(t *testing.T, srv *testserver.Server, clientOf func(int) testingv1.TestServiceClient, shared bool) {
	keyed := interceptor.WithIdempotencyKey("idempotency-key")
	type result struct {
		kind  string // "write", "put", "keyed"
		reset bool   // the call's first attempt to run resets
		err   error
	}
	results := make([]result, rtCalls)
	clients := make([]testingv1.TestServiceClient, rtCalls)
	for i := range clients {
		clients[i] = clientOf(i)
	}
	key := func(i int) string { return fmt.Sprint("reset-", i) }
	parallel(rtCalls, func(i int) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		r := result{reset: !shared || i%3 == 0}
		sc := &testingv1.Script{Key: key(i)}
		if r.reset {
			sc.ResetAttempts = 1
		}
		switch i % 5 {
		case 0, 1:
			r.kind = "write"
			_, r.err = clients[i].Write(ctx, &testingv1.WriteRequest{Script: sc})
		case 2, 3:
			r.kind = "put"
			_, r.err = clients[i].Put(ctx, &testingv1.PutRequest{Script: sc})
		default:
			r.kind = "keyed"
			_, r.err = clients[i].Write(ctx, &testingv1.WriteRequest{Script: sc}, keyed)
		}
		results[i] = r
	})
	// Close waits for every handler, so the records below are final: a
	// handler a reset cut off may still be running when its call ended.
	srv.Close()
	var writes, writeRuns, keyedRuns, healed int
	for i, r := range results {
		recs := srv.Attempts(key(i))
		runs, wasReset := 0, false
		for _, rec := range recs {
			if rec.Code == codes.OK || rec.Reset {
				runs++
			}
			wasReset = wasReset || rec.Reset
		}
		switch r.kind {
		case "write":
			writes++
			writeRuns += runs
			if len(recs) > 1 {
				t.Errorf("call %d (Write): the server saw %d attempts and ran it %d times: a call not known to be idempotent was retried after it may have run", i, len(recs), runs)
			}
			switch {
			case r.err == nil && !wasReset:
			case status.Code(r.err) == codes.Unavailable && interceptor.Attempts(r.err) == 1 &&
				(reasonOf(r.err) == policy.ReasonAmbiguous.String() || shared && reasonOf(r.err) == policy.ReasonCommitted.String()):
				// Committed: another call's reset came after this one's
				// response headers (shared only).
			default:
				t.Errorf("call %d (Write, reset %v): %v (reason %q, %d attempts), want UNAVAILABLE after 1 attempt, reason ambiguous (or committed, or OK when not reset)", i, wasReset, r.err, reasonOf(r.err), interceptor.Attempts(r.err))
			}
		case "put", "keyed":
			if r.kind == "keyed" {
				keyedRuns += runs
			}
			if r.err == nil && wasReset {
				healed++
			}
			if shared {
				// Every attempt may have met some call's reset, and one whose
				// response headers had arrived when another call's reset came
				// is committed (gRFC A6): final.
				if r.err != nil && (status.Code(r.err) != codes.Unavailable || (reasonOf(r.err) != policy.ReasonAttempts.String() && reasonOf(r.err) != policy.ReasonCommitted.String())) {
					t.Errorf("call %d (%s): %v (reason %q), want OK, or UNAVAILABLE after every attempt was reset or after headers (committed)", i, r.kind, r.err, reasonOf(r.err))
				}
				continue
			}
			if r.err != nil || runs != 2 || len(recs) != 2 || !recs[0].Reset {
				t.Errorf("call %d (%s): %v (reason %q), the server saw %+v; want OK, run twice: reset, then retried", i, r.kind, r.err, reasonOf(r.err), recs)
			}
		}
	}
	if got := srv.Executions(testingv1.TestService_Write_FullMethodName); got != int64(writeRuns+keyedRuns) {
		t.Errorf("Write ran %d times, the calls' records say %d", got, writeRuns+keyedRuns)
	}
	t.Logf("%d writes ran %d times; %d repeatable calls healed after a reset", writes, writeRuns, healed)
}

// fastReconnect dials again 10ms after a failed connection attempt, not
// after grpc-go's reconnect backoff (1s at first), so that calls held or
// retried while the server is gone meet it soon after it is back.
func fastReconnect() grpc.DialOption {
	return grpc.WithConnectParams(grpc.ConnectParams{Backoff: backoff.Config{BaseDelay: 10 * time.Millisecond, Multiplier: 1, MaxDelay: 10 * time.Millisecond}, MinConnectTimeout: time.Second})
}

// A call whose connection is refused never left the client: it is retried
// and heals, Write (not idempotent) included, and runs exactly once.
func TestRealTimeRefusedHeals(t *testing.T) {
	srv := testserver.New(testserver.WithTCP())
	t.Cleanup(srv.Close)
	cfg := rtConfig(t, rtResetFile)
	// grpc-go waits 1s (its reconnect backoff) before dialling again after
	// a refused connection, failing calls fast meanwhile; 10ms here, so the
	// retries meet the server once it is back.
	fast := fastReconnect()
	cc, err := srv.DialTCP(append(stagger.DialOptions(cfg, interceptor.WithBudget(nil)), fast)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	client := testingv1.NewTestServiceClient(cc)
	srv.StopServing()
	back := time.AfterFunc(30*time.Millisecond, func() {
		if err := srv.Resume(); err != nil {
			t.Errorf("resume: %v", err)
		}
	})
	defer back.Stop()
	var hooks hookLog
	parallel(rtCalls, func(i int) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		key := fmt.Sprint("refused-", i)
		_, err := client.Write(ctx, &testingv1.WriteRequest{Script: &testingv1.Script{Key: key}}, interceptor.WithHook(hooks.hook))
		if err != nil {
			t.Errorf("call %d: %v (reason %q), want OK after refused attempts", i, err, reasonOf(err))
			return
		}
		if recs := srv.Attempts(key); len(recs) != 1 || recs[0].Code != codes.OK {
			t.Errorf("call %d: the server saw %+v, want one attempt, OK", i, recs)
		}
	})
	retried := 0
	for _, e := range hooks.all() {
		if e.Kind == interceptor.EventRetry {
			retried++
		}
	}
	if retried == 0 {
		t.Errorf("no call was retried: the server came back before any attempt was refused")
	}
}

// After a reconnection, waitForReady calls that queued while the server was
// gone reach it paced (breaker.Breaker.Pace: one at a time, at the rate the
// process asked for first attempts over the breaker's window), not all at
// once as grpc would send them. Real time and loopback TCP: the hold rides
// on the connection's real state changes.
func TestRealTimeReconnectPacing(t *testing.T) {
	srv := testserver.New(testserver.WithTCP())
	defer srv.Close()
	cfg := rtConfig(t, `{"circuitBreaker": {}, "methodConfig": [{"name": [{"service": "stagger.testing.v1.TestService"}], "waitForReady": true}]}`)
	fast := fastReconnect()
	cc, err := srv.DialTCP(append(stagger.DialOptions(cfg, interceptor.WithBudget(nil)), fast)...)
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	client := testingv1.NewTestServiceClient(cc)
	const warm, held = 40, 12
	for range warm {
		if _, err := client.Get(context.Background(), &testingv1.GetRequest{Script: &testingv1.Script{}}); err != nil {
			t.Fatal(err)
		}
	}
	srv.StopServing()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for s := cc.GetState(); s == connectivity.Ready; s = cc.GetState() {
		if !cc.WaitForStateChange(ctx, s) {
			t.Fatal("the connection never left READY")
		}
	}
	errs := make(chan error, held)
	for i := range held {
		go func() {
			_, err := client.Get(ctx, &testingv1.GetRequest{Script: &testingv1.Script{Key: "held"}})
			errs <- fmt.Errorf("call %d: %w", i, err)
		}()
	}
	time.Sleep(100 * time.Millisecond)
	if err := srv.Resume(); err != nil {
		t.Fatal(err)
	}
	for range held {
		if err := <-errs; errors.Unwrap(err) != nil {
			t.Fatal(err)
		}
	}
	recs := srv.Attempts("held")
	if len(recs) != held {
		t.Fatalf("%d attempts, want %d", len(recs), held)
	}
	// The held calls reserve their starts when the connection is ready,
	// at breaker.PaceGain (1.25) times the rate of the 40 answers in the
	// breaker's 10 s window: one every 200ms, 2.2s for all. Allow for a
	// loaded machine: the spread must be most of that, and never more than
	// 2 in any 100ms.
	first, last := recs[0].Arrived, recs[len(recs)-1].Arrived
	if span := last.Sub(first); span < time.Second || span > 4*time.Second {
		t.Fatalf("held calls arrived over %v, want them paced over about 2.2s", span)
	}
	for i := 2; i < len(recs); i++ {
		if d := recs[i].Arrived.Sub(recs[i-2].Arrived); d < 100*time.Millisecond {
			t.Fatalf("held calls %d-%d arrived within %v", i-2, i, d)
		}
	}
}

// A hedged call with more attempts in flight than its results channel has
// room for (20 at once against 8): the attempts that find it full wait for
// the call's goroutine, which receives every result before it returns, so
// every call ends with the right outcome and no goroutine is left behind
// (goleak). All fail: the last status after 20 attempts; half fail: a
// success, the others cancelled.
func TestRealTimeHedgeMoreAttemptsThanResultSlots(t *testing.T) {
	srv := testserver.New(testserver.WithTCP())
	t.Cleanup(srv.Close)
	cfg := rtConfig(t, `{"methodConfig": [{"name": [{"service": "stagger.testing.v1.TestService"}],
		"hedgingPolicy": {"maxAttempts": 20, "hedgingDelay": "0s", "nonFatalStatusCodes": ["UNAVAILABLE"]}}]}`, policy.WithMaxAttemptsCap(20))
	cc, err := srv.DialTCP(stagger.DialOptions(cfg, interceptor.WithBudget(nil))...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	client := testingv1.NewTestServiceClient(cc)
	if _, err := client.Get(context.Background(), &testingv1.GetRequest{Script: &testingv1.Script{}}); err != nil {
		t.Fatal(err)
	}
	errs := make([]error, rtCalls)
	parallel(rtCalls, func(i int) {
		fail := int32(20)
		if i%2 == 1 {
			fail = 10
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_, errs[i] = client.Get(ctx, &testingv1.GetRequest{Script: &testingv1.Script{Key: fmt.Sprint("k", i), FailAttempts: fail}})
	})
	for i, err := range errs {
		if i%2 == 1 {
			if err != nil {
				t.Errorf("call %d (10 of 20 fail): %v, want success", i, err)
			}
			continue
		}
		if status.Code(err) != codes.Unavailable || interceptor.Attempts(err) != 20 || reasonOf(err) != "attempts" {
			t.Errorf("call %d (all fail): %v, %d attempts, reason %q; want UNAVAILABLE after 20, reason attempts", i, err, interceptor.Attempts(err), reasonOf(err))
		}
		if n := len(srv.Attempts(fmt.Sprint("k", i))); n != 20 {
			t.Errorf("call %d: server saw %d attempts, want 20", i, n)
		}
	}
}

// rtHedgeFile hedges every method of the test service (marked idempotent):
// 2 attempts, the hedge 50ms after the first.
const rtHedgeFile = `{"methodConfig": [{
	"name": [{"service": "stagger.testing.v1.TestService"}],
	"idempotent": true,
	"hedgingPolicy": {"maxAttempts": 2, "hedgingDelay": "0.05s", "nonFatalStatusCodes": ["UNAVAILABLE"]}
}]}`

// A hedged stream whose first attempt commits (its response headers
// arrive) as the hedge timer fires: either the first attempt commits
// before the hedge leaves (one attempt), or the hedge leaves and one of the
// two wins, the other cancelled. Whichever wins, the application gets every
// message once, in order, all from the winner, and never an error. Server
// streams and bidi streams (whose messages race the commit too).
func TestRealTimeHedgedStreamCommitMeetsHedge(t *testing.T) {
	const n = 3
	srv, client := rtBench(t, rtHedgeFile)
	for _, kind := range []string{"server", "bidi"} {
		t.Run(kind, func(t *testing.T) {
			var hedged, firstWon atomic.Int32
			parallel(rtCalls, func(i int) {
				key := fmt.Sprint("hedge-", kind, "-", i)
				// First responses leave from 5ms before the hedge to 5ms after.
				first := 50*time.Millisecond + time.Duration(i%11-5)*time.Millisecond
				sc := &testingv1.Script{Key: key, AttemptDelays: []*durationpb.Duration{durationpb.New(first), durationpb.New(0)}}
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				defer cancel()
				var r streamResult
				if kind == "server" {
					r = runListItems(ctx, client, sc, n)
				} else {
					r = runChat(ctx, client, sc, n)
				}
				if r.err != nil {
					t.Errorf("call %d (first answer at %v): %v", i, first, r.err)
					return
				}
				if len(r.seqs) != n {
					t.Errorf("call %d: seqs %v, want 1..%d once each", i, r.seqs, n)
					return
				}
				for j, s := range r.seqs {
					if s != int64(j+1) || r.attempts[j] != r.attempts[0] {
						t.Errorf("call %d: seqs %v from attempts %v, want 1..%d from one attempt", i, r.seqs, r.attempts, n)
						return
					}
				}
				wctx, wcancel := context.WithTimeout(context.Background(), 5*time.Second)
				defer wcancel()
				recs, err := srv.Await(wctx, key, func(recs []testserver.AttemptRecord) bool {
					for _, rec := range recs {
						if !rec.Done {
							return false
						}
					}
					return len(recs) > 0
				})
				if err != nil || len(recs) > 2 {
					t.Errorf("call %d: server saw %+v (%v), want 1 or 2 attempts, ended", i, recs, err)
					return
				}
				if len(recs) == 2 {
					hedged.Add(1)
				}
				if r.attempts[0] == 1 {
					firstWon.Add(1)
				}
				for _, rec := range recs {
					if rec.Attempt != int(r.attempts[0]) && !rec.Cancelled && rec.Code != codes.OK {
						t.Errorf("call %d: the losing attempt %+v neither cancelled nor OK", i, rec)
					}
				}
			})
			t.Logf("%s: %d of %d streams hedged, the first attempt won %d", kind, hedged.Load(), rtCalls, firstWon.Load())
		})
	}
}

// rtResumeFile retries UNAVAILABLE up to 8 attempts in a row with pauses of
// 10ms (parsed with rtResumeCap: gRFC A6's cap of 5 would lower it), each
// attempt waiting for a ready connection (a reset connection takes a moment
// to come back); ListItems is not idempotent, so only its resume function
// lets a stream whose connection broke continue.
const rtResumeFile = `{"methodConfig": [{
	"name": [{"service": "stagger.testing.v1.TestService"}],
	"waitForReady": true,
	"retryPolicy": {"maxAttempts": 8, "initialBackoff": "0.01s", "maxBackoff": "0.01s",
		"backoffMultiplier": 1, "retryableStatusCodes": ["UNAVAILABLE"], "jitter": "NONE"}
}]}`

// rtResumeCap lets rtResumeFile's maxAttempts of 8 stand.
const rtResumeCap = 8

// A server stream whose connection the server resets (TCP RST) mid-way is
// resumed after the last message received: the application reads every
// item once, in order, however many of the messages the server sent the
// reset lost. Alone: each call on its own connection, reset twice, so every
// call must heal, after exactly 3 attempts on the server. Shared: rtCalls
// calls on one connection, one in ten of them resetting it once, so the
// resets break the others' streams too, at any point, often before their
// first message. The server counts only the attempts that reached its
// handler, so a resetting call whose first attempts another reset killed
// resets a later connection: the five resets can come one after another,
// each killing every attempt in flight before it delivered anything (the
// reset's 50 messages are queued, and the connection dropped, before the
// others' messages are written). A call meets at most one failure per reset,
// five in all, and 8 attempts in a row outlast them, so every call heals.
// (With maxAttempts left at A6's cap of 5, 41 of 50 calls ended UNAVAILABLE
// after five resets in a row, one run in a few hundred.) On a loaded machine
// (the race detector beside a CPU hog) a call may run out of its deadline;
// what it read is still exact, and rtMinHealthy calls must heal
// (rtBatches).
func TestRealTimeResumeAfterReset(t *testing.T) {
	const items = 150
	resume := interceptor.WithResume(testingv1.TestService_ListItems_FullMethodName, interceptor.TypedResume(
		func(req *testingv1.ListItemsRequest, last *testingv1.ListItemsResponse) (*testingv1.ListItemsRequest, error) {
			next := proto.Clone(req).(*testingv1.ListItemsRequest)
			next.StartAfter = last.GetReply().GetSeq()
			return next, nil
		}))
	for _, shared := range []bool{false, true} {
		t.Run(map[bool]string{false: "alone", true: "shared"}[shared], func(t *testing.T) {
			srv := testserver.New(testserver.WithTCP())
			t.Cleanup(srv.Close)
			cfg := rtConfig(t, rtResumeFile, policy.WithMaxAttemptsCap(rtResumeCap))
			// grpc-go's reconnect backoff (1s at first) would hold the
			// waitForReady attempts after a failed reconnection: 10ms here.
			fast := fastReconnect()
			dial := func() testingv1.TestServiceClient {
				cc, err := srv.DialTCP(append(stagger.DialOptions(cfg, interceptor.WithBudget(nil), resume), fast)...)
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { cc.Close() })
				return testingv1.NewTestServiceClient(cc)
			}
			clients := make([]testingv1.TestServiceClient, rtCalls)
			for i := range clients {
				if i == 0 || !shared {
					clients[i] = dial()
				} else {
					clients[i] = clients[0]
				}
			}
			type result struct {
				ran   bool
				seqs  []int64
				reset bool
				err   error
			}
			results := make([]result, rtMaxBatches*rtCalls)
			key := func(i int) string { return fmt.Sprint("resume-", i) }
			rtBatches(t, "calls read the whole list", func(i int) bool {
				ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
				defer cancel()
				r := result{ran: true, reset: !shared || i%10 == 0}
				sc := &testingv1.Script{Key: key(i), ResponseCount: items, MessagesBeforeFailure: items / 3}
				switch {
				case !shared:
					sc.ResetAttempts = 2
				case r.reset:
					sc.ResetAttempts = 1
				}
				// A later batch's call i uses batch one's connection i, which
				// no other call is using by then.
				st, err := clients[i%rtCalls].ListItems(ctx, &testingv1.ListItemsRequest{Script: sc})
				for err == nil {
					var m *testingv1.ListItemsResponse
					if m, err = st.Recv(); err == nil {
						r.seqs = append(r.seqs, m.GetReply().GetSeq())
					}
				}
				if !errors.Is(err, io.EOF) {
					r.err = err
				}
				results[i] = r
				return r.err == nil && len(r.seqs) == items
			})
			srv.Close()
			ran, healed, resets, resetting := 0, 0, 0, 0
			for i, r := range results {
				if !r.ran {
					continue
				}
				ran++
				if r.reset {
					resetting++
				}
				recs := srv.Attempts(key(i))
				for _, rec := range recs {
					if rec.Reset {
						resets++
					}
				}
				if !slices.Equal(r.seqs, seqsTo(len(r.seqs))) {
					t.Errorf("call %d: read %v, want 1, 2, ... each once, in order", i, r.seqs)
					continue
				}
				switch {
				case r.err == nil && len(r.seqs) == items:
					healed++
					if !shared && (len(recs) != 3 || !recs[0].Reset || !recs[1].Reset) {
						t.Errorf("call %d: the server saw %+v, want two resets, then the rest", i, recs)
					}
				case status.Code(r.err) == codes.DeadlineExceeded && reasonOf(r.err) == policy.ReasonCaller.String():
					// A loaded machine.
				default:
					t.Errorf("call %d: %v (reason %q) after %d items, want all %d; the server saw %+v", i, r.err, reasonOf(r.err), len(r.seqs), items, recs)
				}
			}
			if shared && resets > resetting {
				t.Errorf("the server reset the connection %d times, want at most %d (one per resetting call)", resets, resetting)
			}
			t.Logf("%d of %d calls read all %d items; %d resets", healed, ran, items, resets)
			ends := map[string]int{}
			for _, r := range results {
				if r.ran {
					ends[fmt.Sprintf("%v/%s", status.Code(r.err), reasonOf(r.err))]++
				}
			}
			t.Logf("ends: %v", ends)
		})
	}
}

// A stream whose caller cancels it while its reader may be in RecvMsg, or
// while a retry is being decided, ends its call exactly once (the watch on
// the abandoned stream and the reader both may report the attempt's end):
// every call's end event comes once, and the reader always gets an answer.
func TestRealTimeAbandonedStreamEndsOnce(t *testing.T) {
	var ends atomic.Int64
	_, client := rtBench(t, rtNoTimerFile, interceptor.WithCallHook(func(_ context.Context, e interceptor.Event) {
		if e.Kind == interceptor.EventEnd {
			ends.Add(1)
		}
	}))
	const rounds = 4
	ends.Store(0) // rtBench's own call to connect
	parallel(rtCalls, func(i int) {
		for r := range rounds {
			ctx, cancel := context.WithCancel(context.Background())
			sc := &testingv1.Script{Key: fmt.Sprint("abandon-", i, "-", r), ResponseCount: 3, FailAttempts: int32(i % 2), Delay: durationpb.New(time.Duration(r) * time.Millisecond)}
			st, err := client.ListItems(ctx, &testingv1.ListItemsRequest{Script: sc})
			if err != nil {
				cancel()
				t.Errorf("call %d/%d: ListItems: %v", i, r, err)
				return
			}
			read := make(chan error, 1)
			go func() {
				for {
					if _, err := st.Recv(); err != nil {
						read <- err
						return
					}
				}
			}()
			time.Sleep(time.Duration(i%4) * time.Millisecond)
			cancel()
			select {
			case err := <-read:
				// UNAVAILABLE: the scripted failure came before the
				// cancellation, which then ended the call with it.
				if c := status.Code(err); err != io.EOF && c != codes.Canceled && (c != codes.Unavailable || sc.FailAttempts == 0) {
					t.Errorf("call %d/%d: the reader got %v, want EOF, CANCELED or the scripted failure", i, r, err)
				}
			case <-time.After(5 * time.Second):
				t.Errorf("call %d/%d: the reader got no answer within 5s of the cancellation", i, r)
			}
		}
	})
	// The end events of calls that end on the watch's goroutine may come a
	// moment after the reader returned.
	deadline := time.Now().Add(5 * time.Second)
	for ends.Load() < rtCalls*rounds && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	time.Sleep(20 * time.Millisecond)
	if n := ends.Load(); n != rtCalls*rounds {
		t.Fatalf("%d end events for %d calls, want one each", n, rtCalls*rounds)
	}
}

// rtSpread is the delay of call i's deciding attempt: from 5ms before the
// per-attempt timer to 5ms after, so that its answer and the timer race.
func rtSpread(i int) time.Duration {
	return rtPerAttempt + time.Duration(i%11-5)*time.Millisecond
}

// rtClientAttempt is the client's number of the attempt the server
// recorded as rec: one more than the grpc-previous-rpc-attempts it carried.
// The server numbers a key's attempts as they arrive (rec.Attempt, the
// reply's attempt), which differs when an attempt never reached it.
func rtClientAttempt(rec testserver.AttemptRecord) int {
	if rec.PreviousAttempts == "" {
		return 1
	}
	n, err := strconv.Atoi(rec.PreviousAttempts)
	if err != nil {
		return -1
	}
	return n + 1
}

// rtAwaitDone waits until the server recorded n attempts of key, all ended.
func rtAwaitDone(ctx context.Context, srv *testserver.Server, key string, n int) ([]testserver.AttemptRecord, error) {
	return srv.Await(ctx, key, func(recs []testserver.AttemptRecord) bool {
		if len(recs) < n {
			return false
		}
		for _, r := range recs {
			if !r.Done {
				return false
			}
		}
		return true
	})
}

// rtFirstAttemptLost reports whether a call of 2 attempts whose first was
// scripted to hang ended with the caller's deadline because its first
// attempt never reached the server (a loaded machine): the server then saw
// one attempt, the client's last, scripted to hang, which ran on.
func rtFirstAttemptLost(srv *testserver.Server, key string, err error) bool {
	recs := srv.Attempts(key)
	return status.Code(err) == codes.DeadlineExceeded && reasonOf(err) == policy.ReasonCaller.String() && len(recs) == 1
}

// The timer of a call's last attempt meets its answer: whichever comes
// first, no retry can go, so the attempt runs on and its answer is the
// call's: OK, never DEADLINE_EXCEEDED, and the server's last attempt is
// never cancelled. The first attempt hangs and is cut off (a retry can go
// then); the second, the last of 2, answers around its timer.
//
// On a loaded machine the first attempt can be cut off before it reached
// the server, which then counts the second as its first and delays it a
// minute: that last attempt runs on to the caller's deadline, rightly. The
// test accepts it when the server saw one attempt, and requires
// rtMinHealthy calls to take the path under test (rtBatches).
func TestRealTimeTimerLastAttemptRunsOn(t *testing.T) {
	srv, client := rtBench(t, rtFile)
	rtBatches(t, "calls", func(i int) (took bool) {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		defer cancel()
		key := fmt.Sprint("last-", i)
		sc := &testingv1.Script{Key: key, AttemptDelays: []*durationpb.Duration{durationpb.New(time.Minute), durationpb.New(rtSpread(i))}}
		_, err := client.Get(ctx, &testingv1.GetRequest{Script: sc}, interceptor.WithMaxAttempts(2))
		if err != nil && rtFirstAttemptLost(srv, key, err) {
			return
		}
		if err != nil {
			t.Errorf("call %d (last attempt answers after %v): %v (reason %q, %d attempts), want OK; the server's records %+v", i, rtSpread(i), err, reasonOf(err), interceptor.Attempts(err), srv.Attempts(key))
			return
		}
		took = true
		recs, err := rtAwaitDone(ctx, srv, key, 2)
		if err != nil || len(recs) != 2 {
			t.Errorf("call %d: the server's records %+v: %v, want 2 attempts", i, recs, err)
			return
		}
		if !recs[0].Cancelled {
			t.Errorf("call %d: first attempt %+v, want cut off", i, recs[0])
		}
		if recs[1].Cancelled || recs[1].Code != codes.OK {
			t.Errorf("call %d: last attempt %+v, want run on and answered OK", i, recs[1])
		}
		return
	})
}

// A budget that refuses every retry: the timer fires with no retry
// possible, so the first attempt runs on whether it answers just before or
// just after the timer; the budget is asked at most once per call and never
// pays for a retry that does not go.
func TestRealTimeTimerBudgetRefusesRunsOn(t *testing.T) {
	b := &streamRefusingBudget{}
	srv, client := rtBench(t, rtFile, interceptor.WithBudget(b))
	parallel(rtCalls, func(i int) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		key := fmt.Sprint("refused-", i)
		sc := &testingv1.Script{Key: key, Delay: durationpb.New(rtSpread(i))}
		_, err := client.Get(ctx, &testingv1.GetRequest{Script: sc})
		if err != nil {
			t.Errorf("call %d (answers after %v): %v (reason %q), want OK", i, rtSpread(i), err, reasonOf(err))
			return
		}
		recs, err := rtAwaitDone(ctx, srv, key, 1)
		if err != nil || len(recs) != 1 || recs[0].Cancelled || recs[0].Code != codes.OK {
			t.Errorf("call %d: the server's records %+v: %v, want one attempt answered OK", i, recs, err)
		}
	})
	b.mu.Lock()
	defer b.mu.Unlock()
	// rtBench's first call, which connects, counts too.
	if b.asked > rtCalls+1 {
		t.Errorf("the budget was asked %d times for %d calls, want at most once a call", b.asked, rtCalls+1)
	}
}

// rtLongPauseFile is rtFile with a 1s pause: under a 500ms deadline no
// retry can go once the 100ms timer fires.
const rtLongPauseFile = `{"methodConfig": [{
	"name": [{"service": "stagger.testing.v1.TestService"}],
	"idempotent": true,
	"retryPolicy": {"maxAttempts": 3, "initialBackoff": "1s", "maxBackoff": "1s",
		"backoffMultiplier": 1, "retryableStatusCodes": ["UNAVAILABLE"], "jitter": "NONE",
		"perAttemptRecvTimeout": "0.1s"}
}]}`

// The pause before a retry would outlast the caller's deadline: the timer
// lets the attempt run on, and it answers within the deadline.
func TestRealTimeTimerPausePastDeadlineRunsOn(t *testing.T) {
	srv, client := rtBench(t, rtLongPauseFile)
	parallel(rtCalls, func(i int) {
		ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
		defer cancel()
		key := fmt.Sprint("pause-", i)
		sc := &testingv1.Script{Key: key, Delay: durationpb.New(rtSpread(i) + 50*time.Millisecond)}
		_, err := client.Get(ctx, &testingv1.GetRequest{Script: sc})
		if err != nil {
			t.Errorf("call %d: %v (reason %q), want OK", i, err, reasonOf(err))
			return
		}
		wctx, wcancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer wcancel()
		recs, err := rtAwaitDone(wctx, srv, key, 1)
		if err != nil || len(recs) != 1 || recs[0].Cancelled {
			t.Errorf("call %d: the server's records %+v: %v, want one attempt, run on", i, recs, err)
		}
	})
}

// A server stream whose last attempt's first message meets the timer: the
// attempt runs on either way, and every message arrives once, OK.
// As for unary calls, a first attempt lost before it reached the server
// makes the last one a minute long.
func TestRealTimeStreamTimerLastAttemptRunsOn(t *testing.T) {
	srv, client := rtBench(t, rtFile)
	const n = 5
	rtBatches(t, "streams", func(i int) (took bool) {
		key := fmt.Sprint("stream-last-", i)
		sc := &testingv1.Script{Key: key, ResponseCount: n, AttemptDelays: []*durationpb.Duration{durationpb.New(time.Minute), durationpb.New(rtSpread(i))}}
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		defer cancel()
		st, err := client.ListItems(ctx, &testingv1.ListItemsRequest{Script: sc}, interceptor.WithMaxAttempts(2))
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
			if err != nil && len(seqs) == 0 && rtFirstAttemptLost(srv, key, err) {
				return
			}
			if err != nil {
				t.Errorf("call %d (first message at %v): %v (reason %q) after %v, want every message once and OK; the server's records %+v", i, rtSpread(i), err, reasonOf(err), seqs, srv.Attempts(key))
				return
			}
			seqs = append(seqs, m.GetReply().GetSeq())
		}
		if !slices.Equal(seqs, []int64{1, 2, 3, 4, 5}) {
			t.Errorf("call %d: seqs %v, want 1..%d once each", i, seqs, n)
			return
		}
		took = true
		recs, err := rtAwaitDone(ctx, srv, key, 2)
		if err != nil || len(recs) != 2 || !recs[0].Cancelled || recs[1].Cancelled {
			t.Errorf("call %d: the server's records %+v: %v, want the first cut off, the second run on", i, recs, err)
		}
		return
	})
}

// rtHedgeTimerFile is rtFile with hedgeOnPerTryTimeout.
const rtHedgeTimerFile = `{"methodConfig": [{
	"name": [{"service": "stagger.testing.v1.TestService"}],
	"idempotent": true,
	"retryPolicy": {"maxAttempts": 3, "initialBackoff": "0.01s", "maxBackoff": "0.01s",
		"backoffMultiplier": 1, "retryableStatusCodes": ["UNAVAILABLE"], "jitter": "NONE",
		"perAttemptRecvTimeout": "0.1s", "hedgeOnPerTryTimeout": true}
}]}`

// hedgeOnPerTryTimeout over TCP, 2 attempts: the first attempt's timer
// fires at 100ms and the retry leaves 10ms later while the attempt runs on.
// Even calls: the slow first attempt answers from 5ms before the retry
// leaves to 5ms after (the answer, the timer and the retry race), and the
// retry hangs: the first attempt wins, always. Odd calls: the first attempt
// hangs and the retry answers at once: the retry wins. Exactly one attempt
// answers OK, its reply is the caller's, and every other attempt the server
// saw was cancelled by the client. (The server numbers attempts as they
// arrive, so the attempt that answers is the one its script names even if
// a loaded machine delivers the two out of order.)
func TestRealTimeHedgeOnPerTryTimeout(t *testing.T) {
	srv, client := rtBench(t, rtHedgeTimerFile)
	parallel(rtCalls, func(i int) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		key := fmt.Sprint("hedge-timer-", i)
		ds := []time.Duration{rtSpread(i) + rtPause, time.Minute}
		want := int32(1)
		if i%2 == 1 {
			ds, want = []time.Duration{time.Minute, 0}, 2
		}
		sc := &testingv1.Script{Key: key, AttemptDelays: []*durationpb.Duration{durationpb.New(ds[0]), durationpb.New(ds[1])}}
		reply, err := client.Get(ctx, &testingv1.GetRequest{Script: sc}, interceptor.WithMaxAttempts(2))
		if err != nil {
			t.Errorf("call %d (delays %v): %v (reason %q, %d attempts), want OK; the server's records %+v", i, ds, err, reasonOf(err), interceptor.Attempts(err), srv.Attempts(key))
			return
		}
		got := reply.GetReply().GetAttempt()
		recs, err := srv.Await(ctx, key, func(recs []testserver.AttemptRecord) bool {
			for _, r := range recs {
				if !r.Done {
					return false
				}
			}
			return len(recs) >= int(got)
		})
		if err != nil {
			t.Errorf("call %d: the server's records %+v: %v", i, recs, err)
			return
		}
		oks := 0
		for _, r := range recs {
			switch {
			case r.Code == codes.OK && !r.Cancelled:
				oks++
				if r.Attempt != int(got) {
					t.Errorf("call %d: attempt %d answered OK, but the caller got attempt %d's reply", i, r.Attempt, got)
				}
			case !r.Cancelled:
				t.Errorf("call %d: attempt %+v, want cancelled by the client or OK", i, r)
			}
		}
		if oks != 1 {
			t.Errorf("call %d: %d attempts answered OK %+v, want 1", i, oks, recs)
		}
		if got != want {
			t.Errorf("call %d (delays %v): the reply of attempt %d, want %d", i, ds, got, want)
		}
	})
}

// A busy process (a call every 20ms) and a server slow for every attempt
// (250ms each, against rtFile's 100ms timer): while the attempts sent
// after a timed-out one are unanswered too, the timer waits another
// period instead of cutting it off, and a retry goes only as the method's
// scout (one at a time, after gaps of 100ms, 200ms, 400ms...) or when
// nothing was sent after it (the last calls). So every call is answered,
// by an attempt that ran on in nearly every case, and at most a fifth of
// the calls lose an attempt to the timer; without the rule every call's
// first two attempts were cut off. The order of the real events (answers,
// timers, sends) moves under load; the bound holds whatever it is.
func TestRealTimeTimerSlowForAll(t *testing.T) {
	srv, client := rtBench(t, rtFile)
	spaced(rtCalls, 20*time.Millisecond, func(i int) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		key := fmt.Sprint("slow-for-all-", i)
		sc := &testingv1.Script{Key: key, Delay: durationpb.New(250 * time.Millisecond)}
		if _, err := client.Get(ctx, &testingv1.GetRequest{Script: sc}); err != nil {
			t.Errorf("call %d: %v (reason %q, %d attempts), want OK", i, err, reasonOf(err), interceptor.Attempts(err))
		}
	})
	cut := 0
	wctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for i := range rtCalls {
		recs, err := rtAwaitDone(wctx, srv, fmt.Sprint("slow-for-all-", i), 1)
		if err != nil {
			t.Fatalf("call %d: the server's records %+v: %v", i, recs, err)
		}
		for _, r := range recs {
			if r.Cancelled {
				cut++
			}
		}
	}
	t.Logf("%d attempts cut off for %d calls", cut, rtCalls)
	if cut > rtCalls/5 {
		t.Errorf("%d attempts cut off for %d calls, want at most %d", cut, rtCalls, rtCalls/5)
	}
}

// TestRealTimeStragglerCut is TestStragglerCutUnpaid over loopback TCP on
// real time: a quiet process (5 calls/s), the first attempt of calls 2, 7,
// 12 and 17 answers after 900 ms and every other attempt at once, a 300 ms
// per-attempt timeout, a budget that never holds the timeout retry's cost
// (10 tokens, 9 held, a success adds 0.01). Each straggler is cut off when
// its timer fires (the method's latest attempt was served at once) and its
// retry goes unpaid (the Gate's heal rule): the call ends in about 320 ms,
// not 900, and the budget refunds nothing. The times are twice
// stragglerFile's: an answer "at once" must take under half the timeout
// (stragglerFastPart), and at -cpu=1 beside a CPU hog with the race
// detector, one of loopback took over 75 ms in about one run in three.
func TestRealTimeStragglerCut(t *testing.T) {
	s := budget.DefaultSettings()
	s.TokenBucket.Capacity, s.TokenBucket.SuccessReward = 10, 0.01
	b, err := budget.New(s)
	if err != nil {
		t.Fatal(err)
	}
	srv, client := rtBench(t, strings.Replace(stragglerFile, `"0.15s"`, `"0.3s"`, 1), interceptor.WithBudget(b))
	const calls = 20
	straggler := func(i int) bool { return i%5 == 2 }
	took := make([]time.Duration, calls)
	reports := make([]interceptor.Report, calls)
	spaced(calls, 200*time.Millisecond, func(i int) {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		sc := &testingv1.Script{Key: fmt.Sprint("straggler-", i)}
		if straggler(i) {
			sc.AttemptDelays = delays(900*time.Millisecond, 0)
		}
		start := time.Now()
		if _, err := client.Get(ctx, &testingv1.GetRequest{Script: sc}, interceptor.WithReport(&reports[i])); err != nil {
			t.Errorf("call %d: %v (reason %q), want OK", i, err, reasonOf(err))
		}
		took[i] = time.Since(start)
	})
	wctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for i := range calls {
		recs, err := rtAwaitDone(wctx, srv, fmt.Sprint("straggler-", i), 1)
		if err != nil {
			t.Fatalf("call %d: the server's records %+v: %v", i, recs, err)
		}
		if !straggler(i) {
			continue
		}
		if len(recs) != 2 || !recs[0].Cancelled || reports[i].TimerRefused != 0 || took[i] >= 900*time.Millisecond {
			t.Errorf("call %d: %d attempts (first cut off: %v), TimerRefused %d, took %v; want 2, the first cut off, 0, under 900ms", i, len(recs), len(recs) > 0 && recs[0].Cancelled, reports[i].TimerRefused, took[i])
		}
	}
	// rtBench's call, 16 first attempts and 4 healed retries succeeded,
	// 0.01 each; a refund would have filled the bucket.
	if got, want := b.State().Level, 9+0.01*21; got < want-1e-9 || got > want+1e-9 {
		t.Errorf("budget level %v, want %v: no refund of an unpaid retry", got, want)
	}
}

// A timed attempt's reply meets the decision that cuts it off (the end of
// its grace: the timer, then the 10ms pause): the first attempt answers
// OK from 5ms before that time to 5ms after, the second at once. The loop
// judges the attempt by when it ended against the decision's due time,
// whichever of the two events reached it first, and the caller sees one
// attempt's answer: its reply, its header and its peer, with the Report
// counting up to that attempt and OnFinish run once. An attempt the caller
// got the reply of was not cancelled at the server. The reply names the
// attempt by the server's count, so the attempt is told by the record's
// grpc-previous-rpc-attempts (rtClientAttempt): on a loaded machine the
// first attempt can be cut off before it reached the server.
func TestRealTimeTimerMeetsReply(t *testing.T) {
	srv, client := rtBench(t, rtFile)
	var cutOff, unsent atomic.Int32
	rtBatches(t, "calls", func(i int) (took bool) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		key := fmt.Sprint("meets-", i)
		first := rtSpread(i) + rtPause
		// Headers with the reply: sent first, they would commit the attempt
		// (TestRealTimeHeadersMeetTimer races them with the timer).
		sc := &testingv1.Script{Key: key, AttemptDelays: []*durationpb.Duration{durationpb.New(first), durationpb.New(0)}}
		var rep interceptor.Report
		var header metadata.MD
		var p peer.Peer
		var finished atomic.Int32
		reply, err := client.Get(ctx, &testingv1.GetRequest{Script: sc}, interceptor.WithMaxAttempts(2), interceptor.WithReport(&rep),
			grpc.Header(&header), grpc.Peer(&p), grpc.OnFinish(func(error) { finished.Add(1) }))
		if err != nil {
			t.Errorf("call %d (first answers after %v): %v (reason %q), want OK; the server's records %+v", i, first, err, reasonOf(err), srv.Attempts(key))
			return
		}
		arrived := int(reply.GetReply().GetAttempt())
		recs, err := rtAwaitDone(ctx, srv, key, arrived)
		if err != nil || arrived < 1 || len(recs) < arrived {
			t.Errorf("call %d: the reply of the server's attempt %d; the server's records %+v: %v", i, arrived, recs, err)
			return
		}
		r := recs[arrived-1]
		got := rtClientAttempt(r)
		if got != rep.Attempts || header == nil || p.Addr == nil || finished.Load() != 1 {
			t.Errorf("call %d: the reply of attempt %d, Report.Attempts %d, header %v, peer %v, OnFinish ran %d times; want one attempt's answer, the Report counting to it, OnFinish once; the server's records %+v",
				i, got, rep.Attempts, header, p.Addr, finished.Load(), recs)
		}
		if r.Cancelled || r.Code != codes.OK {
			t.Errorf("call %d: the caller got the reply of attempt %+v, want one the server answered OK", i, r)
		}
		if got == 2 {
			cutOff.Add(1)
		}
		// The path under test: the first attempt reached the server and
		// its answer met the cut.
		if rtClientAttempt(recs[0]) != 1 {
			unsent.Add(1)
			return false
		}
		return got <= 2
	})
	t.Logf("%d calls had their first attempt cut off, %d of them before it reached the server", cutOff.Load(), unsent.Load())
}

// A first attempt cut off before it reached the server (held in the client
// until the timer cuts it, as a loaded machine's transport can hold it):
// the retry is the only attempt the server sees, and numbers it 1 in its
// reply. The caller gets the retry's answer with the Report counting both
// attempts sent, as TestRealTimeTimerMeetsReply judges it (rtClientAttempt).
func TestRealTimeTimerCutsUnsentAttempt(t *testing.T) {
	hold := func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		r, _ := req.(*testingv1.GetRequest)
		if md, _ := metadata.FromOutgoingContext(ctx); strings.HasPrefix(r.GetScript().GetKey(), "unsent-") && len(md.Get("grpc-previous-rpc-attempts")) == 0 {
			<-ctx.Done()
			return status.FromContextError(ctx.Err()).Err()
		}
		return invoker(ctx, method, req, reply, cc, opts...)
	}
	srv, client := rtBenchDial(t, rtFile, []grpc.DialOption{grpc.WithChainUnaryInterceptor(hold)})
	parallel(rtCalls, func(i int) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		key := fmt.Sprint("unsent-", i)
		var rep interceptor.Report
		var header metadata.MD
		var p peer.Peer
		var finished atomic.Int32
		reply, err := client.Get(ctx, &testingv1.GetRequest{Script: &testingv1.Script{Key: key, HeadersFirst: true}}, interceptor.WithMaxAttempts(2), interceptor.WithReport(&rep),
			grpc.Header(&header), grpc.Peer(&p), grpc.OnFinish(func(error) { finished.Add(1) }))
		if err != nil {
			t.Errorf("call %d: %v (reason %q), want OK; the server's records %+v", i, err, reasonOf(err), srv.Attempts(key))
			return
		}
		recs, err := rtAwaitDone(ctx, srv, key, 1)
		if err != nil || len(recs) != 1 || reply.GetReply().GetAttempt() != 1 {
			t.Errorf("call %d: the reply of the server's attempt %d; the server's records %+v: %v; want one attempt, its first", i, reply.GetReply().GetAttempt(), recs, err)
			return
		}
		if got := rtClientAttempt(recs[0]); got != 2 || rep.Attempts != 2 || rep.Retries != 1 || header == nil || p.Addr == nil || finished.Load() != 1 {
			t.Errorf("call %d: the reply of attempt %d, Report.Attempts %d (retries %d), header %v, peer %v, OnFinish ran %d times; want the retry's answer, the Report counting 2 attempts, OnFinish once",
				i, got, rep.Attempts, rep.Retries, header, p.Addr, finished.Load())
		}
		if r := recs[0]; r.Cancelled || r.Code != codes.OK {
			t.Errorf("call %d: the caller got the reply of attempt %+v, want one the server answered OK", i, r)
		}
	})
}

//go:build go1.25

package interceptor

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/emptypb"
)

// Issue 90: a call ends once, on every path, unary and stream alike.

// caseServer serves the test service by the case the client names in
// its x-case header: "ok" answers, "fail" fails UNAVAILABLE, "hang" waits
// for the call's end, "retried" fails the first attempt and answers the
// next, "hedged" leaves the first attempt hanging and answers the next.
func caseServer(t *testing.T) *grpc.ClientConn {
	return bufconnServe(t, func(_ any, ss grpc.ServerStream) error {
		md, _ := metadata.FromIncomingContext(ss.Context())
		what := "ok"
		if v := md.Get("x-case"); len(v) > 0 {
			what = v[len(v)-1] // the last one named
		}
		n := serverAttempt(ss)
		switch {
		case what == "fail" || what == "retried" && n == 1:
			return status.Error(codes.Unavailable, "the server's failure")
		case what == "hang" || what == "hedged" && n == 1:
			<-ss.Context().Done()
			return status.FromContextError(ss.Context().Err()).Err()
		}
		if err := ss.RecvMsg(new(emptypb.Empty)); err != nil {
			return err
		}
		return ss.SendMsg(&emptypb.Empty{})
	})
}

const (
	endRetry = `"idempotent": true, "retryPolicy": {"maxAttempts": 2, "initialBackoff": "0.001s", "maxBackoff": "0.001s", "backoffMultiplier": 1, "retryableStatusCodes": ["UNAVAILABLE"]}`
	endHedge = `"idempotent": true, "hedgingPolicy": {"maxAttempts": 2, "hedgingDelay": "0.001s", "nonFatalStatusCodes": ["UNAVAILABLE"]}`
)

// TestOnFinishOncePerCall: grpc.OnFinish runs exactly once per call, with
// the status the caller got, and the call hooks hear one EventEnd, on every
// path, for a unary call and a stream.
func TestOnFinishOncePerCall(t *testing.T) {
	cc := caseServer(t)
	for _, tc := range []struct {
		name, server string
		cfg          string // the file's members ("": no file)
		opts         func() []Option
		timeout      time.Duration // the caller's (0: none)
		cancelAfter  time.Duration // the caller cancels after (0: never)
		code         codes.Code
	}{
		{name: "success", server: "ok", cfg: end90Entry(endRetry)},
		{name: "retried", server: "retried", cfg: end90Entry(endRetry)},
		{name: "hedged", server: "hedged", cfg: end90Entry(endHedge)},
		{name: "failure", server: "fail", cfg: end90Entry(endRetry), code: codes.Unavailable},
		{name: "cancel", server: "hang", cfg: end90Entry(endRetry), cancelAfter: 20 * time.Millisecond, code: codes.Canceled},
		{name: "cancel hedged", server: "hang", cfg: end90Entry(endHedge), cancelAfter: 20 * time.Millisecond, code: codes.Canceled},
		{name: "deadline", server: "hang", cfg: end90Entry(endRetry), timeout: 20 * time.Millisecond, code: codes.DeadlineExceeded},
		{name: "breaker", server: "ok", cfg: end90Entry(endRetry), code: codes.Unavailable,
			opts: func() []Option { return []Option{WithBreakers(openBreaker(t, cc, end90Method))} }},
		{name: "switch", server: "fail", cfg: `"disabled": true, ` + end90Entry(endRetry), code: codes.Unavailable},
		{name: "budget", server: "fail", cfg: end90Entry(endRetry), code: codes.Unavailable,
			opts: func() []Option { return []Option{WithBudget(refusingBudget{})} }},
		{name: "no policy", server: "fail", code: codes.Unavailable},
		{name: "no policy ok", server: "ok"},
	} {
		for _, stream := range []bool{false, true} {
			name := tc.name + "/unary"
			if stream {
				name = tc.name + "/stream"
			}
			t.Run(name, func(t *testing.T) {
				var ends atomic.Int32
				opts := []Option{WithCallHook(func(_ context.Context, e Event) {
					if e.Kind == EventEnd {
						ends.Add(1)
					}
				})}
				if tc.cfg != "" {
					opts = append(opts, WithConfig(end90File(t, tc.cfg)))
				}
				if tc.opts != nil {
					opts = append(opts, tc.opts()...)
				}
				ctx, cancel := context.WithCancel(metadata.AppendToOutgoingContext(context.Background(), "x-case", tc.server))
				defer cancel()
				if tc.timeout > 0 {
					ctx, cancel = context.WithTimeout(ctx, tc.timeout)
					defer cancel()
				}
				if tc.cancelAfter > 0 {
					time.AfterFunc(tc.cancelAfter, cancel)
				}
				var f finishes
				var err error
				if stream {
					var cs grpc.ClientStream
					if cs, err = StreamClientInterceptor(opts...)(ctx, end90Desc, cc, end90Method, streamerOf(cc), f.option()); err == nil {
						err = readAll(cs)
					}
				} else {
					err = UnaryClientInterceptor(opts...)(ctx, end90Method, &emptypb.Empty{}, &emptypb.Empty{}, cc, invokeOf, f.option())
				}
				if status.Code(err) != tc.code {
					t.Fatalf("the call returned %v, want %v", err, tc.code)
				}
				f.once(t, name, err)
				if n := ends.Load(); n != 1 {
					t.Errorf("the hooks heard %d EventEnd, want 1", n)
				}
			})
		}
	}
}

// end90Entry is a methodConfig of one entry for the test service.
func end90Entry(entry string) string {
	return `"methodConfig": [{"name": [{"service": "stagger.testing.v1.TestService"}], ` + entry + `}]`
}

// TestNothingOutlivesAStream: after each of many hedged and retried
// streams (some cancelled, some timed out, some refused by the breaker),
// nothing of the stream runs: no call is in an attempt's stream (behind a
// slow interceptor), the budget has heard every attempt opened, and no
// goroutine is left (goleak).
func TestNothingOutlivesAStream(t *testing.T) {
	n := 500
	if testing.Short() {
		n = 50
	}
	cc := caseServer(t)
	var active, opened atomic.Int32
	streamer := func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, opts ...grpc.CallOption) (grpc.ClientStream, error) {
		opened.Add(1)
		cs, err := cc.NewStream(ctx, desc, method, opts...)
		if err != nil {
			return nil, err
		}
		return slowEnd{cs, ctx, &active, time.Millisecond}, nil
	}
	for _, kind := range []struct{ name, entry, server string }{
		{"hedged", endHedge, "hedged"},
		{"retried", endRetry, "retried"},
	} {
		t.Run(kind.name, func(t *testing.T) {
			cfg := end90File(t, end90Entry(kind.entry))
			b := new(recordCounter)
			opened.Store(0)
			k := StreamClientInterceptor(WithConfig(cfg), WithBudget(b))
			refused := StreamClientInterceptor(WithConfig(cfg), WithBudget(b), WithBreakers(openBreaker(t, cc, end90Method)))
			base := metadata.AppendToOutgoingContext(context.Background(), "x-case", kind.server)
			if cs, err := k(base, end90Desc, cc, end90Method, streamer); err != nil || readAll(cs) != nil {
				t.Fatalf("warm-up stream: %v", err)
			}
			ignore := goleak.IgnoreCurrent()
			for i := range n {
				ctx, cancel := context.WithCancel(base)
				interceptor, want := k, codes.OK
				switch i % 4 {
				case 1:
					ctx = metadata.AppendToOutgoingContext(ctx, "x-case", "hang")
					time.AfterFunc(2*time.Millisecond, cancel)
					want = codes.Canceled
				case 2:
					ctx = metadata.AppendToOutgoingContext(ctx, "x-case", "hang")
					ctx, cancel = context.WithTimeout(ctx, 2*time.Millisecond)
					want = codes.DeadlineExceeded
				case 3:
					interceptor, want = refused, codes.Unavailable
				}
				var err error
				var cs grpc.ClientStream
				if cs, err = interceptor(ctx, end90Desc, cc, end90Method, streamer); err == nil {
					err = readAll(cs)
				}
				if a, got, sent := active.Load(), b.n.Load(), opened.Load(); a != 0 || got != sent {
					t.Fatalf("stream %d (%v) ended with %d calls in its attempts' streams, the budget told of %d attempts of %d", i, err, a, got, sent)
				}
				cancel()
				if status.Code(err) != want {
					t.Fatalf("stream %d: %v, want %v", i, err, want)
				}
				if err := goleak.Find(ignore); err != nil {
					t.Fatalf("after stream %d: %v", i, err)
				}
			}
		})
	}
}

// TestAbandonedStreamOnFinishOnce: a stream whose caller cancels it and
// never reads it ends once, by its abandon watch: OnFinish runs once with
// CANCELED, the status RecvMsg then returns, retried or hedged.
func TestAbandonedStreamOnFinishOnce(t *testing.T) {
	cc := caseServer(t)
	for _, kind := range []struct{ name, entry string }{{"retried", endRetry}, {"hedged", endHedge}} {
		t.Run(kind.name, func(t *testing.T) {
			ran := make(chan error, 2)
			ctx, cancel := context.WithCancel(metadata.AppendToOutgoingContext(context.Background(), "x-case", "hang"))
			k := StreamClientInterceptor(WithConfig(end90File(t, end90Entry(kind.entry))))
			cs, err := k(ctx, end90Desc, cc, end90Method, streamerOf(cc), grpc.OnFinish(func(err error) { ran <- err }))
			if err != nil {
				t.Fatal(err)
			}
			if err := cs.SendMsg(&emptypb.Empty{}); err != nil {
				t.Fatal(err)
			}
			cancel()
			var got error
			select {
			case got = <-ran:
			case <-time.After(10 * time.Second):
				t.Fatal("OnFinish never ran for the abandoned stream")
			}
			err = cs.RecvMsg(new(emptypb.Empty))
			if status.Code(got) != codes.Canceled || status.Code(err) != codes.Canceled {
				t.Errorf("OnFinish got %v, RecvMsg %v; want CANCELED for both", got, err)
			}
			select {
			case again := <-ran:
				t.Errorf("OnFinish ran again, with %v", again)
			default:
			}
		})
	}
}

package interceptor

import (
	"context"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/emptypb"
)

// Issue 90's defects 4 and 5: with HeaderWatch installed, a unary attempt
// whose headers arrived commits the call at once (gRFC A6; grpc C-core's
// per-attempt timer). Real gRPC over bufconn, in real time.

// headersThenLate serves attempt 1 its headers at once and its reply after
// late (or the end of its context); any other attempt answers at once.
// served counts the attempts.
func headersThenLate(served *atomic.Int32, late time.Duration) grpc.StreamHandler {
	return func(_ any, ss grpc.ServerStream) error {
		served.Add(1)
		if err := ss.RecvMsg(new(emptypb.Empty)); err != nil {
			return err
		}
		n := serverAttempt(ss)
		if err := ss.SendHeader(metadata.Pairs("x-attempt", strconv.Itoa(n))); err != nil {
			return err
		}
		if n == 1 {
			select {
			case <-time.After(late):
			case <-ss.Context().Done():
				return status.FromContextError(ss.Context().Err()).Err()
			}
		}
		return ss.SendMsg(&emptypb.Empty{})
	}
}

// TestHeadersCommitUnary: the first attempt's headers, sent at once, commit
// the call: no hedge leaves after them (defect 4), and the per-attempt
// timer stops (defect 5): the call returns the first attempt's late reply.
// A call with an idempotency key keeps its exception: its headers commit
// nothing, and the timer cuts the attempt off.
func TestHeadersCommitUnary(t *testing.T) {
	var served atomic.Int32
	cc := bufconnServe(t, headersThenLate(&served, 300*time.Millisecond), grpc.WithStatsHandler(HeaderWatch()))
	timer := `"idempotent": true, "retryPolicy": {"maxAttempts": 2, "initialBackoff": "0.001s", "maxBackoff": "0.001s", "backoffMultiplier": 1, "retryableStatusCodes": ["UNAVAILABLE"], "perAttemptRecvTimeout": "0.05s"}`
	for _, tc := range []struct {
		name, entry string
		key         bool
		attempts    int
	}{
		{"hedge", `"idempotent": true, "hedgingPolicy": {"maxAttempts": 2, "hedgingDelay": "0.05s", "nonFatalStatusCodes": ["UNAVAILABLE"]}`, false, 1},
		{"timer", timer, false, 1},
		{"timer with a key", timer, true, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			served.Store(0)
			var rep Report
			var header metadata.MD
			opts := []Option{WithConfig(end90Config(t, tc.entry)), WithBudget(nil)}
			if tc.key {
				opts = append(opts, WithIdempotencyKey("x-key"))
			}
			k := UnaryClientInterceptor(opts...)
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			err := k(ctx, end90Method, &emptypb.Empty{}, new(emptypb.Empty), cc, invokeOf, grpc.Header(&header), WithReport(&rep))
			want := strconv.Itoa(tc.attempts)
			if got := header.Get("x-attempt"); err != nil || rep.Attempts != tc.attempts || len(got) != 1 || got[0] != want {
				t.Errorf("call: %v after %d attempts, headers %v; want attempt %s's answer", err, rep.Attempts, header, want)
			}
			if got := served.Load(); int(got) != tc.attempts {
				t.Errorf("the server saw %d attempts, want %d", got, tc.attempts)
			}
		})
	}
}

// TestHeadersCommitCancelsHedges: hedges in flight when an attempt's
// headers arrive are cancelled then, not when it ends: attempt 1 sends its
// headers once both hedges reached the server, and its reply only once
// they were cancelled (or after 2 s).
func TestHeadersCommitCancelsHedges(t *testing.T) {
	arrived, cancelled := make(chan int, 2), make(chan int, 2)
	var cancelledFirst atomic.Bool
	cc := bufconnServe(t, func(_ any, ss grpc.ServerStream) error {
		if err := ss.RecvMsg(new(emptypb.Empty)); err != nil {
			return err
		}
		n := serverAttempt(ss)
		if n > 1 {
			arrived <- n
			<-ss.Context().Done()
			cancelled <- n
			return status.FromContextError(ss.Context().Err()).Err()
		}
		<-arrived
		<-arrived
		if err := ss.SendHeader(metadata.Pairs("x-attempt", "1")); err != nil {
			return err
		}
		giveUp := time.After(2 * time.Second)
		for range 2 {
			select {
			case <-cancelled:
			case <-giveUp:
				return ss.SendMsg(&emptypb.Empty{})
			}
		}
		cancelledFirst.Store(true)
		return ss.SendMsg(&emptypb.Empty{})
	}, grpc.WithStatsHandler(HeaderWatch()))
	var rep Report
	var header metadata.MD
	k := UnaryClientInterceptor(WithConfig(end90Config(t, `"idempotent": true, "hedgingPolicy": {"maxAttempts": 3, "hedgingDelay": "0.02s", "nonFatalStatusCodes": ["UNAVAILABLE"]}`)), WithBudget(nil))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err := k(ctx, end90Method, &emptypb.Empty{}, new(emptypb.Empty), cc, invokeOf, grpc.Header(&header), WithReport(&rep))
	if got := header.Get("x-attempt"); err != nil || rep.Attempts != 3 || len(got) != 1 || got[0] != "1" {
		t.Errorf("call: %v after %d attempts, headers %v; want attempt 1's answer after 3", err, rep.Attempts, header)
	}
	if !cancelledFirst.Load() {
		t.Error("the hedges ran on after attempt 1's headers arrived")
	}
}

// TestHeadersCommitBeside: with hedgeOnPerTryTimeout, headers of an attempt
// that runs beside its retry commit the call to it: the retry is cancelled,
// and no third attempt goes.
func TestHeadersCommitBeside(t *testing.T) {
	arrived, cancelled := make(chan struct{}, 1), make(chan struct{}, 1)
	var served atomic.Int32
	var cancelledFirst atomic.Bool
	cc := bufconnServe(t, func(_ any, ss grpc.ServerStream) error {
		served.Add(1)
		if err := ss.RecvMsg(new(emptypb.Empty)); err != nil {
			return err
		}
		switch serverAttempt(ss) {
		case 1:
			select {
			case <-arrived:
			case <-time.After(2 * time.Second):
			}
			if err := ss.SendHeader(metadata.Pairs("x-attempt", "1")); err != nil {
				return err
			}
			select {
			case <-cancelled:
				cancelledFirst.Store(true)
			case <-time.After(2 * time.Second):
			}
			time.Sleep(150 * time.Millisecond) // past the retry's timer
			return ss.SendMsg(&emptypb.Empty{})
		case 2:
			arrived <- struct{}{}
			<-ss.Context().Done()
			cancelled <- struct{}{}
			return status.FromContextError(ss.Context().Err()).Err()
		}
		return ss.SendMsg(&emptypb.Empty{})
	}, grpc.WithStatsHandler(HeaderWatch()))
	var rep Report
	var header metadata.MD
	k := UnaryClientInterceptor(WithConfig(end90Config(t, `"idempotent": true, "retryPolicy": {"maxAttempts": 3, "initialBackoff": "0.001s", "maxBackoff": "0.001s", "backoffMultiplier": 1, "retryableStatusCodes": ["UNAVAILABLE"], "perAttemptRecvTimeout": "0.05s", "hedgeOnPerTryTimeout": true}`)), WithBudget(nil))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err := k(ctx, end90Method, &emptypb.Empty{}, new(emptypb.Empty), cc, invokeOf, grpc.Header(&header), WithReport(&rep))
	if got := header.Get("x-attempt"); err != nil || len(got) != 1 || got[0] != "1" {
		t.Errorf("call: %v after %d attempts, headers %v; want attempt 1's answer", err, rep.Attempts, header)
	}
	if n := served.Load(); n != 2 || !cancelledFirst.Load() {
		t.Errorf("the server saw %d attempts, want 2 (the retry cancelled at attempt 1's headers)", n)
	}
}

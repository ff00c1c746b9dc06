package interceptor

import (
	"context"
	"errors"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

func TestAttemptTimerFiredAndStoppedExclude(t *testing.T) {
	// Stopped first: the timer never fires, the attempt was not cut off.
	at := startAttemptTimer(context.Background(), time.Hour)
	if !at.stop() {
		t.Fatal("stop on an armed timer = false, want true")
	}
	if !at.stop() {
		t.Fatal("stop on a stopped timer = false, want true")
	}
	at.fire() // a late fire changes nothing
	if at.ctx.Err() != nil || !at.stop() {
		t.Fatalf("after stop then fire: ctx.Err() = %v, stop() = %v; want nil, true", at.ctx.Err(), at.stop())
	}
	at.cancel()

	// Fired first: the attempt's context is cancelled and stop says so.
	at = startAttemptTimer(context.Background(), time.Hour)
	at.fire()
	if at.stop() || at.ctx.Err() == nil {
		t.Fatalf("after fire: stop() = true or ctx.Err() = nil (%v); want false and cancelled", at.ctx.Err())
	}
	at.cancel()

	// A nil timer (no per-attempt timeout) never cuts an attempt off.
	var none *attemptTimer
	if !none.stop() {
		t.Fatal("nil timer stop() = false, want true")
	}

	// The timer is not a deadline: the server sees the parent's.
	parent, cancel := context.WithTimeout(context.Background(), time.Hour)
	defer cancel()
	at = startAttemptTimer(parent, time.Millisecond)
	defer at.cancel()
	want, _ := parent.Deadline()
	if got, ok := at.ctx.Deadline(); !ok || !got.Equal(want) {
		t.Fatalf("attempt deadline = %v, %v; want the caller's %v", got, ok, want)
	}
}

func TestAttemptOutcome(t *testing.T) {
	// Each row gets a fresh context, so that a deadline 500µs away is still
	// ahead when the row runs (or, on a slow machine, just past: see racy).
	type mkCtx func() (context.Context, context.CancelFunc)
	far := func() (context.Context, context.CancelFunc) {
		return context.WithTimeout(context.Background(), time.Hour)
	}
	near := func() (context.Context, context.CancelFunc) {
		return context.WithDeadline(context.Background(), time.Now().Add(500*time.Microsecond))
	}
	passed := func() (context.Context, context.CancelFunc) {
		return context.WithDeadline(context.Background(), time.Now().Add(-time.Second))
	}
	cancelled := func() (context.Context, context.CancelFunc) {
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		return ctx, cancel
	}

	server := func(c codes.Code) error { return status.Error(c, "from the server") }
	tests := []struct {
		name       string
		ctx        mkCtx
		err        error
		cutOff     bool
		wantCode   codes.Code
		wantSame   bool // the attempt's own error comes back unchanged
		wantTimed  bool
		wantCaller bool
	}{
		{"success", far, nil, false, codes.OK, true, false, false},
		{"success after the timer fired is a success", far, nil, true, codes.OK, true, false, false},
		{"server status, deadline far", far, server(codes.Unavailable), false, codes.Unavailable, true, false, false},
		{"server DEADLINE_EXCEEDED, deadline far: the server's own", far, server(codes.DeadlineExceeded), false, codes.DeadlineExceeded, true, false, false},
		{"cut off by the timer", far, server(codes.Canceled), true, codes.DeadlineExceeded, false, true, false},
		{"server DEADLINE_EXCEEDED within 1 ms of the caller's deadline", near, server(codes.DeadlineExceeded), false, codes.DeadlineExceeded, true, false, true},
		{"CANCELED within 1 ms of the caller's deadline", near, server(codes.Canceled), false, codes.DeadlineExceeded, false, false, true},
		{"timer and deadline together: the caller's", near, server(codes.Canceled), true, codes.DeadlineExceeded, false, false, true},
		{"CANCELED after the deadline passed", passed, server(codes.Canceled), false, codes.DeadlineExceeded, false, false, true},
		{"server status as the deadline passed is kept", passed, server(codes.InvalidArgument), false, codes.InvalidArgument, true, false, true},
		{"the caller cancelled", cancelled, server(codes.Canceled), false, codes.Canceled, true, false, true},
		{"the caller cancelled during the timer", cancelled, server(codes.DeadlineExceeded), true, codes.Canceled, false, false, true},
		{"UNAVAILABLE within 1 ms of the deadline is the server's", near, server(codes.Unavailable), false, codes.Unavailable, true, false, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx, cancel := tt.ctx()
			defer cancel()
			err, timed := attemptOutcome(ctx, tt.err, tt.cutOff)
			if status.Code(err) != tt.wantCode || timed != tt.wantTimed {
				t.Errorf("attemptOutcome = %v, %v; want code %v, timed out %v", err, timed, tt.wantCode, tt.wantTimed)
			}
			if tt.wantSame && !errors.Is(err, tt.err) && err != tt.err {
				t.Errorf("attemptOutcome = %v, want the attempt's own %v", err, tt.err)
			}
			// A non-context code is the caller's only once its context is
			// done: a row whose 500µs passed while it ran says nothing.
			racy := !tt.wantCaller && ctx.Err() != nil
			if got := tt.err != nil && callerEnded(ctx, tt.err); got != tt.wantCaller && !racy {
				t.Errorf("callerEnded = %v, want %v", got, tt.wantCaller)
			}
		})
	}
}

func TestWireAmbiguous(t *testing.T) {
	ct := metadata.Pairs("content-type", "application/grpc")
	for _, tc := range []struct {
		name      string
		trailer   metadata.MD
		committed bool
		want      bool
	}{
		{"no stream: never left the client", nil, false, false},
		{"stream, transport ended it (empty trailer)", metadata.MD{}, false, true},
		{"stream, trailer of the server's own keys but no content-type", metadata.Pairs("x-server", "1"), false, true},
		{"Trailers-Only: the server wrote a status", ct, false, false},
		{"committed: final anyway", metadata.MD{}, true, false},
	} {
		if got := wireAmbiguous(tc.trailer, tc.committed); got != tc.want {
			t.Errorf("%s: wireAmbiguous = %v, want %v", tc.name, got, tc.want)
		}
	}
}

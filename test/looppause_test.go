//go:build go1.25

package test

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/stagger-go/stagger/interceptor"
	"github.com/stagger-go/stagger/policy"
	testingv1 "github.com/stagger-go/stagger/proto/stagger/testing/v1"
)

// TestUnaryPauseIsLoopEvent: a unary call's retry pause, inline (no
// per-attempt timer) or timed (one attempt at a time on a goroutine), is
// waited out whole before the retry leaves, or ends at once when the
// caller cancels in it; the Report's Delay is the time paused either way.
func TestUnaryPauseIsLoopEvent(t *testing.T) {
	for _, tc := range []struct {
		name  string
		file  string
		pause time.Duration
	}{
		{"inline", retryFile, time.Second},
		{"timed", perAttemptFile, 100 * time.Millisecond},
	} {
		t.Run(tc.name+"/waited out", func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				b := newBench(t, []interceptor.Option{interceptor.WithConfig(parse(t, tc.file))})
				var r interceptor.Report
				if err := b.get(context.Background(), &testingv1.Script{Key: "k", FailAttempts: 1}, interceptor.WithReport(&r)); err != nil {
					t.Fatalf("call: %v, want OK after one retry", err)
				}
				if g := gaps(b.attempts(t, "k")); len(g) != 1 || g[0] != tc.pause {
					t.Errorf("gaps between attempts %v, want [%v]", g, tc.pause)
				}
				if r.Attempts != 2 || r.Delay != tc.pause {
					t.Errorf("report: %d attempts, delay %v; want 2, %v", r.Attempts, r.Delay, tc.pause)
				}
			})
		})
		t.Run(tc.name+"/cancelled in it", func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				b := newBench(t, []interceptor.Option{interceptor.WithConfig(parse(t, tc.file))})
				ctx, cancel := context.WithCancel(context.Background())
				var r interceptor.Report
				done := make(chan error, 1)
				go func() { done <- b.get(ctx, &testingv1.Script{Key: "k", FailAttempts: 10}, interceptor.WithReport(&r)) }()
				if _, err := b.srv.AwaitAttempts(context.Background(), "k", 1); err != nil {
					t.Fatal(err)
				}
				synctest.Wait() // the client is in its pause
				time.Sleep(tc.pause / 4)
				at := time.Now()
				cancel()
				err := <-done
				if took := time.Since(at); took != 0 {
					t.Errorf("call returned %v after cancel, want at once", took)
				}
				if status.Code(err) != codes.Canceled {
					t.Errorf("code = %v, want CANCELED", status.Code(err))
				}
				if n := len(b.attempts(t, "k")); n != 1 {
					t.Errorf("server saw %d attempts, want 1", n)
				}
				if r.Attempts != 1 || r.Delay != tc.pause/4 || r.Reason != policy.ReasonCaller {
					t.Errorf("report: %d attempts, delay %v, reason %v; want 1, %v, caller", r.Attempts, r.Delay, r.Reason, tc.pause/4)
				}
			})
		})
	}
}

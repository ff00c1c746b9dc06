//go:build go1.25

package test

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

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
				var r interceptor.Report
				cancelInPause(t, b, tc.pause/4, interceptor.WithReport(&r))
				if r.Attempts != 1 || r.Delay != tc.pause/4 || r.Reason != policy.ReasonCaller {
					t.Errorf("report: %d attempts, delay %v, reason %v; want 1, %v, caller", r.Attempts, r.Delay, r.Reason, tc.pause/4)
				}
			})
		})
	}
}

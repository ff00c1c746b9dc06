package soak

import (
	"context"
	"testing"
	"time"
)

// TestGivingUp: a churn request's caller gives up at its first deferral,
// at once or after its moment, once; stop before the moment keeps the
// request alive.
func TestGivingUp(t *testing.T) {
	tests := []struct {
		name       string
		after      time.Duration
		stopFirst  bool
		wantCancel bool
	}{
		{"at once", 0, false, true},
		{"after a moment", time.Millisecond, false, true},
		{"stopped before its moment", time.Hour, true, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			calls := 0
			g := &givingUp{cancel: func() { calls++; cancel() }, after: tc.after}
			g.deferred()
			if tc.stopFirst {
				g.stop()
			}
			g.deferred() // a second deferral changes nothing
			select {
			case <-ctx.Done():
				if !tc.wantCancel {
					t.Fatal("the request was cancelled, want it alive")
				}
			case <-time.After(time.Second):
				if tc.wantCancel {
					t.Fatal("the request was not cancelled within a second")
				}
			}
			g.stop()
			if tc.wantCancel && calls != 1 {
				t.Fatalf("cancel called %d times, want 1", calls)
			}
		})
	}
	var none *givingUp
	none.stop() // not a churn request: nothing to stop
}

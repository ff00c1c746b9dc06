//go:build go1.25

// synctest needs the Go 1.23 timer channels: defer_synctest_test.go asks
// for them for the whole test binary.

package budget

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stagger-go/stagger/criticality"
)

// The criticality rule on the real clock's Wait, on virtual time: three calls wait
// through a failure; once the server is back, the release credits go to
// the most critical first, one a second, whichever goroutine wakes first.
func TestGateReleasesTheMostCriticalFirst(t *testing.T) {
	synctest.Test(t, checkReleaseOrder)
}

func equalLevels(a, b []criticality.Level) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// The criticality rule on the real clock's Wait: an evicted call's Wait returns
// errEvicted at once, not at its deadline.
func TestGateEvictionEndsTheWaitAtOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g, err := Deferring(&switchBudget{}, DeferSettings{MaxWaiting: 1})
		if err != nil {
			t.Fatal(err)
		}
		downServer(g)
		done := make(chan error, 1)
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			_, err := g.Wait(ctx, retryAt(shed), time.Second)
			done <- err
		}()
		synctest.Wait()
		start := time.Now()
		w, err := g.Enter(retryAt(crit), time.Second, time.Time{})
		if err != nil {
			t.Fatalf("CRITICAL into a full gate: %v", err)
		}
		defer w.Leave()
		if err := <-done; !errors.Is(err, errEvicted) {
			t.Fatalf("evicted Wait: %v, want errEvicted", err)
		}
		if d := time.Since(start); d != 0 {
			t.Fatalf("the evicted Wait returned after %v, want at once", d)
		}
		if st := g.State(); st.Waiting != 1 || st.DeferGaveUp != 1 {
			t.Fatalf("State: %d waiting, %d gave up; want 1 and 1", st.Waiting, st.DeferGaveUp)
		}
	})
}

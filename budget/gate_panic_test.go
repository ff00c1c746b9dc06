package budget

import (
	"context"
	"runtime/debug"
	"strings"
	"testing"
	"time"

	tune "github.com/stagger-go/stagger/internal/gatetune"
)

// The guard contract: Wait gives back what it was granted when a guard or
// the budget panics, and the panic goes on with its own stack (a deferred
// give-back, not a recover and a new panic, which would hide where it
// began). Package breaker tests a breaker's Listener that panics.

// closedPanicking is a guard whose Closed panics.
type closedPanicking struct{}

func (closedPanicking) Closed() bool                  { panic("closed") }
func (closedPanicking) AllowRetry() (bool, time.Time) { return true, time.Time{} }

// yesGuard is an open guard that allows every retry and counts the yeses
// it said and got back.
type yesGuard struct{ allowed, backed int }

func (g *yesGuard) Closed() bool { return false }
func (g *yesGuard) AllowRetry() (bool, time.Time) {
	g.allowed++
	return true, time.Time{}
}
func (g *yesGuard) ReturnRetry() { g.backed++ }

// panickingBudget refuses every retry, but panics the first time it is
// asked for one (Take asks it whether it pays for the probe it admitted).
type panickingBudget struct {
	switchBudget
	panicked bool
}

func (b *panickingBudget) Allow(r Request) bool {
	if r.Number > 1 && !b.panicked {
		b.panicked = true
		panic("budget")
	}
	return false
}

func TestGateWaitPanicGivesBack(t *testing.T) {
	for _, tt := range []struct {
		name  string
		b     Budget
		guard Guard
		// value is the panic's; frame, a function its stack must hold.
		value, frame string
	}{
		{"guard's AllowRetry", &switchBudget{}, panickingGuard{}, "guard", "panickingGuard.AllowRetry"},
		{"guard's Closed", &switchBudget{}, closedPanicking{}, "closed", "closedPanicking.Closed"},
		{"budget's Allow after the guard's yes", &panickingBudget{}, &yesGuard{}, "budget", "(*panickingBudget).Allow"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			clk := &manualClock{now: t0}
			g := downServer(newGate(t, tt.b, DeferSettings{MaxWaiting: 1}, clk))
			failures(g, tune.Evidence)
			r := retry2
			r.Guard = tt.guard
			var stack string
			func() {
				defer func() {
					p := recover()
					stack = string(debug.Stack())
					if p != tt.value {
						t.Errorf("Wait's caller recovered %v, want %q", p, tt.value)
					}
				}()
				ctx, cancel := context.WithCancel(context.Background())
				defer cancel()
				g.Wait(ctx, r, 0)
			}()
			if !strings.Contains(stack, tt.frame) {
				t.Errorf("the panic reached Wait's caller without its stack (no %s):\n%s", tt.frame, stack)
			}
			if st := g.State(); st.Waiting != 0 || st.Deferred != 1 || st.DeferGaveUp != 1 {
				t.Fatalf("after the panic: %+v; want nobody waiting, the wait counted given up, once", st)
			}
			if y, ok := tt.guard.(*yesGuard); ok && (y.allowed != 1 || y.backed != 1) {
				t.Errorf("the guard said yes %d times and got %d back; want 1 and 1", y.allowed, y.backed)
			}
			// The probe slot and the room's one place are free: the next
			// retry waits and goes as the probe.
			w, err := g.Enter(retry2, 0, time.Time{})
			if err != nil {
				t.Fatalf("the next retry: %v; want it to wait", err)
			}
			defer w.Leave()
			poll(t, w, admitProbe)
		})
	}
}

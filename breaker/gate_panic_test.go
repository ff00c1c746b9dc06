package breaker

import (
	"context"
	"runtime/debug"
	"strings"
	"testing"
	"time"

	"github.com/stagger-go/stagger/budget"
	"github.com/stagger-go/stagger/criticality"
)

// A retry's Listener that panics inside the breaker, as the Gate's Wait
// asks the breaker's guard for the retry it admitted: the panic reaches
// Wait's caller with its own stack, and nothing stays taken: the Gate's
// wait and probe slot (a room of one takes the next retry, and it goes),
// and the breaker's half-open slot (a first attempt probes at once).
func TestGateWaitPanickingListenerGivesBack(t *testing.T) {
	clk := &manualClock{now: t0}
	var changes []Change
	br := newTestBreaker(t, Settings{ConsecutiveFailures: 2, ProbeEvery: 1, BreakDuration: time.Second}, clk, &changes)
	g, err := budget.Deferring(&switchBudget{}, budget.DeferSettings{MaxWaiting: 1}, budget.WithClock(clk.Now))
	if err != nil {
		t.Fatal(err)
	}
	admitN(t, br, budget.Failure, 2)
	g.Record(budget.Attempt{Number: 1, Outcome: budget.Failure})
	clk.advance(DefaultMaxBreakDuration) // the break is over: the next asking probes
	panicking := listenerFunc(func(c Change) {
		if c.To == StateHalfOpen {
			panic("hook")
		}
	})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var stack string
	func() {
		defer func() {
			p := recover()
			stack = string(debug.Stack())
			if p != "hook" {
				t.Errorf("Wait's caller recovered %v, want the Listener's panic", p)
			}
		}()
		g.Wait(ctx, budget.Request{Number: 2, Guard: br.Guard(criticality.Unset, panicking)}, 0)
	}()
	if !strings.Contains(stack, "TestGateWaitPanickingListenerGivesBack.func1") {
		t.Errorf("the panic reached Wait's caller without the Listener's frame:\n%s", stack)
	}
	if st := g.State(); st.Waiting != 0 || st.Deferred != 1 || st.DeferGaveUp != 1 {
		t.Fatalf("after the Listener panicked: %+v; want nobody waiting, the wait counted given up, once", st)
	}
	if err := br.Admit(criticality.Unset, nil); err != nil {
		t.Fatalf("a first attempt after the Listener panicked: %v; want it to go as the breaker's probe", err)
	}
	// The Gate's probe slot is free: the next retry (unguarded) waits in
	// the room's one place and goes as the probe.
	if a, err := g.Wait(ctx, budget.Request{Number: 2}, 0); a == budget.AdmitNone || err != nil {
		t.Fatalf("the next retry's Wait = %v, %v; want it to go", a, err)
	}
}

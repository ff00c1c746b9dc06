//go:build go1.25

package budget

import (
	"testing"
	"testing/synctest"
	"time"
)

// A set that nobody reads (no States) and that gets no new key still
// forgets an idle target on time: within backendIdle and a minute of its
// last use (Backends' doc), plus the test's minute; a target in use beside
// it is kept. Once nothing is left, the sweep timer stops.
func TestBackendsForgetOnTimeWithoutReadsOrAdds(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		bs, err := NewBackends(DefaultSettings())
		if err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		idle := bs.Slot("idle", "/m")
		busy := bs.Slot("busy", "/m")
		var forgotten time.Duration
		for time.Since(start) < backendIdle+2*time.Minute {
			time.Sleep(10 * time.Second)
			if _, ok := busy.Budget(); !ok { // a lookup, as every call's
				t.Fatalf("a target used every 10 s was forgotten at %v", time.Since(start))
			}
			if idle.gone.Load() && forgotten == 0 { // looked at, not used
				forgotten = time.Since(start)
			}
		}
		switch {
		case forgotten == 0:
			t.Fatalf("an idle target kept for %v with no read and no new key", time.Since(start))
		case forgotten < backendIdle:
			t.Fatalf("an idle target forgotten after %v, before %v", forgotten, backendIdle)
		case forgotten > backendIdle+time.Minute:
			t.Fatalf("an idle target forgotten after %v; the doc says within %v", forgotten, backendIdle+time.Minute)
		}
		t.Logf("the idle target was forgotten %v after its last use", forgotten)
		bs.mu.Lock()
		n := bs.ntargets
		bs.mu.Unlock()
		if n != 1 {
			t.Fatalf("%d targets kept, want the busy one", n)
		}

		time.Sleep(backendIdle + 2*time.Minute) // nothing used
		bs.mu.Lock()
		n, armed := bs.ntargets, bs.sweep.armed
		bs.mu.Unlock()
		if n != 0 || armed {
			t.Fatalf("after every target went idle: %d targets, timer armed %v; want none and no timer", n, armed)
		}
	})
}

// A client that dials a new pod address every second still forgets the
// addresses it no longer calls on time: the adds do not push their uses
// forward (backendsEpochMin).
func TestBackendsForgetOnTimeUnderChurn(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		bs, err := NewBackends(DefaultSettings())
		if err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		idle := bs.Slot("idle", "/m")
		var forgotten time.Duration
		for i := 0; time.Since(start) < backendIdle+2*time.Minute; i++ {
			time.Sleep(time.Second)
			bs.Slot("pod-"+time.Since(start).String(), "/m")
			if idle.gone.Load() && forgotten == 0 {
				forgotten = time.Since(start)
			}
		}
		if forgotten < backendIdle || forgotten > backendIdle+time.Minute {
			t.Fatalf("an idle target beside a new one every second forgotten after %v; want within %v and %v", forgotten, backendIdle, backendIdle+time.Minute)
		}
		time.Sleep(2 * backendIdle) // every pod goes idle: the timer stops
	})
}

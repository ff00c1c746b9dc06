package interceptor

import (
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
)

// TestPerMethodSetsBounded: what the interceptor remembers per method for
// logs and adaptive hedging stops growing at its bound, however many
// method names a caller makes up.
func TestPerMethodSetsBounded(t *testing.T) {
	k := newCore(nil)
	first := 0
	for i := range 3 * methodCacheMax {
		m := fmt.Sprintf("/made.up.S/M%d", i)
		h := k.latency(m)
		if h != nil && i >= methodCacheMax {
			t.Fatalf("method %d got a latency histogram past the bound %d", i, methodCacheMax)
		} else if h == nil && i < methodCacheMax {
			t.Fatalf("method %d got no latency histogram below the bound", i)
		}
		if again := k.latency(m); again != h {
			t.Fatal("one method, two histograms")
		}
		if k.opts.firstAmbiguous(m) {
			first++
		}
		if k.opts.firstAmbiguous(m) {
			t.Fatalf("method %d: its ambiguous give-up said twice", i)
		}
		k.firstNotice(m, 1, 0)
		k.noticed.first(m)
	}
	if first != saidMax {
		t.Errorf("%d first ambiguous give-ups said, want the bound %d", first, saidMax)
	}
	if n := k.noticed.Len(); n != saidMax {
		t.Errorf("%d notices remembered, want the bound %d", n, saidMax)
	}
	if n := k.latencies.Len(); n != methodCacheMax {
		t.Errorf("%d histograms, want the bound %d", n, methodCacheMax)
	}
}

// TestSaidOnce: each of the sets of what was said once says a key once,
// to one of the goroutines asking at once, and says nothing new past
// saidMax keys. The loud set is shared by the cores sharing a State; the
// notices by method and by option count toward one bound.
func TestSaidOnce(t *testing.T) {
	st := NewState()
	k, k2 := newCore([]Option{WithState(st)}), newCore([]Option{WithState(st)})
	sets := []struct {
		name  string
		first func(i int) bool
		// again, when set, asks for the keys past the first half: the
		// same set, though another core's or by another key.
		again func(i int) bool
	}{
		{"loud", func(i int) bool { return k.firstLoud(fmt.Sprint(i)) }, func(i int) bool { return k2.firstLoud(fmt.Sprint(i)) }},
		{"ambiguous", func(i int) bool { return k.opts.firstAmbiguous(fmt.Sprint(i)) }, nil},
		{"notice", func(i int) bool { return k.noticed.first(fmt.Sprint(i)) }, func(i int) bool { return k.firstNotice(fmt.Sprint(i), 1, 0) }},
	}
	for _, set := range sets {
		var said atomic.Int64
		var wg sync.WaitGroup
		for range 4 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := range saidMax / 2 {
					if set.first(i) {
						said.Add(1)
					}
				}
			}()
		}
		wg.Wait()
		if n := said.Load(); n != saidMax/2 {
			t.Errorf("%s: %d keys said by 4 goroutines, want each once: %d", set.name, n, saidMax/2)
		}
		n := 0
		for i := range 2 * saidMax {
			ask := set.first
			if set.again != nil && i >= saidMax/2 {
				ask = set.again
			}
			if ask(i) {
				n++
			}
		}
		if n != saidMax-saidMax/2 || set.first(0) {
			t.Errorf("%s: %d more keys said, want up to the bound: %d", set.name, n, saidMax-saidMax/2)
		}
	}
}

// TestKnownMethodNoAlloc: an adaptive hedged call finds its method's
// histogram without an allocation (a bounded.Map taking its key as an
// interface made it allocate).
func TestKnownMethodNoAlloc(t *testing.T) {
	k := newCore(nil)
	m := fmt.Sprint("/made.up.S/M", 1)
	h := k.latency(m)
	n := testing.AllocsPerRun(1000, func() {
		if k.latency(m) != h {
			t.Fatal("one method, two histograms")
		}
	})
	if n != 0 {
		t.Errorf("%v allocations to find a method's histogram, want 0", n)
	}
}

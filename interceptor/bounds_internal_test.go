package interceptor

import (
	"fmt"
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
		k.firstOf(&k.noticed, m)
	}
	if first != noticeMax {
		t.Errorf("%d first ambiguous give-ups said, want the bound %d", first, noticeMax)
	}
	if n := k.noticeN.Load(); n != noticeMax {
		t.Errorf("%d notices remembered, want the bound %d", n, noticeMax)
	}
	if n := k.hedgeLatencyN.Load(); n != methodCacheMax {
		t.Errorf("%d histograms, want the bound %d", n, methodCacheMax)
	}
}

package quantile

import (
	"sync"
	"testing"
	"time"
)

func TestLatencySlotBounds(t *testing.T) {
	// Every duration falls in a bucket whose upper bound is above it and at
	// most 25% above it (past the first bucket); buckets increase with d.
	prev := -1
	for d := time.Duration(1); d < 200*time.Second; d = d*11/10 + 1 {
		i := latencySlot(d)
		if i < prev {
			t.Fatalf("slot(%v) = %d, below slot of a shorter duration %d", d, i, prev)
		}
		prev = i
		up := slotUpper(i)
		if i == latencySlots-1 {
			continue // the last bucket is open-ended
		}
		if d >= up {
			t.Fatalf("slot(%v) = %d whose upper bound %v is not above it", d, i, up)
		}
		if i > 0 && float64(up) > 1.25*float64(d)+1 {
			t.Fatalf("slot(%v): upper bound %v more than 25%% above", d, up)
		}
		if i > 0 && d < slotUpper(i-1) {
			t.Fatalf("slot(%v) = %d but %v is below the previous bucket's bound %v", d, i, d, slotUpper(i-1))
		}
	}
}

func TestLatencyQuantile(t *testing.T) {
	tests := []struct {
		name    string
		samples map[time.Duration]int
		q       float64
		want    time.Duration // a duration in the expected bucket
		ok      bool
	}{
		{"too few samples", map[time.Duration]int{time.Millisecond: minSamples - 1}, 0.95, 0, false},
		{"one value", map[time.Duration]int{20 * time.Millisecond: 100}, 0.95, 20 * time.Millisecond, true},
		{"tail above 5% moves p95", map[time.Duration]int{10 * time.Millisecond: 90, time.Second: 10}, 0.95, time.Second, true},
		{"tail at exactly 5% does not", map[time.Duration]int{10 * time.Millisecond: 95, time.Second: 5}, 0.95, 10 * time.Millisecond, true},
		{"median", map[time.Duration]int{time.Millisecond: 50, 50 * time.Millisecond: 50}, 0.5, time.Millisecond, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var h Histogram
			for d, n := range tt.samples {
				for i := 0; i < n; i++ {
					h.Observe(d)
				}
			}
			got, ok := h.Quantile(tt.q)
			if ok != tt.ok {
				t.Fatalf("ok = %v, want %v", ok, tt.ok)
			}
			if ok && got != slotUpper(latencySlot(tt.want)) {
				t.Errorf("quantile(%v) = %v, want %v (the bound of %v's bucket)", tt.q, got, slotUpper(latencySlot(tt.want)), tt.want)
			}
		})
	}
}

// TestLatencyHistogramForgets: after a change of latency the estimate follows
// within a few half-lives instead of averaging over all history.
func TestLatencyHistogramForgets(t *testing.T) {
	var h Histogram
	for i := 0; i < 10*halfLife; i++ {
		h.Observe(time.Second)
	}
	for i := 0; i < 5*halfLife; i++ {
		h.Observe(10 * time.Millisecond)
	}
	got, _ := h.Quantile(0.95)
	if want := slotUpper(latencySlot(10 * time.Millisecond)); got != want {
		t.Errorf("p95 after the change = %v, want %v", got, want)
	}
}

func TestLatencyHistogramConcurrent(t *testing.T) {
	var h Histogram
	var wg sync.WaitGroup
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 1000; i++ {
				h.Observe(5 * time.Millisecond)
				h.Quantile(0.95)
			}
		}()
	}
	wg.Wait()
	got, ok := h.Quantile(0.95)
	if want := slotUpper(latencySlot(5 * time.Millisecond)); !ok || got != want {
		t.Errorf("p95 = %v, %v; want %v", got, ok, want)
	}
}

func BenchmarkLatencyHistogram(b *testing.B) {
	b.ReportAllocs()
	var h Histogram
	for i := 0; i < b.N; i++ {
		h.Observe(time.Duration(i%1000) * time.Microsecond)
		if i%16 == 0 {
			h.Quantile(0.95)
		}
	}
}

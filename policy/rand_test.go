package policy

import (
	"sync"
	"testing"
)

func TestSeededRandomDeterministic(t *testing.T) {
	a, b, c := NewSeededRandom(5), NewSeededRandom(5), NewSeededRandom(6)
	same := 0
	for i := 0; i < 1000; i++ {
		x, y, z := a(), b(), c()
		if x != y {
			t.Fatalf("draw %d: seed 5 gave %v and %v", i, x, y)
		}
		if x == z {
			same++
		}
		if x < 0 || x >= 1 {
			t.Fatalf("draw %d = %v, want in [0, 1)", i, x)
		}
	}
	if same > 1 {
		t.Errorf("seeds 5 and 6 agreed on %d of 1000 draws", same)
	}
}

func TestRandomFloat64(t *testing.T) {
	var r Random // the default source
	for i := 0; i < 1000; i++ {
		if u := r.Float64(); u < 0 || u >= 1 {
			t.Fatalf("default Float64() = %v, want in [0, 1)", u)
		}
	}
	fixed := Random(func() float64 { return 0.25 })
	if u := fixed.Float64(); u != 0.25 {
		t.Errorf("Float64() = %v, want the injected 0.25", u)
	}
}

// TestRandomConcurrent shares both sources between goroutines; run with
// -race. The seeded one must still hand out each number of its sequence
// exactly once.
func TestRandomConcurrent(t *testing.T) {
	const workers, each = 8, 1000
	seeded := NewSeededRandom(11)
	var def Random
	got := make([][]float64, workers)
	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < each; i++ {
				got[w] = append(got[w], seeded())
				_ = def.Float64()
			}
		}()
	}
	wg.Wait()
	want := map[float64]int{}
	ref := NewSeededRandom(11)
	for i := 0; i < workers*each; i++ {
		want[ref()]++
	}
	for _, g := range got {
		for _, u := range g {
			want[u]--
		}
	}
	for u, n := range want {
		if n != 0 {
			t.Fatalf("number %v drawn %d times more or less than the sequence holds", u, -n)
		}
	}
}

func BenchmarkRandom(b *testing.B) {
	b.Run("default", func(b *testing.B) {
		b.ReportAllocs()
		var r Random
		b.RunParallel(func(pb *testing.PB) {
			var s float64
			for pb.Next() {
				s += r.Float64()
			}
			_ = s
		})
	})
	b.Run("seeded", func(b *testing.B) {
		b.ReportAllocs()
		r := NewSeededRandom(1)
		b.RunParallel(func(pb *testing.PB) {
			var s float64
			for pb.Next() {
				s += r.Float64()
			}
			_ = s
		})
	})
}

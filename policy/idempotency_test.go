package policy

import (
	"fmt"
	"sync"
	"testing"

	// Registers stagger.testing.v1.TestService: Write unmarked, Get
	// NO_SIDE_EFFECTS, Put IDEMPOTENT.
	_ "github.com/stagger-go/stagger/proto/stagger/testing/v1"
)

func TestIdempotencyOf(t *testing.T) {
	tests := []struct {
		method string
		want   Idempotency
		safe   bool
	}{
		{"/stagger.testing.v1.TestService/Write", IdempotencyUnknown, false},
		{"/stagger.testing.v1.TestService/Get", IdempotencyNoSideEffects, true},
		{"/stagger.testing.v1.TestService/Put", IdempotencyIdempotent, true},
		{"/stagger.testing.v1.TestService/ListItems", IdempotencyUnknown, false},
		{"/stagger.testing.v1.TestService/Nope", IdempotencyUnknown, false},
		{"/no.such.Service/Get", IdempotencyUnknown, false},
		// A message, not a method.
		{"/stagger.testing.v1/Script", IdempotencyUnknown, false},
		{"stagger.testing.v1.TestService/Get", IdempotencyUnknown, false},
		{"/stagger.testing.v1.TestService/Get/x", IdempotencyUnknown, false},
		{"/stagger.testing.v1.TestService/", IdempotencyUnknown, false},
		{"//Get", IdempotencyUnknown, false},
		{"", IdempotencyUnknown, false},
		{"/", IdempotencyUnknown, false},
		{"/a b.C/D", IdempotencyUnknown, false},
	}
	for _, tt := range tests {
		t.Run(tt.method, func(t *testing.T) {
			for i := 0; i < 2; i++ { // the second answer comes from the cache
				got := IdempotencyOf(tt.method)
				if got != tt.want || got.Safe() != tt.safe {
					t.Errorf("lookup %d: IdempotencyOf(%q) = %v (safe %v), want %v (safe %v)", i+1, tt.method, got, got.Safe(), tt.want, tt.safe)
				}
			}
		})
	}
}

func TestIdempotencyString(t *testing.T) {
	for i, want := range []string{"IDEMPOTENCY_UNKNOWN", "NO_SIDE_EFFECTS", "IDEMPOTENT", "IDEMPOTENCY_UNKNOWN"} {
		if got := Idempotency(i).String(); got != want {
			t.Errorf("Idempotency(%d).String() = %q, want %q", i, got, want)
		}
	}
}

func TestIdempotencyOfConcurrent(t *testing.T) {
	var wg sync.WaitGroup
	for w := 0; w < 8; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 200; i++ {
				if got := IdempotencyOf("/stagger.testing.v1.TestService/Put"); got != IdempotencyIdempotent {
					t.Errorf("IdempotencyOf(Put) = %v", got)
					return
				}
				IdempotencyOf(fmt.Sprintf("/concurrent.S%d/M%d", w, i%20))
			}
		}()
	}
	wg.Wait()
}

func TestIdempotencyCacheBounded(t *testing.T) {
	saved := idempotencyCache.Load()
	t.Cleanup(func() { idempotencyCache.Store(saved) })
	idempotencyCache.Store(nil)
	const max = 64
	for i := 0; i < max+10; i++ {
		m := fmt.Sprintf("/bounded.S/M%d", i)
		idempotencyStoreBounded(m, lookupIdempotency(m), max)
	}
	if n := len(*idempotencyCache.Load()); n != max {
		t.Errorf("cache holds %d methods, want %d", n, max)
	}
	// Past the bound, answers stay right.
	if got := IdempotencyOf("/stagger.testing.v1.TestService/Get"); got != IdempotencyNoSideEffects {
		t.Errorf("IdempotencyOf(Get) = %v after the cache filled", got)
	}
}

func TestIdempotencyOfCachedDoesNotAllocate(t *testing.T) {
	const m = "/stagger.testing.v1.TestService/Get"
	IdempotencyOf(m)
	if n := testing.AllocsPerRun(100, func() { IdempotencyOf(m) }); n != 0 {
		t.Errorf("cached IdempotencyOf allocates %v times", n)
	}
}

func BenchmarkIdempotencyOf(b *testing.B) {
	const m = "/stagger.testing.v1.TestService/Put"
	IdempotencyOf(m)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if IdempotencyOf(m) != IdempotencyIdempotent {
			b.Fatal("wrong answer")
		}
	}
}

func BenchmarkIdempotencyOfParallel(b *testing.B) {
	const m = "/stagger.testing.v1.TestService/Get"
	IdempotencyOf(m)
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if IdempotencyOf(m) != IdempotencyNoSideEffects {
				b.Error("wrong answer")
				return
			}
		}
	})
}

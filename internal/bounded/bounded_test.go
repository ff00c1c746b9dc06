package bounded

import (
	"errors"
	"fmt"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// Kept holds at most its bound of keys: past that, Get builds for the
// caller and keeps nothing; a build that fails gives the zero value, kept
// nowhere; Drop removes only the keys it picks.
func TestKeptBounded(t *testing.T) {
	const bound = 8
	var m Kept[int, *int]
	builds := 0
	build := func() (*int, error) { builds++; v := builds; return &v, nil }
	for k := range bound + 3 {
		m.Get(k, bound, build, true)
	}
	if got := len(m.Values()); got != bound {
		t.Fatalf("kept %d keys, want the bound (%d)", got, bound)
	}
	if a, b := m.Get(bound+1, bound, build, true), m.Get(bound+1, bound, build, true); a == b {
		t.Error("a key past the bound was kept")
	}
	if v := m.Get(0, bound, build, true); *v != 1 {
		t.Errorf("key 0 gives build %d, want the first", *v)
	}
	if v := m.Get(-1, bound, func() (*int, error) { return new(int), errors.New("refused") }, true); v != nil {
		t.Error("a failed build should give nil")
	}
	m.Drop(func(k int) bool { return k%2 == 0 })
	if got := len(m.Values()); got != bound/2 {
		t.Fatalf("after dropping the even keys, %d kept, want %d", got, bound/2)
	}
	if _, ok := m.Load()[1]; !ok {
		t.Error("drop removed a key it did not pick")
	}
}

// Map adds a key once, up to its bound, and past it hands out the zero
// value without counting.
func TestMapBounded(t *testing.T) {
	const bound = 8
	var m Map[string, *int]
	for i := range 2 * bound {
		k := fmt.Sprint(i)
		v, added := m.Get(k, bound, func() *int { return new(int) })
		if (i < bound) != added || (v == nil) == (i < bound) {
			t.Fatalf("key %d: added %v, value %v; want added and a value below the bound only", i, added, v)
		}
		if again, added := m.Get(k, bound, func() *int { return new(int) }); added || again != v {
			t.Fatalf("key %d asked again: added %v, another value %v", i, added, again != v)
		}
	}
	if n := m.Len(); n != bound {
		t.Fatalf("Len %d, want %d", n, bound)
	}
}

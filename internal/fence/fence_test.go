package fence

import "testing"

func TestRun(t *testing.T) {
	before := Panics()
	ran := false
	if Run(Hook, func() { ran = true }) != nil || !ran {
		t.Fatalf("a quiet callback: panicked or not run")
	}
	for range 3 {
		if p := Run(Hook, func() { panic("boom") }); p != "boom" {
			t.Fatalf("a panicking callback: Run returned %v, want its panic", p)
		}
	}
	if Run(Predicate, func() { var s []int; _ = s[len(s)] }) == nil {
		t.Fatal("a runtime panic: not reported")
	}
	if got := Panics() - before; got != 4 {
		t.Fatalf("Panics() grew by %d, want 4", got)
	}
}

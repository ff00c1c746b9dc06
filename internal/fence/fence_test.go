package fence

import "testing"

func TestRun(t *testing.T) {
	before := Panics()
	ran := false
	if Run(Hook, func() { ran = true }) || !ran {
		t.Fatalf("a quiet callback: panicked or not run")
	}
	for range 3 {
		if !Run(Hook, func() { panic("boom") }) {
			t.Fatal("a panicking callback: Run reported no panic")
		}
	}
	if !Run(Predicate, func() { var s []int; _ = s[len(s)] }) {
		t.Fatal("a runtime panic: not reported")
	}
	if got := Panics() - before; got != 4 {
		t.Fatalf("Panics() grew by %d, want 4", got)
	}
}

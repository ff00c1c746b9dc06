package holdset

import (
	"context"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestEndByOwner: End ends the holds of its owner alone, the zero owner's
// End every hold; a hold let go (stop) is not ended, and stop after End
// leaves the switch's cause.
func TestEndByOwner(t *testing.T) {
	var s Set[*int]
	a, b := new(int), new(int)
	never := func() bool { return false }
	ca, stopA := s.Hold(context.Background(), a, never)
	cb, stopB := s.Hold(context.Background(), b, never)
	cn, stopN := s.Hold(context.Background(), nil, never)
	cl, stopL := s.Hold(context.Background(), a, never)
	stopL()
	s.End(a)
	if !Ended(ca) || Ended(cb) || Ended(cn) {
		t.Fatalf("End(a): a %v, b %v, none %v; want a's alone ended", Ended(ca), Ended(cb), Ended(cn))
	}
	if Ended(cl) || cl.Err() == nil {
		t.Fatalf("a hold let go: ended by the switch %v, err %v; want cancelled, not by the switch", Ended(cl), cl.Err())
	}
	s.End(nil)
	if !Ended(cb) || !Ended(cn) {
		t.Fatalf("End(nil): b %v, none %v; want both ended", Ended(cb), Ended(cn))
	}
	stopA()
	stopB()
	stopN()
	if !Ended(ca) {
		t.Fatal("stop after End replaced the switch's cause")
	}
	if len(s.m) != 0 {
		t.Fatalf("%d holds kept, want none", len(s.m))
	}
}

// TestHoldSeesSwitchOn: a hold taken while its switch is on has ended at
// once, and is not kept.
func TestHoldSeesSwitchOn(t *testing.T) {
	var s Set[*int]
	ctx, stop := s.Hold(context.Background(), nil, func() bool { return true })
	defer stop()
	if !Ended(ctx) {
		t.Fatal("a hold taken with the switch on has not ended")
	}
	if len(s.m) != 0 {
		t.Fatalf("%d holds kept, want none", len(s.m))
	}
}

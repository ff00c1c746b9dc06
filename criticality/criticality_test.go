package criticality

import (
	"context"
	"strings"
	"testing"
)

func TestParseRoundTrip(t *testing.T) {
	for _, l := range Levels() {
		got, err := Parse(l.String())
		if err != nil || got != l {
			t.Errorf("Parse(%q) = %v, %v; want %v", l.String(), got, err, l)
		}
		if got, _ := Parse(strings.ToLower(strings.ReplaceAll(l.String(), "_", "-"))); got != l {
			t.Errorf("Parse(lower, dashes) of %v = %v", l, got)
		}
	}
	for _, bad := range []string{"", "UNSET", "critical+", "5"} {
		if _, err := Parse(bad); err == nil || !strings.Contains(err.Error(), "CRITICAL_PLUS") {
			t.Errorf("Parse(%q) error = %v, want one listing the names", bad, err)
		}
	}
}

func TestOrderAndEffective(t *testing.T) {
	for i := 1; i < NumLevels; i++ {
		if !(Levels()[i-1] < Levels()[i]) {
			t.Fatalf("Levels not ascending at %d", i)
		}
	}
	if Unset.Effective() != Critical || Level(9).Effective() != Critical || Sheddable.Effective() != Sheddable {
		t.Fatal("Effective")
	}
	for i, l := range Levels() {
		if l.Index() != i {
			t.Errorf("%v.Index() = %d, want %d", l, l.Index(), i)
		}
	}
	if Unset.Index() != Critical.Index() || Unset.Valid() || Level(9).Valid() {
		t.Fatal("Unset")
	}
	if Level(9).String() != "Level(9)" {
		t.Fatal(Level(9).String())
	}
}

func TestContext(t *testing.T) {
	ctx := context.Background()
	if _, ok := FromContext(ctx); ok {
		t.Fatal("empty context carries a level")
	}
	if NewContext(ctx, Unset) != ctx {
		t.Fatal("Unset changed the context")
	}
	l, ok := FromContext(NewContext(ctx, Sheddable))
	if !ok || l != Sheddable {
		t.Fatalf("got %v %v", l, ok)
	}
}

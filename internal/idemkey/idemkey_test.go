package idemkey

import (
	"encoding/hex"
	"testing"
)

func TestNew(t *testing.T) {
	a, b := New(), New()
	if len(a) != 32 || a == b {
		t.Fatalf("keys %q and %q: want 32 hex digits, distinct", a, b)
	}
	if _, err := hex.DecodeString(a); err != nil {
		t.Fatal(err)
	}
}

package gatetune

import (
	"strings"
	"testing"
)

// Every rule's text prints its numbers: no format error, none left empty.
func TestRulesPrint(t *testing.T) {
	for _, r := range Current() {
		if r.Name == "" || r.Says == "" || strings.Contains(r.Says, "%!") {
			t.Errorf("rule %q: %q", r.Name, r.Says)
		}
	}
}

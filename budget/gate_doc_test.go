package budget

import (
	"go/ast"
	"go/parser"
	"go/token"
	"strings"
	"testing"

	tune "github.com/stagger-go/stagger/internal/gatetune"
)

// The Gate's doc states the estimate and the two rules first, in under 40
// lines, and names every rule `stagger check` prints (other docs point to
// the Gate by those names).
func TestGateDocNamesItsRules(t *testing.T) {
	f, err := parser.ParseFile(token.NewFileSet(), "gate.go", nil, parser.ParseComments)
	if err != nil {
		t.Fatal(err)
	}
	var doc string
	for _, d := range f.Decls {
		if g, ok := d.(*ast.GenDecl); ok && g.Tok == token.TYPE && g.Specs[0].(*ast.TypeSpec).Name.Name == "Gate" {
			doc = g.Doc.Text()
		}
	}
	if n := strings.Count(doc, "\n"); n == 0 || n >= 40 {
		t.Errorf("the Gate's doc is %d lines, want under 40", n)
	}
	for _, first := range []string{"The estimate:", "Go:", "End:"} {
		if i := strings.Index(doc, first); i < 0 || strings.Count(doc[:i], "\n") > 30 {
			t.Errorf("the Gate's doc does not state %q in its first 30 lines", first)
		}
	}
	words := strings.NewReplacer(",", " ", ":", " ", ".", " ", "\n", " ").Replace(doc)
	for _, r := range tune.Current() {
		if !strings.Contains(" "+words+" ", " "+r.Name+" ") {
			t.Errorf("the Gate's doc does not name the rule %q that stagger check prints", r.Name)
		}
	}
}

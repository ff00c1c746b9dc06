package interceptor

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"slices"
	"strings"
	"testing"
)

// ownerSites returns, for the package's non-test source, the functions
// ("file: func") that call policy.Policy.Decide and those that end a call
// (call.end, told from the other methods named end by its first argument,
// the connection: cc or x.cc).
func ownerSites(t *testing.T) (deciders, enders []string) {
	t.Helper()
	entries, err := os.ReadDir(".")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	for _, e := range entries {
		name := e.Name()
		if !strings.HasSuffix(name, ".go") || strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range f.Decls {
			fn, ok := d.(*ast.FuncDecl)
			if !ok || fn.Body == nil {
				continue
			}
			site := name + ": " + fn.Name.Name
			ast.Inspect(fn.Body, func(n ast.Node) bool {
				ce, ok := n.(*ast.CallExpr)
				if !ok {
					return true
				}
				sel, ok := ce.Fun.(*ast.SelectorExpr)
				if !ok {
					return true
				}
				switch {
				case sel.Sel.Name == "Decide":
					deciders = append(deciders, site)
				case sel.Sel.Name == "end" && len(ce.Args) == 2 && isConn(ce.Args[0]):
					enders = append(enders, site)
				}
				return true
			})
		}
	}
	return slices.Compact(deciders), slices.Compact(enders)
}

func isConn(e ast.Expr) bool {
	switch x := e.(type) {
	case *ast.Ident:
		return x.Name == "cc"
	case *ast.SelectorExpr:
		return x.Sel.Name == "cc"
	}
	return false
}

// TestOneOwnerSites counts who decides "retry or not" and who ends a
// call, so that a new engine or a new copy of a decision shows here
// (issue 71, one owner per call). Every unary call ends in one place,
// runUnary, whichever mode its loop (unaryLoop) ran its attempts in. The
// policy's Decide is asked by afterAttempt (the loop's decision on an
// attempt's end), by timeoutVerdict (as a per-attempt timer fires: on a
// unary call's loop, on a stream's timer goroutine) and by recordBeside
// (under hedgeOnPerTryTimeout, the outcome of an attempt that decides
// nothing). The streams' ends are their engines' (stream.go,
// hedgestream_attempts.go).
func TestOneOwnerSites(t *testing.T) {
	deciders, enders := ownerSites(t)
	wantDeciders := []string{"call_retry.go: afterAttempt", "call_retry.go: timeoutVerdict", "unary_loop.go: recordBeside"}
	if !slices.Equal(deciders, wantDeciders) {
		t.Errorf("functions that call Decide:\n%s\nwant\n%s", strings.Join(deciders, "\n"), strings.Join(wantDeciders, "\n"))
	}
	var unary []string
	for _, s := range enders {
		if !strings.HasPrefix(s, "stream") && !strings.HasPrefix(s, "hedgestream") {
			unary = append(unary, s)
		}
	}
	if want := []string{"unary.go: runUnary"}; !slices.Equal(unary, want) {
		t.Errorf("unary call ends in:\n%s\nwant %s alone", strings.Join(unary, "\n"), want[0])
	}
}

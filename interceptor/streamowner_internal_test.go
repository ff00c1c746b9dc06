package interceptor

import (
	"go/ast"
	"slices"
	"strings"
	"testing"
)

// callersIn returns, for the package's non-test files whose names start
// with prefix, the functions that call each of names (as x.name(...)),
// sorted.
func callersIn(t *testing.T, prefix string, names ...string) map[string][]string {
	t.Helper()
	callers := make(map[string][]string, len(names))
	eachCall(t, func(file string) bool { return strings.HasPrefix(file, prefix) }, func(_ string, fn *ast.FuncDecl, _ *ast.CallExpr, sel *ast.SelectorExpr) {
		if slices.Contains(names, sel.Sel.Name) {
			callers[sel.Sel.Name] = append(callers[sel.Sel.Name], fn.Name.Name)
		}
	})
	for k, v := range callers {
		slices.Sort(v)
		callers[k] = slices.Compact(v)
	}
	return callers
}

// TestHedgedStreamOneOwner reads the hedged stream's source: its driver
// alone commits and launches, so no hedge can go after the commit (issue
// 71). commitLocked is called by the driver's steps only (serve, ended),
// launchLocked by sendDue and, for the first attempt before the driver
// starts, launch; and those steps by the driver's loop (drive, takeEvents)
// alone. An attempt's goroutine or the application's that commits, as
// watch, join, SendMsg and Context did, shows here.
func TestHedgedStreamOneOwner(t *testing.T) {
	got := callersIn(t, "hedgestream", "commitLocked", "launchLocked", "serve", "ended", "sendDue", "launch")
	want := map[string][]string{
		"commitLocked": {"ended", "serve"},
		"launchLocked": {"launch", "sendDue"},
		"serve":        {"drive"},
		"ended":        {"drive", "takeEvents"},
		"sendDue":      {"drive"},
		"launch":       {"hedgeStream"},
	}
	for name, w := range want {
		if !slices.Equal(got[name], w) {
			t.Errorf("%s is called by %v, want %v alone", name, got[name], w)
		}
	}
}

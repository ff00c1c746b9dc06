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

// streamCallers returns, for the stream engine's non-test files
// (streamFile), the functions that call each of names (as x.name(...)),
// sorted.
func streamCallers(t *testing.T, names ...string) map[string][]string {
	t.Helper()
	callers := make(map[string][]string, len(names))
	eachCall(t, streamFile, func(_ string, fn *ast.FuncDecl, _ *ast.CallExpr, sel *ast.SelectorExpr) {
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

// TestHedgedStreamOneOwner reads the stream engine's source: one commit
// (commitLocked) for retried and hedged streams alike, and, while a hedged
// stream's attempts race, its driver alone commits and launches, so no
// hedge can go after the commit (issue 71). commitLocked is called by the
// application's calls on a stream whose attempts run one at a time (the
// first answer commits it: RecvMsg, Header, Context, SendMsg's overflow;
// dial, when a replay ends after a commit was
// asked), and by the race's one end (endRace: commit or failure), which the
// application asks for through ask alone; endRace by the driver's steps only
// (drive, serve, ended), launchLocked by takeHedge and, for the first attempt before
// the driver starts, hedgeStream; and those steps by the driver's loop (drive)
// alone, which hands takeHedge, wantsHedge and runHedge to
// hedging's one start rule (hedgeState.sendDue) and names them nowhere else. An attempt's goroutine or the application's that
// commits a race, as watch, join, SendMsg and Context did, shows here; so
// does a second place that asks the decision or ends the stream.
func TestHedgedStreamOneOwner(t *testing.T) {
	got := streamCallers(t, "commitLocked", "endRace", "launchLocked", "serve", "ended", "sendDue", "drive", "ask",
		"afterAttempt", "judge", "recordHedge", "finished", "fill", "finishStream", "stopTimer")
	want := map[string][]string{
		"commitLocked": {"Context", "Header", "RecvMsg", "SendMsg", "dial", "endRace"},
		"ask":          {"Context", "SendMsg"},
		"endRace":      {"drive", "ended", "serve"},
		"launchLocked": {"hedgeStream", "takeHedge"},
		"serve":        {"drive"},
		"ended":        {"drive"},
		"sendDue":      {"drive"},
		// One decision per kind of attempt: one after another (retryAfter;
		// settle judges an abandoned one once, and never retries), or racing
		// (ended, the driver's: judge asks the call's decision, askRaced,
		// and makes the next hedge due);
		"afterAttempt": {"retryAfter", "settle"},
		"judge":        {"ended", "settle"},
		// A hedged attempt's end that needs no verdict: a hedge given
		// back, a loser; the winner's end is judged (settle).
		"recordHedge": {"settleOthers", "takeHedge"},
		// One end, finishStream, which every end goes through: an
		// attempt's (settle, retryAfter), the breaker's refusal (stream),
		// a race that failed (endRace, the driver's last step).
		"finished":     {"finishStream"},
		"fill":         {"finishStream"},
		"finishStream": {"endRace", "retryAfter", "settle", "stream"},
		// Every end of a retried stream's attempt (it failed to open, to
		// replay, or ended) hands the call its timer's verdict in one place.
		"stopTimer": {"endAttempt"},
	}
	for name, w := range want {
		if !slices.Equal(got[name], w) {
			t.Errorf("%s is called by %v, want %v alone", name, got[name], w)
		}
	}
	for _, name := range []string{"wantsHedge", "takeHedge", "runHedge"} {
		if got, want := identUsers(t, name), []string{"hedgestream.go: retryStream.drive"}; !slices.Equal(got, want) {
			t.Errorf("%s is named in %v, want %v alone", name, got, want)
		}
	}
}

// TestStreamGoroutinesCounted: every goroutine the stream engine starts
// (a go statement in its files) is counted where it starts
// (goroutines.Add), so that the stream's one end waits for it: nothing of
// a stream runs after its end is announced (issue 90).
func TestStreamGoroutinesCounted(t *testing.T) {
	entries, err := os.ReadDir(".")
	if err != nil {
		t.Fatal(err)
	}
	starters := 0
	fset := token.NewFileSet()
	for _, e := range entries {
		name := e.Name()
		if !strings.HasSuffix(name, ".go") || strings.HasSuffix(name, "_test.go") || !streamFile(name) {
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
			goes, counts := false, false
			ast.Inspect(fn.Body, func(n ast.Node) bool {
				switch x := n.(type) {
				case *ast.GoStmt:
					goes = true
				case *ast.SelectorExpr:
					if id, ok := x.X.(*ast.SelectorExpr); ok && id.Sel.Name == "goroutines" && x.Sel.Name == "Add" {
						counts = true
					}
				}
				return true
			})
			if goes {
				starters++
				if !counts {
					t.Errorf("%s starts a goroutine the stream's end does not wait for (no goroutines.Add)", funcSite(name, fn))
				}
			}
		}
	}
	if starters == 0 {
		t.Fatal("no go statement found in the stream engine's files; the test no longer finds them")
	}
}

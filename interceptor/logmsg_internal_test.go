package interceptor

import (
	"context"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors/logging"

	"github.com/stagger-go/stagger/internal/refusedlog"
	"github.com/stagger-go/stagger/policy"
)

// TestLogMessagesAreConstant: every message the package logs (through a
// logging.Logger's Log, warnLoud, or slog) is a constant, or a variable of
// the function that logs it assigned only constants; what changes goes in
// attributes (logmsg.go says why); an entry of a package table whose
// values are all constants (kindMsgs, noticeMsgs) counts as one. The packages that log for it
// (internal/refusedlog, internal/filelog) are held to it too.
func TestLogMessagesAreConstant(t *testing.T) {
	fset := token.NewFileSet()
	paths, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	for _, dir := range []string{"refusedlog", "filelog"} {
		more, err := filepath.Glob("../internal/" + dir + "/*.go")
		if err != nil || len(more) == 0 {
			t.Fatalf("internal/%s's files: %v, %v", dir, more, err)
		}
		paths = append(paths, more...)
	}
	consts := map[string]bool{}
	tables := map[string]*ast.CompositeLit{}
	var files []*ast.File
	for _, p := range paths {
		if strings.HasSuffix(p, "_test.go") {
			continue
		}
		src, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		f, err := parser.ParseFile(fset, p, src, 0)
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, f)
		for _, d := range f.Decls {
			if g, ok := d.(*ast.GenDecl); ok && g.Tok == token.CONST {
				for _, s := range g.Specs {
					for _, n := range s.(*ast.ValueSpec).Names {
						consts[n.Name] = true
					}
				}
			}
			if g, ok := d.(*ast.GenDecl); ok && g.Tok == token.VAR {
				for _, s := range g.Specs {
					v := s.(*ast.ValueSpec)
					for i, n := range v.Names {
						if i < len(v.Values) {
							if lit, ok := v.Values[i].(*ast.CompositeLit); ok {
								tables[n.Name] = lit
							}
						}
					}
				}
			}
		}
	}
	var constant func(e ast.Expr) bool
	constant = func(e ast.Expr) bool {
		switch e := e.(type) {
		case *ast.BasicLit:
			return e.Kind == token.STRING
		case *ast.Ident:
			return consts[e.Name]
		case *ast.IndexExpr:
			id, ok := e.X.(*ast.Ident)
			if !ok || tables[id.Name] == nil {
				return false
			}
			lit := tables[id.Name]
			for _, el := range lit.Elts {
				if kv, ok := el.(*ast.KeyValueExpr); ok {
					el = kv.Value
				}
				if !constant(el) {
					return false
				}
			}
			return true
		}
		return false
	}
	calls := 0
	for _, f := range files {
		for _, d := range f.Decls {
			fn, ok := d.(*ast.FuncDecl)
			if !ok || fn.Body == nil {
				continue
			}
			ast.Inspect(fn.Body, func(n ast.Node) bool {
				call, ok := n.(*ast.CallExpr)
				if !ok {
					return true
				}
				sel, ok := call.Fun.(*ast.SelectorExpr)
				if !ok {
					return true
				}
				i := -1
				switch sel.Sel.Name {
				case "Log":
					i = 2
				case "warnLoud":
					i = 0
				case "Warn", "Error", "Info", "Debug":
					if isSlog(sel.X) {
						i = 0
					}
				}
				if i < 0 || len(call.Args) <= i {
					return true
				}
				calls++
				msg := call.Args[i]
				if constant(msg) {
					return true
				}
				id, ok := msg.(*ast.Ident)
				if !ok {
					t.Errorf("%s: %s logs a message that is not a constant", fset.Position(call.Pos()), fn.Name.Name)
					return true
				}
				for _, rhs := range assigned(fn.Body, id.Name) {
					if !constant(rhs) {
						t.Errorf("%s: %s assigns %s, the message it logs, a value that is not a constant", fset.Position(rhs.Pos()), fn.Name.Name, id.Name)
					}
				}
				return true
			})
		}
	}
	if calls < 5 {
		t.Fatalf("found %d calls that log; the test no longer finds them", calls)
	}
}

// assigned returns every value body assigns to the variable name.
func assigned(body *ast.BlockStmt, name string) []ast.Expr {
	var out []ast.Expr
	ast.Inspect(body, func(n ast.Node) bool {
		a, ok := n.(*ast.AssignStmt)
		if !ok || len(a.Lhs) != len(a.Rhs) {
			return true
		}
		for i, l := range a.Lhs {
			if id, ok := l.(*ast.Ident); ok && id.Name == name {
				out = append(out, a.Rhs[i])
			}
		}
		return true
	})
	return out
}

// isSlog reports whether x is package slog or slog.Default().
func isSlog(x ast.Expr) bool {
	if c, ok := x.(*ast.CallExpr); ok {
		x = c.Fun
	}
	if s, ok := x.(*ast.SelectorExpr); ok {
		x = s.X
	}
	id, ok := x.(*ast.Ident)
	return ok && id.Name == "slog"
}

// TestNoticeMessageSaysItsReason: a notice's message names what was not
// applied and why; a hedged method whose reply is not a protobuf message
// is not said to be "not known to be idempotent".
func TestNoticeMessageSaysItsReason(t *testing.T) {
	cases := []struct {
		reason  policy.Reason
		hedging bool
		want    string
	}{
		{policy.ReasonNotIdempotent, false, "stagger: per-attempt timeout not applied: method not known to be idempotent"},
		{policy.ReasonNotIdempotent, true, msgNoHedging},
		{policy.ReasonReplyType, true, "stagger: hedging not applied: the call's reply is not a protobuf message, so its attempts go one at a time"},
		{policy.ReasonOverridden, false, "stagger: the call's WithPolicy not applied: the policy file's entry for the method decides"},
	}
	for _, tc := range cases {
		var got string
		l := logging.LoggerFunc(func(_ context.Context, _ logging.Level, msg string, _ ...any) { got = msg })
		new(options).log(context.Background(), l, Event{Kind: EventNotice, Reason: tc.reason, Hedging: tc.hedging})
		if got != tc.want {
			t.Errorf("notice %v (hedging %v) logs %q, want %q", tc.reason, tc.hedging, got, tc.want)
		}
	}
	// Every kind a logger hears, and every reason a notice gives, has a message.
	says := func(e Event) {
		var got string
		l := logging.LoggerFunc(func(_ context.Context, _ logging.Level, msg string, _ ...any) { got = msg })
		new(options).log(context.Background(), l, e)
		if !strings.HasPrefix(got, "stagger: ") {
			t.Errorf("%v (reason %v) logs %q, want a message of its own", e.Kind, e.Reason, got)
		}
	}
	for k := EventRetry; k <= EventTimerRanOn; k++ {
		if k != EventEnd && k != EventNotice {
			says(Event{Kind: k})
		}
	}
	for _, r := range []policy.Reason{policy.ReasonNotIdempotent, policy.ReasonAttempts, policy.ReasonOverridden, policy.ReasonNoPolicy,
		policy.ReasonOneAttempt, policy.ReasonInvalidOption, policy.ReasonForeignOption, policy.ReasonReplyType} {
		says(Event{Kind: EventNotice, Reason: r})
	}
}

// A deferred retry's summary names a backend by its canonical target, as
// its budget and Gate are keyed (canonicalTarget fills the cache before
// any deferral): two spellings of one backend holding calls begin one
// hold, said once at info level, under the canonical target.
func TestHeldTwoSpellingsOneLine(t *testing.T) {
	const dialled, canonical = "held-spellings.test:443", "dns:///held-spellings.test:443"
	canonicalTargets.Store(dialled, canonical)
	canonicalTargets.Store(canonical, canonical)
	defer canonicalTargets.Delete(dialled)
	defer canonicalTargets.Delete(canonical)
	var mu sync.Mutex
	var targets []any
	l := logging.LoggerFunc(func(_ context.Context, lvl logging.Level, _ string, kv ...any) {
		if lvl != logging.LevelInfo {
			return // the deferral's own line
		}
		mu.Lock()
		targets = append(targets, kv[1])
		mu.Unlock()
	})
	o := &options{summary: refusedlog.New(l)}
	o.log(context.Background(), l, Event{Kind: EventDeferred, Target: dialled, Method: "/a.S/M"})
	o.log(context.Background(), l, Event{Kind: EventDeferred, Target: canonical, Method: "/a.S/M"})
	mu.Lock()
	defer mu.Unlock()
	if len(targets) != 1 || targets[0] != canonical {
		t.Fatalf("holding lines for %v, want one, for %s", targets, canonical)
	}
}

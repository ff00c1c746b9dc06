package budget

import (
	"go/ast"
	"go/importer"
	"go/parser"
	"go/token"
	"go/types"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"
)

// gateStateTypes are the types whose values the Gate's lock owns: what a
// write to any of their fields changes is the Gate's shared state.
var gateStateTypes = map[string]bool{"Gate": true, "gateState": true, "evidence": true, "pacer": true, "Waiter": true, "waiterView": true}

// gateWriters lists the functions of the Gate's files (budget/gate*.go,
// budget/defer.go) whose bodies write the Gate's shared state: assign to,
// or increment, a field reached through a pointer to one of
// gateStateTypes (g.st.ev.x, a local e := &s.ev, *s; not a field of a
// copy: the pacer's and the evidence's methods compute a new value, which
// the gate's transitions store), or change one through a foreign mutator
// (a list's PushBack or Remove, a waitSet's push or setDue, a timer's
// Reset or Stop, an atomic's Store, close of a channel field). A function that only calls a writer is
// not one. Constructors (Deferring, new*) build a value nobody shares yet.
func gateWriters(t *testing.T) []string {
	t.Helper()
	fset := token.NewFileSet()
	all, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	var files []*ast.File
	gate := map[*ast.File]bool{}
	for _, p := range all {
		if strings.HasSuffix(p, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, p, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, f)
		if strings.HasPrefix(p, "gate") || p == "defer.go" {
			gate[f] = true
		}
	}
	info := &types.Info{Types: map[ast.Expr]types.TypeAndValue{}, Selections: map[*ast.SelectorExpr]*types.Selection{}, Uses: map[*ast.Ident]types.Object{}}
	conf := types.Config{Importer: importer.ForCompiler(fset, "source", nil)}
	if _, err := conf.Check("github.com/stagger-go/stagger/budget", fset, files, info); err != nil {
		t.Fatal(err)
	}
	// statePointer reports whether tp points to a state value: what is
	// stored through it is shared (a value of a state type is a copy).
	statePointer := func(tp types.Type) bool {
		p, ok := tp.(*types.Pointer)
		if !ok {
			return false
		}
		n, ok := p.Elem().(*types.Named)
		return ok && gateStateTypes[n.Obj().Name()] && n.Obj().Pkg().Name() == "budget"
	}
	// written reports whether storing to x changes shared state: x reaches
	// a field through a pointer to a state value.
	var written func(x ast.Expr) bool
	written = func(x ast.Expr) bool {
		switch x := x.(type) {
		case *ast.ParenExpr:
			return written(x.X)
		case *ast.IndexExpr:
			return written(x.X)
		case *ast.StarExpr:
			return statePointer(info.Types[x.X].Type) || written(x.X)
		case *ast.SelectorExpr:
			if sel, ok := info.Selections[x]; ok && sel.Kind() == types.FieldVal {
				return statePointer(info.Types[x.X].Type) || written(x.X)
			}
		}
		return false
	}
	// mutator reports whether a method of these changes its receiver.
	mutator := func(sel *types.Selection) bool {
		tp := sel.Recv()
		if p, ok := tp.(*types.Pointer); ok {
			tp = p.Elem()
		}
		n, ok := tp.(*types.Named)
		if !ok || n.Obj().Pkg() == nil {
			return false
		}
		switch n.Obj().Pkg().Path() + "." + n.Obj().Name() {
		case "container/list.List", "time.Timer":
			return sel.Obj().Name() != "Len" && sel.Obj().Name() != "Front" && sel.Obj().Name() != "Back"
		case "github.com/stagger-go/stagger/budget.waitSet":
			// The Gate's ordered sets (waitset.go), a container as the
			// list is: what changes them writes.
			return !slices.Contains([]string{"len", "top", "has", "index", "less"}, sel.Obj().Name())
		}
		return n.Obj().Pkg().Path() == "sync/atomic" && sel.Obj().Name() != "Load"
	}
	var out []string
	for _, f := range files {
		if !gate[f] {
			continue
		}
		for _, d := range f.Decls {
			fd, ok := d.(*ast.FuncDecl)
			if !ok || fd.Body == nil || fd.Name.Name == "Deferring" || strings.HasPrefix(fd.Name.Name, "new") {
				continue
			}
			writes := false
			ast.Inspect(fd.Body, func(n ast.Node) bool {
				switch n := n.(type) {
				case *ast.FuncLit:
					return true
				case *ast.AssignStmt:
					if n.Tok != token.DEFINE {
						for _, l := range n.Lhs {
							writes = writes || written(l)
						}
					}
				case *ast.IncDecStmt:
					writes = writes || written(n.X)
				case *ast.CallExpr:
					switch fn := n.Fun.(type) {
					case *ast.Ident:
						if (fn.Name == "close" || fn.Name == "delete" || fn.Name == "clear") && len(n.Args) > 0 {
							writes = writes || written(n.Args[0])
						}
					case *ast.SelectorExpr:
						if sel, ok := info.Selections[fn]; ok && sel.Kind() == types.MethodVal && mutator(sel) {
							writes = writes || written(fn.X)
						}
					}
				}
				return true
			})
			if writes {
				name := fd.Name.Name
				if fd.Recv != nil {
					rt := fd.Recv.List[0].Type
					if s, ok := rt.(*ast.StarExpr); ok {
						rt = s.X
					}
					name = rt.(*ast.Ident).Name + "." + name
				}
				out = append(out, name)
			}
		}
	}
	sort.Strings(out)
	return out
}

// TestGateWriters holds issue 62's bar: at most maxGateWriters functions
// write the Gate's shared state, so that a reader holds every way it
// changes in a few places.
func TestGateWriters(t *testing.T) {
	const maxGateWriters = 10
	w := gateWriters(t)
	t.Logf("%d writers: %s", len(w), strings.Join(w, ", "))
	// The count cannot pass by missing writes: these write, by design.
	for _, want := range []string{"Gate.grantLocked", "Gate.moveLocked", "gateState.observe", "Waiter.take"} {
		if !slices.Contains(w, want) {
			t.Errorf("the writers found miss %s, which writes the Gate's state", want)
		}
	}
	if len(w) > maxGateWriters {
		t.Errorf("%d functions write the Gate's shared state, want at most %d: %s", len(w), maxGateWriters, strings.Join(w, ", "))
	}
}

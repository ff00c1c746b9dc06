package interceptor_test

import (
	"go/ast"
	"go/doc"
	"go/parser"
	"go/token"
	"path/filepath"
	"strings"
	"testing"
)

// Every exported name of the package has a doc comment that go doc shows: a
// blank line between a comment and its declaration detaches it, and go doc
// then prints nothing (WithPerAttemptTimeout and WithIdempotentMethods did).
func TestExportedNamesHaveDocs(t *testing.T) {
	paths, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	var files []*ast.File
	for _, path := range paths {
		if strings.HasSuffix(path, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, path, nil, parser.ParseComments)
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, f)
	}
	p, err := doc.NewFromFiles(fset, files, "github.com/stagger-go/stagger/interceptor")
	if err != nil {
		t.Fatal(err)
	}
	values := append(p.Consts, p.Vars...)
	for _, f := range p.Funcs {
		if f.Doc == "" {
			t.Errorf("func %s has no doc comment", f.Name)
		}
	}
	for _, ty := range p.Types {
		if ty.Doc == "" {
			t.Errorf("type %s has no doc comment", ty.Name)
		}
		for _, f := range append(ty.Funcs, ty.Methods...) {
			if f.Doc == "" {
				t.Errorf("%s.%s has no doc comment", ty.Name, f.Name)
			}
		}
		values = append(values, append(ty.Consts, ty.Vars...)...)
	}
	for _, v := range values {
		if v.Doc != "" {
			continue
		}
		for _, spec := range v.Decl.Specs {
			if s := spec.(*ast.ValueSpec); s.Doc == nil && s.Comment == nil && s.Names[0].IsExported() {
				t.Errorf("%s has no doc comment", s.Names[0].Name)
			}
		}
	}
}

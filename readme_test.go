package stagger_test

import (
	"bytes"
	"context"
	"encoding/json"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"
)

// The documents whose snippets are checked against the files they copy.
var checkedDocs = []string{"README.md", "docs/migrating-from-grpc-go.md", "docs/migrating-from-go-grpc-middleware.md", "docs/recipes.md", "connect/README.md"}

// block is a fenced code block of a Markdown document.
type block struct {
	lang string
	// line is the line number of the opening fence (1 = first).
	line int
	body string
	// before is the paragraph right above the fence, after is the one
	// right below the closing fence (blank lines skipped, "" when none).
	before, after string
}

// fencedBlocks returns the fenced code blocks of a Markdown document.
func fencedBlocks(t *testing.T, doc string) []block {
	t.Helper()
	data, err := os.ReadFile(doc)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(string(data), "\n")
	paragraph := func(from, step int) string {
		i := from
		for i >= 0 && i < len(lines) && strings.TrimSpace(lines[i]) == "" {
			i += step
		}
		var p []string
		for ; i >= 0 && i < len(lines) && strings.TrimSpace(lines[i]) != "" && !strings.HasPrefix(lines[i], "```"); i += step {
			p = append(p, lines[i])
		}
		if step < 0 {
			for l, r := 0, len(p)-1; l < r; l, r = l+1, r-1 {
				p[l], p[r] = p[r], p[l]
			}
		}
		return strings.Join(p, "\n")
	}
	var out []block
	for i := 0; i < len(lines); i++ {
		if !strings.HasPrefix(lines[i], "```") {
			continue
		}
		b := block{lang: strings.TrimPrefix(lines[i], "```"), line: i + 1, before: paragraph(i-1, -1)}
		j := i + 1
		for j < len(lines) && !strings.HasPrefix(lines[j], "```") {
			j++
		}
		if j == len(lines) {
			t.Fatalf("%s:%d: code block never closed", doc, i+1)
		}
		b.body = strings.Join(lines[i+1:j], "\n")
		b.after = paragraph(j+1, 1)
		out = append(out, b)
		i = j
	}
	return out
}

// policyFileNamed finds the file a JSON block copies: the last
// `examples/policies/...` path named in the paragraph that introduces it
// ("A policy file looks like `examples/policies/retry.json`:").
var policyFileNamed = regexp.MustCompile("`(examples/policies/[^`]+)`")

// Every JSON block that a document introduces as a policy file of
// examples/policies is that file, as parsed JSON; one introduced as "the top
// level of" a file is a fragment: each of its keys has the file's value.
func TestDocsPolicyFilesMatchExamples(t *testing.T) {
	for _, doc := range checkedDocs {
		copies := 0
		for _, b := range fencedBlocks(t, doc) {
			if b.lang != "json" {
				continue
			}
			m := policyFileNamed.FindAllStringSubmatch(b.before, -1)
			if m == nil {
				continue
			}
			copies++
			path := m[len(m)-1][1]
			data, err := os.ReadFile(path)
			if err != nil {
				t.Errorf("%s:%d: the block copies %s: %v", doc, b.line, path, err)
				continue
			}
			var inDoc, inFile map[string]any
			if err := json.Unmarshal([]byte(b.body), &inDoc); err != nil {
				t.Errorf("%s:%d: the block is not JSON: %v", doc, b.line, err)
				continue
			}
			if err := json.Unmarshal(data, &inFile); err != nil {
				t.Errorf("%s: %v", path, err)
				continue
			}
			if strings.Contains(b.before, "top level of") {
				for k, v := range inDoc {
					if !reflect.DeepEqual(v, inFile[k]) {
						t.Errorf("%s:%d: %q differs from %s's: copy the file's", doc, b.line, k, path)
					}
				}
				continue
			}
			if !reflect.DeepEqual(inDoc, inFile) {
				t.Errorf("%s:%d: the block differs from %s: copy the file (it is what the examples load)", doc, b.line, path)
			}
		}
		if want := map[string]int{"README.md": 2, "docs/migrating-from-go-grpc-middleware.md": 1}[doc]; copies < want {
			t.Errorf("%s: %d JSON blocks introduced by a file of examples/policies, want at least %d: has the wording of the introductions changed?", doc, copies, want)
		}
	}
}

// exampleNamed finds the Example a Go block is a copy of, in the paragraph
// after the block: "The lines above are `ExampleDialOptions` in
// `example_readme_test.go`".
var exampleNamed = regexp.MustCompile("lines above are `(Example[A-Za-z0-9_]*)` in `([^`]+)`")

// Every Go block that a document says is an Example's lines is: each of its
// lines is a line of the Example's body, in the same order (the Example may
// have more: its server, its output).
func TestDocsGoSnippetsMatchExamples(t *testing.T) {
	for _, doc := range checkedDocs {
		copies := 0
		for _, b := range fencedBlocks(t, doc) {
			m := exampleNamed.FindStringSubmatch(strings.Join(strings.Fields(b.after), " "))
			if b.lang != "go" || m == nil {
				continue
			}
			copies++
			body := exampleBody(t, m[2], m[1])
			next := 0
			for _, line := range strings.Split(b.body, "\n") {
				line = strings.TrimSpace(line)
				if line == "" {
					continue
				}
				for next < len(body) && body[next] != line {
					next++
				}
				if next == len(body) {
					t.Errorf("%s:%d: %q is not a line of %s in %s (after the lines before it): copy the Example", doc, b.line, line, m[1], m[2])
					break
				}
				next++
			}
		}
		if want := map[string]int{"README.md": 2, "docs/recipes.md": 5, "connect/README.md": 1, "docs/migrating-from-go-grpc-middleware.md": 3}[doc]; copies < want {
			t.Errorf("%s: %d Go blocks said to be an Example's lines, want at least %d: has the wording changed?", doc, copies, want)
		}
	}
}

// exampleBody returns the trimmed lines of the Go file path's imports,
// then of the body of its function name.
func exampleBody(t *testing.T, path, name string) []string {
	t.Helper()
	src, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, path, src, parser.ParseComments)
	if err != nil {
		t.Fatal(err)
	}
	// The file's imports come first: a snippet may open with them, so
	// that it compiles as shown.
	var lines []string
	for _, d := range f.Decls {
		if g, ok := d.(*ast.GenDecl); ok && g.Tok == token.IMPORT {
			for _, l := range strings.Split(string(src[fset.Position(g.Pos()).Offset:fset.Position(g.End()).Offset]), "\n") {
				lines = append(lines, strings.TrimSpace(l))
			}
		}
	}
	for _, d := range f.Decls {
		if fn, ok := d.(*ast.FuncDecl); ok && fn.Name.Name == name && fn.Body != nil {
			text := string(src[fset.Position(fn.Body.Lbrace).Offset+1 : fset.Position(fn.Body.Rbrace).Offset])
			for _, l := range strings.Split(text, "\n") {
				lines = append(lines, strings.TrimSpace(l))
			}
			return lines
		}
	}
	t.Fatalf("%s has no function %s", path, name)
	return nil
}

// Every JSON block of docs/migrating-from-grpc-go.md is a service config
// that example_migrate_test.go runs (equal as parsed JSON to one of its
// string constants), and every text block is the output of one of its
// Examples, line for line.
func TestMigrationGuideMatchesExamples(t *testing.T) {
	const doc, examples = "docs/migrating-from-grpc-go.md", "example_migrate_test.go"
	src, err := os.ReadFile(examples)
	if err != nil {
		t.Fatal(err)
	}
	f, err := parser.ParseFile(token.NewFileSet(), examples, src, parser.ParseComments)
	if err != nil {
		t.Fatal(err)
	}
	var configs []any
	ast.Inspect(f, func(n ast.Node) bool {
		if lit, ok := n.(*ast.BasicLit); ok && lit.Kind == token.STRING {
			if s, err := strconv.Unquote(lit.Value); err == nil {
				var v map[string]any
				if json.Unmarshal([]byte(s), &v) == nil {
					configs = append(configs, v)
				}
			}
		}
		return true
	})
	outputs := exampleOutputs(f)
	var jsonBlocks, textBlocks int
	for _, b := range fencedBlocks(t, doc) {
		switch b.lang {
		case "json":
			jsonBlocks++
			var v map[string]any
			if err := json.Unmarshal([]byte(b.body), &v); err != nil {
				t.Errorf("%s:%d: not JSON: %v", doc, b.line, err)
				continue
			}
			found := false
			for _, c := range configs {
				found = found || reflect.DeepEqual(c, v)
			}
			if !found {
				t.Errorf("%s:%d: the service config is none of %s's: copy the one the Example runs", doc, b.line, examples)
			}
		case "text":
			textBlocks++
			found := false
			for _, o := range outputs {
				found = found || o == strings.TrimSpace(b.body)
			}
			if !found {
				t.Errorf("%s:%d: the output is no Example's in %s: copy the Example's // Output", doc, b.line, examples)
			}
		}
	}
	if jsonBlocks < 2 || textBlocks < 4 {
		t.Errorf("%s: %d JSON and %d text blocks, want 2 and 4 (the four Examples)", doc, jsonBlocks, textBlocks)
	}
}

// exampleOutputs returns the // Output of each Example of f, one string.
func exampleOutputs(f *ast.File) []string {
	var outputs []string
	for _, d := range f.Decls {
		fn, ok := d.(*ast.FuncDecl)
		if !ok || !strings.HasPrefix(fn.Name.Name, "Example") || fn.Body == nil {
			continue
		}
		for _, cg := range f.Comments {
			if cg.Pos() < fn.Body.Lbrace || cg.End() > fn.Body.Rbrace {
				continue
			}
			if text := cg.Text(); strings.HasPrefix(text, "Output:") {
				outputs = append(outputs, strings.TrimSpace(strings.TrimPrefix(text, "Output:")))
			}
		}
	}
	return outputs
}

// docs/migrating-from-go-grpc-middleware.md, followed by a test: its
// "before" and "after" programs are Examples of example_middleware_test.go
// (TestDocsGoSnippetsMatchExamples checks its Go blocks are their lines,
// TestDocsPolicyFilesMatchExamples its file), and every text block of the
// guide is the output of one of them, line for line: what the guide says
// each side did is what it does.
func TestMiddlewareGuideMatchesExamples(t *testing.T) {
	const doc, examples = "docs/migrating-from-go-grpc-middleware.md", "example_middleware_test.go"
	f, err := parser.ParseFile(token.NewFileSet(), examples, nil, parser.ParseComments)
	if err != nil {
		t.Fatal(err)
	}
	outputs := exampleOutputs(f)
	textBlocks := 0
	for _, b := range fencedBlocks(t, doc) {
		if b.lang != "text" {
			continue
		}
		textBlocks++
		found := false
		for _, o := range outputs {
			found = found || o == strings.TrimSpace(b.body)
		}
		if !found {
			t.Errorf("%s:%d: the output is no Example's in %s: copy the Example's // Output", doc, b.line, examples)
		}
	}
	if textBlocks < 3 {
		t.Errorf("%s: %d text blocks, want 3 (the two programs' runs and the ported callback's)", doc, textBlocks)
	}
}

// The README is for users first, and short.
func TestDocsReadmeLength(t *testing.T) {
	data, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(data), "\n"); n > 250 {
		t.Errorf("README.md has %d lines, want at most 250: contributor material goes to CONTRIBUTING.md", n)
	}
}

// The README's quick start, as written: its main.go is built in a scratch
// module that requires stagger through a replace directive to this
// repository, run (its server is on loopback), and its output is the
// README's. The module cache serves the dependencies (the repository's
// go.sum has their sums); when it lacks one, the module proxy is asked, and
// the test is skipped only if that cannot be reached.
func TestDocsQuickStart(t *testing.T) {
	var mainGo, output string
	blocks := fencedBlocks(t, "README.md")
	for i, b := range blocks {
		if b.lang == "go" && strings.HasPrefix(b.body, "package main\n") {
			mainGo = b.body
			if i+1 < len(blocks) && blocks[i+1].lang == "text" {
				output = blocks[i+1].body
			}
			break
		}
	}
	if mainGo == "" || output == "" {
		t.Fatal("README.md: no quick start (a go block starting with package main, followed by a text block of its output)")
	}
	repo, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	gomod := "module quickstart\n\ngo 1.22\n\nrequire github.com/stagger-go/stagger v0.0.0\n\nreplace github.com/stagger-go/stagger => " + repo + "\n"
	sum, err := os.ReadFile("go.sum")
	if err != nil {
		t.Fatal(err)
	}
	for name, data := range map[string][]byte{"main.go": []byte(mainGo + "\n"), "go.mod": []byte(gomod), "go.sum": sum} {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	goCmd := filepath.Join(runtime.GOROOT(), "bin", "go")
	run := func(proxy string) (string, string, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, goCmd, "run", ".")
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS=-mod=mod", "GOTOOLCHAIN=local", "GOPROXY="+proxy)
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		err := cmd.Run()
		return stdout.String(), stderr.String(), err
	}
	out, errOut, err := run("off")
	if err != nil && strings.Contains(errOut, "GOPROXY=off") {
		proxy := os.Getenv("GOPROXY")
		if proxy == "" || proxy == "off" {
			proxy = "https://proxy.golang.org,direct"
		}
		out, errOut, err = run(proxy)
		if err != nil && (strings.Contains(errOut, "dial tcp") || strings.Contains(errOut, "no such host") || strings.Contains(errOut, "i/o timeout")) {
			t.Skipf("the quick start needs modules that are not in the module cache, and the module proxy cannot be reached: %s", errOut)
		}
	}
	if err != nil {
		t.Fatalf("go run of the README's quick start: %v\n%s%s", err, out, errOut)
	}
	if strings.TrimSpace(out) != strings.TrimSpace(output) {
		t.Errorf("the quick start printed\n%s\nthe README says\n%s", out, output)
	}
}

// The interceptor package documentation is a user's manual: with its index,
// `go doc ./interceptor` stays within 250 lines; the rules live in the docs
// of the functions that enforce them.
func TestDocsInterceptorPackageLength(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(runtime.GOROOT(), "bin", "go"), "doc", "./interceptor")
	cmd.Env = append(os.Environ(), "GOTOOLCHAIN=local")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("go doc ./interceptor: %v\n%s", err, out)
	}
	if n := strings.Count(string(out), "\n"); n > 250 {
		t.Errorf("go doc ./interceptor prints %d lines, want at most 250: move detail into the docs of the functions it describes", n)
	}
}

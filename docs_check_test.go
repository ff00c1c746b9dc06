package stagger_test

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
	"unicode"
)

// The docs check: what the docs name must exist. Every Go identifier a
// document names in backquotes with its package (`budget.DefaultBackends`,
// `policy.Config.Budgets`, `interceptor.Report.Target`) resolves in this
// repository's package of that name; every `make TARGET` names a target of
// the Makefile; every flag of a `stagger CMD -flag` the command defines.
// Go comments are held to the same for the identifiers they qualify with
// one of our packages, and may not name as exported (QuietGapMax) what
// the package declares unexported (quietGapMax): a name that was
// unexported and is still spoken of as API.

// docFiles are the documents checked: the README, CONTRIBUTING, docs/,
// the nested modules' READMEs, and CHANGELOG.md's Unreleased section.
func docFiles(t *testing.T) map[string]string {
	t.Helper()
	out := make(map[string]string)
	read := func(path string) string {
		data, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		return string(data)
	}
	paths := []string{"README.md", "CONTRIBUTING.md"}
	more, _ := filepath.Glob("docs/*.md")
	paths = append(paths, more...)
	more, _ = filepath.Glob("*/README.md")
	paths = append(paths, more...)
	more, _ = filepath.Glob("*/*/README.md")
	paths = append(paths, more...)
	for _, p := range paths {
		if strings.HasPrefix(p, "api/") {
			continue // the recorded API: what was, not what is
		}
		out[p] = read(p)
	}
	changelog := read("CHANGELOG.md")
	start := strings.Index(changelog, "## [Unreleased]")
	if start < 0 {
		t.Fatal("CHANGELOG.md has no Unreleased section")
	}
	rest := changelog[start+len("## [Unreleased]"):]
	if end := strings.Index(rest, "\n## ["); end >= 0 {
		rest = rest[:end]
	}
	// The Breaking entries name what was removed, and the other entries
	// may say what replaced it: names removed are checked by
	// make api-check, which requires them there.
	if b := strings.Index(rest, "### Breaking"); b >= 0 {
		end := strings.Index(rest[b+1:], "\n### ")
		if end < 0 {
			end = len(rest) - b - 1
		}
		removed := rest[b : b+1+end]
		rest = rest[:b] + rest[b+1+end:]
		for _, m := range backquoted.FindAllStringSubmatch(removed, -1) {
			removedNames[m[1]] = true
		}
	}
	out["CHANGELOG.md (Unreleased)"] = rest
	return out
}

// removed reports whether span is a name the Breaking entries remove, or
// one of its methods or fields.
func removed(span string) bool {
	for name := range removedNames {
		if span == name || strings.HasPrefix(span, name+".") {
			return true
		}
	}
	return false
}

// removedNames are the names CHANGELOG.md's Unreleased Breaking entries
// give in backquotes: the CHANGELOG may speak of them elsewhere.
var removedNames = make(map[string]bool)

// goPackage is what one package of the repository declares.
type goPackage struct {
	dir  string
	decl map[string]bool            // top-level names, exported or not
	sub  map[string]map[string]bool // type name -> its methods and fields
	// comments are the package's doc comments and those of its exported
	// declarations, with their positions.
	comments []docComment
}

type docComment struct {
	pos  string
	text string
}

// repoPackages parses every package of the repository (every module, no
// tests, no generated code), by the names a document calls them: the
// package name (staggerconnect), its directory as apidiff names it
// (connect, server/redisstore) and "stagger" for the root.
func repoPackages(t *testing.T) map[string]*goPackage {
	t.Helper()
	byDir := parseRepo(t)
	out := make(map[string]*goPackage)
	for dir, p := range byDir {
		if dir == "." {
			out["stagger"] = p
			continue
		}
		if strings.Contains(dir, "internal") {
			continue
		}
		// By its directory too, as apidiff and the CHANGELOG name it,
		// where that names no other package a document speaks of
		// (connect-go's connect, OpenTelemetry's otel).
		if d := filepath.ToSlash(dir); d != "connect" && d != "otel" {
			out[d] = p
		}
		if name := packageName(dir); name != "" {
			out[name] = p
		}
	}
	return out
}

// packageName returns the name the package in dir declares ("" when its
// files say none).
func packageName(dir string) string {
	names, _ := filepath.Glob(filepath.Join(dir, "*.go"))
	for _, n := range names {
		if strings.HasSuffix(n, "_test.go") {
			continue
		}
		data, _ := os.ReadFile(n)
		if m := regexp.MustCompile(`(?m)^package (\w+)`).FindSubmatch(data); m != nil {
			return string(m[1])
		}
	}
	return ""
}

// parseRepo parses every package of the repository (every module, no
// tests, no generated code, internal packages included), by directory.
func parseRepo(t *testing.T) map[string]*goPackage {
	t.Helper()
	byDir := make(map[string]*goPackage)
	fset := token.NewFileSet()
	err := filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if name := d.Name(); path != "." && (strings.HasPrefix(name, ".") || name == "testdata" || name == "gen" || name == "api") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.ParseComments)
		if err != nil {
			return err
		}
		if ast.IsGenerated(f) || f.Name.Name == "main" {
			return nil
		}
		dir := filepath.Dir(path)
		p := byDir[dir]
		if p == nil {
			p = &goPackage{dir: dir, decl: make(map[string]bool), sub: make(map[string]map[string]bool)}
			byDir[dir] = p
		}
		addSub := func(typ, name string) {
			if p.sub[typ] == nil {
				p.sub[typ] = make(map[string]bool)
			}
			p.sub[typ][name] = true
		}
		comment := func(g *ast.CommentGroup) {
			if g != nil {
				p.comments = append(p.comments, docComment{pos: fset.Position(g.Pos()).String(), text: g.Text()})
			}
		}
		comment(f.Doc)
		for _, d := range f.Decls {
			switch d := d.(type) {
			case *ast.FuncDecl:
				if d.Recv == nil {
					p.decl[d.Name.Name] = true
				} else {
					typ := d.Recv.List[0].Type
					for {
						switch x := typ.(type) {
						case *ast.StarExpr:
							typ = x.X
							continue
						case *ast.IndexExpr:
							typ = x.X
							continue
						case *ast.IndexListExpr:
							typ = x.X
							continue
						}
						break
					}
					if id, ok := typ.(*ast.Ident); ok {
						addSub(id.Name, d.Name.Name)
					}
				}
				if d.Name.IsExported() {
					comment(d.Doc)
				}
			case *ast.GenDecl:
				exported := false
				for _, s := range d.Specs {
					switch s := s.(type) {
					case *ast.TypeSpec:
						p.decl[s.Name.Name] = true
						exported = exported || s.Name.IsExported()
						if s.Name.IsExported() {
							comment(s.Doc)
						}
						var fields *ast.FieldList
						switch tt := s.Type.(type) {
						case *ast.StructType:
							fields = tt.Fields
						case *ast.InterfaceType:
							fields = tt.Methods
						}
						if fields != nil {
							for _, f := range fields.List {
								for _, n := range f.Names {
									addSub(s.Name.Name, n.Name)
									if n.IsExported() {
										comment(f.Doc)
									}
								}
								if len(f.Names) == 0 { // embedded
									if id, ok := f.Type.(*ast.Ident); ok {
										addSub(s.Name.Name, id.Name)
									}
								}
							}
						}
					case *ast.ValueSpec:
						for _, n := range s.Names {
							p.decl[n.Name] = true
							exported = exported || n.IsExported()
						}
						if len(s.Names) > 0 && s.Names[0].IsExported() {
							comment(s.Doc)
						}
					}
				}
				if exported {
					comment(d.Doc)
				}
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return byDir
}

// resolve reports whether the dotted reference ref (after its package)
// names something of p: a top-level name, or a method or field of a type.
func (p *goPackage) resolve(parts []string) bool {
	if !p.decl[parts[0]] {
		return false
	}
	if len(parts) == 1 {
		return true
	}
	if p.sub[parts[0]][parts[1]] {
		return true
	}
	// A method or field of a value's type (policy.DefaultX.Field): any type's.
	if !unicode.IsUpper(rune(parts[0][0])) || len(parts) > 2 {
		return false
	}
	for _, s := range p.sub {
		if s[parts[1]] {
			return true
		}
	}
	return false
}

var (
	backquoted = regexp.MustCompile("`([^`\n]+)`")
	// qualified is a reference to a package's identifier: pkg.Name,
	// pkg.Type.Method, server/redisstore.New; a call's "()" allowed.
	qualified = regexp.MustCompile(`^([a-z][a-z0-9]*(?:/[a-z][a-z0-9]*)?)\.([A-Z]\w*(?:\.[A-Za-z_]\w*)*)(?:\(\))?$`)
	// inComment is such a reference inside prose: an exported name (m[1]
	// is what comes before: "failsafe-go's budget.ErrExceeded" is another
	// project's package).
	inComment = regexp.MustCompile(`(\S*\s)?\b([a-z][a-z0-9]*)\.([A-Z]\w*(?:\.[A-Z]\w*)?)`)
	// camel is a CamelCase word of two humps or more.
	camel      = regexp.MustCompile(`\b[A-Z][a-z0-9]+(?:[A-Z][a-z0-9]+)+\b`)
	makeTarget = regexp.MustCompile(`^make ((?:[A-Z_]+=\S+ )*)([a-z][a-z0-9-]*)`)
	makeRule   = regexp.MustCompile(`(?m)^([a-z][a-z0-9-]*):`)
	staggerCmd = regexp.MustCompile(`^stagger ([a-z]+)((?: \S+)*)$`)
)

func TestDocsNameWhatExists(t *testing.T) {
	pkgs := repoPackages(t)
	makefile, err := os.ReadFile("Makefile")
	if err != nil {
		t.Fatal(err)
	}
	targets := make(map[string]bool)
	for _, m := range makeRule.FindAllStringSubmatch(string(makefile), -1) {
		targets[m[1]] = true
	}
	flags := commandFlags(t)

	var problems []string
	for doc, text := range docFiles(t) {
		for i, line := range strings.Split(text, "\n") {
			for _, m := range backquoted.FindAllStringSubmatch(line, -1) {
				span := strings.TrimSpace(m[1])
				where := fmt.Sprintf("%s:%d", doc, i+1)
				if q := qualified.FindStringSubmatch(span); q != nil {
					if p := pkgs[q[1]]; p != nil && !p.resolve(strings.Split(q[2], ".")) && !(strings.HasPrefix(doc, "CHANGELOG") && removed(span)) {
						problems = append(problems, fmt.Sprintf("%s: `%s`: %s declares no %s", where, span, q[1], q[2]))
					}
				}
				if mt := makeTarget.FindStringSubmatch(span); mt != nil && !targets[mt[2]] {
					problems = append(problems, fmt.Sprintf("%s: `%s`: the Makefile has no target %s", where, span, mt[2]))
				}
				if sc := staggerCmd.FindStringSubmatch(span); sc != nil {
					if known, ok := flags[sc[1]]; ok {
						for _, word := range strings.Fields(sc[2]) {
							name := strings.TrimLeft(strings.SplitN(word, "=", 2)[0], "-")
							if strings.HasPrefix(word, "-") && name != "" && !known[name] {
								problems = append(problems, fmt.Sprintf("%s: `%s`: stagger %s has no flag -%s", where, span, sc[1], name))
							}
						}
					}
				}
			}
		}
	}
	for name, p := range pkgs {
		if name != filepath.ToSlash(p.dir) && !(name == "stagger" && p.dir == ".") {
			continue // each package once, by its directory
		}
		for _, c := range p.comments {
			for _, m := range inComment.FindAllStringSubmatch(c.text, -1) {
				if strings.HasSuffix(strings.TrimSpace(m[1]), "'s") {
					continue
				}
				if q := pkgs[m[2]]; q != nil && !q.resolve(strings.Split(m[3], ".")) {
					problems = append(problems, fmt.Sprintf("%s: %s.%s: %s declares no %s", c.pos, m[2], m[3], m[2], m[3]))
				}
			}
			for _, w := range camel.FindAllString(c.text, -1) {
				lower := strings.ToLower(w[:1]) + w[1:]
				if !p.decl[w] && p.decl[lower] && !exportedAnywhere(pkgs, w) {
					problems = append(problems, fmt.Sprintf("%s: %s: the package declares it unexported (%s)", c.pos, w, lower))
				}
			}
		}
	}
	sort.Strings(problems)
	for _, p := range problems {
		t.Error(p)
	}
}

// exportedAnywhere reports whether some package of the repository
// declares name (a comment may name another package's identifier
// without its package).
func exportedAnywhere(pkgs map[string]*goPackage, name string) bool {
	for _, p := range pkgs {
		if p.decl[name] {
			return true
		}
		for _, s := range p.sub {
			if s[name] {
				return true
			}
		}
	}
	return false
}

// commandFlags returns the flags of each stagger subcommand, read from
// cmd/stagger's sources: a subcommand is a file's flag.NewFlagSet("name",
// ...), its flags the fs.Type("flag", ...) definitions in that file.
func commandFlags(t *testing.T) map[string]map[string]bool {
	t.Helper()
	files, err := filepath.Glob("cmd/stagger/*.go")
	if err != nil {
		t.Fatal(err)
	}
	newSet := regexp.MustCompile(`flag\.NewFlagSet\("([a-z]+)"`)
	define := regexp.MustCompile(`\.(?:String|Int|Int64|Uint|Uint64|Bool|Float64|Duration|Func|Var|StringVar|IntVar|Int64Var|UintVar|BoolVar|Float64Var|DurationVar|TextVar|BoolFunc)\((?:&?[\w.]+, )?"([a-z][\w-]*)"`)
	out := make(map[string]map[string]bool)
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		sets := newSet.FindAllStringSubmatch(string(data), -1)
		if len(sets) == 0 {
			continue
		}
		known := make(map[string]bool)
		for _, d := range define.FindAllStringSubmatch(string(data), -1) {
			known[d[1]] = true
		}
		for _, s := range sets {
			out[s[1]] = known
		}
	}
	return out
}

// TestDocsModuleRequirements: each nested module a user adopts says in its
// README what it requires: the Go version and every direct requirement of
// its go.mod, at the version go.mod gives.
func TestDocsModuleRequirements(t *testing.T) {
	require := regexp.MustCompile(`^(?:require\s+)?([a-z][\w./-]*)\s+(v\S+)$`)
	listed := regexp.MustCompile("(?m)^- `([^`]+)` (v\\S+)$")
	for _, m := range []string{"otel", "server/redisstore", "connect"} {
		mod, err := os.ReadFile(filepath.Join(m, "go.mod"))
		if err != nil {
			t.Fatal(err)
		}
		readme, err := os.ReadFile(filepath.Join(m, "README.md"))
		if err != nil {
			t.Errorf("%s has no README.md", m)
			continue
		}
		text := string(readme)
		_, section, ok := strings.Cut(text, "## Requirements")
		if !ok {
			t.Errorf("%s/README.md has no Requirements section", m)
			continue
		}
		want := make(map[string]string)
		for _, line := range strings.Split(string(mod), "\n") {
			line = strings.TrimSpace(line)
			if v, ok := strings.CutPrefix(line, "go "); ok {
				if minor := strings.Join(strings.Split(v, ".")[:2], "."); !strings.Contains(section, "Go "+minor+" ") {
					t.Errorf("%s/README.md: Requirements do not say Go %s (go.mod: go %s)", m, minor, v)
				}
			}
			if rm := require.FindStringSubmatch(line); rm != nil && !strings.Contains(rm[1], "stagger-go/stagger") {
				want[rm[1]] = rm[2]
			}
		}
		got := make(map[string]string)
		for _, lm := range listed.FindAllStringSubmatch(section, -1) {
			got[lm[1]] = lm[2]
		}
		for p, v := range want {
			if got[p] != v {
				t.Errorf("%s/README.md: Requirements give %s %q, go.mod %s", m, p, got[p], v)
			}
		}
		for p := range got {
			if _, ok := want[p]; !ok {
				t.Errorf("%s/README.md: Requirements list %s, which go.mod does not require directly", m, p)
			}
		}
	}
}

// TestFiguresLiveInBenchmarks: a figure a code comment quotes (a
// percentage with a decimal: a lab's, a sim's, a benchmark's) is one
// BENCHMARKS.md has, where a retune replaces it; the comment states its
// reason and names the section. Figures in comments went stale at every
// retune (issue 47).
func TestFiguresLiveInBenchmarks(t *testing.T) {
	bench, err := os.ReadFile("BENCHMARKS.md")
	if err != nil {
		t.Fatal(err)
	}
	figure := regexp.MustCompile(`\b\d+\.\d+ ?%`)
	err = filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if name := d.Name(); path != "." && (strings.HasPrefix(name, ".") || name == "testdata" || name == "gen") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") || strings.HasSuffix(path, ".pb.go") {
			return nil
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for i, line := range strings.Split(string(data), "\n") {
			at := strings.Index(line, "//")
			if at < 0 {
				continue
			}
			for _, f := range figure.FindAllString(line[at:], -1) {
				spaced := strings.TrimSuffix(strings.TrimSpace(strings.TrimSuffix(f, "%")), " ") + " %"
				if !strings.Contains(string(bench), spaced) && !strings.Contains(string(bench), strings.ReplaceAll(f, " ", "")) {
					t.Errorf("%s:%d: %s is not in BENCHMARKS.md: name the section there instead", path, i+1, f)
				}
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

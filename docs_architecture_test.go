package stagger_test

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestDocsArchitectureNamesResolve: docs/architecture.md maps the code, so it
// is held to more than the other documents: every Go name it writes in
// backquotes resolves, unexported ones and internal packages included
// (`interceptor.call.afterAttempt`, `frontend.WithTarget`): a package of the
// repository, by directory or by name, and a top-level name of it, or a
// method or field of one of its types; `Type.Method` names a method or field
// some package's Type has; a path names a file or directory that exists.
// A qualified name whose package is neither ours nor one of the few the page
// may name (grpc's, the standard library's) is an error: a renamed package
// must not turn its names into unchecked prose. The Mermaid diagrams' names
// are checked the same way, and their participants must be packages.
// Documents and the CONTRIBUTING and README lines that send a maintainer to
// the page must exist.
func TestDocsArchitectureNamesResolve(t *testing.T) {
	const doc = "docs/architecture.md"
	data, err := os.ReadFile(doc)
	if err != nil {
		t.Fatal(err)
	}
	byDir := parseRepo(t)
	pkgs := make(map[string]*goPackage)
	for dir, p := range byDir {
		if dir == "." {
			pkgs["stagger"] = p
			continue
		}
		pkgs[filepath.ToSlash(dir)] = p
		if name := packageName(dir); name != "" {
			pkgs[name] = p
		}
	}
	foreign := map[string]bool{"grpc": true, "context": true, "sync": true, "atomic": true, "time": true, "metadata": true, "status": true, "codes": true}
	qualifiedAny := regexp.MustCompile(`^([a-z][a-z0-9]*(?:/[a-z][a-z0-9]*)*)\.([A-Za-z_]\w*(?:\.[A-Za-z_]\w*)?)(?:\(\))?$`)
	typeMember := regexp.MustCompile(`^([A-Z]\w*)\.([A-Za-z_]\w*)$`)
	pathLike := regexp.MustCompile(`^[a-z][\w.-]*(?:/[\w.-]+)*(?:\.go|/)$|^[a-z][\w-]*/[\w./-]+$`)
	inMermaid := regexp.MustCompile(`\b([a-z][a-z0-9]*)\.([A-Za-z_]\w*(?:\.[A-Za-z_]\w*)?)`)
	participant := regexp.MustCompile(`^\s*participant \w+ as (\S+)$`)

	strict := func(p *goPackage, parts []string) bool {
		if !p.decl[parts[0]] {
			return false
		}
		return len(parts) == 1 || len(parts) == 2 && p.sub[parts[0]][parts[1]]
	}
	var problems []string
	checked := 0
	check := func(where, span string, mustResolve bool) {
		if q := qualifiedAny.FindStringSubmatch(span); q != nil && !strings.HasSuffix(span, ".go") {
			p := pkgs[q[1]]
			switch {
			case p != nil:
				checked++
				if !strict(p, strings.Split(q[2], ".")) {
					problems = append(problems, fmt.Sprintf("%s: `%s`: package %s declares no %s", where, span, q[1], q[2]))
				}
			case mustResolve && !foreign[q[1]]:
				problems = append(problems, fmt.Sprintf("%s: `%s`: %s is no package of the repository", where, span, q[1]))
			}
			return
		}
		if m := typeMember.FindStringSubmatch(span); m != nil && mustResolve {
			checked++
			for _, p := range byDir {
				if p.sub[m[1]][m[2]] {
					return
				}
			}
			problems = append(problems, fmt.Sprintf("%s: `%s`: no type %s with %s", where, span, m[1], m[2]))
			return
		}
		if pathLike.MatchString(span) && mustResolve {
			checked++
			if _, err := os.Stat(strings.TrimSuffix(span, "/")); err != nil {
				problems = append(problems, fmt.Sprintf("%s: `%s`: no such file or directory", where, span))
			}
		}
	}
	inDiagram := false
	for i, line := range strings.Split(string(data), "\n") {
		where := fmt.Sprintf("%s:%d", doc, i+1)
		switch {
		case line == "```mermaid":
			inDiagram = true
			continue
		case strings.HasPrefix(line, "```"):
			inDiagram = false
			continue
		}
		if inDiagram {
			if m := participant.FindStringSubmatch(line); m != nil {
				if _, isPkg := pkgs[m[1]]; !isPkg && m[1] != "application" && m[1] != "grpc" {
					problems = append(problems, fmt.Sprintf("%s: participant %s is no package", where, m[1]))
				}
				continue
			}
			for _, m := range inMermaid.FindAllStringSubmatch(line, -1) {
				check(where, m[0], false)
			}
			continue
		}
		for _, m := range backquoted.FindAllStringSubmatch(line, -1) {
			check(where, strings.TrimSpace(m[1]), true)
		}
	}
	for _, p := range problems {
		t.Error(p)
	}
	if checked < 50 {
		t.Errorf("%s: %d names checked; has the page lost its map, or the check its patterns?", doc, checked)
	}
	for _, from := range []string{"CONTRIBUTING.md", "README.md"} {
		text, err := os.ReadFile(from)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(text), "docs/architecture.md") {
			t.Errorf("%s does not link docs/architecture.md", from)
		}
	}
}

// Command apicheck compares the exported Go API of stagger's modules with the
// one recorded at the last release (the export data in api/, written by
// golang.org/x/exp/cmd/apidiff), and fails on an incompatible change that the
// Unreleased section of CHANGELOG.md does not list under "### Breaking".
//
// Run it from the repository root (make api-check, make api-baseline):
//
//	go run ./internal/apicheck            # check every module
//	go run ./internal/apicheck -write     # record the API of the working tree as the baseline
//
// Why export data committed in api/ rather than a git tag or commit: tags do
// not travel with the project's submissions, CI works in a fresh clone that
// may be shallow, and a baseline built from an old commit would also need
// that commit's dependencies. The export data is self-contained (apidiff
// records, per package, the parts of its dependencies it refers to),
// deterministic, and read back by the same pinned apidiff (tools.mk).
//
// Each module is loaded alone (GOWORK=off), on the versions its go.mod
// requires: in the workspace, the core module's pattern would take in the
// nested modules too, and the baseline must be made and read the same way.
//
// A change is named by its package's directory in the repository ("stagger"
// for the root package), a dot, and apidiff's name for the object:
// stagger.DialOptions, interceptor.WithConfig, policy.(*Source).Reload
// (also accepted as policy.Source.Reload), otel.Option,
// server/redisstore.New; a package removed is named by its directory alone.
// CHANGELOG.md allows an incompatible change when such a name stands in
// backquotes under "### Breaking" in its Unreleased section.
package main

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
)

// module is one Go module of the repository whose API is checked.
type module struct {
	// dir is the module's directory, relative to the repository root.
	dir string
	// path is its module path.
	path string
	// baseline is the export data file, relative to the repository root.
	baseline string
}

// modules are the modules with a public API: the core and the nested modules
// users import (the lab and the command are programs, not libraries).
var modules = []module{
	{".", "github.com/stagger-go/stagger", "api/stagger.apidiff"},
	{"otel", "github.com/stagger-go/stagger/otel", "api/otel.apidiff"},
	{"server/redisstore", "github.com/stagger-go/stagger/server/redisstore", "api/server-redisstore.apidiff"},
}

// outsideAPI are the packages, by key, that serve stagger's own tests,
// examples and command: their changes are reported, never enforced (README,
// "Stability").
var outsideAPI = map[string]bool{
	"testserver":               true,
	"sim":                      true,
	"proto/stagger/testing/v1": true,
	"test":                     true, // the end-to-end tests: no Go file but _test.go ones
}

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// run is the command; it returns the exit code.
func run(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("apicheck", flag.ContinueOnError)
	fs.SetOutput(stderr)
	root := fs.String("root", ".", "the repository root")
	apidiff := fs.String("apidiff", "apidiff", "the apidiff command (make tools installs the pinned one in .tools/bin)")
	changelog := fs.String("changelog", "CHANGELOG.md", "the changelog, relative to -root")
	write := fs.Bool("write", false, "record the API of the working tree as the baseline (at a release)")
	version := fs.String("version", "", "with -write: the version the baseline is (written to api/VERSION)")
	only := fs.String("module", "", "check or write only the module in this directory (\".\" for the core)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if strings.ContainsRune(*apidiff, filepath.Separator) {
		// apidiff runs in each module's directory.
		abs, err := filepath.Abs(*apidiff)
		if err != nil {
			fmt.Fprintf(stderr, "apicheck: %v\n", err)
			return 2
		}
		*apidiff = abs
	}
	mods := modules
	if *only != "" {
		mods = nil
		for _, m := range modules {
			if m.dir == filepath.Clean(*only) {
				mods = append(mods, m)
			}
		}
		if mods == nil {
			fmt.Fprintf(stderr, "apicheck: -module %s: not one of the checked modules\n", *only)
			return 2
		}
	}
	if *write {
		return writeBaselines(*root, *apidiff, *version, mods, stdout, stderr)
	}
	log := *changelog
	if !filepath.IsAbs(log) {
		log = filepath.Join(*root, log)
	}
	return check(*root, *apidiff, log, mods, stdout, stderr)
}

func writeBaselines(root, apidiff, version string, mods []module, stdout, stderr io.Writer) int {
	if version == "" {
		fmt.Fprintln(stderr, "apicheck: -write needs -version (the release the baseline is, e.g. v0.2.0)")
		return 2
	}
	for _, m := range mods {
		out, err := filepath.Abs(filepath.Join(root, m.baseline))
		if err != nil {
			fmt.Fprintf(stderr, "apicheck: %v\n", err)
			return 1
		}
		if _, err := runAPIDiff(root, apidiff, m, "-m", "-w", out, m.path); err != nil {
			fmt.Fprintf(stderr, "apicheck: writing the API of %s: %v\n", m.path, err)
			return 1
		}
		fmt.Fprintf(stdout, "wrote %s (%s)\n", m.baseline, m.path)
	}
	if err := os.WriteFile(filepath.Join(root, "api", "VERSION"), []byte(version+"\n"), 0o644); err != nil {
		fmt.Fprintf(stderr, "apicheck: %v\n", err)
		return 1
	}
	fmt.Fprintf(stdout, "api/VERSION: %s\n", version)
	return 0
}

func check(root, apidiff, changelogPath string, mods []module, stdout, stderr io.Writer) int {
	log, err := os.ReadFile(changelogPath)
	if err != nil {
		fmt.Fprintf(stderr, "apicheck: %v\n", err)
		return 1
	}
	allowed, err := breakingNames(string(log))
	if err != nil {
		fmt.Fprintf(stderr, "apicheck: %s: %v\n", changelogPath, err)
		return 1
	}
	version := "the baseline"
	if v, err := os.ReadFile(filepath.Join(root, "api", "VERSION")); err == nil {
		version = strings.TrimSpace(string(v))
	}
	fmt.Fprintf(stdout, "API against %s (api/), changes allowed by CHANGELOG.md's Unreleased Breaking: %d names\n", version, len(allowed))
	unlisted := 0
	for _, m := range mods {
		baseline, err := filepath.Abs(filepath.Join(root, m.baseline))
		if err != nil {
			fmt.Fprintf(stderr, "apicheck: %v\n", err)
			return 1
		}
		out, err := runAPIDiff(root, apidiff, m, "-m", baseline, m.path)
		if err != nil {
			fmt.Fprintf(stderr, "apicheck: comparing %s with %s: %v\n", m.path, m.baseline, err)
			return 1
		}
		changes, err := parseReport(out, m)
		if err != nil {
			fmt.Fprintf(stderr, "apicheck: %s: %v\n", m.path, err)
			return 1
		}
		added := 0
		for _, c := range changes {
			switch {
			case c.compatible:
				fmt.Fprintf(stdout, "  compatible: %s\n", c)
				added++
			case outsideAPI[c.pkg]:
				fmt.Fprintf(stdout, "  outside the API, not enforced: %s\n", c)
			case allowed[normalize(c.name)]:
				fmt.Fprintf(stdout, "  incompatible, listed under Breaking: %s\n", c)
			default:
				fmt.Fprintf(stdout, "  INCOMPATIBLE, not listed under Breaking: %s\n", c)
				unlisted++
			}
		}
		fmt.Fprintf(stdout, "%s: %d compatible changes (additions)\n", m.path, added)
	}
	if unlisted > 0 {
		fmt.Fprintf(stdout, "FAIL: %d incompatible API changes. Keep the old API, or, if the break is meant (v0: a minor version may break), "+
			"list each name in backquotes under \"### Breaking\" in the Unreleased section of CHANGELOG.md, with what users do instead.\n", unlisted)
		return 1
	}
	fmt.Fprintln(stdout, "ok: no incompatible change outside CHANGELOG.md's Breaking")
	return 0
}

// runAPIDiff runs apidiff in m's directory, on m alone (GOWORK=off), and
// returns its standard output.
func runAPIDiff(root, apidiff string, m module, args ...string) (string, error) {
	cmd := exec.Command(apidiff, args...)
	cmd.Dir = filepath.Join(root, m.dir)
	cmd.Env = append(os.Environ(), "GOWORK=off")
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	if err := cmd.Run(); err != nil {
		var notFound *exec.Error
		if errors.As(err, &notFound) {
			return "", fmt.Errorf("%v (make tools installs it in .tools/bin)", err)
		}
		return "", fmt.Errorf("%v: %s", err, strings.TrimSpace(errOut.String()))
	}
	return out.String(), nil
}

// change is one line of apidiff's report.
type change struct {
	// pkg is the package's key: its directory in the repository, "stagger"
	// for the root package.
	pkg string
	// name is pkg, a dot and the object ("interceptor.WithConfig"), or pkg
	// alone for a package added or removed.
	name       string
	what       string
	compatible bool
}

func (c change) String() string { return c.name + ": " + c.what }

// parseReport reads apidiff -m's text report of module m: "Incompatible
// changes:" and "Compatible changes:", each followed by "- SUBJECT: WHAT"
// lines, where SUBJECT is "./pkg/dir.Object" ("Object" for the module's
// root package) or "package IMPORT/PATH".
func parseReport(out string, m module) ([]change, error) {
	var changes []change
	compatible, inSection := false, false
	for _, line := range strings.Split(out, "\n") {
		switch {
		case line == "":
		case line == "Incompatible changes:":
			compatible, inSection = false, true
		case line == "Compatible changes:":
			compatible, inSection = true, true
		case strings.HasPrefix(line, "- ") && inSection:
			subject, what, ok := strings.Cut(line[2:], ": ")
			if !ok {
				return nil, fmt.Errorf("apidiff's report line %q has no \": \"", line)
			}
			c := change{what: what, compatible: compatible}
			if p, ok := strings.CutPrefix(subject, "package "); ok {
				c.pkg = packageKey(m, strings.TrimPrefix(strings.TrimPrefix(p, m.path), "/"))
				c.name = c.pkg
			} else {
				rel, obj := "", subject
				if s, ok := strings.CutPrefix(subject, "./"); ok {
					slash := strings.LastIndexByte(s, '/')
					dot := strings.IndexByte(s[slash+1:], '.')
					if dot < 0 {
						return nil, fmt.Errorf("apidiff's report line %q: no object after the package", line)
					}
					rel, obj = s[:slash+1+dot], s[slash+1+dot+1:]
				}
				c.pkg = packageKey(m, rel)
				c.name = c.pkg + "." + obj
			}
			changes = append(changes, c)
		default:
			return nil, fmt.Errorf("unexpected line in apidiff's report: %q", line)
		}
	}
	return changes, nil
}

// packageKey names the package at directory rel of module m by its directory
// in the repository ("stagger" for the root package).
func packageKey(m module, rel string) string {
	dir := filepath.ToSlash(filepath.Join(m.dir, rel))
	if dir == "." {
		return "stagger"
	}
	return dir
}

// normalize makes a method's two spellings one: policy.(*Source).Reload and
// policy.Source.Reload.
func normalize(name string) string {
	return strings.NewReplacer("(*", "", "(", "", ")", "").Replace(name)
}

var codeSpan = regexp.MustCompile("`([^`]+)`")

// breakingNames returns the names in backquotes under "### Breaking" in the
// "## [Unreleased]" (or "## Unreleased") section of a Keep a Changelog
// file, normalized. A changelog without an Unreleased section is an error:
// the check would silently allow nothing to be recorded.
func breakingNames(log string) (map[string]bool, error) {
	names := map[string]bool{}
	inUnreleased, inBreaking, found := false, false, false
	for _, line := range strings.Split(log, "\n") {
		t := strings.TrimSpace(line)
		switch {
		case strings.HasPrefix(t, "## "):
			h := strings.ToLower(strings.Trim(strings.TrimSpace(t[3:]), "[]"))
			inUnreleased = strings.HasPrefix(h, "unreleased")
			found = found || inUnreleased
			inBreaking = false
		case strings.HasPrefix(t, "### "):
			inBreaking = inUnreleased && strings.HasPrefix(strings.ToLower(strings.TrimSpace(t[4:])), "breaking")
		case inBreaking:
			for _, m := range codeSpan.FindAllStringSubmatch(t, -1) {
				names[normalize(m[1])] = true
			}
		}
	}
	if !found {
		return nil, errors.New(`no "## [Unreleased]" section`)
	}
	return names, nil
}

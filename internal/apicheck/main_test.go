package main

import (
	"bytes"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestParseReport(t *testing.T) {
	report := `Incompatible changes:
- ./interceptor.WithPredicate: removed
- ./policy.(*Source).Path: removed
- DialOptions: changed from func(*policy.Config) to func(int)
- package github.com/stagger-go/stagger/sim: removed
- ./server/storetest.Run: changed from func(a/b.T) to func()
Compatible changes:
- Added: added
- ./policy.SourceEvent.AddedField: added
`
	got, err := parseReport(report, modules[0])
	if err != nil {
		t.Fatal(err)
	}
	want := []change{
		{"interceptor", "interceptor.WithPredicate", "removed", false},
		{"policy", "policy.(*Source).Path", "removed", false},
		{"stagger", "stagger.DialOptions", "changed from func(*policy.Config) to func(int)", false},
		{"sim", "sim", "removed", false},
		{"server/storetest", "server/storetest.Run", "changed from func(a/b.T) to func()", false},
		{"stagger", "stagger.Added", "added", true},
		{"policy", "policy.SourceEvent.AddedField", "added", true},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got  %+v\nwant %+v", got, want)
	}

	// A nested module's root package is named by its directory.
	got, err = parseReport("Incompatible changes:\n- Option: removed\n- ./x.F: removed\n", modules[2])
	if err != nil {
		t.Fatal(err)
	}
	if got[0].name != "server/redisstore.Option" || got[1].name != "server/redisstore/x.F" {
		t.Errorf("nested module names: %+v", got)
	}

	for _, bad := range []string{"Incompatible changes:\n- no colon here\n", "something else\n", "Incompatible changes:\n- ./pkg: removed\n"} {
		if _, err := parseReport(bad, modules[0]); err == nil {
			t.Errorf("parseReport(%q): no error", bad)
		}
	}
}

func TestBreakingNames(t *testing.T) {
	log := "# Changelog\n\n## [Unreleased]\n\n### Added\n\n- `interceptor.WithCodes`\n\n" +
		"### Breaking\n\n- `policy.(*Source).Path` and `stagger.Old` are gone: use `policy.New`.\n\n" +
		"### Fixed\n\n- `budget.X`\n\n## [v0.1.0] - 2026-11-23\n\n### Breaking\n\n- `interceptor.Released`\n"
	got, err := breakingNames(log)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]bool{"policy.Source.Path": true, "stagger.Old": true, "policy.New": true}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got %v, want %v (only Unreleased's Breaking counts)", got, want)
	}
	if _, err := breakingNames("# Changelog\n\n## [v0.1.0]\n"); err == nil {
		t.Error("no Unreleased section: no error")
	}
}

// TestCheckFailsOnIncompatibleChange runs the whole check, with the real
// apidiff, on a copy of the core module: an exported function recorded in a
// baseline and then removed fails the check until CHANGELOG.md lists it
// under Unreleased's Breaking; an addition passes. It loads the module
// three times (tens of seconds), so it runs when APICHECK_SELFTEST=1
// (make api-check-selftest, which CI runs) and needs apidiff on PATH.
func TestCheckFailsOnIncompatibleChange(t *testing.T) {
	if os.Getenv("APICHECK_SELFTEST") != "1" {
		t.Skip("APICHECK_SELFTEST=1 runs it (make api-check-selftest)")
	}
	apidiff, err := exec.LookPath("apidiff")
	if err != nil {
		t.Fatalf("%v (make tools installs it in .tools/bin)", err)
	}
	root := copyCoreModule(t, filepath.Join("..", ".."))
	probe := filepath.Join(root, "apicheck_probe.go")
	writeFile(t, probe, "package stagger\n\n// APICheckProbe is there for apicheck's test.\nfunc APICheckProbe() {}\n")
	var out bytes.Buffer
	if code := run([]string{"-root", root, "-apidiff", apidiff, "-module", ".", "-write", "-version", "v0.0.1-test"}, &out, &out); code != 0 {
		t.Fatalf("writing the baseline: exit %d\n%s", code, &out)
	}

	if err := os.Remove(probe); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(root, "added.go"), "package stagger\n\n// APICheckAdded is there for apicheck's test.\nfunc APICheckAdded() {}\n")
	steps := []struct {
		name      string
		changelog string
		wantCode  int
		wantOut   string
	}{
		{"removed, not listed", "# Changelog\n\n## [Unreleased]\n\n### Removed\n\n- `stagger.APICheckProbe`\n", 1,
			"INCOMPATIBLE, not listed under Breaking: stagger.APICheckProbe: removed"},
		{"removed, listed under a release's Breaking", "# Changelog\n\n## [Unreleased]\n\n## [v0.0.1]\n\n### Breaking\n\n- `stagger.APICheckProbe`\n", 1,
			"INCOMPATIBLE, not listed under Breaking: stagger.APICheckProbe: removed"},
		{"removed, listed under Unreleased's Breaking", "# Changelog\n\n## [Unreleased]\n\n### Breaking\n\n- `stagger.APICheckProbe` is gone.\n", 0,
			"incompatible, listed under Breaking: stagger.APICheckProbe: removed"},
	}
	for _, st := range steps {
		writeFile(t, filepath.Join(root, "CHANGELOG.md"), st.changelog)
		out.Reset()
		code := run([]string{"-root", root, "-apidiff", apidiff, "-module", "."}, &out, &out)
		if code != st.wantCode || !strings.Contains(out.String(), st.wantOut) {
			t.Errorf("%s: exit %d, want %d with %q; output:\n%s", st.name, code, st.wantCode, st.wantOut, &out)
		}
		if !strings.Contains(out.String(), "compatible: stagger.APICheckAdded: added") {
			t.Errorf("%s: the addition is not reported as compatible:\n%s", st.name, &out)
		}
	}
}

// copyCoreModule copies the core module at src (its files, not the nested
// modules, not .git) to a temporary directory and returns it.
func copyCoreModule(t *testing.T, src string) string {
	t.Helper()
	dst := t.TempDir()
	err := filepath.WalkDir(src, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(src, path)
		if err != nil {
			return err
		}
		if d.Name() == ".git" { // a directory, or a worktree's file
			if d.IsDir() {
				return filepath.SkipDir
			}
			return nil
		}
		if d.IsDir() {
			if rel != "." {
				if d.Name() == ".tools" {
					return filepath.SkipDir
				}
				if _, err := os.Stat(filepath.Join(path, "go.mod")); err == nil {
					return filepath.SkipDir // a nested module
				}
			}
			return os.MkdirAll(filepath.Join(dst, rel), 0o755)
		}
		if !d.Type().IsRegular() {
			return nil
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(dst, rel), data, 0o644)
	})
	if err != nil {
		t.Fatal(err)
	}
	return dst
}

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

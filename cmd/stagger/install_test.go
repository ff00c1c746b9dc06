package main

import (
	"archive/zip"
	"bytes"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strings"
	"testing"
)

// installVersion is the version the install check publishes the core at: a
// version no release will have, so that nothing but the check's own proxy
// can serve it.
const installVersion = "v0.999.0"

// TestInstallFromCoreOnly builds the command as a user does, outside the
// repository, with only the core module published: the working tree's core
// (every file git knows, less the nested modules' trees) is served at
// installVersion by a module proxy on disk, ahead of the module cache and
// the usual proxy, which have no module of this repository. Then
//
//	go install github.com/stagger-go/stagger/cmd/stagger@v0.999.0
//
// and, in a scratch module that requires the core (GOFLAGS=-mod=mod),
// go build github.com/stagger-go/stagger/cmd/stagger must succeed, and the
// command must check a policy file. A command that needed the lab's module
// or connect's (neither published) fails here, as it failed a user. It runs
// with STAGGER_INSTALL_CHECK=1 only (make install-check): it asks the module
// proxy for what the core's go.mod requires and the module cache lacks.
func TestInstallFromCoreOnly(t *testing.T) {
	if os.Getenv("STAGGER_INSTALL_CHECK") != "1" {
		t.Skip("set STAGGER_INSTALL_CHECK=1 (make install-check): builds the command from a proxy on disk")
	}
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	tmp := t.TempDir()
	goCmd := func(dir string, env []string, args ...string) string {
		t.Helper()
		cmd := exec.Command("go", args...)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), env...)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("go %s (in %s): %v\n%s", strings.Join(args, " "), dir, err, out)
		}
		return strings.TrimSpace(string(out))
	}
	goEnv := func(name string) string { return goCmd(root, nil, "env", name) }

	proxy := filepath.Join(tmp, "proxy")
	publishCore(t, root, proxy)
	env := []string{
		"GOWORK=off",
		"GOFLAGS=-mod=mod -modcacherw",
		// A module cache of its own, so that no earlier run's copy of
		// installVersion is used; the usual cache serves the rest as a
		// proxy, so that only what it lacks is fetched.
		"GOMODCACHE=" + filepath.Join(tmp, "modcache"),
		"GOPROXY=" + fileURL(proxy) + "," + fileURL(filepath.Join(goEnv("GOMODCACHE"), "cache", "download")) + "," + goEnv("GOPROXY"),
		"GONOSUMDB=github.com/stagger-go/stagger",
		"GOBIN=" + filepath.Join(tmp, "bin"),
	}

	outside := filepath.Join(tmp, "outside")
	if err := os.Mkdir(outside, 0o755); err != nil {
		t.Fatal(err)
	}
	goCmd(outside, env, "install", "github.com/stagger-go/stagger/cmd/stagger@"+installVersion)
	runBuilt(t, filepath.Join(tmp, "bin", "stagger"), root)

	scratch := filepath.Join(tmp, "scratch")
	if err := os.Mkdir(scratch, 0o755); err != nil {
		t.Fatal(err)
	}
	mod := "module example.com/scratch\n\ngo 1.22\n\nrequire github.com/stagger-go/stagger " + installVersion + "\n"
	if err := os.WriteFile(filepath.Join(scratch, "go.mod"), []byte(mod), 0o644); err != nil {
		t.Fatal(err)
	}
	built := filepath.Join(tmp, "scratch-stagger")
	goCmd(scratch, env, "build", "-o", built, "github.com/stagger-go/stagger/cmd/stagger")
	runBuilt(t, built, root)
}

// runBuilt runs the built command on one of the repository's example policy
// files.
func runBuilt(t *testing.T, bin, root string) {
	t.Helper()
	cmd := exec.Command(bin, "check", filepath.Join(root, "examples", "policies", "retry.json"))
	out, err := cmd.CombinedOutput()
	if err != nil || !bytes.Contains(out, []byte("retry.json: valid")) {
		t.Fatalf("%s check retry.json: %v\n%s", bin, err, out)
	}
}

func fileURL(dir string) string { return "file://" + filepath.ToSlash(dir) }

// publishCore writes the core module of the tree at root into proxy as a
// module proxy serves it (the GOPROXY protocol's list, .info, .mod and .zip
// of installVersion): the files git tracks or would track, less every
// nested module's tree, as the module zip holds them.
func publishCore(t *testing.T, root, proxy string) {
	t.Helper()
	out, err := exec.Command("git", "-C", root, "ls-files", "-z", "--cached", "--others", "--exclude-standard").Output()
	if err != nil {
		t.Fatalf("git ls-files: %v", err)
	}
	files := strings.Split(strings.TrimRight(string(out), "\x00"), "\x00")
	var nested []string
	for _, f := range files {
		if path.Base(f) == "go.mod" && f != "go.mod" {
			nested = append(nested, path.Dir(f)+"/")
		}
	}
	var buf bytes.Buffer
	zw := zip.NewWriter(&buf)
	prefix := "github.com/stagger-go/stagger@" + installVersion + "/"
next:
	for _, f := range files {
		for _, n := range nested {
			if strings.HasPrefix(f, n) {
				continue next
			}
		}
		data, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(f)))
		if os.IsNotExist(err) {
			continue // deleted in the working tree
		}
		if err != nil {
			t.Fatal(err)
		}
		w, err := zw.Create(prefix + f)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := w.Write(data); err != nil {
			t.Fatal(err)
		}
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	gomod, err := os.ReadFile(filepath.Join(root, "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(proxy, "github.com", "stagger-go", "stagger", "@v")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, data := range map[string][]byte{
		"list":                   []byte(installVersion + "\n"),
		installVersion + ".info": []byte(`{"Version":"` + installVersion + `","Time":"2026-01-01T00:00:00Z"}`),
		installVersion + ".mod":  gomod,
		installVersion + ".zip":  buf.Bytes(),
	} {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

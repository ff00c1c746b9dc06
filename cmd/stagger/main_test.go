package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"go.uber.org/goleak"
)

// TestMain is the package's only TestMain.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestRunDispatch(t *testing.T) {
	tests := []struct {
		name       string
		args       []string
		wantCode   int
		wantStderr string
	}{
		{"no command", nil, 2, "usage: stagger <command>"},
		{"help", []string{"-h"}, 0, "check"},
		{"unknown command", []string{"nope"}, 2, `unknown command "nope"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			if code := run(tt.args, &stdout, &stderr); code != tt.wantCode {
				t.Errorf("exit code %d, want %d", code, tt.wantCode)
			}
			if !strings.Contains(stderr.String(), tt.wantStderr) {
				t.Errorf("stderr %q lacks %q", stderr.String(), tt.wantStderr)
			}
		})
	}
}

// TestLabRunsStaggerLab: `stagger lab ARGS` runs stagger-lab ARGS from PATH
// and exits with its code; without it, it says where the lab is.
func TestLabRunsStaggerLab(t *testing.T) {
	dir := t.TempDir()
	t.Setenv("PATH", dir)
	var stdout, stderr bytes.Buffer
	if code := run([]string{"lab", "-scenario", "blip"}, &stdout, &stderr); code != 2 {
		t.Errorf("without stagger-lab: exit code %d, want 2", code)
	}
	if want := "go run ./lab/cmd/stagger-lab"; !strings.Contains(stderr.String(), want) {
		t.Errorf("without stagger-lab: stderr %q lacks %q", stderr.String(), want)
	}

	script := "#!/bin/sh\necho \"lab got: $*\"\necho oops >&2\nexit 3\n"
	if err := os.WriteFile(filepath.Join(dir, "stagger-lab"), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	stdout.Reset()
	stderr.Reset()
	if code := run([]string{"lab", "-scenario", "blip"}, &stdout, &stderr); code != 3 {
		t.Errorf("exit code %d, want stagger-lab's 3", code)
	}
	if got, want := stdout.String(), "lab got: -scenario blip\n"; got != want {
		t.Errorf("stdout %q, want %q", got, want)
	}
	if got, want := stderr.String(), "oops\n"; got != want {
		t.Errorf("stderr %q, want %q", got, want)
	}
}

package main

import (
	"bytes"
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

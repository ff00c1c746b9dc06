package policy

import (
	"strings"
	"testing"
)

// TestConfigDisabled: the top-level "disabled" is stagger's switch written
// in the file: true turns it on, false or absent leaves it off, anything
// else is an error naming the field.
func TestConfigDisabled(t *testing.T) {
	tests := []struct {
		doc     string
		want    bool
		wantErr string
	}{
		{`{"disabled": true}`, true, ""},
		{`{"disabled": true, "methodConfig": []}`, true, ""},
		{"disabled: true\nmethodConfig: []\n", true, ""},
		{`{"disabled": false}`, false, ""},
		{`{"methodConfig": []}`, false, ""},
		{`{"disabled": "yes"}`, false, "disabled: must be true or false"},
	}
	for _, tt := range tests {
		cfg, err := ParseConfig([]byte(tt.doc))
		switch {
		case tt.wantErr != "":
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("%s: error %v, want %q", tt.doc, err, tt.wantErr)
			}
		case err != nil:
			t.Errorf("%s: %v", tt.doc, err)
		case cfg.Disabled() != tt.want:
			t.Errorf("%s: Disabled() = %v, want %v", tt.doc, cfg.Disabled(), tt.want)
		}
	}
	if (*Config)(nil).Disabled() {
		t.Error("a nil Config is disabled")
	}
}

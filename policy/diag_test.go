package policy

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestSyntaxErrorPlaces: a document that is not JSON or YAML is reported at
// the line (and, for JSON, the column) of the mistake. JSON errors once had
// no place at all, and YAML's named the line where the enclosing block began
// (line 1 for a key mis-indented on line 5).
func TestSyntaxErrorPlaces(t *testing.T) {
	tests := []struct {
		doc, want string
	}{
		{"{\n  \"methodConfig\": [\n    {\"name\": [{\"service\": \"a\"}],, }\n  ]\n}",
			`policy: invalid JSON at line 3, column 33: invalid character ',' looking for beginning of object key string`},
		{"{\n  \"a\": 1\n  \"b\": 2\n}",
			`policy: invalid JSON at line 3, column 3: invalid character '"' after object key:value pair`},
		{"{\"a\": 1} x", `policy: invalid JSON at line 1, column 10: invalid character 'x' after top-level value`},
		{"{\n  \"a\": [1, 2\n", `policy: invalid JSON at line 2, column 13: unexpected end of JSON input`},
		{"methodConfig:\n  - name: [{service: a.S}]\n    retryPolicy: {maxAttempts: 3\n",
			`policy: invalid YAML at line 3: did not find expected ',' or '}'`},
		{"methodConfig:\n  - name: [{service: a.S}]\n   retryPolicy: {}\n",
			`policy: invalid YAML at line 3: did not find expected '-' indicator`},
		{"methodConfig:\n  - name: [{service: a.S}]\n    retryPolicy:\n      maxAttempts: 3\n     initialBackoff: 1s\n",
			`policy: invalid YAML at line 5: did not find expected key`},
		{"a: 1\nb:\n\t- 1\n", `policy: invalid YAML at line 3: found character that cannot start any token`},
		{"a: 1\nb: .inf\n", `policy: invalid YAML at line 2, column 4: .inf is not a finite number`},
	}
	for _, tt := range tests {
		_, err := ParseConfig([]byte(tt.doc))
		var se *SyntaxError
		if !errors.As(err, &se) || err.Error() != tt.want {
			t.Errorf("ParseConfig(%q):\n got %v\nwant %s", tt.doc, err, tt.want)
		}
	}
	// A file's errors name it, as compilers do: file:line:col.
	dir := t.TempDir()
	for name, doc := range map[string]string{
		"retry.json": "{\n  \"methodConfig\": [\n    {\"name\": [{\"service\": \"a\"}],, }\n  ]\n}",
		"retry.yaml": "methodConfig:\n  - name: [{service: a.S}]\n   retryPolicy: {}\n",
	} {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, []byte(doc), 0o600); err != nil {
			t.Fatal(err)
		}
		want := map[string]string{
			"retry.json": "policy: " + path + ":3:33: invalid JSON: invalid character ',' looking for beginning of object key string",
			"retry.yaml": "policy: " + path + ":3: invalid YAML: did not find expected '-' indicator",
		}[name]
		if _, err := LoadFile(path); err == nil || err.Error() != want {
			t.Errorf("LoadFile(%s):\n got %v\nwant %s", name, err, want)
		}
	}
}

// TestUnknownKeySuggestions: an unknown key names the known key it most
// likely misspells, and a required key that is missing because it was
// misspelt says so, with or without Strict (it once said only "is
// required").
func TestUnknownKeySuggestions(t *testing.T) {
	doc := `{"methodConfig": [{"name": [{"service": "a.S"}], "retryPolicy": {"maxAtempts": 3, "initial_backof": "1s", "maxBackoff": "1s",
	  "BackoffMultiplier": 2, "retryableStatusCodes": ["UNAVAILABLE"], "jiter": "FULL", "colour": 1}}]}`
	_, err := ParseConfig([]byte(doc))
	wantErrs := []string{
		`policy: methodConfig[0].retryPolicy.maxAttempts: is required (the key "maxAtempts" is unknown: did you mean "maxAttempts"?), got nothing`,
		`policy: methodConfig[0].retryPolicy.initialBackoff: is required (the key "initial_backof" is unknown: did you mean "initialBackoff"?), got nothing`,
	}
	if got := parseErrLines(t, err); !equalLines(got, wantErrs) {
		t.Errorf("errors:\n%s\nwant:\n%s", join2(got), join2(wantErrs))
	}
	fixed := `{"methodConfig": [{"name": [{"service": "a.S"}], "retryPolicy": {"maxAttempts": 3, "maxAtempts": 3, "initialBackoff": "1s", "maxBackoff": "1s",
	  "backoffMultiplier": 2, "retryableStatusCodes": ["UNAVAILABLE"], "jiter": "FULL", "colour": 1}}]}`
	c := parseMust(t, fixed)
	var got []string
	for _, w := range c.Warnings() {
		got = append(got, w.String())
	}
	want := []string{
		`methodConfig[0].retryPolicy.maxAtempts: unknown key, ignored (did you mean "maxAttempts"?)`,
		`methodConfig[0].retryPolicy.jiter: unknown key, ignored (did you mean "jitter"?)`,
		`methodConfig[0].retryPolicy.colour: unknown key, ignored`,
	}
	if !equalLines(got, want) {
		t.Errorf("warnings:\n%s\nwant:\n%s", join2(got), join2(want))
	}
	_, err = ParseConfig([]byte(doc), Strict())
	if got := join2(parseErrLines(t, err)); !strings.Contains(got, `maxAttempts: is required (the key "maxAtempts" is unknown: did you mean "maxAttempts"?)`) ||
		!strings.Contains(got, `methodConfig[0].retryPolicy: must hold only known keys (Strict; did you mean "jitter"?), got "jiter"`) {
		t.Errorf("Strict:\n%s", got)
	}
}

func TestSuggestKey(t *testing.T) {
	known := []string{"maxAttempts", "initialBackoff", "maxBackoff", "backoffMultiplier", "retryableStatusCodes", "jitter", "perAttemptRecvTimeout"}
	for k, want := range map[string]string{
		"maxAtempts": "maxAttempts", "max_atempts": "maxAttempts", "MAXATTEMPT": "maxAttempts", "maxBackof": "maxBackoff",
		"retryableStatusCode": "retryableStatusCodes", "retriableStatusCodes": "retryableStatusCodes", "jitters": "jitter",
		"colour": "", "x": "", "max": "", "attempts": "", strings.Repeat("a", 1000): "",
	} {
		if got := suggestKey(k, known); got != want {
			t.Errorf("suggestKey(%q) = %q, want %q", k, got, want)
		}
	}
}

func equalLines(a, b []string) bool { return join2(a) == join2(b) }

func join2(lines []string) string { return strings.Join(lines, "\n") }

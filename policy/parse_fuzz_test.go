package policy

import (
	"errors"
	"strings"
	"testing"
)

// FuzzParseConfig: no input panics the parser, and its answer is always
// either a Config or errors that start with the package name.
func FuzzParseConfig(f *testing.F) {
	for _, row := range cfgConformance {
		f.Add([]byte(row.doc))
	}
	f.Add([]byte("methodConfig:\n  - name: [{service: a.S, method: M}]\n    retryPolicy: {maxAttempts: 3, initialBackoff: 100ms, maxBackoff: 1s, backoffMultiplier: 2, retryableStatusCodes: [unavailable]}\nretryBudget: {tokenBucket: {capacity: 10}}\n"))
	f.Add([]byte("a: &a [1, *a]\n"))
	f.Add([]byte("{methodConfig: [{name: [{}], timeout: 0x10}]}"))
	f.Fuzz(func(t *testing.T, data []byte) {
		for _, opts := range [][]ParseOption{nil, {Strict(), AsYAML()}} {
			c, err := ParseConfig(data, opts...)
			if (c == nil) == (err == nil) {
				t.Fatalf("ParseConfig = %v, %v: want exactly one of them", c, err)
			}
			if err != nil {
				for _, line := range strings.Split(err.Error(), "\n") {
					if !strings.HasPrefix(line, "policy: ") {
						var fe *FieldError
						t.Fatalf("error line %q lacks the package name (FieldError: %v)", line, errors.As(err, &fe))
					}
				}
				// A syntax error is placed inside the document.
				var se *SyntaxError
				if errors.As(err, &se) && (se.Line < 0 || se.Line > lineBreaks(data)+1 || se.Format == "JSON" && (se.Line < 1 || se.Column < 1)) {
					t.Fatalf("syntax error placed at %d:%d, outside the document: %v", se.Line, se.Column, err)
				}
				continue
			}
			for _, name := range c.Names() {
				if c.Method(name+"x") == nil && name != "" && strings.HasSuffix(name, "/") {
					t.Fatalf("service entry %q does not match a method of its service", name)
				}
			}
			for _, w := range c.Warnings() {
				if s := w.String(); strings.ContainsAny(s, "\n\r") {
					t.Fatalf("warning %q spans lines", s)
				}
			}
		}
	})
}

// lineBreaks counts the line breaks of data as YAML does (a YAML error's
// line follows them): \r\n, a lone \r, \n, and U+0085, U+2028, U+2029.
func lineBreaks(data []byte) int {
	s := strings.ReplaceAll(string(data), "\r\n", "\n")
	n := 0
	for _, r := range s {
		switch r {
		case '\n', '\r', '\u0085', '\u2028', '\u2029':
			n++
		}
	}
	return n
}

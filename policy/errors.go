package policy

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// FieldError is one rule a policy or a policy file breaks. Path names the
// field with the names a policy file uses ("initialBackoff",
// "methodConfig[1].retryPolicy.maxAttempts"), so the message points at the
// line to fix. Validate methods and the policy-file parser return one
// FieldError per violation, joined with errors.Join; find them with errors.As.
//
// A FieldError is a plain value; it is safe for concurrent use once built.
type FieldError struct {
	// Path is the field, in policy-file names, from the root given.
	Path string
	// Rule is what the value must satisfy: "must be > 0".
	Rule string
	// Value is the offending value, printed with %v (durations print as
	// "0s", strings are quoted).
	Value any
	// Line and Column place the field in the policy file, from 1 (Column
	// counts bytes): the key Path names (an array's element: the element),
	// or the object that lacks it. 0 when unknown (a Validate method's
	// errors, ParseConfig's errors about the file as a whole).
	Line, Column int
	// File is the file's path as given to LoadFile or WatchFile (or the
	// name given by Named), when the error is placed in it (Line > 0); ""
	// otherwise.
	File string
}

// Position returns "file:line:col", leaving out what is unknown, as
// SyntaxError.Position does; "" when the error is not placed.
func (e *FieldError) Position() string { return position(e.File, e.Line, e.Column) }

// Error returns "policy: <path>: <rule>, got <value>"; an error placed in a
// file (LoadFile, WatchFile) starts with its place, as a compiler's does:
// "policy: retry.json:4:7: <path>: <rule>, got <value>".
func (e *FieldError) Error() string {
	v := e.Value
	if s, ok := v.(string); ok {
		v = fmt.Sprintf("%q", s)
	}
	prefix := "policy: "
	if e.File != "" && e.Line > 0 {
		prefix += e.Position() + ": "
	}
	if e.Path == "" {
		return fmt.Sprintf("%s%s, got %v", prefix, e.Rule, v)
	}
	return fmt.Sprintf("%s%s: %s, got %v", prefix, e.Path, e.Rule, v)
}

// position is "file:line:col", leaving out what is unknown ("file:line",
// "line:col"): the one format of every place this package reports.
func position(file string, line, col int) string {
	var parts []string
	if file != "" {
		parts = append(parts, file)
	}
	if line > 0 {
		parts = append(parts, strconv.Itoa(line))
		if col > 0 {
			parts = append(parts, strconv.Itoa(col))
		}
	}
	return strings.Join(parts, ":")
}

// SyntaxError is a policy file that is not valid JSON or YAML, with the
// place of the mistake. ParseConfig, LoadFile and a Source's reloads return
// it alone (a document that cannot be read has no fields to check).
//
// A SyntaxError is a plain value; it is safe for concurrent use once built.
type SyntaxError struct {
	// File is the file's path as given to LoadFile or WatchFile, or the
	// name given by Named; "" for ParseConfig otherwise.
	File string
	// Format is "JSON" or "YAML".
	Format string
	// Line and Column place the mistake, from 1; Column counts bytes. 0
	// means unknown: YAML's parser names the line only.
	Line, Column int
	// Msg is the parser's message: "invalid character ',' looking for
	// beginning of value".
	Msg string
}

// Position returns "file:line:col", leaving out what is unknown
// ("file:line", "line:col").
func (e *SyntaxError) Position() string { return position(e.File, e.Line, e.Column) }

// Error returns "policy: retry.json:3:17: invalid JSON: <message>"; without
// a file, "policy: invalid JSON at line 3, column 17: <message>".
func (e *SyntaxError) Error() string {
	what := "invalid " + e.Format
	switch {
	case e.File != "":
		if pos := e.Position(); pos != "" {
			return "policy: " + pos + ": " + what + ": " + e.Msg
		}
	case e.Line > 0 && e.Column > 0:
		what += fmt.Sprintf(" at line %d, column %d", e.Line, e.Column)
	case e.Line > 0:
		what += fmt.Sprintf(" at line %d", e.Line)
	}
	return "policy: " + what + ": " + e.Msg
}

// Prefixed returns a copy of e whose Path is prefix followed by e.Path, for a
// caller that validates a part of a larger document: prefix
// "methodConfig[1].retryPolicy." turns "maxAttempts" into
// "methodConfig[1].retryPolicy.maxAttempts". A nil e returns nil.
func (e *FieldError) Prefixed(prefix string) *FieldError {
	if e == nil {
		return nil
	}
	c := *e
	c.Path = prefix + e.Path
	return &c
}

// PrefixErrors returns err with every FieldError in it (err itself, or the
// errors it joins, recursively) prefixed as by Prefixed. Other errors are
// kept as they are. A nil err returns nil.
func PrefixErrors(err error, prefix string) error {
	switch e := err.(type) {
	case nil:
		return nil
	case *FieldError:
		return e.Prefixed(prefix)
	case interface{ Unwrap() []error }:
		errs := e.Unwrap()
		out := make([]error, 0, len(errs))
		for _, x := range errs {
			out = append(out, PrefixErrors(x, prefix))
		}
		return joinErrors(out)
	}
	return err
}

// joinErrors is errors.Join, except that one error is returned as itself so a
// single violation stays a *FieldError a caller can type-assert.
func joinErrors(errs []error) error {
	var n int
	var last error
	for _, e := range errs {
		if e != nil {
			n++
			last = e
		}
	}
	switch n {
	case 0:
		return nil
	case 1:
		return last
	}
	return errors.Join(errs...)
}

package policy

import (
	"errors"
	"fmt"
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
}

// Error returns "policy: <path>: <rule>, got <value>".
func (e *FieldError) Error() string {
	v := e.Value
	if s, ok := v.(string); ok {
		v = fmt.Sprintf("%q", s)
	}
	if e.Path == "" {
		return fmt.Sprintf("policy: %s, got %v", e.Rule, v)
	}
	return fmt.Sprintf("policy: %s: %s, got %v", e.Path, e.Rule, v)
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

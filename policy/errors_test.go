package policy

import (
	"errors"
	"fmt"
	"testing"
	"time"
)

func TestFieldErrorMessage(t *testing.T) {
	tests := []struct {
		name string
		err  *FieldError
		want string
	}{
		{"duration", &FieldError{Path: "initialBackoff", Rule: "must be > 0", Value: time.Duration(0)}, "policy: initialBackoff: must be > 0, got 0s"},
		{"int", &FieldError{Path: "maxAttempts", Rule: "must be at least 2", Value: 1}, "policy: maxAttempts: must be at least 2, got 1"},
		{"string quoted", &FieldError{Path: "jitter", Rule: "must be one of PROPORTIONAL, FULL, EQUAL, DECORRELATED, NONE", Value: "FUL"}, `policy: jitter: must be one of PROPORTIONAL, FULL, EQUAL, DECORRELATED, NONE, got "FUL"`},
		{"no path", &FieldError{Rule: "must be an object", Value: "[]"}, `policy: must be an object, got "[]"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.err.Error(); got != tt.want {
				t.Errorf("Error() = %q, want %q", got, tt.want)
			}
		})
	}
}

func TestFieldErrorPrefixed(t *testing.T) {
	e := &FieldError{Path: "maxAttempts", Rule: "must be at least 2", Value: 1}
	p := e.Prefixed("methodConfig[1].retryPolicy.")
	if p.Path != "methodConfig[1].retryPolicy.maxAttempts" {
		t.Errorf("Prefixed Path = %q", p.Path)
	}
	if e.Path != "maxAttempts" {
		t.Errorf("Prefixed modified the receiver: %q", e.Path)
	}
	var nilErr *FieldError
	if nilErr.Prefixed("x.") != nil {
		t.Error("nil.Prefixed() != nil")
	}
}

func TestPrefixErrors(t *testing.T) {
	plain := errors.New("other")
	joined := errors.Join(
		&FieldError{Path: "a", Rule: "r", Value: 1},
		errors.Join(&FieldError{Path: "b", Rule: "r", Value: 2}, plain),
	)
	got := PrefixErrors(joined, "x.")
	var paths []string
	var walk func(error)
	walk = func(err error) {
		if fe, ok := err.(*FieldError); ok {
			paths = append(paths, fe.Path)
		}
		if u, ok := err.(interface{ Unwrap() []error }); ok {
			for _, e := range u.Unwrap() {
				walk(e)
			}
		}
	}
	walk(got)
	if fmt.Sprint(paths) != "[x.a x.b]" {
		t.Errorf("paths = %v, want [x.a x.b]", paths)
	}
	if !errors.Is(got, plain) {
		t.Error("a plain error was lost")
	}
	if PrefixErrors(nil, "x.") != nil {
		t.Error("PrefixErrors(nil) != nil")
	}
	single := PrefixErrors(&FieldError{Path: "c", Rule: "r", Value: 3}, "x.")
	if fe, ok := single.(*FieldError); !ok || fe.Path != "x.c" {
		t.Errorf("single = %#v", single)
	}
}

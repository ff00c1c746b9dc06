package policy

import (
	"fmt"
	"strings"

	"github.com/stagger-go/stagger/breaker"
	"github.com/stagger-go/stagger/budget"
)

// Config is a parsed policy file: a Method per method name, the settings of
// the budget and the circuit breakers the file declares, and the warnings
// found while parsing. Build one with ParseConfig or LoadFile.
//
// A Config is data: it holds no budget tokens, Gate or breaker state. The
// interceptors build those from its settings where the backend is known
// (interceptor.State: per target, on first use) and keep them across
// reloads that do not change the settings. Two Configs parsed from the same
// file are equal (reflect.DeepEqual) unless WithBudgetOptions or
// WithBreakerOptions gave them functions.
//
// A Config is immutable once built and safe for concurrent use; the *Method
// values it returns are shared and must not be modified.
type Config struct {
	methods        map[string]*Method // "/svc/method", "/svc/", "" (the default entry)
	defaultMethod  *Method
	entries        []Entry
	warnings       []Warning
	budgetSettings budget.Settings
	budgetPath     string
	lbPolicy       string
	// breaker is the file's top-level circuitBreaker/adaptiveThrottling.
	breaker *breaker.Settings
	// budgetOpts and breakerOpts are the parse's WithBudgetOptions and
	// WithBreakerOptions, for NewBudgets and NewBreakers.
	budgetOpts  []budget.Option
	breakerOpts []breaker.Option
	// maxAttemptsCap is the cap the file was parsed with.
	maxAttemptsCap int
	// disabled is the file's top-level "disabled" (Disabled).
	disabled bool
}

// Disabled reports whether the file turns stagger off: its top-level
// "disabled": true, stagger's switch written in the file. The interceptors
// then send each call that follows the file once, as
// interceptor.SetDisabled(true) does, and end the retries they hold; a
// reload that removes it (or sets false) turns retries back on. A nil
// Config returns false.
func (c *Config) Disabled() bool { return c != nil && c.disabled }

// Entry is one methodConfig entry of a file, as `stagger check` explains it.
type Entry struct {
	// Index is the entry's position in methodConfig.
	Index int
	// Names are the entry's names as matched: "/svc/method", "/svc/", or ""
	// for the default entry ({}).
	Names []string
	// Method is what the entry says.
	Method *Method
}

// Warning is something in a file that does not stop it from being used but
// that its author should know: an unknown key, a value capped, a field
// stagger does not apply.
type Warning struct {
	// Path names the field, as FieldError.Path does.
	Path string
	// Message says what is wrong.
	Message string
	// Line and Column place the field in the file, as in FieldError; 0
	// when unknown.
	Line, Column int
	// File is the file's path, as in FieldError.
	File string
	// Typo: the warning is a likely typo that silently drops part of the
	// file: an unknown key, or a service or method name that no known
	// proto declares but one nearly does. The interceptors log such
	// warnings even without a logger (interceptor.WithLogger).
	Typo bool
}

// Position returns "file:line:col", leaving out what is unknown; "" when
// the warning is not placed.
func (w Warning) Position() string {
	if w.Line == 0 {
		return ""
	}
	return position(w.File, w.Line, w.Column)
}

// String returns "path: message".
func (w Warning) String() string {
	if w.Path == "" {
		return w.Message
	}
	return w.Path + ": " + w.Message
}

// Method returns what the file says for fullMethod ("/pkg.Service/Method",
// as grpc-go names methods): the entry naming that method, else the one
// naming its service, else the default entry ({}), else nil. It does not
// allocate. A nil Config returns nil.
func (c *Config) Method(fullMethod string) *Method {
	if c == nil {
		return nil
	}
	if m, ok := c.methods[fullMethod]; ok {
		return m
	}
	if i := strings.LastIndexByte(fullMethod, '/'); i > 0 {
		if m, ok := c.methods[fullMethod[:i+1]]; ok {
			return m
		}
	}
	return c.defaultMethod
}

// NewBudgets returns new, empty budgets of the file's budget settings
// (BudgetSettings), built with the parse's WithBudgetOptions: a
// budget.Backends, which makes each backend (target) its own tokens on first
// use. (nil, nil) when the file declares no budget (unlimited, as in
// grpc-go). Each call returns a new value that shares nothing with the
// others; the interceptors call it once per settings and keep the result
// (interceptor.State). The settings were checked by the parse, so a Config
// from ParseConfig, LoadFile or a Source never returns an error.
func (c *Config) NewBudgets() (*budget.Backends, error) {
	if c == nil || c.budgetSettings.Kind == budget.KindNone {
		return nil, nil
	}
	bs, err := budget.NewBackends(c.budgetSettings, c.budgetOpts...)
	if err != nil {
		return nil, fmt.Errorf("policy: %s: %w", c.budgetPath, err)
	}
	return bs, nil
}

// BudgetSettings returns the budget as the file declares it; Kind is
// budget.KindNone when it declares none. Two Configs whose BudgetSettings
// are equal (==) declare the same budget: a reload between them keeps every
// backend's tokens and Gates (interceptor.State).
func (c *Config) BudgetSettings() budget.Settings {
	if c == nil {
		return budget.Settings{}
	}
	return c.budgetSettings
}

// Warnings returns what the parse found worth saying but not fatal. The
// caller must not modify the slice.
func (c *Config) Warnings() []Warning {
	if c == nil {
		return nil
	}
	return c.warnings
}

// Entries returns the file's methodConfig entries in file order. The caller
// must not modify them.
func (c *Config) Entries() []Entry {
	if c == nil {
		return nil
	}
	return c.entries
}

// Names lists every name the file matches ("/svc/method", "/svc/", "" for
// the default entry), sorted.
func (c *Config) Names() []string {
	if c == nil {
		return nil
	}
	return sortedNames(c.methods)
}

// MaxAttemptsCap returns the cap on maxAttempts the file was parsed with
// (WithMaxAttemptsCap, else DefaultMaxAttemptsCap); a nil Config returns
// DefaultMaxAttemptsCap. The interceptors bound a maxAttempts given in code
// per call (interceptor.WithMaxAttempts) by it.
func (c *Config) MaxAttemptsCap() int {
	if c == nil || c.maxAttemptsCap < 2 {
		return DefaultMaxAttemptsCap
	}
	return c.maxAttemptsCap
}

// LoadBalancingPolicy returns the load-balancing policy grpc-go would choose
// from the file ("" when the file names none, and grpc-go uses pick_first).
// stagger does not apply it; `stagger check` uses it to warn that hedging
// under pick_first reaches a single backend.
func (c *Config) LoadBalancingPolicy() string {
	if c == nil {
		return ""
	}
	return c.lbPolicy
}

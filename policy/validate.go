package policy

import (
	"errors"
	"math"
)

// allCodes is every gRPC status code, 0 (OK) to 16 (UNAUTHENTICATED).
const allCodes = CodeSet(1<<17 - 1)

// Validate reports every rule b breaks, each as a *FieldError named with the
// policy file's keys (initialBackoff, maxBackoff, backoffMultiplier, jitter),
// joined with errors.Join; nil when b is valid.
//
// A Max below Initial is valid, as in gRFC A6 and grpc-go: every term is then
// Max.
func (b Backoff) Validate() error {
	var errs []error
	if b.Initial <= 0 {
		errs = append(errs, &FieldError{Path: "initialBackoff", Rule: "must be > 0", Value: b.Initial})
	}
	if b.Max <= 0 {
		errs = append(errs, &FieldError{Path: "maxBackoff", Rule: "must be > 0", Value: b.Max})
	}
	if !(b.Multiplier > 0) || math.IsInf(b.Multiplier, 1) {
		errs = append(errs, &FieldError{Path: "backoffMultiplier", Rule: "must be a finite number > 0", Value: b.Multiplier})
	}
	if b.Jitter < JitterProportional || b.Jitter > JitterNone {
		errs = append(errs, &FieldError{Path: "jitter", Rule: "must be one of PROPORTIONAL, FULL, EQUAL, DECORRELATED, NONE", Value: int(b.Jitter)})
	}
	return errors.Join(errs...)
}

// Validate reports every rule p breaks, each as a *FieldError named with the
// policy file's keys (maxAttempts, initialBackoff, ..., retryableStatusCodes,
// perAttemptRecvTimeout), joined with errors.Join; nil when p is valid.
//
// An empty RetryableCodes is valid here: in code it means stagger's default
// decisions. A policy file must list codes (gRFC A6); its parser checks that.
// MaxAttempts above DefaultMaxAttemptsCap is valid too: the parser caps a
// file's value, and code may raise the cap.
func (p *Policy) Validate() error {
	var errs []error
	if p.MaxAttempts < 2 {
		errs = append(errs, &FieldError{Path: "maxAttempts", Rule: "must be at least 2", Value: p.MaxAttempts})
	}
	if err := p.Backoff.Validate(); err != nil {
		errs = append(errs, err.(interface{ Unwrap() []error }).Unwrap()...)
	}
	if extra := p.RetryableCodes &^ allCodes; extra != 0 {
		errs = append(errs, &FieldError{Path: "retryableStatusCodes", Rule: "must hold only codes 0 to 16", Value: bitsOf(extra)})
	}
	if p.PerAttemptRecvTimeout < 0 {
		errs = append(errs, &FieldError{Path: "perAttemptRecvTimeout", Rule: "must be >= 0", Value: p.PerAttemptRecvTimeout})
	}
	if p.PushbackCeiling < 0 {
		errs = append(errs, &FieldError{Path: "pushbackCeiling", Rule: "must be >= 0", Value: p.PushbackCeiling})
	}
	return errors.Join(errs...)
}

// Validate reports every rule h breaks, each as a *FieldError named with the
// policy file's keys (maxAttempts, hedgingDelay, nonFatalStatusCodes), joined
// with errors.Join; nil when h is valid.
func (h *Hedging) Validate() error {
	var errs []error
	if h.MaxAttempts < 2 {
		errs = append(errs, &FieldError{Path: "maxAttempts", Rule: "must be at least 2", Value: h.MaxAttempts})
	}
	if h.Delay < 0 {
		errs = append(errs, &FieldError{Path: "hedgingDelay", Rule: "must be >= 0", Value: h.Delay})
	}
	if extra := h.NonFatalCodes &^ allCodes; extra != 0 {
		errs = append(errs, &FieldError{Path: "nonFatalStatusCodes", Rule: "must hold only codes 0 to 16", Value: bitsOf(extra)})
	}
	return errors.Join(errs...)
}

// bitsOf lists the bits set in s: the codes a CodeSet built by hand holds
// beyond 16, which NewCodeSet would have dropped.
func bitsOf(s CodeSet) []int {
	var out []int
	for i := 0; i < 32; i++ {
		if s&(1<<i) != 0 {
			out = append(out, i)
		}
	}
	return out
}

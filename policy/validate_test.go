package policy

import (
	"errors"
	"math"
	"strings"
	"testing"
	"time"
)

// validateMessages lists the messages of the FieldErrors err joins, in order,
// and fails if err holds anything else.
func validateMessages(t *testing.T, err error) []string {
	t.Helper()
	if err == nil {
		return nil
	}
	var errs []error
	if u, ok := err.(interface{ Unwrap() []error }); ok {
		errs = u.Unwrap()
	} else {
		errs = []error{err}
	}
	var out []string
	for _, e := range errs {
		var fe *FieldError
		if !errors.As(e, &fe) {
			t.Fatalf("%T %v is not a *FieldError", e, e)
		}
		out = append(out, fe.Error())
	}
	return out
}

func validateCheck(t *testing.T, err error, want []string) {
	t.Helper()
	got := validateMessages(t, err)
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("errors:\n  %s\nwant:\n  %s", strings.Join(got, "\n  "), strings.Join(want, "\n  "))
	}
}

var validBackoff = Backoff{Initial: 100 * time.Millisecond, Max: time.Second, Multiplier: 2}

func TestBackoffValidate(t *testing.T) {
	tests := []struct {
		name string
		b    Backoff
		want []string
	}{
		{"valid", validBackoff, nil},
		{"valid max below initial, as grpc-go", Backoff{Initial: time.Second, Max: time.Millisecond, Multiplier: 0.5, Jitter: JitterNone}, nil},
		{"zero", Backoff{}, []string{
			"policy: initialBackoff: must be > 0, got 0s",
			"policy: maxBackoff: must be > 0, got 0s",
			"policy: backoffMultiplier: must be a finite number > 0, got 0",
		}},
		{"negative", Backoff{Initial: -time.Second, Max: -time.Millisecond, Multiplier: -1.5, Jitter: -1}, []string{
			"policy: initialBackoff: must be > 0, got -1s",
			"policy: maxBackoff: must be > 0, got -1ms",
			"policy: backoffMultiplier: must be a finite number > 0, got -1.5",
			"policy: jitter: must be one of PROPORTIONAL, FULL, EQUAL, DECORRELATED, NONE, got -1",
		}},
		{"NaN multiplier", Backoff{Initial: 1, Max: 1, Multiplier: math.NaN()}, []string{"policy: backoffMultiplier: must be a finite number > 0, got NaN"}},
		{"infinite multiplier", Backoff{Initial: 1, Max: 1, Multiplier: math.Inf(1)}, []string{"policy: backoffMultiplier: must be a finite number > 0, got +Inf"}},
		{"unknown jitter", Backoff{Initial: 1, Max: 1, Multiplier: 1, Jitter: 5}, []string{"policy: jitter: must be one of PROPORTIONAL, FULL, EQUAL, DECORRELATED, NONE, got 5"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) { validateCheck(t, tt.b.Validate(), tt.want) })
	}
}

func TestPolicyValidate(t *testing.T) {
	tests := []struct {
		name string
		p    Policy
		want []string
	}{
		{"valid", Policy{MaxAttempts: 3, Backoff: validBackoff}, nil},
		{"valid above the file cap", Policy{MaxAttempts: 50, Backoff: validBackoff, RetryableCodes: DefaultRetryableCodes, PerAttemptRecvTimeout: time.Second, PushbackCeiling: time.Hour}, nil},
		{"one attempt", Policy{MaxAttempts: 1, Backoff: validBackoff}, []string{"policy: maxAttempts: must be at least 2, got 1"}},
		{"everything wrong, all reported", Policy{
			MaxAttempts:           0,
			Backoff:               Backoff{Max: time.Second, Multiplier: 2},
			RetryableCodes:        1<<20 | 1<<2,
			PerAttemptRecvTimeout: -time.Second,
			PushbackCeiling:       -1,
		}, []string{
			"policy: maxAttempts: must be at least 2, got 0",
			"policy: initialBackoff: must be > 0, got 0s",
			"policy: retryableStatusCodes: must hold only codes 0 to 16, got [20]",
			"policy: perAttemptRecvTimeout: must be >= 0, got -1s",
			"policy: pushbackCeiling: must be >= 0, got -1ns",
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) { validateCheck(t, tt.p.Validate(), tt.want) })
	}
}

func TestHedgingValidate(t *testing.T) {
	tests := []struct {
		name string
		h    Hedging
		want []string
	}{
		{"valid", Hedging{MaxAttempts: 3, Delay: 50 * time.Millisecond, NonFatalCodes: DefaultRetryableCodes}, nil},
		{"valid all at once", Hedging{MaxAttempts: 2}, nil},
		{"everything wrong", Hedging{MaxAttempts: -3, Delay: -time.Millisecond, NonFatalCodes: 1 << 31}, []string{
			"policy: maxAttempts: must be at least 2, got -3",
			"policy: hedgingDelay: must be >= 0, got -1ms",
			"policy: nonFatalStatusCodes: must hold only codes 0 to 16, got [31]",
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) { validateCheck(t, tt.h.Validate(), tt.want) })
	}
}

// TestValidatePrefixed shows how a policy-file parser places the errors.
func TestValidatePrefixed(t *testing.T) {
	p := Policy{MaxAttempts: 1, Backoff: validBackoff}
	err := PrefixErrors(p.Validate(), "methodConfig[1].retryPolicy.")
	validateCheck(t, err, []string{"policy: methodConfig[1].retryPolicy.maxAttempts: must be at least 2, got 1"})
}

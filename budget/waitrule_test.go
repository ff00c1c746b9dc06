package budget

import (
	"context"
	"errors"
	"fmt"
	"testing"
)

// ruled is an error that names its rule, as the Gate's wait ends do; it
// wraps base. The test builds its own so that it holds whatever names the
// Gate's rules have.
type ruled struct {
	rule string
	base error
}

func (e ruled) Error() string    { return "ended by " + e.rule }
func (e ruled) WaitRule() string { return e.rule }
func (e ruled) Unwrap() error    { return e.base }

func TestWaitRule(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want string
	}{
		{ruled{rule: "hold"}, "hold"},
		{fmt.Errorf("wrapped: %w", ruled{rule: "max-wait"}), "max-wait"},
		// The Gate's own name wins over what the error wraps.
		{ruled{rule: "criticality", base: ErrTooManyWaiting}, "criticality"},
		{ruled{rule: "deadline", base: context.DeadlineExceeded}, "deadline"},
		{ErrOutageLasting, "futility"},
		{fmt.Errorf("wrapped: %w", ErrTooManyWaiting), "room"},
		{context.DeadlineExceeded, "deadline"},
		{context.Canceled, "caller"},
		{errors.New("something else"), "other"},
		{nil, "other"},
	} {
		if got := WaitRule(tc.err); got != tc.want {
			t.Errorf("WaitRule(%v) = %q, want %q", tc.err, got, tc.want)
		}
	}
}

package budget

import (
	"context"
	"errors"
)

// WaitRule names the rule of a Gate's wait contract (see Gate) that ended a
// wait with err: the Gate's own name for it when err carries one (hold,
// hopeless, max-wait, criticality, deadline), else "futility"
// (ErrOutageLasting), "room" (ErrTooManyWaiting), "deadline" (a context's
// deadline), "caller" (a cancelled context) or "other". It is what
// interceptor.Report.WaitEnd holds.
func WaitRule(err error) string {
	var r interface{ WaitRule() string }
	switch {
	case errors.As(err, &r):
		return r.WaitRule()
	case errors.Is(err, ErrOutageLasting):
		return "futility"
	case errors.Is(err, ErrTooManyWaiting):
		return "room"
	case errors.Is(err, context.DeadlineExceeded):
		return "deadline"
	case errors.Is(err, context.Canceled):
		return "caller"
	}
	return "other"
}

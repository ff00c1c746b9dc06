package interceptor

import (
	"context"
	"time"

	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors/logging"
	"github.com/stagger-go/stagger/policy"
	"google.golang.org/grpc/codes"
)

// EventKind says what an Event reports.
type EventKind uint8

const (
	// EventRetry: an attempt failed and another follows after Pause.
	EventRetry EventKind = iota + 1
	// EventGiveUp: an attempt failed and the call ends with its error;
	// Reason says why.
	EventGiveUp
	// EventNotice: stagger did not apply part of the policy (Reason
	// ReasonNotIdempotent: a per-attempt timeout on a method not known to be
	// idempotent). Reported once per method and interceptor.
	EventNotice
)

var eventKindNames = [...]string{"", "retry", "give up", "notice"}

// String returns "retry", "give up" or "notice".
func (k EventKind) String() string {
	if int(k) < len(eventKindNames) && k > 0 {
		return eventKindNames[k]
	}
	return "unknown"
}

// Event is what hooks receive. Each hook gets its own copy.
type Event struct {
	Kind EventKind
	// Method is the full method name, "/pkg.Service/Method".
	Method string
	// Attempt is the number of the attempt that just ended (1 = first).
	Attempt int
	// Code is that attempt's status code; Err its error.
	Code codes.Code
	Err  error
	// Pause is the pause before the next attempt (EventRetry only).
	Pause time.Duration
	// Pushback: Pause is the server's pushback.
	Pushback bool
	// Reason: why the call gives up (EventGiveUp), or what was not applied
	// (EventNotice); ReasonNone for EventRetry.
	Reason policy.Reason
}

// emit runs the hooks and the logger. The caller holds no lock.
func (o *options) emit(ctx context.Context, e Event) {
	for _, h := range o.hooks {
		h(e)
	}
	if o.logger == nil {
		return
	}
	level, msg := logging.LevelDebug, "stagger: retrying"
	switch e.Kind {
	case EventGiveUp:
		msg = "stagger: giving up"
		if e.Reason == policy.ReasonBudget {
			level = logging.LevelWarn
		}
	case EventNotice:
		level, msg = logging.LevelWarn, "stagger: per-attempt timeout not applied: method not known to be idempotent"
	}
	o.logger.Log(ctx, level, msg,
		"grpc.method", e.Method,
		"stagger.attempt", e.Attempt,
		"grpc.code", e.Code.String(),
		"stagger.pause", e.Pause,
		"stagger.reason", e.Reason.String(),
	)
}

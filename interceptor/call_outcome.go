package interceptor

import (
	"context"
	"errors"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// callerEnded reports whether the attempt that ended with err ended because
// the caller's context did, or err has a context's code and the deadline is
// at most callerDeadlineSlack away (the report can beat the context's own
// timer).
func callerEnded(callCtx context.Context, err error) bool {
	if callCtx.Err() != nil {
		return true
	}
	if !contextCode(err) {
		return false
	}
	dl, ok := callCtx.Deadline()
	return ok && time.Until(dl) <= callerDeadlineSlack
}

// contextCode reports whether err is CANCELED or DEADLINE_EXCEEDED.
func contextCode(err error) bool {
	code := status.Code(err)
	return code == codes.Canceled || code == codes.DeadlineExceeded
}

// callerErr is the error of a call the caller's context ended: CANCELED
// only when the caller cancelled, else DEADLINE_EXCEEDED, whatever the
// attempt ended with.
func callerErr(callCtx context.Context, err error) error {
	if errors.Is(callCtx.Err(), context.Canceled) {
		if status.Code(err) == codes.Canceled {
			return err
		}
		return status.Error(codes.Canceled, context.Canceled.Error())
	}
	if status.Code(err) == codes.DeadlineExceeded {
		return err
	}
	return status.Error(codes.DeadlineExceeded, context.DeadlineExceeded.Error())
}

// attemptOutcome returns the error to decide on of an attempt (cutOff: the
// timer cut it off: errAttemptTimeout), and whether the timer cut it off.
// Once the caller's context ended, a context's code or a cut ends with
// callerErr; a status the server wrote is kept.
func attemptOutcome(callCtx context.Context, err error, cutOff bool) (error, bool) {
	switch {
	case err == nil:
		return nil, false
	case callerEnded(callCtx, err):
		if cutOff || contextCode(err) {
			return callerErr(callCtx, err), false
		}
		return err, false
	case cutOff:
		return errAttemptTimeout, true
	}
	return err, false
}

// wireAmbiguous reports whether a failed attempt was ambiguous (the package
// doc says what that is). trailer is nil when the attempt got no transport
// stream; committed: headers or a message arrived. A server's status without
// response headers is a Trailers-Only response, whose HEADERS frame carries
// content-type, which grpc-go keeps in the trailer; when the transport
// ended the stream (reset, EOF, GOAWAY) the trailer is empty.
func wireAmbiguous(trailer metadata.MD, committed bool) bool {
	return trailer != nil && !committed && len(trailer["content-type"]) == 0
}

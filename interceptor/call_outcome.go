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
// the caller's context did: it was cancelled, or its deadline passed; or err
// is CANCELED or DEADLINE_EXCEEDED and the deadline is at most
// callerDeadlineSlack away (the server's or grpc's report of the deadline
// can arrive before the context's own timer says so). stagger's timer is
// not the caller: the attempt must have passed stop.
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

// contextCode reports whether err's code is one a context ending makes:
// CANCELED or DEADLINE_EXCEEDED.
func contextCode(err error) bool {
	code := status.Code(err)
	return code == codes.Canceled || code == codes.DeadlineExceeded
}

// callerErr is the error a call the caller's context ended returns: CANCELED
// only when the caller cancelled; DEADLINE_EXCEEDED when its deadline passed,
// whatever the attempt ended with (grpc reports a context cancelled by
// stagger, or one whose deadline and cancellation race, as CANCELED).
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

// attemptOutcome classifies the end of an attempt whose timer (nil: none)
// has been stopped: it returns the error to decide on and whether stagger's
// timer cut the attempt off. An attempt the timer cut off ends with
// errAttemptTimeout (DEADLINE_EXCEEDED, as in grpc C-core) rather than the
// CANCELED grpc reports; one the caller's context ended with a context's
// code ends with callerErr. A status the server wrote as the caller's
// deadline passed is kept as it is (the call still ends, reason caller).
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

// wireAmbiguous reports whether a failed attempt may have run on the server
// and ended without a status from it, from the two facts grpc's call options
// give: trailer is the attempt's trailer metadata, nil when the attempt got
// no transport stream (grpc fills grpc.Trailer, and ClientStream.Trailer
// answers, only for an attempt that got one: a refused connection or no
// ready transport leaves it nil, and such an attempt never left the
// client); committed says response headers or a message arrived.
//
// An attempt that got a stream sent its request headers, so the server may
// have started the handler (the safe side: a stream whose headers never
// left counts too). Whether the server then wrote a status is told by
// content-type: a server's status without response headers is a
// Trailers-Only response, whose one HEADERS frame carries content-type
// (required by the gRPC protocol), and grpc-go keeps it in the attempt's
// trailer (v1.64 through v1.85); when the transport ended the stream (reset,
// EOF, GOAWAY, RST_STREAM) the trailer is empty. A committed attempt is
// final anyway (gRFC A6). Reading these costs nothing: the interceptors ask
// grpc for the trailer for pushback already, and a stats.Handler, which
// would see the same facts (OutHeader, InTrailer), costs about 15
// allocations per call inside grpc whether it does anything or not.
func wireAmbiguous(trailer metadata.MD, committed bool) bool {
	return trailer != nil && !committed && len(trailer["content-type"]) == 0
}

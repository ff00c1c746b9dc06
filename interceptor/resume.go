package interceptor

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"strconv"

	"github.com/stagger-go/stagger/internal/fence"
	"github.com/stagger-go/stagger/policy"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

// ResumeFunc builds the request that continues a server stream: req is the
// request the call was made with (the original, never a resumed one), last
// the last message the application received, and next the request whose
// stream starts right after last (for a paginated list, req with its page
// token or start key set from last), or an error (WithResume says what each
// does).
//
// It runs on the goroutine of the application's RecvMsg, once per resume.
// It must not modify req or last, and it must return a new message rather
// than req modified: req is sent again if a later resume needs it. A
// ResumeFunc shared by an interceptor's calls must be safe for concurrent
// use.
type ResumeFunc func(req, last proto.Message) (next proto.Message, err error)

// ErrCannotResume (or an error wrapping it) is what a ResumeFunc returns
// when the stream cannot continue from the last message (a message without
// a key to continue after, a token that expired).
var ErrCannotResume = errors.New("interceptor: stream cannot resume")

// ResumeHeader is the request header a resumed attempt carries: the number
// of the resume (1 for the first), so a server can tell a resumed request
// from a retried one. It stays on the retries of a resumed attempt that
// fail before their first message.
const ResumeHeader = "stagger-resume"

// WithResume makes the server-streaming method (its full name,
// "/pkg.Service/Method") resumable with fn: a stream of that method that fails
// after it committed is decided as one that had not, by every usual rule (the
// budget is charged per resume as for a retry), and when it would be retried
// it is reopened, after the pause, with the request fn builds (a new one only
// when messages arrived since the last), so that the application reads one
// stream with every message once, in order. Hooks hear EventResume (not
// EventRetry) before fn runs; resumed attempts carry the ResumeHeader request
// header. A nil fn removes the method's resume function. It does nothing for a
// method that has no retry policy or is not server-streaming (unary,
// client-streaming, bidi: which messages to send again is the application's
// protocol, which one request cannot express).
//
// A method whose request can say where to start (a page token, a start
// key) can so continue where gRFC A6 would fail the call, as Google's
// client libraries do per API (Bigtable's ReadRows). TypedResume adapts a
// function written for the generated types (ExampleWithResume shows one).
//
// Counting. An attempt that delivers a message restarts the count: it
// becomes attempt 1 and the backoff sequence starts over, so maxAttempts
// bounds the failures in a row since the last message, not the resumes;
// grpc-previous-rpc-attempts, AttemptFromContext and Event.Attempt count
// since that message. The call's total (EventEnd, Report, Attempts(err))
// counts every attempt.
//
// Ambiguity. A resume function declares that the method's request may be
// sent again, so a stream broken by its connection (reset, GOAWAY), whose
// status no server wrote, is resumed or retried too, where a call not known
// to be idempotent would end (reason ambiguous). Register one only for
// methods where that holds. The per-attempt timeout still follows the
// method's idempotency.
//
// When fn returns ErrCannotResume the call ends, at once, with the stream's
// own error (reason committed), as without fn; when it returns another
// error or no request, or panics, with a *ResumeError. A code the policy
// does not retry ends the stream without calling fn.
//
// A resumable stream keeps a reference to its request and to the last
// message received, and allocates nothing per message (the application
// must not modify a message after RecvMsg returned it). Context commits a
// resumable stream for good, as it commits any stream.
func WithResume(method string, fn ResumeFunc) Option {
	return Option{apply: func(o *options) {
		m := make(map[string]ResumeFunc, len(o.resume)+1)
		maps.Copy(m, o.resume)
		if fn == nil {
			delete(m, method)
		} else {
			m[method] = fn
		}
		o.resume = m
	}}
}

// TypedResume adapts a resume function written for the method's own
// message types (the generated request and response structs) to a
// ResumeFunc. A request or message of another type (WithResume given the
// wrong method) makes the resume fail with INTERNAL, naming both types.
func TypedResume[Req, Resp proto.Message](fn func(req Req, last Resp) (next Req, err error)) ResumeFunc {
	return func(req, last proto.Message) (proto.Message, error) {
		r, ok := req.(Req)
		if !ok {
			var want Req
			return nil, fmt.Errorf("interceptor: resume function takes a request of type %T, the stream sent %T", want, req)
		}
		l, ok := last.(Resp)
		if !ok {
			var want Resp
			return nil, fmt.Errorf("interceptor: resume function takes a message of type %T, the stream received %T", want, last)
		}
		return fn(r, l)
	}
}

// ResumeError is the error a resumable stream ends with when its resume
// function failed (WithResume): INTERNAL, naming the method and the
// function's error, with the stream's own failure in the message too.
// Unwrap reaches both.
//
// A ResumeError is immutable and safe for concurrent use.
type ResumeError struct {
	// Method is the stream's full method name.
	Method string
	// Err is the resume function's error (a panic becomes one).
	Err error
	// StreamErr is the failure the stream would have resumed from.
	StreamErr error
}

// Error returns the status's message, as grpc-go formats it.
func (e *ResumeError) Error() string { return e.GRPCStatus().Err().Error() }

// GRPCStatus returns INTERNAL with a message naming the resume function.
func (e *ResumeError) GRPCStatus() *status.Status {
	return status.Newf(codes.Internal, "interceptor: resume function of %s failed: %v (the stream had failed with: %v)", e.Method, e.Err, e.StreamErr)
}

// Unwrap returns the resume function's error and the stream's.
func (e *ResumeError) Unwrap() []error { return []error{e.Err, e.StreamErr} }

// resumeState is what a resumable stream sent and received, for its
// resume function: under the stream's endMu, but req, orig and off, mu.
type resumeState struct {
	fn ResumeFunc
	// orig is the request the application sent; req the one the running
	// attempt sent (orig, or the last resume's), nil until SendMsg.
	orig, req any
	off       bool // Context was called
	// last is the last message delivered; delivered: one was since req
	// was built; progress: the running attempt delivered one.
	last                any
	delivered, progress bool
	resumes             int
	ctx                 context.Context // with ResumeHeader
}

// received notes m, delivered to the application; the first message of an
// attempt restarts the call's attempt count and backoff sequence.
func (r *resumeState) received(m any, c *call) {
	r.last = m
	if r.progress {
		return
	}
	r.progress, r.delivered = true, true
	c.before += c.attempt - 1
	c.attempt = 1
	c.retry, c.prev = 0, 0
}

// resuming decides, as a committed attempt ended with err (nil: success),
// whether the stream resumes rather than ends (c.resume): it failed, its
// request was sent and closed, and Context was not called.
func (s *retryStream) resuming(err error) bool {
	r := s.res
	if r == nil {
		return false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	r.progress = false
	s.c.resume = err != nil && !r.off && r.req != nil && s.closeSent
	if s.c.resume {
		s.live = s.live[:0] // until the resumed attempt goes live
	}
	return s.c.resume
}

// prepareResume, once the loop decided to resume (c.resume stays set
// through the pause, for a Gate's wait to report EventResume too, and
// retryAfter clears it before the attempt opens), makes the request that
// continues the stream the only message to replay, or returns the call's
// final error.
func (s *retryStream) prepareResume(streamErr error) error {
	r := s.res
	if r == nil || !s.c.resume {
		return nil
	}
	s.mu.Lock()
	req, orig := r.req, r.orig
	s.mu.Unlock()
	if r.delivered {
		next, err := r.build(orig, r.last)
		if err != nil {
			// The resume function said no or failed: a give-up after a
			// pause (call.giveUp).
			final := streamErr
			if !errors.Is(err, ErrCannotResume) {
				final = &ResumeError{Method: s.method, Err: err, StreamErr: streamErr}
			}
			return s.c.giveUp(s.callCtx, Event{Method: s.c.method, Attempt: s.c.attempt}, policy.ReasonCommitted, final)
		}
		req = next
		r.delivered = false
	}
	r.resumes++
	r.ctx = metadata.AppendToOutgoingContext(s.callCtx, ResumeHeader, strconv.Itoa(r.resumes))
	s.mu.Lock()
	r.req = req
	// The only message kept, past the bounds: a resumed request must be
	// sent, and the stream commits again at its first message.
	s.buf.release()
	s.buf.force(req)
	s.closeSent, s.committed, s.commitNext = true, false, false
	s.mu.Unlock()
	return nil
}

// build calls the resume function; a panic is its error.
func (r *resumeState) build(orig, last any) (next proto.Message, err error) {
	req, ok := orig.(proto.Message)
	if !ok {
		return nil, fmt.Errorf("the request is a %T, not a proto.Message", orig)
	}
	msg, ok := last.(proto.Message)
	if !ok {
		return nil, fmt.Errorf("the last message is a %T, not a proto.Message", last)
	}
	if p := fence.Run(fence.Resume, func() { next, err = r.fn(req, msg) }); p != nil {
		return nil, fmt.Errorf("panic: %v", p)
	}
	if err == nil && (next == nil || !next.ProtoReflect().IsValid()) {
		err = errors.New("it returned no request")
	}
	return next, err
}

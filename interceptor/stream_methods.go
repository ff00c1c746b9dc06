package interceptor

import (
	"context"
	"io"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

func (s *retryStream) SendMsg(m any) error {
	s.mu.Lock()
	a := s.cur
	s.res.sent(m)
	if s.committed {
		s.mu.Unlock()
		return a.cs.SendMsg(m)
	}
	switch {
	case s.done:
		s.mu.Unlock()
		return sendOnEnded(s.desc)
	case s.closeSent:
		s.mu.Unlock()
		return errSendAfterClose
	}
	if !s.buf.add(m) {
		if s.switching {
			s.buf.force(m)
			s.overflow = true
			s.mu.Unlock()
			return nil
		}
		s.commitLocked()
		s.mu.Unlock()
		return a.cs.SendMsg(m)
	}
	kept := len(s.buf.msgs)
	s.mu.Unlock()
	err := a.cs.SendMsg(m)
	switch {
	case err == nil:
		return nil
	case err == io.EOF:
		s.mu.Lock()
		committed := s.committed
		s.mu.Unlock()
		if committed {
			return io.EOF
		}
		return nil
	default:
		s.mu.Lock()
		s.buf.dropLast(kept)
		s.mu.Unlock()
		return err
	}
}

// CloseSend closes the sending side of the current attempt and, until the
// stream commits, remembers it for replay.
func (s *retryStream) CloseSend() error {
	s.mu.Lock()
	a := s.cur
	if !s.committed {
		s.closeSent = true
	}
	s.mu.Unlock()
	return a.cs.CloseSend()
}

// RecvMsg receives the next message. A failure before the stream committed
// is retried here, transparently: the caller sees the next message or the
// final status. A message received commits the stream.
func (s *retryStream) RecvMsg(m any) error {
	s.mu.Lock()
	if s.done {
		err := s.final
		s.mu.Unlock()
		return err
	}
	a, committed := s.cur, s.committed
	s.mu.Unlock()
	for {
		err := a.cs.RecvMsg(m)
		if err == nil && !a.timer.stop() {
			// The timer fired as the message arrived: the attempt was cut
			// off before anything reached the application, so the message
			// is dropped and the attempt ends as timed out.
			err = status.Error(codes.Canceled, "interceptor: message arrived after the per-attempt timer fired")
		}
		if err == nil {
			if !committed {
				s.mu.Lock()
				s.commitLocked()
				s.mu.Unlock()
			}
			if s.res != nil {
				s.res.received(m, &s.c)
			}
			if !s.desc.ServerStreams {
				// grpc-go has read the status too: the call succeeded.
				s.attemptEnded(a, nil)
			}
			return nil
		}
		if a, err = s.attemptEnded(a, err); a == nil {
			return err
		}
		s.mu.Lock()
		committed = s.committed
		s.mu.Unlock()
	}
}

// Header returns the response headers of the current attempt: the committed
// one once there is one. Headers that arrive commit the stream. As with
// grpc-go, it may return nil, nil when the attempt failed without headers;
// RecvMsg then reports the outcome.
func (s *retryStream) Header() (metadata.MD, error) {
	s.mu.Lock()
	a := s.cur
	s.mu.Unlock()
	md, err := a.cs.Header()
	if md != nil && !a.timer.stop() {
		// The timer cut the attempt off before its headers arrived: they
		// belong to an attempt that will not be used. As for an attempt
		// that failed without headers, RecvMsg tells the outcome.
		return nil, nil
	}
	if md != nil {
		s.mu.Lock()
		if s.cur == a && !s.committed && !s.switching {
			s.commitLocked()
		}
		s.mu.Unlock()
	}
	return md, err
}

// Trailer returns the trailer metadata of the current (last) attempt. As with
// grpc-go, call it after RecvMsg returned an error (io.EOF included).
func (s *retryStream) Trailer() metadata.MD {
	s.mu.Lock()
	a := s.cur
	s.mu.Unlock()
	return a.cs.Trailer()
}

// Context commits the stream, as grpc-go does, and returns the context of
// the attempt it committed to, which no retry will cancel. Called while a
// retry is opening the next attempt (from a goroutine other than
// RecvMsg's), it returns the call's context and the stream commits to the
// new attempt once it is open.
func (s *retryStream) Context() context.Context {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.res != nil {
		s.res.off = true
	}
	if s.switching {
		s.ctxCommit = true
		return s.callCtx
	}
	if !s.committed {
		s.commitLocked()
	}
	return s.cur.cs.Context()
}

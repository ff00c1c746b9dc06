package interceptor

import (
	"context"
	"time"

	"github.com/stagger-go/stagger/internal/frontend"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// SendMsg sends m on the current attempt (before a hedged stream commits:
// on every attempt open) and, until the stream commits, keeps it for
// replay (StreamClientInterceptor, Replay).
func (s *retryStream) SendMsg(m any) error {
	s.sendMu.Lock()
	defer s.sendMu.Unlock()
	s.mu.Lock()
	for s.buf.forced && !s.committed && !s.done && s.oldestOpenLocked() == nil {
		// Past the bound with no attempt live: held, as flow control would
		// hold it, until one is (the stream commits to it) or the end.
		wait := s.liveWait()
		s.mu.Unlock()
		select {
		case <-wait:
		case <-s.callCtx.Done():
			return sendOnEnded(s.desc)
		}
		s.mu.Lock()
	}
	r := s.race
	if res := s.res; res != nil && res.orig == nil {
		res.orig, res.req = m, m // the request, for the resume function
	}
	a := s.cur
	switch {
	case s.committed:
		s.mu.Unlock()
		return a.cs.SendMsg(m)
	case s.done || r != nil && r.failed:
		s.mu.Unlock()
		return sendOnEnded(s.desc)
	case s.closeSent:
		s.mu.Unlock()
		return status.Error(codes.Internal, "SendMsg called after CloseSend") // grpc-go's own answer
	}
	if kept, now := s.buf.keepBeforeCommit(m, s.oldestOpenLocked() != nil); !kept {
		if !now {
			s.commitNext = true
			s.mu.Unlock()
			return nil
		}
		// m does not fit: the stream commits to the attempt open now (a
		// hedged stream's driver does: ask; its attempt may end meanwhile).
		if r == nil {
			s.commitLocked()
		} else {
			a = s.ask()
		}
		if a != nil {
			s.mu.Unlock()
			return a.cs.SendMsg(m)
		}
		if r.failed {
			s.mu.Unlock()
			return sendOnEnded(s.desc)
		}
		// The attempt ended before the driver heard the ask: m is kept
		// past the bound for the next attempt to go live (commitNext).
		s.buf.force(m)
	}
	return s.sendKept(m, false)
}

// CloseSend closes the sending side as SendMsg sends.
func (s *retryStream) CloseSend() error {
	s.sendMu.Lock()
	defer s.sendMu.Unlock()
	s.mu.Lock()
	a := s.cur
	if !s.committed {
		s.closeSent = true
		if s.race != nil {
			return s.sendKept(nil, true)
		}
	}
	s.mu.Unlock()
	if s.callCtx.Err() != nil {
		// No half-close once the caller left, as from grpc-go once its
		// watch finished the stream: the server cannot answer OK to a call
		// cancelled first (grpc's reader may hand that answer over).
		return nil
	}
	return a.cs.CloseSend()
}

// RecvMsg receives the next message; a failure before the stream committed
// is retried here (StreamClientInterceptor).
func (s *retryStream) RecvMsg(m any) error {
	s.recvMu.Lock()
	defer s.recvMu.Unlock()
	if s.race != nil {
		<-s.race.ready
	}
	s.mu.Lock()
	a, committed, done, final := s.cur, s.committed, s.done, s.final
	s.mu.Unlock()
	if done {
		return final
	}
	for {
		err := a.recv(m)
		if err == nil && !a.timer.stopAnswered(time.Now()) {
			// Cut off as the message arrived: it is dropped.
			err = status.Error(codes.Canceled, "interceptor: message arrived after the per-attempt timer fired")
		}
		if err == nil {
			if !committed {
				s.mu.Lock()
				s.commitLocked()
				s.mu.Unlock()
			}
			if s.res != nil {
				// Under endMu, as the abandon watch judges: a message of
				// an attempt judged already counts for nothing.
				s.endMu.Lock()
				if !a.settled {
					s.res.received(m, &s.c)
				}
				s.endMu.Unlock()
			}
			if !s.desc.ServerStreams {
				// grpc-go has read the status too: the call succeeded.
				s.settle(a, nil, false)
			}
			return nil
		}
		if a, err = s.settle(a, err, false); a == nil {
			return err
		}
		s.mu.Lock()
		committed = s.committed
		s.mu.Unlock()
	}
}

// Header returns the response headers of the attempt the stream commits
// to, as grpc-go's own retry does: an attempt that ended without headers
// (Trailers-Only) is retried underneath. Headers that arrive commit the
// stream. When the call ends without headers, while another goroutine is
// in RecvMsg (which then retries), or when the per-attempt timer cut the
// attempt off, Header returns nil, nil, and RecvMsg tells the outcome.
func (s *retryStream) Header() (metadata.MD, error) {
	if s.race != nil {
		<-s.race.ready
	}
	for {
		s.mu.Lock()
		a, committed, done := s.cur, s.committed || s.commitNext, s.done
		s.mu.Unlock()
		if a == nil {
			return nil, nil
		}
		md, err := a.cs.Header()
		if md != nil && !a.timer.stopAnswered(time.Now()) {
			return nil, nil
		}
		if md != nil {
			s.mu.Lock()
			if s.cur == a && !s.committed && (s.done || len(s.live) > 0) {
				s.commitLocked()
			}
			s.mu.Unlock()
			return md, err
		}
		if err != nil || committed || done {
			return md, err
		}
		// Ended without headers, so no message can come: read its status
		// and judge it, unless RecvMsg's goroutine is at it.
		if !s.recvMu.TryLock() {
			return nil, nil
		}
		rerr := a.cs.RecvMsg(&noMessage{})
		s.recvMu.Unlock()
		if rerr == nil {
			return nil, nil // a message without headers: RecvMsg's
		}
		if next, _ := s.settle(a, rerr, false); next == nil {
			return nil, nil
		}
	}
}

type noMessage struct{}

// Trailer returns the trailer of the attempt the caller sees; as with
// grpc-go, call it after RecvMsg returned an error (io.EOF included).
func (s *retryStream) Trailer() metadata.MD {
	s.mu.Lock()
	cs := s.shownLocked()
	s.mu.Unlock()
	if cs == nil {
		return nil
	}
	return cs.Trailer()
}

// Context commits the stream and returns the context of the attempt it
// committed to; with none open (during a retry, or when a hedged stream's
// attempts have all ended), the call's, and the stream commits to the next
// attempt to go live (commitNext): one that fails to open is final. A
// hedged stream's driver commits it to its oldest attempt open (ask).
func (s *retryStream) Context() context.Context {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.res != nil {
		s.res.off = true
	}
	if s.race != nil && s.race.failed {
		return s.callCtx
	}
	// Uncommitted, or resuming between attempts (committed, none live).
	if !s.committed || !s.done && len(s.live) == 0 {
		switch {
		case !s.done && s.oldestOpenLocked() == nil:
			s.commitNext = true
			return s.callCtx
		case s.race == nil:
			s.commitLocked()
		case s.ask() == nil:
			return s.callCtx
		}
	}
	return s.cur.cs.Context()
}

var _ frontend.Shown = (*retryStream)(nil)

// ShownStream implements frontend.Shown: the grpc stream of the attempt
// the stream committed to or, once it ended, of its last attempt; nil
// while neither is known.
func (s *retryStream) ShownStream() any {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.committed && !s.done {
		return nil
	}
	return s.shownLocked()
}

package interceptor

import (
	"context"
	"io"
	"time"

	"github.com/stagger-go/stagger/internal/frontend"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// SendMsg sends m on the current attempt (before a hedged stream commits:
// on every attempt open) and, until the stream commits, keeps it for
// replay. The application must not modify m afterwards (as grpc-go
// requires too: stagger keeps the reference). When the attempt has died
// before the stream committed, SendMsg returns nil: RecvMsg reports the
// outcome. A message that does not fit in the replay buffer commits the
// stream.
func (s *retryStream) SendMsg(m any) error {
	r, held := s.lockSend()
	if held {
		defer r.sendMu.Unlock()
	}
	s.res.sent(m)
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
		return errSendAfterClose
	}
	if kept, now := s.buf.keepBeforeCommit(m, s.openLocked()); !kept {
		if !now {
			s.commitNext = true
			s.mu.Unlock()
			return nil
		}
		if a = s.commitNowLocked(); a != nil {
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
	if r != nil {
		return s.sendRaced(m, false)
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

// openLocked says whether an attempt can take a message now. Under mu.
func (s *retryStream) openLocked() bool {
	if s.race != nil {
		return s.oldestOpenLocked() != nil
	}
	return !s.switching
}

// commitNowLocked commits the stream to the attempt open now, for a
// message that does not fit in the replay buffer, and returns it (nil: a
// hedged stream's attempt ended meanwhile). Under mu, held again on return.
func (s *retryStream) commitNowLocked() *streamAttempt {
	if s.race != nil {
		return s.ask()
	}
	s.commitLocked()
	return s.cur
}

// lockSend takes mu for SendMsg or CloseSend and returns the stream's
// race. Before a hedged stream commits it takes the race's sendMu first,
// and held says the caller is to let it go.
func (s *retryStream) lockSend() (r *hedgeRace, held bool) {
	s.mu.Lock()
	r = s.race
	if r == nil || s.committed {
		return r, false
	}
	s.mu.Unlock()
	r.sendMu.Lock()
	s.mu.Lock()
	return r, true
}

// CloseSend closes the sending side of the current attempt (before a
// hedged stream commits: of every attempt open) and, until the stream
// commits, keeps it for replay.
func (s *retryStream) CloseSend() error {
	r, held := s.lockSend()
	if held {
		defer r.sendMu.Unlock()
	}
	a := s.cur
	if !s.committed {
		s.closeSent = true
		if r != nil {
			return s.sendRaced(nil, true)
		}
	}
	s.mu.Unlock()
	if s.callCtx.Err() != nil {
		// The caller left: no half-close goes, as none does from grpc-go
		// once its watch finished the stream, so the server cannot answer
		// OK to a call its caller cancelled first (grpc's reader may hand
		// over an answer that came beside the cancel).
		return nil
	}
	return a.cs.CloseSend()
}

// RecvMsg receives the next message. A failure before the stream committed
// is retried here, transparently: the caller sees the next message or the
// final status. A message received commits the stream.
func (s *retryStream) RecvMsg(m any) error {
	s.recvMu.Lock()
	defer s.recvMu.Unlock()
	if s.race != nil {
		<-s.race.ready
	}
	s.mu.Lock()
	if s.done {
		err := s.final
		s.mu.Unlock()
		return err
	}
	a, committed := s.cur, s.committed
	s.mu.Unlock()
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
// (a Trailers-Only failure) is retried underneath, and Header returns the
// headers of the attempt whose messages follow. Headers that arrive commit
// the stream. When the call ends without headers, or while another
// goroutine is in RecvMsg (which then retries), or the per-attempt timer
// cut the attempt off, Header returns nil, nil, and RecvMsg tells the
// outcome.
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
			if s.cur == a && !s.committed && !s.switching {
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

// noMessage is what Header reads the status of an attempt into.
type noMessage struct{}

// Trailer returns the trailer metadata of the current (last) attempt. As with
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

// Context commits the stream, as grpc-go does, and returns the context of
// the attempt it committed to, which no retry will cancel. While a retry
// opens the next attempt, it returns the call's context and the stream
// commits to the new attempt once it is open.
func (s *retryStream) Context() context.Context {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.res != nil {
		s.res.off = true
	}
	if s.race != nil && !s.committed {
		return s.raceContext()
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

// The stream tells another front end which attempt the caller sees.
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

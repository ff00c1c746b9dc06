package interceptor

import (
	"context"
	"io"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
)

// SendMsg sends m on every attempt open and, until the stream commits,
// keeps it for the attempts still to come. Before the commit it returns nil
// whatever became of the attempts (RecvMsg tells the outcome), unless grpc
// refused the message itself; a message that does not fit in the replay
// buffer commits the stream to the oldest attempt open.
func (s *hedgedStream) SendMsg(m any) error {
	s.mu.Lock()
	if w := s.winner; w != nil {
		s.mu.Unlock()
		return w.cs.SendMsg(m)
	}
	s.mu.Unlock()
	s.sendMu.Lock()
	defer s.sendMu.Unlock()
	s.mu.Lock()
	switch {
	case s.winner != nil:
		w := s.winner
		s.mu.Unlock()
		return w.cs.SendMsg(m)
	case s.failed:
		s.mu.Unlock()
		return sendOnEnded(s.desc)
	case s.closeSent:
		s.mu.Unlock()
		return errSendAfterClose
	}
	if kept, now := s.buf.keepBeforeCommit(m, s.oldestOpenLocked() != nil); !kept {
		if !now {
			s.commitNext = true
			s.mu.Unlock()
			return nil
		}
		if w := s.ask(); w != nil {
			s.mu.Unlock()
			return w.cs.SendMsg(m)
		}
		if s.failed {
			s.mu.Unlock()
			return sendOnEnded(s.desc)
		}
		// The attempt open ended before the driver heard the ask, which
		// set commitNext: m is kept past the bound for the next attempt to
		// go live, and sent to any that went live meanwhile.
		s.buf.force(m)
	}
	kept := len(s.buf.msgs)
	s.targets = append(s.targets[:0], s.live...)
	s.mu.Unlock()
	for i, a := range s.targets {
		if err := a.cs.SendMsg(m); err != nil && err != io.EOF && i == 0 && a.ctx.Err() == nil {
			// grpc refused the message (too large, cannot marshal): it is
			// not part of the stream. (An attempt cancelled meanwhile, a
			// hedge that lost, is not grpc refusing.)
			s.mu.Lock()
			s.buf.dropLast(kept)
			s.mu.Unlock()
			clear(s.targets)
			return err
		}
	}
	clear(s.targets)
	return nil
}

// CloseSend closes the sending side of every attempt open and, until the
// stream commits, of the attempts still to come.
func (s *hedgedStream) CloseSend() error {
	s.mu.Lock()
	if w := s.winner; w != nil {
		s.mu.Unlock()
		return w.cs.CloseSend()
	}
	s.mu.Unlock()
	s.sendMu.Lock()
	defer s.sendMu.Unlock()
	s.mu.Lock()
	if w := s.winner; w != nil {
		s.mu.Unlock()
		return w.cs.CloseSend()
	}
	s.closeSent = true
	s.targets = append(s.targets[:0], s.live...)
	s.mu.Unlock()
	for _, a := range s.targets {
		_ = a.cs.CloseSend()
	}
	clear(s.targets)
	return nil
}

// RecvMsg waits for the stream to commit, then receives from the winner.
// A stream that failed before committing returns its final error.
func (s *hedgedStream) RecvMsg(m any) error {
	<-s.ready
	s.mu.Lock()
	if s.done {
		err := s.final
		s.mu.Unlock()
		return err
	}
	w := s.winner
	s.mu.Unlock()
	// The attempt's goroutine may be reading its status (it ended without
	// headers); once it is done, the stream is the application's alone.
	<-w.watched
	var err error
	if w.ended {
		err = w.endErr
		if err == nil {
			err = io.EOF
		}
	} else {
		err = w.cs.RecvMsg(m)
	}
	if err == nil {
		if !s.desc.ServerStreams {
			// grpc-go has read the status too: the call succeeded.
			s.winnerEnded(w, nil, false)
		}
		return nil
	}
	return s.winnerEnded(w, err, false)
}

// Header waits for the stream to commit and returns the winner's response
// headers (nil, nil when it ended without any, as grpc-go's); after a
// failure before any commit, the last attempt's.
func (s *hedgedStream) Header() (metadata.MD, error) {
	<-s.ready
	cs := s.current()
	if cs == nil {
		return nil, nil
	}
	return cs.Header()
}

// Trailer returns the trailer of the winner, or before a commit of the last
// attempt that ended; call it after RecvMsg returned an error.
func (s *hedgedStream) Trailer() metadata.MD {
	cs := s.current()
	if cs == nil {
		return nil
	}
	return cs.Trailer()
}

// current returns the grpc stream of the winner or, before a commit, of the
// last attempt that ended; nil when that attempt never opened, or when
// none has ended.
func (s *hedgedStream) current() grpc.ClientStream {
	s.mu.Lock()
	a := s.winner
	if a == nil {
		a = s.last
	}
	s.mu.Unlock()
	if a == nil {
		return nil
	}
	return a.cs
}

// oldestOpenLocked returns the oldest live attempt that has not ended, nil
// when none: an attempt whose watcher saw its end is live until the driver
// hears of it, and a commit to it would make its failure, which the next
// hedge may still answer, the stream's.
func (s *hedgedStream) oldestOpenLocked() *streamHedgeAttempt {
	for _, a := range s.live {
		select {
		case <-a.watched:
			// Its watcher is done: a.ended is written before watched closes.
			if a.ended {
				continue
			}
		default:
		}
		return a
	}
	return nil
}

// Context commits the stream, as grpc-go's does, to the oldest attempt open
// (the others are cancelled; the driver commits, ask), and returns that
// attempt's context. With none open it returns the call's context and the
// next attempt to open wins.
func (s *hedgedStream) Context() context.Context {
	s.mu.Lock()
	w := s.winner
	if w == nil && !s.failed {
		if s.oldestOpenLocked() == nil {
			s.commitNext = true
		} else if w = s.ask(); w == nil && !s.failed {
			s.commitNext = true
		}
	}
	s.mu.Unlock()
	if w == nil {
		return s.callCtx
	}
	return w.cs.Context()
}

// ShownStream implements frontend.Shown for another front end's header
// and trailer methods: the grpc stream of the winner or, once the stream
// failed before any commit, of the attempt whose end ended it (the one
// Header and Trailer read); nil while attempts still race, or when that
// attempt never opened.
func (s *hedgedStream) ShownStream() any {
	s.mu.Lock()
	defer s.mu.Unlock()
	a := s.winner
	if a == nil && s.failed {
		a = s.last
	}
	if a == nil || a.cs == nil {
		return nil
	}
	return a.cs
}

package interceptor

import (
	"context"
	"io"
)

// sendRaced is SendMsg (or, closing, CloseSend) before a hedged stream
// commits, once m is kept: it sends m to every attempt open, and returns
// nil unless grpc refused the message itself. mu is held, and let go here.
func (s *retryStream) sendRaced(m any, closing bool) error {
	r := s.race
	kept := len(s.buf.msgs)
	r.targets = append(r.targets[:0], r.live...)
	s.mu.Unlock()
	defer clear(r.targets)
	for i, a := range r.targets {
		if closing {
			_ = a.cs.CloseSend()
		} else if err := a.cs.SendMsg(m); err != nil && err != io.EOF && i == 0 && a.ctx.Err() == nil {
			// grpc refused the message (too large, cannot marshal); a
			// cancelled attempt is not grpc refusing.
			s.mu.Lock()
			s.buf.dropLast(kept)
			s.mu.Unlock()
			return err
		}
	}
	return nil
}

// oldestOpenLocked returns the oldest live attempt not seen to end (nil:
// none): a commit to an ended attempt would make its failure, which the
// next hedge may still answer, the stream's.
func (s *retryStream) oldestOpenLocked() *streamAttempt {
	for _, a := range s.race.live {
		select {
		case <-a.watched:
			if a.ended {
				continue
			}
		default:
		}
		return a
	}
	return nil
}

// raceContext is Context before a hedged stream commits: it has the driver
// commit to the oldest attempt open (ask) and returns its context; with
// none open, the call's, and the next attempt to open wins.
func (s *retryStream) raceContext() context.Context {
	var w *streamAttempt
	if !s.race.failed {
		if s.oldestOpenLocked() == nil {
			s.commitNext = true
		} else if w = s.ask(); w == nil && !s.race.failed {
			s.commitNext = true
		}
	}
	if w == nil {
		return s.callCtx
	}
	return w.cs.Context()
}

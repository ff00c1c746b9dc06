package interceptor

import (
	"context"
	"io"
)

// sendRaced is SendMsg before a hedged stream commits, once m is kept:
// it sends m on every attempt open. It returns nil whatever became of the
// attempts (RecvMsg tells the outcome), unless grpc refused the message
// itself. mu is held, and let go here.
func (s *retryStream) sendRaced(m any) error {
	r := s.race
	kept := len(s.buf.msgs)
	r.targets = append(r.targets[:0], r.live...)
	s.mu.Unlock()
	for i, a := range r.targets {
		if err := a.cs.SendMsg(m); err != nil && err != io.EOF && i == 0 && a.ctx.Err() == nil {
			// grpc refused the message (too large, cannot marshal): it is
			// not part of the stream. (An attempt cancelled meanwhile, a
			// hedge that lost, is not grpc refusing.)
			s.mu.Lock()
			s.buf.dropLast(kept)
			s.mu.Unlock()
			clear(r.targets)
			return err
		}
	}
	clear(r.targets)
	return nil
}

// closeRaced is CloseSend before a hedged stream commits, once it is
// remembered for the attempts still to come: it closes the sending side of
// every attempt open. mu is held, and let go here.
func (s *retryStream) closeRaced() error {
	r := s.race
	r.targets = append(r.targets[:0], r.live...)
	s.mu.Unlock()
	for _, a := range r.targets {
		_ = a.cs.CloseSend()
	}
	clear(r.targets)
	return nil
}

// oldestOpenLocked returns the oldest live attempt that has not ended, nil
// when none: an attempt whose watcher saw its end is live until the driver
// hears of it, and a commit to it would make its failure, which the next
// hedge may still answer, the stream's.
func (s *retryStream) oldestOpenLocked() *streamAttempt {
	for _, a := range s.race.live {
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

// raceContext is Context before a hedged stream commits: it commits the
// stream to the oldest attempt open (the others are cancelled; the driver
// commits, ask), and returns that attempt's context. With none open it
// returns the call's context and the next attempt to open wins. mu is
// held, and held again on return.
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

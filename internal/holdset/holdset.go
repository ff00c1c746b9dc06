// Package holdset ends at once the waits of retries held in a budget's
// Deferrer when a kill switch turns on (interceptor.SetDisabled, a policy
// file's "disabled"): each wait is held under the owner whose switch ends
// it.
package holdset

import (
	"context"
	"errors"
	"sync"
)

var errSwitchedOff = errors.New("interceptor: stagger switched off")

// Set is the retries held now, each under an owner (the zero O: none). It
// keeps their contexts' cancel functions, not a context of its own, which
// would tie together what a test's synctest bubbles keep apart.
//
// Safe for concurrent use; the zero value is empty and ready.
type Set[O comparable] struct {
	mu sync.Mutex
	m  map[*hold[O]]struct{}
}

type hold[O comparable] struct {
	cancel context.CancelCauseFunc
	owner  O
}

// Hold returns the context a retry of owner's waits in: ctx, ended too by
// End. off says whether a switch that ends it is on; it is read under the
// lock End takes, so a switch turned before Hold is seen by off (the
// context returned has ended) and one turned after, whose End follows,
// finds the hold. stop lets the hold go.
func (s *Set[O]) Hold(ctx context.Context, owner O, off func() bool) (_ context.Context, stop func()) {
	wctx, cancel := context.WithCancelCause(ctx)
	h := &hold[O]{cancel: cancel, owner: owner}
	s.mu.Lock()
	if off() {
		cancel(errSwitchedOff)
	} else {
		if s.m == nil {
			s.m = make(map[*hold[O]]struct{})
		}
		s.m[h] = struct{}{}
	}
	s.mu.Unlock()
	return wctx, func() {
		s.mu.Lock()
		delete(s.m, h)
		s.mu.Unlock()
		cancel(nil)
	}
}

// End ends the waits held under owner, or every one for the zero owner.
func (s *Set[O]) End(owner O) {
	var none O
	s.mu.Lock()
	defer s.mu.Unlock()
	for h := range s.m {
		if owner == none || h.owner == owner {
			h.cancel(errSwitchedOff)
			delete(s.m, h)
		}
	}
}

// Ended reports whether a switch ended ctx, a Hold's.
func Ended(ctx context.Context) bool { return context.Cause(ctx) == errSwitchedOff }

// Package gateview gives the code of this repository what it needs of a
// budget.Gate beyond its public API: the waiter that does not block, for
// the simulator's virtual clock; and a snapshot of the Gate's rules
// (their names, what each says, and the numbers they use), for `stagger
// check` and the interceptors. Package budget sets Hooks in its init; this package
// imports nothing of budget's, so that budget can import it, and its users
// name budget's types as type arguments.
package gateview

import "time"

// Waiter is one deferred retry on a Gate, for code that cannot block (the
// simulator): Poll whenever the gate's Changed channel closes or the time
// Poll returned comes, until Poll admits it (a is not the zero admission)
// or Err reports its wait over, and Leave once. A Waiter belongs to one
// goroutine.
type Waiter[A comparable] interface {
	// Poll asks, now, whether the retry may go. When it may not, next is
	// when asking again could change the answer without news (zero: only
	// news will), or the wait is over (Err).
	Poll() (a A, next time.Time)
	// Err returns why the wait is over without admission (evicted by a
	// more critical retry, or ended by the Gate), nil while it is not.
	Err() error
	// Leave unregisters the waiter; call it once, admitted or not.
	Leave()
}

// Hooks is what package budget offers of its Gate G, for requests R and
// admissions A (budget.Gate, budget.Request, budget.Admission).
type Hooks[G any, R any, A comparable] struct {
	// Enter registers a deferred retry r that must not go sooner than
	// pause from now, of a call whose deadline is deadline (zero: none).
	// It fails with budget.ErrTooManyWaiting when the waiting room is full
	// and no less critical retry waits.
	Enter func(g G, r R, pause time.Duration, deadline time.Time) (Waiter[A], error)
	// Changed returns a channel closed the next time g learns something.
	Changed func(g G) <-chan struct{}
	// MaxWait is how long g holds a call without a deadline.
	MaxWait func(g G) time.Duration
}

// Rule is one of a Gate's rules: its name and what it says, with its
// numbers.
type Rule struct {
	Name, Says string
}

// Rules is a snapshot of a Gate's rules and of the numbers they use. They
// are not settings: a release may retune them.
type Rules struct {
	// Rules in the order the Gate's documentation gives them.
	Rules []Rule
	// OverloadHold is how long a failure for overload, or a slow success,
	// counts as evidence of overload (the overload rule).
	OverloadHold time.Duration
	// LastChanceLead is the least time before the deadline at which a
	// call's last chance goes (the last-chance rule).
	LastChanceLead time.Duration
}

// Set is budget's Hooks[*budget.Gate, budget.Request, budget.Admission],
// set in its init.
var Set any

// Current returns the Gate's rules today; set by budget in its init.
var Current func() Rules

package budget

import (
	"time"

	"github.com/stagger-go/stagger/internal/clock"
	tune "github.com/stagger-go/stagger/internal/gatetune"
)

// decision is what the rules say of one waiting retry at one moment: how it
// goes now (before its guard and the budget are asked), or AdmitNone: with
// end, its wait ends by that rule; with next, when asking again could
// change the answer without news (zero: only news will); heldBy: the wait is
// held from now on, by that rule (the hold rule, or an open guard); own, with AdmitNone,
// the retry's own time (a call held through an outage goes back no sooner
// than backAfter) when it has not come: whatever the pacer says, the retry
// waits for it, so the grant loop keys it by that alone, not by the
// pacer's time that news moves. (In an outage: its pause after the latest
// that reached the backend, or its last chance, when that binds.)
type decision struct {
	how    Admission
	next   time.Time
	own    time.Time
	end    *waitEnd
	heldBy string
}

// decide is the rules' decision for the waiting retry w at now. While its
// guard is open (as it was when last asked) the guard says when the retry
// goes, as the gate's probe once the pacer's lease is free, and the gate
// holds the wait (the guard rule). It changes nothing: the grant loop
// applies it, and asks only once w's pause has passed (its first due is
// the pause's end; the heads hold only those whose pause passed).
func (s *gateState) decide(now time.Time, w *waiterView) decision {
	end, why := s.endAt(now, w)
	if ended(now, end) {
		return decision{end: why}
	}
	if d := s.decideRules(now, w, end); !w.guardOpen || d.how != AdmitNone {
		return d
	}
	if s.pace.leased(now) {
		return decision{next: clock.Earlier(s.pace.until, end), heldBy: heldGuard}
	}
	return decision{how: admitProbe, heldBy: heldGuard}
}

// endAt is when w's wait ends, whatever else happens, and by which rule:
// the end rule, the one piece of arithmetic by which a wait ends (the hold
// rule ends a wait no rule lets go by its own time, holdAt). A wait ends
// once, at the estimate, its turn plus an attempt cannot come before its
// end: its call's deadline, or DeferSettings.MaxWait after it began
// without one (limit; zero: never, a view without either).
//
// With a deadline the turn is now at the latest (in an outage the retry
// has its last chance before the deadline, and the return may come first:
// 3 s down with 1 s deadlines, failing such retries at once lost the calls
// made in the outage's last second), but for a turn that Enter reckoned
// tune.FutileDeadlines of the time its deadline leaves away or more (the
// futility rule: long outages fail fast), and the attempt takes as long
// as its method's attempts lately (Request.Took, or the latest deferred
// retry that succeeded within tune.OverloadHold, when longer): the wait
// ends that long before the deadline (hopeless), or at it when no attempt
// was timed (deadline). Without one the wait is bounded, not its attempt:
// it ends at its limit (max-wait), or at once when its turn, as the
// estimate saw it when it began to wait (turnAt, Enter), comes no sooner
// (futility: Enter turns it away).
//
// A call with a deadline goes as its last chance tune.LastChanceLead
// before its wait ends (decideRules: the end rule's other face), so that
// its turn plus an attempt still fits: the attempt time is the one number
// behind the hopeless end and the last chance.
func (s *gateState) endAt(now time.Time, w *waiterView) (time.Time, *waitEnd) {
	if w.deadline.IsZero() {
		if !w.turnAt.Before(w.limit) && w.since.Before(w.limit) {
			return w.since, errFutile
		}
		return w.limit, errWaitLimit
	}
	if left := w.deadline.Sub(w.since); left > 0 && float64(w.turnAt.Sub(w.since)) >= tune.FutileDeadlines*float64(left) {
		// With a deadline, the turn counts in deadlines: an outage that
		// outlived tune.FutileDeadlines of them fails the call at once.
		return w.since, errFutile
	}
	took := max(w.Took, 0)
	if now.Before(s.ev.okAt.Add(tune.OverloadHold)) {
		took = max(w.Took, s.ev.okTook)
	}
	if took > 0 {
		return w.deadline.Add(-took), errHopeless
	}
	return w.deadline, errDeadline
}

// ended reports whether a wait that ends at end (zero: never) ended by now.
func ended(now, end time.Time) bool { return !end.IsZero() && !now.Before(end) }

// decideRules is the rules' decision for w before its guard's: the heal
// and hold rules, then the release rule while the server serves, the probe
// and last-chance rules while it fails; endAt is when w's wait ends
// (gateState.endAt), its last chance tune.LastChanceLead before.
func (s *gateState) decideRules(now time.Time, w *waiterView, endAt time.Time) decision {
	held, returning := w.heldBy != "", false
	// The heal rule, but during a return: then every waiting retry goes at
	// the return's pace, one that began to wait just before it too (those
	// went at once: a fleet's 20 processes sent 35 in the return's first
	// 100 ms, 1.13-1.21x the capacity; 1.04-1.08x without).
	if !held && s.phase != phaseOutage && s.pace.backAt.IsZero() && s.ev.heals(now, false) {
		return decision{how: admitHeal}
	}
	if !held && !now.Before(w.holdAt) {
		// In an outage or an overload the wait is held. Else the hold
		// rule: a probe, or the end of the wait. A process that no retry
		// told anything probes too, and so does one that does not know
		// yet whether retries heal, one call at a time: else one whose
		// budget refuses its retries never learns that they heal (issue
		// 62's quiet process).
		free := s.phase != phaseOutage && !s.ev.overloaded(now)
		if free && !s.ev.seen && now.Before(s.ev.retryOut) {
			// A paid retry is out: wait for what it tells.
			return decision{next: clock.Earlier(s.ev.retryOut, endAt)}
		}
		// A retry that failed after its call's first attempt did is the
		// evidence of an outage: a learning retry with attempts left
		// after it waits, held, until the backend gave no news for a
		// while (the probe rule below: the new calls' first attempts are the
		// probes meanwhile); a call's last attempt learns at once, its
		// outcome settling the call (else a fleet of quiet processes pays
		// a learning call's every attempt each: BENCHMARKS.md, A fleet of
		// any size). It may go as the probe that learns whether
		// retries heal while the process does not know yet and no other
		// call is learning (or it goes on with the one that is).
		learning := free && !s.ev.seen && !s.ev.untold(now) && !s.ev.known() && (s.ev.learnNext == 0 || s.ev.hasTurn(w.Number, w.Call) || !now.Before(s.ev.learnUntil))
		if held = !free || learning && !w.Last; !held {
			learn := s.ev.seen || s.ev.untold(now) || learning
			switch wait := w.holdAt.Add(tune.Calm); {
			case learn && !s.pace.leased(now):
				return decision{how: admitProbe}
			case w.since.Before(s.pace.backAt):
				// It began to wait in the outage, whose return is under
				// way: held through it, it goes back at the return's
				// pace, the estimate then, as the release rule below
				// says, and its wait ends by the end rule alone, at its
				// deadline or, without one, its MaxWait (ended at its
				// hold time while the lease was out, a call made in the
				// outage's last moments lost the time it had left: lab
				// ledger replay).
				held, returning = true, true
			case !w.deadline.IsZero() && !s.ev.seen && s.ev.learnNext != 0 && now.Before(s.ev.learnUntil) && now.Before(wait):
				// Another call is learning: a call with a deadline waits
				// for what it tells as long as for a paid retry's answer
				// (lab flaky-quiet: a call's second attempt ended just
				// before the learning call's third was served, in 1 run
				// of 3).
				return decision{next: clock.Earlier(wait, endAt)}
			default:
				return decision{end: errWaitEnded}
			}
		}
	}
	var d decision
	if held && w.heldBy == "" {
		d.heldBy = heldOverload
		if s.phase.failing() && !s.ev.overloaded(now) || s.phase == phaseOutage || returning {
			d.heldBy = heldOutage
		}
	}
	// The release rule while the server serves, the probe and last-chance
	// rules while it fails: how w goes once due comes, and own, w's own
	// time that has not come (its back time after an outage; zero: none).
	how, due, own := AdmitNone, time.Time{}, time.Time{}
	switch {
	case !s.phase.failing():
		how, due = admitRelease, s.pace.next
		// Held through the outage: held before the return, or held by
		// the outage rule once its hold time came after the return
		// began (the hold rule above; one held at the return's very
		// moment went at the pace, and still does).
		backAt := s.pace.backAt
		if held && (w.holdAt.Before(backAt) || w.since.Before(backAt) && w.holdAt.After(backAt) && (returning || w.heldBy == heldOutage)) {
			if back := s.pace.backAfter(w, endAt.Add(-tune.LastChanceLead)); now.Before(back) {
				own, due = back, clock.Later(due, back)
			}
		}
	case s.pace.leased(now):
		due = s.pace.until // the settling rule
	case w.lone:
		how = admitProbe // the futility rule's lone probe
	default:
		// Until retries are known to heal or not, a failed first attempt
		// says nothing: only retries' own outcomes space the probes, and
		// only a call's last attempt probes (its outcome settles the
		// call), or any retry while none has told anything yet.
		reached, known := s.lastReached, s.ev.known()
		if !known {
			reached = s.ev.lastRetry
		}
		// mine: when w's own part of due (its pause after the latest that
		// reached the backend, its last chance) comes; the rest is the
		// pacer's (the probe gap), shared by every waiter. In an outage,
		// until mine, w is held back by itself: own (the grant loop puts
		// such waiters back in the heads when the outage begins or ends).
		var mine time.Time
		if known && (!w.Last || w.deadline.IsZero()) || !known && (w.Last || s.ev.untold(now)) {
			how, due, mine = admitProbe, reached.Add(max(w.pause, s.pace.gap)), reached.Add(w.pause)
		} else if !known && held {
			// With no news the estimate goes back to unknown: once nothing
			// reached the backend for the probe gap and tune.QuietLulls
			// times the latest interval between its answers, any held retry goes
			// to learn, one at a time (a burst that ended the load left held
			// retries no success would ever release; one not held goes by
			// the hold rule).
			quiet := max(s.pace.gap, tune.QuietLulls*s.lull)
			if !s.ev.seen && !s.ev.overloaded(now) {
				// A learning retry held by the hold rule: a backend never
				// seen to serve, whose retry failed, is quiet once no new
				// call brought news for the longest probe gap they stretch
				// (the learning call's own failed probes do not stretch it:
				// it goes on one attempt at a time within its wait).
				quiet = tune.QuietGapMax
			}
			how, due, mine = admitProbe, s.lastReached.Add(max(w.pause, quiet)), s.lastReached.Add(w.pause)
		}
		if !w.deadline.IsZero() {
			lastMine := clock.Later(endAt.Add(-tune.LastChanceLead), reached.Add(w.pause))
			last := clock.Later(lastMine, s.pace.failedAt.Add(s.pace.gap))
			if s.phase == phaseOutage && !s.pace.failedAt.Before(s.streakAt) {
				// A last chance is a probe: once one failed in this outage,
				// the next waits for the probe gap after the latest that
				// reached the backend too, so a long outage's failed calls
				// retry one at a time between the new calls' failures, not
				// each at its deadline (the first still goes: until a retry
				// fails in it, failed first attempts say nothing of retries).
				last = clock.Later(last, reached.Add(s.pace.gap))
			}
			if how == AdmitNone || last.Before(due) {
				how, due, mine = admitLast, last, lastMine
			}
		}
		if s.phase == phaseOutage && now.Before(mine) {
			// Within the outage nothing brings due sooner (the latest that
			// reached the backend and the gap only grow): due is w's own.
			own = due
		}
	}
	if how != AdmitNone && !now.Before(due) {
		d.how = how
		return d
	}
	// It waits, until the earliest of due (the rules set one with a way to
	// go, or the settling rule's, not come yet; zero: none), its hold time
	// unless held, and its end.
	d.next, d.own = due, own
	if !held {
		d.next = clock.Earlier(d.next, w.holdAt)
	}
	d.next = clock.Earlier(d.next, endAt)
	return d
}

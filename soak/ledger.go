package soak

import (
	"fmt"
	"strings"
	"sync"
	"time"
)

// history keeps the latest lines of what happened (calls that ended badly,
// faults, checks), to print around the first broken invariant.
type history struct {
	mu    sync.Mutex
	start time.Time
	lines []string
	next  int
	full  bool
}

func newHistory(start time.Time) *history {
	return &history{start: start, lines: make([]string, historyLines)}
}

func (h *history) addf(format string, args ...any) {
	line := fmt.Sprintf("%9.3fs ", time.Since(h.start).Seconds()) + fmt.Sprintf(format, args...)
	h.mu.Lock()
	h.lines[h.next] = line
	h.next = (h.next + 1) % len(h.lines)
	h.full = h.full || h.next == 0
	h.mu.Unlock()
}

// String returns the lines kept, oldest first.
func (h *history) String() string {
	h.mu.Lock()
	defer h.mu.Unlock()
	var b strings.Builder
	if h.full {
		for _, l := range h.lines[h.next:] {
			b.WriteString(l + "\n")
		}
	}
	for _, l := range h.lines[:h.next] {
		b.WriteString(l + "\n")
	}
	return b.String()
}

// write is one keyed write as the ledger knows it.
type write struct {
	applied int  // runs of the handler that finished (the servers' side)
	ended   bool // the call ended
	ok      bool // and was acknowledged OK
}

// ledger is the servers' record of the keyed writes they applied, checked
// against the calls' outcomes: a write applied twice, or acknowledged OK
// and never applied, breaks an invariant. A write is registered when its
// call starts and forgotten ledgerHorizon after it ended, in two
// generations, so the ledger's size follows the load, not the run's
// length.
type ledger struct {
	mu          sync.Mutex
	cur, prev   map[uint64]*write
	rotated     time.Time
	applies     uint64
	dup, lost   uint64
	onViolation func(string)
}

func newLedger(now time.Time, onViolation func(string)) *ledger {
	return &ledger{cur: map[uint64]*write{}, prev: map[uint64]*write{}, rotated: now, onViolation: onViolation}
}

func (l *ledger) findLocked(id uint64) *write {
	if w := l.cur[id]; w != nil {
		return w
	}
	return l.prev[id]
}

// register records a write whose call starts.
func (l *ledger) register(id uint64) {
	l.mu.Lock()
	l.cur[id] = &write{}
	l.mu.Unlock()
}

// apply records that a server ran the write's handler to the end.
func (l *ledger) apply(id uint64) {
	l.mu.Lock()
	l.applies++
	w := l.findLocked(id)
	var msg string
	switch {
	case w == nil:
		l.dup++
		msg = fmt.Sprintf("write %d applied %s after its call ended: run twice, or never registered", id, ledgerHorizon)
	case w.applied > 0:
		w.applied++
		l.dup++
		msg = fmt.Sprintf("write %d applied %d times (ended %v, ok %v)", id, w.applied, w.ended, w.ok)
	default:
		w.applied++
	}
	l.mu.Unlock()
	if msg != "" {
		l.onViolation(msg)
	}
}

// end records how a write's call ended; every handler run that made it OK
// has returned before the reply left the server, so an OK write not yet
// applied is lost.
func (l *ledger) end(id uint64, ok bool, now time.Time) {
	l.mu.Lock()
	w := l.findLocked(id)
	var msg string
	switch {
	case w == nil:
		msg = fmt.Sprintf("write %d ended but was never registered", id)
	case w.ended:
		msg = fmt.Sprintf("write %d ended twice", id)
	default:
		w.ended, w.ok = true, ok
		if ok && w.applied == 0 {
			l.lost++
			msg = fmt.Sprintf("write %d acknowledged OK but never applied", id)
		}
	}
	if now.Sub(l.rotated) >= ledgerHorizon {
		l.rotateLocked(now)
	}
	l.mu.Unlock()
	if msg != "" {
		l.onViolation(msg)
	}
}

// rotateLocked forgets the older generation: its writes all ended at least
// ledgerHorizon ago (a write still running is carried over).
func (l *ledger) rotateLocked(now time.Time) {
	next := make(map[uint64]*write, len(l.cur))
	for id, w := range l.prev {
		if !w.ended {
			next[id] = w
		}
	}
	l.prev, l.cur, l.rotated = l.cur, next, now
}

// settle forgets, with no call running, every write that ended at least
// ledgerHorizon ago: two rotations, at now, which must be ledgerHorizon
// or more after the last call ended. What the ledger keeps then does not
// depend on the throughput before (it held 10 to 20 s of writes, a few
// hundred kilobytes that followed the machine's speed), so that two
// measures of the heap compare what the fleet keeps.
func (l *ledger) settle(now time.Time) {
	l.mu.Lock()
	l.rotateLocked(now)
	l.rotateLocked(now)
	l.mu.Unlock()
}

// size is the writes the ledger keeps.
func (l *ledger) size() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.cur) + len(l.prev)
}

// counts returns the applies, the writes run twice and those lost.
func (l *ledger) counts() (applies, dup, lost uint64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.applies, l.dup, l.lost
}

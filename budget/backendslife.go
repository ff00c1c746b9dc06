package budget

import (
	"sort"
	"time"
)

// The life of a Backends' keys (Backends says the rules).
const (
	// backendsCap and backendMethodsCap: not measured: chosen so that a
	// service calling hundreds of backends with dozens of methods each
	// stays exact; what they cost in memory is in BENCHMARKS.md ("Issue
	// 56: per-backend state").
	backendsCap       = 1024
	backendMethodsCap = 256
	// backendIdle: past the longest evidence a Gate keeps and the
	// deadlines of the calls it judges, short enough that pod addresses
	// that came and went leave minutes' worth of state.
	backendIdle = 5 * time.Minute
	// backendsSweepEvery: a key is forgotten at most a tenth late, and the
	// walk over every key runs at most twice a minute.
	backendsSweepEvery = backendIdle / 10
	// backendsEpochMin: an epoch lasts at least this long, so that
	// epochsKept of them span more than backendIdle and two sweeps: a key
	// idle that long is still timed by its own epoch, however often keys
	// are added (with an epoch per add, a client dialling a new pod
	// address every second pushed its idle keys' uses forward for ever,
	// and only the cap forgot them).
	backendsEpochMin = backendIdle / 50
	// backendsMaxWaiting: the set's bound of waiting calls (when
	// MaxWaiting is lower): four default rooms, so that a few backends
	// down at once each keep a full room.
	backendsMaxWaiting = 4 * defaultMaxWaiting
)

// sweeper forgets a set's idle keys on time: one timer per set, armed
// while the set holds a key, that ticks the set's epoch and sweeps every
// backendsSweepEvery. Without it a set that no call adds to and no
// metrics reader reads (States) would keep its idle keys, and what they
// hold, for as long as the process runs. Under Backends.mu.
type sweeper struct {
	timer *time.Timer
	armed bool
}

// armSweep arms the set's sweep timer, if it holds a key and the timer is
// not armed: called after a key is added.
func (bs *Backends) armSweep() {
	bs.mu.Lock()
	bs.armSweepLocked()
	bs.mu.Unlock()
}

func (bs *Backends) armSweepLocked() {
	if bs.sweep.armed || bs.ntargets == 0 {
		return
	}
	bs.sweep.armed = true
	if bs.sweep.timer == nil {
		bs.sweep.timer = time.AfterFunc(backendsSweepEvery, bs.sweepOnTime)
		return
	}
	bs.sweep.timer.Reset(backendsSweepEvery)
}

// sweepOnTime is the timer's: it begins an epoch, so that the uses since
// the last are timed, forgets what is idle, and arms the timer again
// while a key is left. The time is the set's clock's (WithClock): on a
// virtual clock the sweeps run every backendsSweepEvery of real time, at
// the virtual time they find.
func (bs *Backends) sweepOnTime() {
	now := bs.now()
	bs.mu.Lock()
	defer bs.mu.Unlock()
	bs.sweep.armed = false
	bs.tickLocked(now)
	bs.sweepLocked(now)
	bs.armSweepLocked()
}

// epochsKept is how many epochs' starts a Backends keeps: a use in an
// older epoch counts as one in the oldest kept (later, so never forgotten
// sooner). An epoch lasts at least backendsEpochMin, so 64 of them span
// 6.4 minutes, past backendIdle and the sweeps' lag, for 1.5 KiB.
const epochsKept = 64

// tickLocked begins an epoch at now, if backendsEpochMin passed since the
// latest began. Under mu.
func (bs *Backends) tickLocked(now time.Time) {
	e := bs.epoch.Load()
	if now.Sub(bs.starts[e%epochsKept]) < backendsEpochMin {
		return
	}
	bs.starts[(e+1)%epochsKept] = now
	bs.epoch.Store(e + 1)
}

// lastUseLocked returns a time no earlier than s's latest use: the start
// of the epoch after the one it was used in (now for the latest). Under
// mu, after tickLocked(now).
func (bs *Backends) lastUseLocked(s *Slot, now time.Time) time.Time {
	cur, e := bs.epoch.Load(), s.epoch.Load()
	if e == cur {
		return now
	}
	next := e + 1
	if cur-next >= epochsKept {
		next = cur - epochsKept + 1
	}
	return bs.starts[next%epochsKept]
}

// idleLocked reports whether s was unused for backendIdle at now.
func (bs *Backends) idleLocked(s *Slot, now time.Time) bool {
	return now.Sub(bs.lastUseLocked(s, now)) >= backendIdle
}

// sweepLocked forgets the keys idle at now, but those a call waits on.
func (bs *Backends) sweepLocked(now time.Time) {
	bs.swept = now
	var forget []string
	bs.targets.each(func(t string, b *backend) {
		if bs.defers {
			var methods []string
			for m, s := range b.methods.snapshot() {
				if bs.idleLocked(s, now) && s.waitedOn() == 0 {
					methods = append(methods, m)
				}
			}
			b.forgetLocked(methods...)
		}
		if bs.idleLocked(&b.tokens, now) && b.room.waiting() == 0 {
			forget = append(forget, t)
		}
	})
	bs.forgetTargetsLocked(forget...)
}

// forgetLRUTargetsLocked forgets the least recently used sixteenth of the
// targets that nobody waits on, to make room for new ones: a sixteenth,
// so that the walk over all of them is made once per 64 new targets at
// the cap.
func (bs *Backends) forgetLRUTargetsLocked(now time.Time) {
	var all []lastUse
	bs.targets.each(func(t string, b *backend) {
		if b.room.waiting() == 0 {
			all = append(all, lastUse{t, bs.lastUseLocked(&b.tokens, now)})
		}
	})
	bs.forgetTargetsLocked(leastRecent(all, backendsCap/16)...)
}

// forgetLRUMethodsLocked is forgetLRUTargetsLocked for b's methods.
func (bs *Backends) forgetLRUMethodsLocked(b *backend, now time.Time) {
	var all []lastUse
	for m, s := range b.methods.snapshot() {
		if s.waitedOn() == 0 {
			all = append(all, lastUse{m, bs.lastUseLocked(s, now)})
		}
	}
	b.forgetLocked(leastRecent(all, backendMethodsCap/16)...)
}

// lastUse is a key and the time of its latest use (lastUseLocked).
type lastUse struct {
	key string
	at  time.Time
}

// leastRecent returns the n keys of all used least recently.
func leastRecent(all []lastUse, n int) []string {
	sort.Slice(all, func(i, j int) bool { return all[i].at.Before(all[j].at) })
	out := make([]string, 0, n)
	for i := 0; i < n && i < len(all); i++ {
		out = append(out, all[i].key)
	}
	return out
}

// forgetTargetsLocked forgets the targets named, and their methods.
func (bs *Backends) forgetTargetsLocked(names ...string) {
	byShard := map[*keyed[*backend]][]string{}
	for _, t := range names {
		sh := bs.targets.shard(t)
		b, _ := sh.load(t)
		byShard[sh] = append(byShard[sh], t)
		bs.ntargets--
		b.tokens.gone.Store(true)
		for _, s := range b.methods.snapshot() {
			s.gone.Store(true)
		}
	}
	for sh, names := range byShard {
		sh.remove(names...)
	}
}

// forgetLocked forgets b's methods named. Under Backends.mu.
func (b *backend) forgetLocked(names ...string) {
	for _, m := range names {
		if s, ok := b.methods.load(m); ok {
			s.gone.Store(true)
		}
	}
	b.methods.remove(names...)
}

// waitedOn returns how many calls wait on s's Gate.
func (s *Slot) waitedOn() int {
	if g, ok := s.b.(*Gate); ok {
		return g.State().Waiting
	}
	return 0
}

package soak

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"time"
)

// checkPending checks the calls that returned before horizon: each ended
// exactly once for the interceptor.
func (r *run) checkPending(horizon time.Time) {
	r.pendMu.Lock()
	var due []pendingCall
	i := 0
	for ; i < len(r.pending) && r.pending[i].at.Before(horizon); i++ {
	}
	due, r.pending = r.pending[:i], append([]pendingCall(nil), r.pending[i:]...)
	r.pendMu.Unlock()
	for _, c := range due {
		switch n := c.track.ends.Load(); {
		case n == 0:
			r.fail(c.what + ": the call returned, and never ended (no EventEnd)")
		case n > 1:
			r.fail(fmt.Sprintf("%s: ended %d times (EventEnd)", c.what, n))
		}
	}
}

// watch checks the running invariants every watchEvery until done: every
// Gate's waiting count within [0, MaxWaiting], the calls' ends.
func (r *run) watch(procs []*process, done <-chan struct{}) {
	t := time.NewTicker(watchEvery)
	defer t.Stop()
	for {
		select {
		case <-done:
			return
		case <-t.C:
		}
		r.watchRound(procs)
	}
}

// watchRound is one round of watch's checks, under watchMu.
func (r *run) watchRound(procs []*process) {
	r.watchMu.Lock()
	defer r.watchMu.Unlock()
	for _, p := range procs {
		for _, st := range p.budgets.States() {
			if st.Waiting < 0 || st.Waiting > p.room {
				r.fail(fmt.Sprintf("%s: the Gate of %s %s counts %d calls waiting (bounds 0 and %d)", p.kind.name, st.Target, st.Method, st.Waiting, p.room))
			}
		}
	}
	r.watchPods(r.pods)
	// A stream's EventEnd may come just after its last message:
	// calls are judged a second after they returned.
	r.checkPending(time.Now().Add(-time.Second))
}

// settled checks, after the load stopped and the tail's probes
// (probeBreakers), that nothing is held: no call waiting in a Gate, every
// breaker closed.
func (r *run) settled(procs []*process) {
	for _, p := range append(procs[:len(procs):len(procs)], &r.pods.proc) {
		if st := p.gates(); st.Waiting != 0 {
			r.fail(fmt.Sprintf("%s: after the load stopped, the Gate counts %d calls waiting, want 0 (deferred %d, admitted %d, gave up %d)",
				p.kind.name, st.Waiting, st.Deferred, st.DeferAdmitted, st.DeferGaveUp))
		}
		for _, key := range p.openBreakers() {
			r.fail(fmt.Sprintf("%s: breaker %s after the calm tail and its probes, want closed", p.kind.name, key))
		}
	}
}

// heapInUse is the heap's live bytes while no call is in flight: the
// least of heapSamples samples, heapSampleGap apart, each after two
// collections (the first frees what the finalizers of the last cycle
// let go). With a profile path (a Config.ProfileDir) it writes the
// heap's profile there too.
func heapInUse(ctx context.Context, profile string) uint64 {
	var least uint64
	for i := range heapSamples {
		if i > 0 {
			sleep(ctx, heapSampleGap)
		}
		runtime.GC()
		runtime.GC()
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		if i == 0 || m.HeapAlloc < least {
			least = m.HeapAlloc
		}
	}
	if filepath.IsAbs(profile) {
		if f, err := os.Create(profile); err == nil {
			_ = pprof.WriteHeapProfile(f)
			_ = f.Close()
		}
	}
	return least
}

// settleGoroutines waits up to ten seconds for the goroutines to fall to
// before and goroutineSlack, and returns how many there are.
func settleGoroutines(before int) int {
	n := runtime.NumGoroutine()
	for end := time.Now().Add(10 * time.Second); n > before+goroutineSlack && time.Now().Before(end); n = runtime.NumGoroutine() {
		time.Sleep(20 * time.Millisecond)
	}
	return n
}

package soak

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"path/filepath"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/stagger-go/stagger/criticality"
	"github.com/stagger-go/stagger/interceptor"
	"github.com/stagger-go/stagger/server"
	"github.com/stagger-go/stagger/server/redisstore"
)

// Config is a soak's length, seed and where it works.
type Config struct {
	// Duration is how long faults are injected under load; a calm tail
	// follows (calmTail) before the final checks.
	Duration time.Duration
	// Seed draws the workload and the faults.
	Seed uint64
	// Dir holds the Redis store's files; "" runs without Redis.
	Dir string
	// Log gets the progress lines (nil: none).
	Log io.Writer
	// ProfileDir, when set (an absolute path), gets the heap's profile at
	// half time and at the end (heap-1.pprof, heap-2.pprof), for `go tool
	// pprof -base`.
	ProfileDir string
}

// Result is what a soak counted, and the first invariant it found broken.
type Result struct {
	Calls, OK, Dup, Lost              uint64
	Applied                           uint64
	GoroutinesBefore, GoroutinesAfter int
	HeapHalf, HeapEnd                 uint64 // bytes in use after a GC, no call in flight
	// NotClosed lists the breakers that were not closed when the load
	// stopped, which the tail's probes (probeBreakers) then closed.
	NotClosed []string
	Redis     bool
	Faults    map[string]int
	// Gates says, per client process, how many retries waited in its
	// Gates and how their waits ended.
	Gates []string
	// Down says, per backend (the replicas, payments), the calls made and
	// the attempts it received while it was down past every deadline.
	Down []string
	// Pods says how many targets the pods client dialled, and the most
	// its budgets held at once.
	Pods    string
	Seed    uint64
	Elapsed time.Duration
	// Broken is the first invariant broken ("" when none), and History
	// the lines before it.
	Broken, History string
}

// Summary is the one-line summary of the run.
func (r *Result) Summary() string {
	return fmt.Sprintf("soak: %d calls, %d run twice, %d lost, goroutines %d->%d, heap %.1f->%.1f MB, seed %d",
		r.Calls, r.Dup, r.Lost, r.GoroutinesBefore, r.GoroutinesAfter, mb(r.HeapHalf), mb(r.HeapEnd), r.Seed)
}

func mb(b uint64) float64 { return float64(b) / (1 << 20) }

// run is one soak under way.
type run struct {
	cfg   Config
	start time.Time
	hist  *history
	led   *ledger
	stop  context.CancelFunc // stops the load and the faults

	brokenOnce sync.Once
	broken     atomic.Pointer[string]

	// repDown and pay.down count the calls and attempts while a backend
	// is down past every deadline (the replicas in a long outage; payments).
	repDown *downLedger
	pay     *payments
	pods    *pods

	// watchMu is held by each round of the running checks (watch) and
	// while the heap is measured: a round's copies of every Gate's state
	// (a thousand pods' targets) are not counted as what the fleet keeps.
	watchMu sync.Mutex

	calls, ok  atomic.Uint64
	redisLines atomic.Uint64
	nextID     atomic.Uint64
	pendMu     sync.Mutex
	pending    []pendingCall
}

// pendingCall is a call that returned, whose EventEnd count is checked
// once a stream's end has had time to reach the hook.
type pendingCall struct {
	track *callTrack
	at    time.Time
	what  string
}

// fail records the first broken invariant and stops the run.
func (r *run) fail(msg string) {
	r.brokenOnce.Do(func() {
		r.hist.addf("BROKEN: %s", msg)
		r.broken.Store(&msg)
		r.logf("soak: invariant broken: %s", msg)
		r.stop()
	})
}

func (r *run) logf(format string, args ...any) {
	if r.cfg.Log != nil {
		fmt.Fprintf(r.cfg.Log, format+"\n", args...)
	}
}

// Run runs a soak (see the package documentation) and returns what it
// found; err is for a soak that could not run (a replica or Redis that
// would not start), not for a broken invariant (Result.Broken).
func Run(cfg Config) (res *Result, err error) {
	res = &Result{Seed: cfg.Seed, Faults: map[string]int{}}
	runtime.GC()
	res.GoroutinesBefore = runtime.NumGoroutine()
	r := &run{cfg: cfg, start: time.Now()}
	r.hist = newHistory(r.start)
	r.led = newLedger(r.start, r.fail)
	r.logf("soak: seed %d, %s of faults (replay: SOAK_SEED=%d)", cfg.Seed, cfg.Duration, cfg.Seed)

	mem, err := server.NewMemoryStore(server.MemoryOptions{MaxEntries: memStoreEntries})
	if err != nil {
		return nil, err
	}
	var rp *redisProcess
	var redisStore server.Store
	var rc *redis.Client
	if cfg.Dir != "" {
		var found bool
		rp, found, err = startRedis(cfg.Dir)
		if err != nil {
			return nil, err
		}
		if found {
			defer rp.kill()
			redis.SetLogger(redisLog{&r.redisLines}) // go-redis has one logger per process
			rc = redis.NewClient(&redis.Options{Addr: rp.addr, MaxRetries: -1, DialTimeout: 200 * time.Millisecond,
				ReadTimeout: 500 * time.Millisecond, WriteTimeout: 500 * time.Millisecond, PoolSize: redisPoolSize})
			defer rc.Close()
			if redisStore, err = redisstore.New(rc, redisstore.Options{}); err != nil {
				return nil, err
			}
			res.Redis = true
		}
	}

	var reps []*replica
	defer func() {
		for _, x := range reps {
			x.ts.Close()
		}
	}()
	r.repDown = &downLedger{name: "replicas"}
	if r.pay, err = newPayments(cfg.Seed, r.hist); err != nil {
		return nil, err
	}
	defer func() {
		if r.pay != nil {
			r.pay.ts.Close()
		}
	}()
	var addrs []string
	for i := range replicas {
		x, err := newReplica(i, cfg.Seed, mem, redisStore, r.led, r.hist, r.repDown)
		if err != nil {
			return nil, err
		}
		reps = append(reps, x)
		addrs = append(addrs, x.ts.Addr())
	}

	var procs []*process
	defer func() {
		for _, p := range procs {
			p.close()
		}
	}()
	for i, k := range kinds {
		p, err := dialProcess(i, k, addrs, r.pay.ts.Addr(), r.hook)
		if err != nil {
			return nil, err
		}
		procs = append(procs, p)
	}

	if r.pods, err = newPods(addrs, cfg.Duration, r.hook); err != nil {
		return nil, err
	}
	podRng := rand.New(rand.NewPCG(cfg.Seed, 0x90d5))

	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	r.stop = stop

	// Every caller keeps its random source across the pause at half time.
	var rngs [][]*rand.Rand
	for pi, p := range procs {
		callers := workersPerProcess
		switch {
		case p.kind.churn:
			callers = churnCallers
		case p.kind.crowd:
			callers = crowdCallers
		}
		var rs []*rand.Rand
		for w := range callers + paymentsCallers {
			rs = append(rs, rand.New(rand.NewPCG(cfg.Seed, uint64(pi*1000+w+1))))
		}
		rngs = append(rngs, rs)
	}
	var load sync.WaitGroup
	startLoad := func() context.CancelFunc {
		loadCtx, stopLoad := context.WithCancel(ctx)
		for pi, p := range procs {
			for i, rng := range rngs[pi] {
				load.Add(1)
				if i < paymentsCallers {
					go func() { defer load.Done(); r.payWork(loadCtx, p, rng) }()
					continue
				}
				go func() { defer load.Done(); r.work(loadCtx, p, rng, res.Redis) }()
			}
		}
		load.Add(1)
		go func() { defer load.Done(); r.podWork(loadCtx, r.pods, podRng) }()
		return stopLoad
	}
	stopLoad := startLoad()
	defer func() { stopLoad(); load.Wait() }()
	watchDone := make(chan struct{})
	var watch sync.WaitGroup
	watch.Add(1)
	go func() { defer watch.Done(); r.watch(procs, watchDone) }()

	// Faults for half the time, a calm window, the other half, a calm
	// tail: the load stops at the end of each calm and the heap is
	// measured with no call in flight (heapInUse), so that the two
	// measures see the same state: what the fleet keeps between calls.
	in := &injector{rng: rand.New(rand.NewPCG(cfg.Seed, 0xfa17)), replicas: reps, redis: rp, hist: r.hist, fail: r.fail, down: r.repDown}
	for half, d := range []time.Duration{cfg.Duration / 2, cfg.Duration - cfg.Duration/2} {
		faultCtx, stopFaults := context.WithTimeout(ctx, d)
		var payFaults sync.WaitGroup
		payFaults.Add(1)
		go r.pay.run(faultCtx, &payFaults)
		in.run(faultCtx)
		payFaults.Wait()
		stopFaults()
		r.hist.addf("faults paused; calm for %s", calmTail)
		sleep(ctx, calmTail)
		stopLoad()
		load.Wait()
		r.hist.addf("load stopped")
		if cfg.Duration >= heapMinRun {
			// The heap is judged: the ledger first forgets what it keeps
			// for the writes that ended (settle).
			sleep(ctx, ledgerHorizon)
			r.led.settle(time.Now())
		}
		r.watchMu.Lock()
		heap := heapInUse(ctx, filepath.Join(cfg.ProfileDir, fmt.Sprintf("heap-%d.pprof", half+1)))
		r.watchMu.Unlock()
		if half == 0 {
			res.HeapHalf = heap
			r.logf("soak: half time: %d calls, heap %.1f MB, goroutines %d", r.calls.Load(), mb(heap), runtime.NumGoroutine())
			if ctx.Err() == nil {
				stopLoad = startLoad()
				r.hist.addf("load resumed")
			}
		} else {
			res.HeapEnd = heap
		}
	}
	if r.broken.Load() == nil {
		res.NotClosed = r.probeBreakers(ctx, procs, res.Redis)
	}
	close(watchDone)
	watch.Wait()
	for f, n := range in.counts {
		res.Faults[fault(f).String()] = n
	}
	res.Faults["payments-outage"], res.Faults["payments-flaky"] = r.pay.outages, r.pay.flaky
	for _, d := range []*downLedger{r.repDown, r.pay.down} {
		res.Down = append(res.Down, d.String())
		d.check(r.fail)
	}

	for _, p := range append(procs[:len(procs):len(procs)], &r.pods.proc) {
		st := p.gates()
		res.Gates = append(res.Gates, fmt.Sprintf("%s: %d deferred, %d admitted, %d gave up", p.kind.name, st.Deferred, st.DeferAdmitted, st.DeferGaveUp))
	}
	res.Pods = r.pods.String()
	if r.broken.Load() == nil {
		r.settled(procs)
		// The watch judges a call a second after it returned: a stream's
		// EventEnd may come just after its last message.
		time.Sleep(time.Second)
	}
	r.checkPending(time.Now().Add(time.Hour))

	// Tear down, then count the goroutines left.
	for _, p := range procs {
		p.close()
	}
	procs = nil
	for _, x := range reps {
		x.ts.Close()
	}
	reps = nil
	r.pay.ts.Close()
	r.pay = nil
	if rc != nil {
		_ = rc.Close()
		rc = nil
	}
	res.GoroutinesAfter = settleGoroutines(res.GoroutinesBefore)
	if r.broken.Load() == nil && res.GoroutinesAfter > res.GoroutinesBefore+goroutineSlack {
		r.fail(fmt.Sprintf("goroutines %d after the run, %d before: more than %d left behind", res.GoroutinesAfter, res.GoroutinesBefore, goroutineSlack))
	}
	if r.broken.Load() == nil && cfg.Duration >= heapMinRun && res.HeapHalf > 0 &&
		float64(res.HeapEnd) > float64(res.HeapHalf)*(1+heapGrowth) {
		r.fail(fmt.Sprintf("heap grew from %.1f MB at half time to %.1f MB at the end: more than %.0f %%", mb(res.HeapHalf), mb(res.HeapEnd), 100*heapGrowth))
	}

	res.Calls, res.OK = r.calls.Load(), r.ok.Load()
	res.Applied, res.Dup, res.Lost = r.led.counts()
	res.Elapsed = time.Since(r.start)
	if b := r.broken.Load(); b != nil {
		res.Broken, res.History = *b, r.hist.String()
	}
	return res, nil
}

// work makes calls until loadCtx ends; a share of its callers give up
// early (cancel). A crowd's caller fans each request out into
// crowdFanOut calls under one deadline and one cancel; the churn
// process's, into churnFanOut Gets, cancelled when one of their retries
// is deferred (givingUp).
func (r *run) work(loadCtx context.Context, p *process, rng *rand.Rand, redis bool) {
	shortest, longest, cancels, fan, patience := callTimeoutMin, callTimeoutMax, cancelShare, 1, callTimeoutMax
	switch {
	case p.kind.churn:
		shortest, longest, cancels, fan = churnTimeoutMin, churnTimeoutMax, 0, churnFanOut
	case p.kind.crowd:
		longest, cancels, fan, patience = crowdTimeoutMax, crowdCancelShare, crowdFanOut, crowdPatience
	}
	var calls sync.WaitGroup
	for loadCtx.Err() == nil {
		timeout := shortest + time.Duration(rng.Int64N(int64(longest-shortest)))
		ctx, cancel := context.WithTimeout(context.WithoutCancel(loadCtx), timeout)
		var t *time.Timer
		if rng.Float64() < cancels {
			t = time.AfterFunc(time.Duration(rng.Int64N(int64(min(timeout, patience)))), cancel)
		}
		var gu *givingUp
		churnOp := opGet
		if p.kind.churn {
			gu = &givingUp{cancel: cancel}
			if rng.Float64() >= churnCancelAtOnce {
				gu.after = time.Duration(rng.Int64N(int64(churnPatience)))
			}
			ctx = context.WithValue(ctx, givingUpKey{}, gu)
			if rng.Float64() < churnFailShare {
				// Every call of the request fails at once: their retries
				// reach the Gate together.
				churnOp = opGetFailing
			}
		}
		for i := range fan {
			o := pickOp(rng, redis)
			if p.kind.churn {
				o = churnOp
			}
			crit := criticality.Levels()[rng.IntN(criticality.NumLevels)]
			if i == fan-1 {
				r.one(ctx, p, o, crit)
				break
			}
			calls.Add(1)
			go func() { defer calls.Done(); r.one(ctx, p, o, crit) }()
		}
		calls.Wait()
		if t != nil {
			t.Stop()
		}
		gu.stop()
		cancel()
	}
}

// payWork calls payments until loadCtx ends, one call every paymentsEvery
// (or back to back, when a call takes longer), each with a random deadline
// and criticality.
func (r *run) payWork(loadCtx context.Context, p *process, rng *rand.Rand) {
	for loadCtx.Err() == nil {
		start := time.Now()
		timeout := callTimeoutMin + time.Duration(rng.Int64N(int64(callTimeoutMax-callTimeoutMin)))
		ctx, cancel := context.WithTimeout(context.WithoutCancel(loadCtx), timeout)
		r.one(ctx, p, opPayments, criticality.Levels()[rng.IntN(criticality.NumLevels)])
		cancel()
		sleep(loadCtx, paymentsEvery-time.Since(start))
	}
}

// givingUp is how a churn request's caller gives up: when the first of
// its calls' retries is deferred (the hook's deferred), at once or after
// a moment within churnPatience. At once, the caller cancels just as that
// retry enters the Gate, where it may evict another call of the request
// that waits there and is leaving.
type givingUp struct {
	cancel context.CancelFunc
	after  time.Duration
	once   sync.Once
	mu     sync.Mutex
	timer  *time.Timer
}

type givingUpKey struct{}

func (g *givingUp) deferred() {
	g.once.Do(func() {
		if g.after == 0 {
			g.cancel()
			return
		}
		g.mu.Lock()
		g.timer = time.AfterFunc(g.after, g.cancel)
		g.mu.Unlock()
	})
}

// stop stops the timer deferred started, if any (nil: not a churn request).
func (g *givingUp) stop() {
	if g == nil {
		return
	}
	g.mu.Lock()
	if g.timer != nil {
		g.timer.Stop()
	}
	g.mu.Unlock()
}

// one makes one call under ctx and checks how it ended.
func (r *run) one(ctx context.Context, p *process, o op, crit criticality.Level) {
	id := r.nextID.Add(1)
	tr := &callTrack{}
	ctx = context.WithValue(ctx, trackKey{}, tr)
	write := o == opWriteMemory || o == opWriteRedis
	if write {
		r.led.register(id)
	}
	r.calls.Add(1)
	if o == opPayments {
		r.pay.down.call(time.Now())
	} else {
		r.repDown.call(time.Now())
	}
	ok, bad := p.call(ctx, o, id, crit)
	if ok {
		r.ok.Add(1)
	}
	now := time.Now()
	if write {
		r.led.end(id, ok, now)
	}
	what := fmt.Sprintf("%s %s %s call %d", p.kind.name, o, crit, id)
	if bad != nil {
		r.fail(what + ": " + bad.Error())
	}
	r.pendMu.Lock()
	r.pending = append(r.pending, pendingCall{track: tr, at: now, what: what})
	r.pendMu.Unlock()
}

// hook counts every call's EventEnd, and tells a churn request that one
// of its calls' retries was deferred (givingUp).
func (r *run) hook(ctx context.Context, e interceptor.Event) {
	if e.Kind == interceptor.EventDeferred {
		if gu, ok := ctx.Value(givingUpKey{}).(*givingUp); ok {
			gu.deferred()
		}
		return
	}
	if e.Kind != interceptor.EventEnd {
		return
	}
	if tr, ok := ctx.Value(trackKey{}).(*callTrack); ok {
		tr.ends.Add(1)
	}
}

// probeBreakers sends, after the load stopped, calls of every method
// through every process, CRITICAL_PLUS with a long deadline, one at a
// time per process, until every breaker of the process is closed or
// probeSpan passed; it returns the breakers that were not closed when it
// began. Under the load a half-open breaker's probe may never be answered
// in time: the caller gives up first (a crowd's patience is 50 ms, and a
// Chat under -race on loaded cores takes longer), and a probe that ends by
// its caller's cancellation says nothing of the server (budget.Other), so
// the breaker rightly stays half-open. These calls give every breaker a
// probe that can finish; settled then requires every breaker closed.
func (r *run) probeBreakers(ctx context.Context, procs []*process, redis bool) []string {
	var notClosed []string
	for _, p := range procs {
		for _, key := range p.openBreakers() {
			notClosed = append(notClosed, p.kind.name+": "+key)
		}
	}
	ops := []op{opWriteMemory, opGet, opPut, opList, opUpload, opChat, opPayments}
	if redis {
		ops = append(ops, opWriteRedis)
	}
	end := time.Now().Add(probeSpan)
	var wg sync.WaitGroup
	for _, p := range procs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for len(p.openBreakers()) > 0 && time.Now().Before(end) && ctx.Err() == nil {
				for _, o := range ops {
					callCtx, cancel := context.WithTimeout(ctx, probeCallTimeout)
					r.one(callCtx, p, o, criticality.CriticalPlus)
					cancel()
				}
				sleep(ctx, probeGap)
			}
		}()
	}
	wg.Wait()
	return notClosed
}

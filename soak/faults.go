package soak

import (
	"context"
	"math/rand/v2"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/stagger-go/stagger/testserver"
)

// fault is one kind of fault the injector draws.
type fault uint8

const (
	faultRestart    fault = iota // a replica off the network, then back on its port
	faultOutage                  // a replica answers UNAVAILABLE
	faultExhausted               // a replica answers RESOURCE_EXHAUSTED with pushback
	faultSlow                    // a replica's work takes slowFactor times as long
	faultReset                   // a replica loses replies after it stored them
	faultLongOutage              // every replica answers UNAVAILABLE, past the calls' deadlines
	faultRedis                   // the Redis store restarts
	faultFlaky                   // a replica fails a share of its attempts
	nFaults
)

var faultNames = [...]string{"restart", "outage", "exhausted", "slow", "reset", "long-outage", "redis-restart", "flaky"}

func (f fault) String() string { return faultNames[f] }

// injector draws faults from its seeded source and applies them; GOAWAYs
// come on their own (each replica's connectionAge). Faults overlap: each
// runs in its own goroutine, and a replica may take several at once.
type injector struct {
	rng      *rand.Rand
	replicas []*replica
	redis    *redisProcess
	hist     *history
	fail     func(string)
	wg       sync.WaitGroup
	redisMu  sync.Mutex // one Redis restart at a time
	counts   [nFaults]int
	// down counts the calls and attempts while every replica is down (a
	// long outage); longOut: one is under way (they do not overlap).
	down    *downLedger
	longOut atomic.Bool
}

func (in *injector) span(min, max time.Duration) time.Duration {
	return min + time.Duration(in.rng.Int64N(int64(max-min)))
}

// run injects faults until ctx ends, then waits for the faults under way
// and heals every replica.
func (in *injector) run(ctx context.Context) {
	for _, r := range in.replicas {
		r.ts.SetFailureRate(baseFailures)
	}
	defer func() {
		in.wg.Wait()
		for _, r := range in.replicas {
			r.heal()
		}
	}()
	for {
		sleep(ctx, time.Duration(in.rng.ExpFloat64()*float64(faultGapMean)))
		if ctx.Err() != nil {
			return
		}
		f := fault(in.rng.IntN(int(nFaults)))
		if f == faultRedis && in.redis == nil {
			f = faultOutage
		}
		if f == faultLongOutage && (in.rng.IntN(4) > 0 || in.longOut.Load()) {
			f = faultFlaky // long outages are the rarest: each costs seconds of calls
		}
		r := in.replicas[in.rng.IntN(len(in.replicas))]
		d := in.span(faultSpanMin, faultSpanMax)
		if f == faultLongOutage {
			in.longOut.Store(true)
		}
		in.counts[f]++
		in.hist.addf("fault %s replica %d for %s", f, r.id, d.Round(time.Millisecond))
		in.wg.Add(1)
		go func() {
			defer in.wg.Done()
			in.apply(ctx, f, r, d)
		}()
	}
}

// apply runs fault f on r (or the fleet) for about d.
func (in *injector) apply(ctx context.Context, f fault, r *replica, d time.Duration) {
	switch f {
	case faultRestart:
		if err := r.restart(ctx, d); err != nil {
			in.fail(err.Error())
		}
		return
	case faultOutage:
		r.ts.SetOutage(true)
		defer r.ts.SetOutage(false)
	case faultExhausted:
		r.ts.SetCapacity(testserver.Capacity{MaxConcurrent: 1, Pushback: strconv.Itoa(int(d.Milliseconds() / 4))})
		defer r.ts.SetCapacity(testserver.Capacity{})
	case faultSlow:
		r.ts.SetDelayFactor(slowFactor)
		defer r.ts.SetDelayFactor(1)
	case faultFlaky:
		r.ts.SetFailureRate(flakyShare)
		defer r.ts.SetFailureRate(baseFailures)
	case faultReset:
		r.resetting.Store(true)
		defer r.resetting.Store(false)
	case faultLongOutage:
		for _, x := range in.replicas {
			x.ts.SetOutage(true)
		}
		in.down.set(true, time.Now())
		defer func() {
			in.down.set(false, time.Now())
			for _, x := range in.replicas {
				x.ts.SetOutage(false)
			}
			in.longOut.Store(false)
		}()
		d = outageMin + d*(outageMax-outageMin)/faultSpanMax
	case faultRedis:
		in.redisMu.Lock()
		defer in.redisMu.Unlock()
		if err := in.redis.restart(ctx, d); err != nil {
			in.fail(err.Error())
		}
		return
	}
	sleep(ctx, d)
}

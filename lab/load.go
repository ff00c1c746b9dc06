package lab

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"slices"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/stagger-go/stagger/criticality"
	testingv1 "github.com/stagger-go/stagger/proto/stagger/testing/v1"
	"github.com/stagger-go/stagger/testserver"
)

// workers is the worker server of cfg, at full strength.
func workers(cfg *Config) testserver.Workers {
	return testserver.Workers{Count: cfg.Workers, Queue: cfg.Queue, Service: cfg.ServiceTime()}
}

// overloadWorkers is ScenarioOverload's server: half its workers from
// `from` to `to`.
func overloadWorkers(cfg *Config, from, to time.Time) testserver.Workers {
	w := workers(cfg)
	w.Reduced, w.ReducedFrom, w.ReducedTo = cfg.Workers/2, from, to
	return w
}

// drain waits until the worker server has taken every attempt left in its
// queue (their callers are gone: every call has returned), so that its
// work and wasted work count them.
func drain(ctx context.Context, srv *testserver.Server, cfg *Config) {
	for st := srv.Stats(); st.Queued > 0 && ctx.Err() == nil; st = srv.Stats() {
		// The queue's work, if every worker were taking from it at the
		// slowest: an overestimate, checked again.
		d := time.Duration(float64(st.Queued) * cfg.Slow * float64(cfg.ServiceTime()) / float64(max(cfg.Workers/2, 1)))
		t := time.NewTimer(max(d, time.Millisecond))
		select {
		case <-ctx.Done():
		case <-t.C:
		}
		t.Stop()
	}
}

// callInterval is the time between two calls of one client.
func callInterval(cfg *Config) time.Duration {
	return time.Duration(float64(cfg.Clients) / cfg.Rate * float64(time.Second))
}

// firstCall is when client i makes its first call, from the load's start:
// the clients' first calls are spread evenly over one interval.
func firstCall(cfg *Config, i int) time.Duration {
	return time.Duration(i) * callInterval(cfg) / time.Duration(cfg.Clients)
}

// callStarts lists when every call of a run starts, from the load's start,
// as Run offers them (unless cancelled): client i at firstCall(i), then
// every callInterval, while before Duration.
func callStarts(cfg *Config) []time.Duration {
	var out []time.Duration
	interval := callInterval(cfg)
	if interval <= 0 {
		return nil
	}
	for i := 0; i < cfg.Clients; i++ {
		for t := firstCall(cfg, i); t < cfg.Duration; t += interval {
			out = append(out, t)
		}
	}
	slices.Sort(out)
	return out
}

// connectAll connects every connection and waits until all are ready.
func connectAll(ctx context.Context, conns []*grpc.ClientConn) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	for _, cc := range conns {
		cc.Connect()
	}
	for _, cc := range conns {
		for s := cc.GetState(); s != connectivity.Ready; s = cc.GetState() {
			if !cc.WaitForStateChange(ctx, s) {
				return fmt.Errorf("connecting to the server: %w (state %v)", ctx.Err(), s)
			}
		}
	}
	return nil
}

// offer calls issue at first, first+interval, ... until end or ctx ends.
func offer(ctx context.Context, first, end time.Time, interval time.Duration, issue func()) {
	t := time.NewTimer(time.Until(first))
	defer t.Stop()
	for next := first; next.Before(end); next = next.Add(interval) {
		if d := time.Until(next); d > 0 {
			t.Reset(d)
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
		issue()
	}
}

// slowSeed is client i's seed for its slow draws.
func slowSeed(i int) (seed [32]byte) {
	binary.LittleEndian.PutUint64(seed[:], uint64(i))
	copy(seed[8:], "stagger lab slow replica")
	return seed
}

// leadingFailures draws how many attempts of a call fail before one is
// served, when each fails with probability p on its own: at least k with
// probability p^k (at most maxLeadingFailures). A client retries only
// after a failure, so that is all it can see of independent draws; drawn
// per call from the client's own source, every contender meets the same
// failures in the same calls, and their success differs only by what
// their retry layers do (a shared draw per attempt gave each contender a
// different sample: ±2 points of pure chance over 200 calls).
func leadingFailures(rng *rand.Rand, p float64) int32 {
	n := int32(0)
	for n < maxLeadingFailures && rng.Float64() < p {
		n++
	}
	return n
}

// maxLeadingFailures bounds leadingFailures: beyond every retry policy the
// lab runs.
const maxLeadingFailures = 16

// slowScript gives every attempt a call could make (3, the most hedging
// sends) SlowBase, or SlowFactor times that with probability SlowOdds. The
// key makes the server number the call's attempts.
func slowScript(rng *rand.Rand, key string) *testingv1.Script {
	sc := &testingv1.Script{Key: key}
	for n := 0; n < 3; n++ {
		d := SlowBase
		if rng.Float64() < SlowOdds {
			d *= SlowFactor
		}
		sc.AttemptDelays = append(sc.AttemptDelays, durationpb.New(d))
	}
	return sc
}

// stragglerScript gives every attempt a call could make StragglerBase, or
// StragglerFactor times that with probability StragglerOdds. The key makes
// the server number the call's attempts.
func stragglerScript(rng *rand.Rand, key string, attempts int) *testingv1.Script {
	sc := &testingv1.Script{Key: key}
	for n := 0; n < attempts; n++ {
		d := StragglerBase
		if rng.Float64() < StragglerOdds {
			d *= StragglerFactor
		}
		sc.AttemptDelays = append(sc.AttemptDelays, durationpb.New(d))
	}
	return sc
}

func oneCall(ctx context.Context, client testingv1.TestServiceClient, sc *testingv1.Script, timeout time.Duration, log *callLog, counter *attemptCounter) {
	ctx, st := counter.callStarted(ctx)
	defer counter.callEnded(st)
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	begin := time.Now()
	_, err := client.Get(ctx, &testingv1.GetRequest{Script: sc})
	log.add(sc.GetKey(), err == nil, begin, time.Now())
	if l := levelOf(ctx); l != criticality.Unset {
		log.mu.Lock()
		c := &log.levels[l.Index()]
		c.calls++
		if err == nil {
			c.ok++
		}
		log.mu.Unlock()
	}
}

// oneStream makes one ListItems call of SlowStreamMessages messages and
// logs its time to the first message with its outcome.
func oneStream(ctx context.Context, client testingv1.TestServiceClient, sc *testingv1.Script, timeout time.Duration, log *callLog, counter *attemptCounter) {
	ctx, st := counter.callStarted(ctx)
	defer counter.callEnded(st)
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	sc.ResponseCount = SlowStreamMessages
	begin := time.Now()
	var first time.Duration
	n := 0
	stream, err := client.ListItems(ctx, &testingv1.ListItemsRequest{Script: sc})
	for err == nil {
		if _, err = stream.Recv(); err == nil {
			if n == 0 {
				first = time.Since(begin)
			}
			n++
		}
	}
	ok := errors.Is(err, io.EOF) && n == SlowStreamMessages
	end := time.Now()
	log.add(sc.GetKey(), ok, begin, end)
	if ok {
		log.mu.Lock()
		log.firsts = append(log.firsts, first)
		log.mu.Unlock()
	}
}

// serverGone closes the server's TCP side from `from` to `to`, so that
// clients meet refused connections, then listens again on the same port.
func serverGone(ctx context.Context, srv *testserver.Server, from, to time.Time) error {
	wait := func(at time.Time) bool {
		t := time.NewTimer(time.Until(at))
		defer t.Stop()
		select {
		case <-ctx.Done():
			return false
		case <-t.C:
			return true
		}
	}
	if !wait(from) {
		return nil
	}
	srv.StopServing()
	// Resume even when the run was cancelled, so the server ends as it began.
	wait(to)
	if err := srv.Resume(); err != nil {
		return fmt.Errorf("the server could not listen again after the outage: %w", err)
	}
	return nil
}

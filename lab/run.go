package lab

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"runtime/pprof"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/resolver"
	"google.golang.org/grpc/resolver/manual"
	"google.golang.org/grpc/stats"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/stagger-go/stagger/criticality"
	testingv1 "github.com/stagger-go/stagger/proto/stagger/testing/v1"
	"github.com/stagger-go/stagger/testserver"
)

// attemptCounter counts the attempts of one contender's connections: grpc-go
// calls HandleRPC with a stats.Begin once per attempt, whichever layer
// retries, so the built-in retry is counted as the interceptors are. It also
// logs what is in flight (see flightLog).
type attemptCounter struct {
	outageFrom, outageTo time.Time
	// t0 is the start of the load: perSecond[i] counts the attempts begun
	// in its i-th second.
	t0 time.Time

	mu        sync.Mutex
	attempts  int
	outage    int
	perSecond []int
	flight    flightLog
}

// callState is one call's part in flight, found through the contexts of
// its attempts, which derive from the call's.
type callState struct {
	attempts int       // in flight
	lastEnd  time.Time // when the last attempt ended, if attempts is 0
	ended    bool      // an attempt has ended and none is in flight
	returned bool
}

type callStateKey struct{}

// callStarted logs a call in flight and returns the context its attempts
// are told apart by.
func (a *attemptCounter) callStarted(ctx context.Context) (context.Context, *callState) {
	st := &callState{}
	a.mu.Lock()
	a.flight.add(flightCall, time.Now(), 1)
	a.mu.Unlock()
	return context.WithValue(ctx, callStateKey{}, st), st
}

func (a *attemptCounter) callEnded(st *callState) {
	now := time.Now()
	a.mu.Lock()
	defer a.mu.Unlock()
	if st.ended {
		// Waiting after its last attempt: until the call returns. A call
		// that gives up at once waits for no time.
		a.flight.add(flightWaiting, st.lastEnd, 1)
		a.flight.add(flightWaiting, now, -1)
		st.ended = false
	}
	st.returned = true // a hedge that ends later leaves no wait
	a.flight.add(flightCall, now, -1)
}

func (a *attemptCounter) TagRPC(ctx context.Context, _ *stats.RPCTagInfo) context.Context {
	return ctx
}

func (a *attemptCounter) HandleRPC(ctx context.Context, s stats.RPCStats) {
	if !s.IsClient() {
		return
	}
	st, _ := ctx.Value(callStateKey{}).(*callState)
	switch s := s.(type) {
	case *stats.Begin:
		now := time.Now()
		a.mu.Lock()
		defer a.mu.Unlock()
		a.flight.add(flightAttempt, now, 1)
		if st != nil {
			st.attempts++
			if st.ended {
				a.flight.add(flightWaiting, st.lastEnd, 1)
				a.flight.add(flightWaiting, now, -1)
				st.ended = false
			}
		}
		if s.IsTransparentRetryAttempt {
			return
		}
		a.attempts++
		if !s.BeginTime.Before(a.outageFrom) && s.BeginTime.Before(a.outageTo) {
			a.outage++
		}
		if !a.t0.IsZero() && !s.BeginTime.Before(a.t0) {
			if i := int(s.BeginTime.Sub(a.t0) / time.Second); i < maxSeconds {
				for len(a.perSecond) <= i {
					a.perSecond = append(a.perSecond, 0)
				}
				a.perSecond[i]++
			}
		}
	case *stats.End:
		now := time.Now()
		a.mu.Lock()
		defer a.mu.Unlock()
		a.flight.add(flightAttempt, now, -1)
		if st != nil {
			st.attempts--
			if st.attempts == 0 && !st.returned {
				st.ended, st.lastEnd = true, now
			}
		}
	}
}

// flightLog logs when calls, attempts and waits begin and end, on the time
// package's clock, for their peaks. A call is in flight from the moment the
// lab makes it until it returns; an attempt from its stats.Begin to its
// stats.End (grpc-go pairs them, transparent retries included, and begins
// an attempt before it picks a connection, so a call waiting for a ready
// connection is in an attempt). A call waits from the end of an attempt,
// when no other attempt of it is in flight, until its next attempt begins or
// it returns: it is pausing between attempts (backoff, pushback, a budget
// holding its retry back), or giving up.
type flightLog struct {
	events []flightEvent
}

type flightKind uint8

const (
	flightCall flightKind = iota
	flightAttempt
	flightWaiting
	flightKinds
)

type flightEvent struct {
	at    time.Time
	kind  flightKind
	delta int8
}

func (l *flightLog) add(k flightKind, at time.Time, delta int8) {
	l.events = append(l.events, flightEvent{at, k, delta})
}

// peaks returns, per kind, the most intervals open at once. Intervals are
// half-open: one that ends when another begins does not overlap it, and
// one of no length counts for nothing.
func (l *flightLog) peaks() [flightKinds]int {
	ev := slices.Clone(l.events)
	slices.SortStableFunc(ev, func(x, y flightEvent) int {
		if c := x.at.Compare(y.at); c != 0 {
			return c
		}
		return int(x.delta) - int(y.delta) // ends first
	})
	var open, peak [flightKinds]int
	for _, e := range ev {
		open[e.kind] += int(e.delta)
		peak[e.kind] = max(peak[e.kind], open[e.kind])
	}
	return peak
}

// mean returns the mean number of intervals of kind k open over [from,
// to), by time; 0 when the span is empty.
func (l *flightLog) mean(k flightKind, from, to time.Time) float64 {
	if !to.After(from) {
		return 0
	}
	ev := slices.Clone(l.events)
	slices.SortStableFunc(ev, func(x, y flightEvent) int { return x.at.Compare(y.at) })
	open, area, at := 0, 0.0, from
	for _, e := range ev {
		if e.kind != k {
			continue
		}
		if e.at.After(from) {
			t := e.at
			if t.After(to) {
				t = to
			}
			if t.After(at) {
				area += float64(open) * t.Sub(at).Seconds()
				at = t
			}
		}
		open += int(e.delta)
	}
	if to.After(at) {
		area += float64(open) * to.Sub(at).Seconds()
	}
	return area / to.Sub(from).Seconds()
}

func (a *attemptCounter) TagConn(ctx context.Context, _ *stats.ConnTagInfo) context.Context {
	return ctx
}

func (a *attemptCounter) HandleConn(context.Context, stats.ConnStats) {}

// maxSeconds bounds a timeline, so that a clock jump cannot exhaust
// memory.
const maxSeconds = 1 << 16

// callLog collects the calls' outcomes.
type callLog struct {
	// keyed: keep every call that has a script key in keyedCalls.
	keyed bool

	mu         sync.Mutex
	calls      int
	latencies  []time.Duration // of successful calls
	failures   []time.Duration // of failed calls
	firsts     []time.Duration // to the first message, of successful streams
	all        []loggedCall
	keyedCalls []keyedCall
	// levels counts the calls by the criticality the lab gave them
	// (ScenarioMixedCriticality), by criticality.Level.Index.
	levels [4]levelCount
}

// loggedCall is one call: when it began and returned, and whether it
// succeeded.
type loggedCall struct {
	begin, end time.Time
	ok         bool
}

// keyedCall is one call whose attempts the servers recorded under key.
type keyedCall struct {
	key        string
	begin, end time.Time
	ok         bool
}

func (l *callLog) add(key string, ok bool, begin, end time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.calls++
	if ok {
		l.latencies = append(l.latencies, end.Sub(begin))
	} else {
		l.failures = append(l.failures, end.Sub(begin))
	}
	l.all = append(l.all, loggedCall{begin, end, ok})
	if l.keyed && key != "" {
		l.keyedCalls = append(l.keyedCalls, keyedCall{key, begin, end, ok})
	}
}

// runContender runs one contender against its own server (in
// ScenarioChain its own chain of three, newChain). Everything the
// contender's clients start (connections, calls, and whatever goroutines
// its retry layer starts) runs under the runtime/pprof label goroutineLabel
// = label, which the goroutine sampler counts; the server is made before
// the label is set, so its goroutines are not counted.
func runContender(ctx context.Context, cfg *Config, c Contender, label string) (Result, error) {
	tcp := cfg.Scenario == ScenarioRefused || cfg.Scenario == ScenarioRefusedWait
	var srv *testserver.Server
	var ch *chain
	var replicas []*testserver.Server
	switch {
	case cfg.Scenario.replicated():
		// The first replica is the bad one (srv), or the slow one: the
		// servers' load and stats are its.
		for i := range 3 {
			opts := []testserver.Option{testserver.WithArrivalBucket(Bin), testserver.WithTCP(), testserver.WithOutage(i == 0 && cfg.Scenario == ScenarioBadReplica)}
			if i == 0 && cfg.Scenario == ScenarioSlowReplica3 {
				opts = append(opts, testserver.WithDelayFactor(SlowFactor))
			}
			r := testserver.New(opts...)
			defer r.Close()
			replicas = append(replicas, r)
		}
		srv = replicas[0]
	case cfg.Scenario == ScenarioChain:
		var err error
		if ch, err = newChain(ctx, cfg, c); err != nil {
			return Result{}, fmt.Errorf("lab: %s: %w", c.Name, err)
		}
		defer ch.close()
		srv = ch.top
	default:
		// The worker server's workers are set by runClients, once it
		// knows when the trigger is.
		opts := []testserver.Option{testserver.WithArrivalBucket(Bin)}
		if tcp {
			opts = append(opts, testserver.WithTCP())
		}
		if cfg.Scenario == ScenarioMixedCriticality {
			o, err := mixedServerSide(cfg, &srv)
			if err != nil {
				return Result{}, fmt.Errorf("lab: %s: %w", c.Name, err)
			}
			opts = append(opts, o)
		}
		srv = testserver.New(opts...)
		defer srv.Close()
	}
	var (
		res Result
		err error
	)
	pprof.Do(ctx, pprof.Labels(goroutineLabel, label), func(ctx context.Context) {
		res, err = runClients(ctx, cfg, c, srv, tcp, ch, replicas)
	})
	return res, err
}

// runClients runs the contender's clients against srv. In ScenarioChain ch
// is the chain (srv is its top, A); the outage, the server's clock and the
// load are then C's, and every call has a key of its own so that each
// server's records tell its attempts apart. In ScenarioBadReplica replicas
// are the three replicas (srv is the bad one), which every connection
// reaches through a resolver of its own; calls have keys there too.
func runClients(ctx context.Context, cfg *Config, c Contender, srv *testserver.Server, tcp bool, ch *chain, replicas []*testserver.Server) (Result, error) {
	down := srv // the server with the outage
	if ch != nil {
		down = ch.bottom
	}
	counter := &attemptCounter{}
	conns := make([]*grpc.ClientConn, 0, cfg.Clients)
	callers := make([]testingv1.TestServiceClient, 0, cfg.Clients)
	defer func() {
		for _, cc := range conns {
			_ = cc.Close()
		}
	}()
	for i := 0; i < cfg.Clients; i++ {
		if c.connect != nil {
			if tcp || ch != nil || replicas != nil {
				return Result{}, fmt.Errorf("lab: %s: %w", c.Name, errConnectScenario)
			}
			ics, err := c.connect(cfg)
			if err != nil {
				return Result{}, fmt.Errorf("lab: %s: %w", c.Name, err)
			}
			client, closeConns := dialConnect(srv, ics, counter)
			defer closeConns()
			callers = append(callers, client)
			continue
		}
		dopts, err := c.dialOptions(cfg)
		if err != nil {
			return Result{}, fmt.Errorf("lab: %s: %w", c.Name, err)
		}
		dopts = append(dopts, grpc.WithStatsHandler(counter))
		if cfg.Scenario == ScenarioRefusedWait {
			dopts = append(dopts, grpc.WithDefaultCallOptions(grpc.WaitForReady(true)))
		}
		var cc *grpc.ClientConn
		switch {
		case replicas != nil:
			cc, err = dialReplicas(replicas, dopts)
		case tcp:
			cc, err = srv.DialTCP(dopts...)
		default:
			cc, err = srv.Dial(dopts...)
		}
		if err != nil {
			return Result{}, fmt.Errorf("lab: %s: dial: %w", c.Name, err)
		}
		conns = append(conns, cc)
		callers = append(callers, testingv1.NewTestServiceClient(cc))
	}

	// Connections are made before the load starts, so that the first
	// second measures retries, not a few hundred handshakes at once. The
	// load starts on a whole second of the server's clock, so that the
	// server's arrival bins (Load) and the timeline's seconds line up
	// with the load's. That costs up to a second of waiting before the
	// load. (A Connect client connects at its first call.)
	if err := connectAll(ctx, conns); err != nil {
		return Result{}, fmt.Errorf("lab: %s: %w", c.Name, err)
	}
	lead := (time.Since(down.Start())/time.Second + 1) * time.Second
	skip := int(lead / Bin)
	t0 := down.Start().Add(lead)
	from, to := t0.Add(cfg.OutageStart), t0.Add(cfg.OutageEnd)
	counter.mu.Lock()
	counter.outageFrom, counter.outageTo, counter.t0 = from, to, t0
	counter.mu.Unlock()

	var outageErr error
	var outageWG sync.WaitGroup
	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	stream := cfg.Scenario == ScenarioSlowReplicaStream
	slow := cfg.Scenario == ScenarioSlowReplica || stream
	if !cfg.Scenario.HasTrigger() {
		// No outage: the attempts counted "in the outage" are none.
		counter.mu.Lock()
		counter.outageFrom, counter.outageTo = time.Time{}, time.Time{}
		counter.mu.Unlock()
	} else if tcp {
		outageWG.Add(1)
		go func() {
			defer outageWG.Done()
			// The server's goroutines are not the contender's.
			pprof.SetGoroutineLabels(context.Background())
			outageErr = serverGone(runCtx, srv, from, to)
		}()
	}
	switch {
	case cfg.Scenario.overloaded():
		srv.SetWorkers(overloadWorkers(cfg, from, to))
	case cfg.Scenario.slowed():
		w := workers(cfg)
		w.Slow, w.SlowFrom, w.SlowTo = cfg.Slow, from, to
		srv.SetWorkers(w)
	case tcp:
		srv.SetWorkers(workers(cfg))
	case cfg.Scenario.workerServer():
		srv.SetWorkers(workers(cfg))
		down.SetOutageWindow(from, to)
	case ch != nil:
		down.SetOutageWindow(from, to)
	}

	log := &callLog{keyed: ch != nil || replicas != nil}
	var calls sync.WaitGroup
	var clients sync.WaitGroup
	interval := callInterval(cfg)
	end := t0.Add(cfg.Duration)
	for i, client := range callers {
		// Clients are spread evenly over one interval so that the offered
		// load is smooth, not a burst every interval.
		first := t0.Add(firstCall(cfg, i))
		// Each client draws its slow attempts (or its calls' failures in
		// ScenarioFlakyQuietRandom) from its own source, seeded by its
		// index, so contenders meet the same slow attempts. ChaCha8, not
		// PCG: PCG states that differ only in their low bits (seeds 1, i)
		// gave far more triple-slow calls than the 1 in 8000 they should.
		rng := rand.New(rand.NewChaCha8(slowSeed(i)))
		seq := 0
		clients.Add(1)
		go func() {
			defer clients.Done()
			offer(runCtx, first, end, interval, func() {
				sc := &testingv1.Script{}
				switch {
				case slow:
					seq++
					sc = slowScript(rng, fmt.Sprintf("c%d-%d", i, seq))
				case ch != nil, replicas != nil:
					seq++
					sc.Key = fmt.Sprintf("c%d-%d", i, seq)
					if cfg.Scenario == ScenarioSlowReplica3 {
						// SlowFactor times as long on the slow replica.
						sc.Delay = durationpb.New(SlowBase)
					}
				case cfg.Scenario == ScenarioFlakyQuiet:
					// The key makes the server count the call's attempts.
					seq++
					sc.Key, sc.FailAttempts = fmt.Sprintf("c%d-%d", i, seq), FlakyFailAttempts
				case cfg.Scenario == ScenarioStragglers:
					seq++
					sc = stragglerScript(rng, fmt.Sprintf("c%d-%d", i, seq), cfg.MaxAttempts)
				case cfg.Scenario == ScenarioFlakyQuietRandom:
					seq++
					sc.Key, sc.FailAttempts = fmt.Sprintf("c%d-%d", i, seq), leadingFailures(rng, cfg.FailureRate)
				}
				callCtx := runCtx
				if cfg.Scenario == ScenarioMixedCriticality {
					seq++
					callCtx = withLevel(runCtx, callLevel(seq))
				}
				calls.Add(1)
				go func() {
					defer calls.Done()
					if stream {
						oneStream(runCtx, client, sc, cfg.CallTimeout, log, counter)
						return
					}
					oneCall(callCtx, client, sc, cfg.CallTimeout, log, counter)
				}()
			})
		}()
	}
	clients.Wait()
	calls.Wait()
	stop()
	outageWG.Wait()
	if outageErr != nil {
		return Result{}, fmt.Errorf("lab: %s: %w", c.Name, outageErr)
	}
	if cfg.Scenario.workerServer() {
		drain(ctx, down, cfg)
	}
	arrivals := down.Arrivals()
	if len(arrivals) > skip {
		arrivals = arrivals[skip:]
	} else {
		arrivals = nil
	}
	r := summarize(cfg, c.Name, log, counter, arrivals, down.Stats(), t0)
	if ch != nil {
		ch.close()
		ch.measure(cfg, &r, log.keyedCalls, from, to)
	}
	switch cfg.Scenario {
	case ScenarioBadReplica:
		r.BadCalls, r.BadRepeats = badMeetings(srv, log.keyedCalls)
	case ScenarioSlowReplica3:
		r.HedgeRepeats = hedgeRepeats(ctx, replicas, log.keyedCalls)
	}
	return r, nil
}

// replicaDials numbers the resolvers of ScenarioBadReplica's connections.
var replicaDials atomic.Int64

// dialReplicas connects to every replica through one connection, whose
// resolver (one of its own) returns their addresses.
func dialReplicas(replicas []*testserver.Server, dopts []grpc.DialOption) (*grpc.ClientConn, error) {
	r := manual.NewBuilderWithScheme(fmt.Sprintf("labreplicas%d", replicaDials.Add(1)))
	var addrs []resolver.Address
	for _, s := range replicas {
		addrs = append(addrs, resolver.Address{Addr: s.Addr()})
	}
	r.InitialState(resolver.State{Addresses: addrs})
	opts := append([]grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials()), grpc.WithResolvers(r)}, dopts...)
	return grpc.NewClient(r.Scheme()+":///replicas", opts...)
}

// badMeetings counts, from the bad replica's records, the calls that met it
// and those that met it more than once.
func badMeetings(bad *testserver.Server, calls []keyedCall) (met, repeats int) {
	for _, c := range calls {
		switch n := len(bad.Attempts(c.key)); {
		case n > 1:
			repeats++
			met++
		case n == 1:
			met++
		}
	}
	return met, repeats
}

// hedgeRepeats counts, from the replicas' records, the calls that sent a
// later attempt to the replica their first attempt (the earliest to
// arrive) went to. It waits up to a second for attempts still running (a
// losing hedge ends as its replica hears of the cancel), so that each
// call's records are whole.
func hedgeRepeats(ctx context.Context, replicas []*testserver.Server, calls []keyedCall) int {
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	allDone := func(recs []testserver.AttemptRecord) bool {
		for _, a := range recs {
			if !a.Done {
				return false
			}
		}
		return true
	}
	repeats := 0
	for _, c := range calls {
		first, firstAt, count := -1, time.Time{}, make([]int, len(replicas))
		for i, s := range replicas {
			recs, _ := s.Await(ctx, c.key, allDone)
			count[i] = len(recs)
			for _, a := range recs {
				if first < 0 || a.Arrived.Before(firstAt) {
					first, firstAt = i, a.Arrived
				}
			}
		}
		if first >= 0 && count[first] > 1 {
			repeats++
		}
	}
	return repeats
}

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

func summarize(cfg *Config, name string, log *callLog, counter *attemptCounter, arrivals []int64, st testserver.Stats, t0 time.Time) Result {
	r := Result{Contender: name, Calls: log.calls, Successes: len(log.latencies)}
	counter.mu.Lock()
	r.Attempts, r.OutageAttempts = counter.attempts, counter.outage
	perSecond := slices.Clone(counter.perSecond)
	counter.mu.Unlock()
	if r.Calls > 0 {
		r.AttemptsPerCall = float64(r.Attempts) / float64(r.Calls)
		r.SuccessRate = float64(r.Successes) / float64(r.Calls)
	}
	r.OutageLoad = outageLoad(cfg, r.OutageAttempts)
	crit, shed := log.levels[criticality.Critical.Index()], log.levels[criticality.Sheddable.Index()]
	r.CriticalCalls, r.CriticalSuccess = crit.calls, crit.rate()
	r.SheddableCalls, r.SheddableSuccess = shed.calls, shed.rate()
	r.Goodput = goodput(cfg, log.all, t0)
	if st.Work > 0 {
		r.Wasted = float64(st.Wasted) / float64(st.Work)
	}
	r.Timeline = timeline(cfg, log.all, perSecond, t0)
	if cfg.Scenario.HasTrigger() {
		r.Recovered, r.Recover = recovery(cfg, log.all, t0)
		gap := AfterGap
		if cfg.Scenario == ScenarioChain {
			gap = 0
		}
		after := t0.Add(cfg.OutageEnd + gap)
		ok := 0
		for _, c := range log.all {
			if !c.begin.Before(after) {
				r.CallsAfter++
				if c.ok {
					ok++
				}
			}
		}
		if r.CallsAfter > 0 {
			r.SuccessAfter = float64(ok) / float64(r.CallsAfter)
		}
	}
	r.Load = make([]int, len(arrivals))
	perBin := float64(cfg.Capacity) * Bin.Seconds()
	for b, n := range arrivals {
		r.Load[b] = int(n)
		at := time.Duration(b) * Bin
		if at >= cfg.OutageEnd && at < cfg.Duration {
			r.PeakAfter = max(r.PeakAfter, float64(n)/perBin)
		}
	}
	counter.mu.Lock()
	peaks := counter.flight.peaks()
	counter.mu.Unlock()
	r.PeakInFlight, r.PeakAttemptsInFlight, r.PeakWaiting = peaks[flightCall], peaks[flightAttempt], peaks[flightWaiting]
	if cfg.Scenario.HasTrigger() {
		counter.mu.Lock()
		r.MeanInFlight = counter.flight.mean(flightCall, t0.Add(cfg.OutageStart), t0.Add(cfg.OutageEnd))
		counter.mu.Unlock()
	}
	lat := slices.Clone(log.latencies)
	slices.Sort(lat)
	r.P50, r.P99, r.P999 = percentile(lat, 0.5), percentile(lat, 0.99), percentile(lat, 0.999)
	fails := slices.Clone(log.failures)
	slices.Sort(fails)
	r.FailP50, r.FailP99 = percentile(fails, 0.5), percentile(fails, 0.99)
	firsts := slices.Clone(log.firsts)
	slices.Sort(firsts)
	r.FirstP50, r.FirstP99, r.FirstP999 = percentile(firsts, 0.5), percentile(firsts, 0.99), percentile(firsts, 0.999)
	return r
}

// timeline is Result.Timeline: the calls, their outcomes and the attempts
// (perSecond, from the attemptCounter) per second from t0, over Duration
// and whatever seconds the last calls took beyond it.
func timeline(cfg *Config, calls []loggedCall, perSecond []int, t0 time.Time) []Second {
	n := int((cfg.Duration + time.Second - 1) / time.Second)
	n = max(n, len(perSecond))
	second := func(t time.Time) int {
		if t.Before(t0) {
			return -1
		}
		return min(int(t.Sub(t0)/time.Second), maxSeconds-1)
	}
	for _, c := range calls {
		n = max(n, second(c.end)+1)
	}
	out := make([]Second, n)
	for i, a := range perSecond {
		out[i].Attempts = a
	}
	for _, c := range calls {
		if b := second(c.begin); b >= 0 {
			out[b].Calls++
			if c.ok {
				out[b].CallsSucceeded++
			}
		}
		if e := second(c.end); e >= 0 && c.ok {
			out[e].Successes++
		}
	}
	return out
}

// recovery is Result.Recovered and Recover: the first whole second k
// after the trigger's end from which the calls made in every second
// [OutageEnd + j s, OutageEnd + (j+1) s), j >= k, until Duration succeed
// at RecoverThreshold or more.
func recovery(cfg *Config, calls []loggedCall, t0 time.Time) (bool, time.Duration) {
	end := t0.Add(cfg.OutageEnd)
	n := int((cfg.Duration - cfg.OutageEnd + time.Second - 1) / time.Second)
	if n <= 0 {
		return false, 0
	}
	made, ok := make([]int, n), make([]int, n)
	for _, c := range calls {
		if c.begin.Before(end) {
			continue
		}
		if j := int(c.begin.Sub(end) / time.Second); j < n {
			made[j]++
			if c.ok {
				ok[j]++
			}
		}
	}
	k := n // none of the seconds yet
	for j := n - 1; j >= 0; j-- {
		if made[j] > 0 && float64(ok[j]) < RecoverThreshold*float64(made[j]) {
			break
		}
		k = j
	}
	if k == n {
		return false, 0
	}
	return true, time.Duration(k) * time.Second
}

// goodput is Result.Goodput.
func goodput(cfg *Config, calls []loggedCall, t0 time.Time) float64 {
	from := time.Duration(0)
	if cfg.Scenario.HasTrigger() {
		from = cfg.OutageStart
	}
	// What the server could serve over [from, Duration), summed by the
	// millisecond; where it limits nothing, what was offered.
	var capacity float64
	const step = time.Millisecond
	for t := from; t < cfg.Duration; t += step {
		c := cfg.CapacityAt(t)
		if math.IsInf(c, 1) {
			c = cfg.Rate
		}
		capacity += c * step.Seconds()
	}
	if capacity <= 0 {
		return 0
	}
	lo, hi := t0.Add(from), t0.Add(cfg.Duration)
	ok := 0
	for _, c := range calls {
		if c.ok && !c.end.Before(lo) && c.end.Before(hi) {
			ok++
		}
	}
	return float64(ok) / capacity
}

// outageLoad is Result.OutageLoad for attempts made during the outage: ÷
// what the server can serve in that time, its capacity when up (Capacity),
// in ScenarioOverload the reduced capacity, in the slowdowns the slowed
// one.
func outageLoad(cfg *Config, attempts int) float64 {
	capacity := float64(cfg.Capacity)
	switch {
	case cfg.Scenario.overloaded():
		capacity = cfg.ReducedCapacity()
	case cfg.Scenario.slowed():
		capacity /= cfg.Slow
	}
	return float64(attempts) / (capacity * (cfg.OutageEnd - cfg.OutageStart).Seconds())
}

// percentile is the nearest-rank percentile of sorted values; 0 for none.
func percentile(sorted []time.Duration, q float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(math.Ceil(q*float64(len(sorted)))) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}

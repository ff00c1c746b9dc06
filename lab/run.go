package lab

import (
	"context"
	"fmt"
	"math/rand/v2"
	"runtime/pprof"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/resolver"
	"google.golang.org/grpc/resolver/manual"
	"google.golang.org/protobuf/types/known/durationpb"

	testingv1 "github.com/stagger-go/stagger/proto/stagger/testing/v1"
	"github.com/stagger-go/stagger/testserver"
)

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

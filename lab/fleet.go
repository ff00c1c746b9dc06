package lab

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/orca"
	"google.golang.org/grpc/status"

	"github.com/stagger-go/stagger/interceptor"
	testingv1 "github.com/stagger-go/stagger/proto/stagger/testing/v1"
	"github.com/stagger-go/stagger/testserver"
)

// FleetContenders lists the fleet's contenders: stagger as an operator
// deploys it (a policy file declaring no budget, so each client process
// has its own default budgets, budget.NewBackends(budget.DefaultSettings())
// where stagger.DialOptions would install the process's
// budget.DefaultBackends), grpc-go's own retry with retryThrottling (10,
// 0.1, per connection), go-grpc-middleware's retry, failsafe-go's retry
// with its default budget per client, and no retry.
func FleetContenders() []Contender {
	stg := Contender{
		Name: "stagger",
		Gets: func(Config) string {
			return fmt.Sprintf("policy file: %d attempts, %v-%v ×%g, UNAVAILABLE and RESOURCE_EXHAUSTED; no budget declared: the default budgets, one budget.Backends per client",
				FleetAttempts, FleetBackoff.Initial, FleetBackoff.Max, FleetBackoff.Multiplier)
		},
		dialOptions: func(c *Config) ([]grpc.DialOption, error) { return staggerOwnBudgets(staggerFile(c)) },
	}
	out := []Contender{stg}
	for _, n := range []string{"grpc-go-throttle", "grpc-middleware", "failsafe-go", "no-retry"} {
		c, _ := contenderIn(Contenders(), n)
		out = append(out, c)
	}
	return out
}

// RunFleet fills in cfg's defaults, validates it, and runs each contender's
// fleet in turn against a server of its own, so that each has the machine
// to itself. Cancelling ctx cancels the calls in flight (the results then
// cover what ran).
func RunFleet(ctx context.Context, cfg FleetConfig) (*FleetReport, error) {
	cfg = cfg.Defaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	start := time.Now()
	rep := &FleetReport{Config: cfg}
	for _, name := range cfg.Contenders {
		c, _ := contenderIn(FleetContenders(), name)
		r, err := runFleetContender(ctx, &cfg, c)
		if err != nil {
			return nil, fmt.Errorf("lab: fleet: %s: %w", name, err)
		}
		rep.Results = append(rep.Results, r)
	}
	rep.Wall = time.Since(start)
	return rep, nil
}

// fleetCall is one call of a fleet run.
type fleetCall struct {
	key       string
	scheduled time.Time
	timedCall
	code codes.Code // of a failure
}

func runFleetContender(ctx context.Context, cfg *FleetConfig, c Contender) (FleetResult, error) {
	opts := []testserver.Option{testserver.WithArrivalBucket(Bin), testserver.WithTCP()}
	if cfg.Reports {
		opts = append(opts, testserver.WithServerOptions(orca.CallMetricsServerOption(nil)))
	}
	srv := testserver.New(opts...)
	defer srv.Close()
	srv.SetWorkers(testserver.Workers{Count: cfg.Workers, Service: cfg.ServiceTime(), ReportLoad: cfg.Reports})
	counter := &attemptCounter{}
	conns := make([]*grpc.ClientConn, 0, cfg.Clients)
	defer func() {
		for _, cc := range conns {
			_ = cc.Close()
		}
	}()
	for range cfg.Clients {
		dopts, err := c.dialOptions(cfg.labConfig())
		if err != nil {
			return FleetResult{}, err
		}
		cc, err := srv.DialTCP(append(dopts, grpc.WithStatsHandler(counter))...)
		if err != nil {
			return FleetResult{}, fmt.Errorf("dial: %w", err)
		}
		conns = append(conns, cc)
	}
	if err := connectAll(ctx, conns); err != nil {
		return FleetResult{}, err
	}
	t0 := loadStart(srv)
	down, back := t0.Add(cfg.Warmup), t0.Add(cfg.Warmup+cfg.Outage)
	end := back.Add(cfg.After)
	srv.SetOutageWindow(down, back)
	counter.mu.Lock()
	counter.outageFrom, counter.outageTo, counter.t0 = down, back, t0
	counter.mu.Unlock()

	callCtx, cut := context.WithCancel(ctx)
	defer cut()
	var (
		mu    sync.Mutex
		calls []*fleetCall
		late  []time.Duration
		wg    sync.WaitGroup
	)
	cpu0, wall0 := cpuTime(), time.Now()
	var clients sync.WaitGroup
	interval := time.Duration(float64(cfg.Clients) / cfg.Rate() * float64(time.Second))
	for i, cc := range conns {
		client := testingv1.NewTestServiceClient(cc)
		seed := slowSeed(i)
		seed[31] ^= byte(cfg.Seed)
		for b := range 8 {
			seed[24+b] ^= byte(cfg.Seed >> (8 * b))
		}
		rng := rand.New(rand.NewChaCha8(seed))
		next := func(prev time.Time) time.Time {
			if cfg.Arrivals == ArrivalsPoisson {
				return prev.Add(time.Duration(rng.ExpFloat64() * float64(interval)))
			}
			return prev.Add(interval)
		}
		first := t0.Add(time.Duration(i) * interval / time.Duration(cfg.Clients))
		if cfg.Arrivals == ArrivalsPoisson {
			first = next(t0)
		}
		clients.Add(1)
		go func() {
			defer clients.Done()
			t := time.NewTimer(time.Until(first))
			defer t.Stop()
			seq := 0
			for at := first; at.Before(end); at = next(at) {
				if d := time.Until(at); d > 0 {
					t.Reset(d)
					select {
					case <-callCtx.Done():
						return
					case <-t.C:
					}
				}
				seq++
				call := &fleetCall{key: fmt.Sprintf("c%d-%d", i, seq), scheduled: at}
				mu.Lock()
				calls = append(calls, call)
				late = append(late, time.Since(at))
				mu.Unlock()
				wg.Add(1)
				go func() {
					defer wg.Done()
					fleetOne(callCtx, client, call, cfg.Deadline)
				}()
			}
		}()
	}
	clients.Wait()
	// Past the load, the calls still in flight get Drain to end.
	awaitCalls(&wg, end.Add(cfg.Drain), cut)
	cpu := (cpuTime() - cpu0).Seconds() / time.Since(wall0).Seconds()

	r := summarizeFleet(cfg, c.Name, calls, srv, t0)
	r.ClientAttempts = counter.began()
	st := srv.Stats()
	r.ServerReceived, r.ServerRejected = st.Received, st.Rejected
	r.CPU = cpu
	slices.Sort(late)
	r.IssueLateP99, r.IssueLateMax = percentile(late, 0.99), percentile(late, 1)
	if ctx.Err() != nil {
		return r, ctx.Err()
	}
	return r, nil
}

// fleetOne makes one call and logs its outcome in call.
func fleetOne(ctx context.Context, client testingv1.TestServiceClient, call *fleetCall, deadline time.Duration) {
	if err := call.get(ctx, client, &testingv1.Script{Key: call.key}, deadline); err != nil {
		call.code = status.Code(err)
	}
}

// timedCall is when a call began and ended, and how; reported: stagger's
// Report of it says its answer carried a load report.
type timedCall struct {
	begin, end time.Time
	ok         bool
	reported   bool
	reason     string // of a failure: fleetReason
}

// get makes one Get of sc under ctx and deadline (none when 0), logs its
// times and outcome in c, and returns its error.
func (c *timedCall) get(ctx context.Context, client testingv1.TestServiceClient, sc *testingv1.Script, deadline time.Duration) error {
	if deadline > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, deadline)
		defer cancel()
	}
	// stagger fills the report in (the Gate's rule that ended a wait);
	// the other layers ignore the option.
	var rep interceptor.Report
	c.begin = time.Now()
	_, err := client.Get(ctx, &testingv1.GetRequest{Script: sc}, interceptor.WithReport(&rep))
	c.end = time.Now()
	c.ok, c.reported = err == nil, rep.Load.Reported
	if err != nil {
		c.reason = fleetReason(err, rep.WaitEnd)
	}
	return err
}

// loadStart is when a run's load starts: on the next whole second of
// srv's clock (as Run's), so that its arrival bins line up with the
// load's.
func loadStart(srv *testserver.Server) time.Time {
	return srv.Start().Add((time.Since(srv.Start())/time.Second + 1) * time.Second)
}

// awaitCalls waits for the calls of wg, cancelling (cut) those still in
// flight at by.
func awaitCalls(wg *sync.WaitGroup, by time.Time, cut context.CancelFunc) {
	stop := time.AfterFunc(time.Until(by), cut)
	wg.Wait()
	stop.Stop()
}

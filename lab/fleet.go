package lab

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"regexp"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/stagger-go/stagger"
	"github.com/stagger-go/stagger/budget"
	"github.com/stagger-go/stagger/interceptor"
	"github.com/stagger-go/stagger/policy"
	testingv1 "github.com/stagger-go/stagger/proto/stagger/testing/v1"
	"github.com/stagger-go/stagger/testserver"
)

// ScenarioFleet names the fleet scenario (RunFleet): it has its own
// configuration (FleetConfig) and report (FleetReport), so it is not among
// Scenarios and Run does not run it.
const ScenarioFleet Scenario = "fleet"

// Arrivals is how a fleet's clients space their calls.
type Arrivals string

const (
	// ArrivalsEven: each client calls every Clients ÷ rate seconds, the
	// clients' first calls spread evenly over one interval (as Run's
	// scenarios do): the server meets a smooth load, so that a refusal
	// after the return is one the retries caused, not a chance bunching.
	ArrivalsEven Arrivals = "even"
	// ArrivalsPoisson: each client's calls are a Poisson process of rate ÷
	// Clients (exponential gaps drawn from the client's own source, seeded
	// by FleetConfig.Seed and its index); the fleet's sum is a Poisson
	// process of the whole rate.
	ArrivalsPoisson Arrivals = "poisson"
)

// The fleet's retry policy, the same for every contender: FleetAttempts
// attempts (the first included), pauses from FleetBackoff, on UNAVAILABLE
// and RESOURCE_EXHAUSTED.
const FleetAttempts = 4

// FleetBackoff is the fleet's backoff: 0.1 s, doubling, at most 1 s, gRFC
// A6's jitter.
var FleetBackoff = policy.Backoff{Initial: 100 * time.Millisecond, Max: time.Second, Multiplier: 2, Jitter: policy.JitterProportional}

// FleetConfig describes a fleet run: Clients client processes' worth of
// independent retry layers (each its own connection, and for stagger its
// own default budgets, as separate pods have) calling one server over
// loopback TCP that has room for Capacity attempts a second (Workers
// workers, no queue: RESOURCE_EXHAUSTED past that), answers UNAVAILABLE
// for Outage after Warmup, then serves again while the load goes on for
// After. The zero value of each field means its default. A FleetConfig is
// a plain value.
type FleetConfig struct {
	// Clients is the number of client processes; default 20.
	Clients int
	// Capacity is the attempts per second the server serves; default
	// 1000. Workers is how many it serves at once; default 50, so that
	// an attempt costs a worker Workers ÷ Capacity (50 ms).
	Capacity, Workers int
	// Load is the offered calls per second as a share of Capacity, spread
	// over the clients; default 0.4.
	Load float64
	// Deadline is every call's deadline; 0 (the default) means none.
	Deadline time.Duration
	// Warmup is the load before the outage (default 2 s), Outage the
	// outage (default 10 s), After the load after the return (default 15
	// s). Each is a whole number of Bins.
	Warmup, Outage, After time.Duration
	// Drain bounds how long the lab waits, once the load has ended, for
	// the calls still in flight; those it then cancels count in
	// FleetResult.Cut. Default 60 s.
	Drain time.Duration
	// Arrivals is how calls are spaced; default ArrivalsEven.
	Arrivals Arrivals
	// Seed seeds the clients' draws under ArrivalsPoisson.
	Seed uint64
	// Contenders names the contenders to run, one after another; default
	// every one of FleetContenders.
	Contenders []string
}

// Defaults returns c with every zero field set to its default.
func (c FleetConfig) Defaults() FleetConfig {
	set := func(v *int, d int) {
		if *v == 0 {
			*v = d
		}
	}
	setD := func(v *time.Duration, d time.Duration) {
		if *v == 0 {
			*v = d
		}
	}
	set(&c.Clients, 20)
	set(&c.Capacity, 1000)
	set(&c.Workers, 50)
	if c.Load == 0 {
		c.Load = 0.4
	}
	setD(&c.Warmup, 2*time.Second)
	setD(&c.Outage, 10*time.Second)
	setD(&c.After, 15*time.Second)
	setD(&c.Drain, time.Minute)
	if c.Arrivals == "" {
		c.Arrivals = ArrivalsEven
	}
	if c.Contenders == nil {
		c.Contenders = namesOf(FleetContenders())
	}
	return c
}

// Validate reports every field of c (after Defaults) that a run cannot use.
func (c FleetConfig) Validate() error {
	var errs []error
	bad := func(field, rule string, v any) {
		errs = append(errs, fmt.Errorf("lab: fleet: %s: %s, got %v", field, rule, v))
	}
	if c.Clients < 1 || c.Clients > 10000 {
		bad("Clients", "must be in [1, 10000]", c.Clients)
	}
	if c.Workers < 1 || c.Workers > 10000 {
		bad("Workers", "must be in [1, 10000]", c.Workers)
	}
	if c.Capacity < 1 || (c.Workers >= 1 && c.Capacity > c.Workers*1000) {
		bad("Capacity", "must be in [1, Workers × 1000] (at least 1 ms per attempt)", c.Capacity)
	}
	if !(c.Load > 0) || c.Load > 10 {
		bad("Load", "must be in (0, 10] (a share of Capacity)", c.Load)
	}
	if c.Deadline < 0 {
		bad("Deadline", "must be >= 0 (0: none)", c.Deadline)
	}
	for _, d := range []struct {
		name string
		v    time.Duration
	}{{"Warmup", c.Warmup}, {"Outage", c.Outage}, {"After", c.After}} {
		if d.v < Bin || d.v%Bin != 0 || d.v > time.Hour {
			bad(d.name, fmt.Sprintf("must be a whole number of %v in [%v, 1h]", Bin, Bin), d.v)
		}
	}
	if c.After > 0 && c.After < 3*time.Second {
		bad("After", "must be at least 3s (the return's first 3 s are measured)", c.After)
	}
	if c.Drain <= 0 {
		bad("Drain", "must be > 0", c.Drain)
	}
	if c.Arrivals != ArrivalsEven && c.Arrivals != ArrivalsPoisson {
		bad("Arrivals", fmt.Sprintf("must be %q or %q", ArrivalsEven, ArrivalsPoisson), fmt.Sprintf("%q", c.Arrivals))
	}
	if len(c.Contenders) == 0 {
		bad("Contenders", "must name at least one", "none")
	}
	seen := map[string]bool{}
	for _, n := range c.Contenders {
		if _, ok := contenderIn(FleetContenders(), n); !ok {
			bad("Contenders", "must be among "+strings.Join(namesOf(FleetContenders()), ", "), fmt.Sprintf("%q", n))
		}
		if seen[n] {
			bad("Contenders", "must not repeat a name", fmt.Sprintf("%q", n))
		}
		seen[n] = true
	}
	return errors.Join(errs...)
}

// Rate is the calls per second offered to the server: Load × Capacity.
func (c FleetConfig) Rate() float64 { return c.Load * float64(c.Capacity) }

// ServiceTime is the worker time an attempt costs: Workers ÷ Capacity.
func (c FleetConfig) ServiceTime() time.Duration {
	return time.Duration(c.Workers) * time.Second / time.Duration(max(c.Capacity, 1))
}

// labConfig is the Config the shared contenders build their retry layers
// from: the fleet's policy, no per-attempt timeout.
func (c FleetConfig) labConfig() *Config {
	return &Config{Scenario: ScenarioUnavailable, MaxAttempts: FleetAttempts, Backoff: FleetBackoff}
}

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
		dialOptions: func(c *Config) ([]grpc.DialOption, error) {
			file, err := policy.ParseConfig([]byte(staggerFile(c)))
			if err != nil {
				return nil, err
			}
			bs, err := budget.NewBackends(budget.DefaultSettings())
			if err != nil {
				return nil, err
			}
			return stagger.DialOptions(file, interceptor.WithDefaultBudgets(bs)), nil
		},
	}
	out := []Contender{stg}
	for _, n := range []string{"grpc-go-throttle", "grpc-middleware", "failsafe-go", "no-retry"} {
		c, _ := contenderIn(Contenders(), n)
		out = append(out, c)
	}
	return out
}

// FleetReport is a fleet run's configuration (defaults filled in) and its
// results, in the order of FleetConfig.Contenders.
type FleetReport struct {
	Config  FleetConfig
	Results []FleetResult
	// Wall is how long the run took.
	Wall time.Duration
}

// FleetResult is what one contender's fleet did. Times "after the return"
// count from the end of the outage; "outage calls" are the calls made
// during it. Every count of attempts is the server's own (its records of
// each call's attempts) unless it says client.
type FleetResult struct {
	Contender string
	// Calls is the calls made; Served those that succeeded.
	Calls, Served int
	// Load is the attempts that arrived at the server per Bin, from the
	// start of the load; Refused the RESOURCE_EXHAUSTED it sent per Bin.
	Load, Refused []int
	// FirstSecond is the attempts that arrived in the first second after
	// the return; ReturnBins the attempts per Bin in its first 3 s.
	FirstSecond int
	ReturnBins  []int
	// PeakAfter is the most attempts that arrived in one Bin after the
	// return, ÷ Capacity × Bin.
	PeakAfter float64
	// Above11 and Above10 are the time after the return spent above 1.1×
	// and above 1.0× Capacity (in whole Bins).
	Above11, Above10 time.Duration
	// RefusedBefore is the RESOURCE_EXHAUSTED the server sent during the
	// warmup (the baseline of the load alone); RefusedAfter those it sent
	// after the return, of which RefusedFresh hit first attempts of
	// calls made after the return.
	RefusedBefore, RefusedAfter, RefusedFresh int
	// OutageCalls is the calls made during the outage, OutageServed those
	// of them that succeeded, HeldAtReturn those still in flight at the
	// return, OutageLate those whose first attempt reached the server
	// only after the return (a late first attempt finds it serving).
	OutageCalls, OutageServed, HeldAtReturn, OutageLate int
	// HeldP50, HeldP90 and HeldMax are when the outage calls that
	// succeeded finished, after the return.
	HeldP50, HeldP90, HeldMax time.Duration
	// FailedAfter is the calls that failed after the return; FailedRoom
	// those of them that failed while the server had room: it refused
	// nothing in the Bin of the failure and the Bin before.
	// RoomReasons counts FailedRoom by error (the rule, for stagger's
	// give-ups, and the text, digits as #), most first; AfterReasons,
	// FailedAfter.
	FailedAfter, FailedRoom   int
	RoomReasons, AfterReasons []FleetReason
	// Longest is the longest call (from its start to its return).
	Longest time.Duration
	// P50 and P99 are of the calls that succeeded, FailP50 and FailP99 of
	// those that failed.
	P50, P99, FailP50, FailP99 time.Duration
	// DownAttempts is the attempts that arrived during the outage;
	// DownPerCall, DownAttempts ÷ OutageCalls.
	DownAttempts int
	DownPerCall  float64
	// ClientAttempts is the attempts the clients began (their stats
	// handlers; transparent retries not counted); ServerReceived the
	// server's Stats.Received, RecordedAttempts its records of the calls'
	// attempts, ServerRefused the RESOURCE_EXHAUSTED among them and
	// ServerUnavailable the UNAVAILABLE (the outage's). The first three
	// agree when nothing was lost. ServerRejected is the server's
	// Stats.Rejected: ServerRefused + ServerUnavailable.
	ClientAttempts                                     int
	ServerReceived, ServerRejected                     int64
	RecordedAttempts, ServerRefused, ServerUnavailable int
	// Cut is the calls the lab cancelled past Drain.
	Cut int
	// The machine: IssueLateP99 and IssueLateMax are how late the clients
	// made their calls against their schedule; ReachP99 and ReachMax how
	// long a call's first attempt took to reach the server (its record's
	// arrival − the call's start; a retry layer that holds first attempts
	// adds to it); CPU is the cores the process used, on average, while
	// the contender ran (its server's and the lab's included; 0 where the
	// platform does not say).
	IssueLateP99, IssueLateMax, ReachP99, ReachMax time.Duration
	CPU                                            float64
}

// FleetReason is a kind of failure and how many calls failed so.
type FleetReason struct {
	Reason string
	Count  int
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
	key                   string
	scheduled, begin, end time.Time
	ok                    bool
	code                  codes.Code
	reason                string // of a failure
}

func runFleetContender(ctx context.Context, cfg *FleetConfig, c Contender) (FleetResult, error) {
	srv := testserver.New(testserver.WithArrivalBucket(Bin), testserver.WithTCP())
	defer srv.Close()
	srv.SetWorkers(testserver.Workers{Count: cfg.Workers, Service: cfg.ServiceTime()})
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
	// The load starts on a whole second of the server's clock (as Run's),
	// so that its arrival bins line up with the load's.
	t0 := srv.Start().Add((time.Since(srv.Start())/time.Second + 1) * time.Second)
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
	stopCut := time.AfterFunc(time.Until(end.Add(cfg.Drain)), cut)
	wg.Wait()
	stopCut.Stop()
	cpu := (cpuTime() - cpu0).Seconds() / time.Since(wall0).Seconds()

	counter.mu.Lock()
	clientAttempts := counter.attempts
	counter.mu.Unlock()
	r := summarizeFleet(cfg, c.Name, calls, srv, t0)
	r.ClientAttempts = clientAttempts
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
	if deadline > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, deadline)
		defer cancel()
	}
	// stagger fills the report in (the Gate's rule that ended a wait);
	// the other layers ignore the option.
	var rep interceptor.Report
	call.begin = time.Now()
	_, err := client.Get(ctx, &testingv1.GetRequest{Script: &testingv1.Script{Key: call.key}}, interceptor.WithReport(&rep))
	call.end = time.Now()
	call.ok = err == nil
	if err != nil {
		call.code, call.reason = status.Code(err), fleetReason(err, rep.WaitEnd)
	}
}

var digits = regexp.MustCompile(`[0-9]+(\.[0-9]+)?`)

// fleetReason is the kind of failure err is: when stagger gave up, its
// reason and the rule of the Gate's wait contract that ended a wait (rule,
// Report.WaitEnd), else the status code; then the error's text with its
// numbers as #.
func fleetReason(err error, rule string) string {
	text := digits.ReplaceAllString(err.Error(), "#")
	var e *interceptor.Error
	if errors.As(err, &e) {
		why := e.Reason.String()
		if rule != "" {
			why += "/" + rule
		}
		return why + ": " + text
	}
	return status.Code(err).String() + ": " + text
}

// summarizeFleet works out a contender's figures from its calls and its
// server's records of their attempts.
func summarizeFleet(cfg *FleetConfig, name string, calls []*fleetCall, srv *testserver.Server, t0 time.Time) FleetResult {
	r := FleetResult{Contender: name, Calls: len(calls)}
	down, back := t0.Add(cfg.Warmup), t0.Add(cfg.Warmup+cfg.Outage)
	bin := func(t time.Time) int { return int(t.Sub(t0) / Bin) }
	perBin := float64(cfg.Capacity) * Bin.Seconds()
	count := func(s *[]int, b int) {
		if b < 0 || b >= maxSeconds*int(time.Second/Bin) {
			return
		}
		for len(*s) <= b {
			*s = append(*s, 0)
		}
		(*s)[b]++
	}
	var ok, failed, held, reach []time.Duration
	for _, c := range calls {
		recs := srv.Attempts(c.key)
		r.RecordedAttempts += len(recs)
		if c.begin.IsZero() {
			// Never began: the run was cut before its goroutine ran.
			c.begin, c.end = c.scheduled, c.scheduled
		}
		for _, a := range recs {
			count(&r.Load, bin(a.Arrived))
			if !a.Arrived.Before(down) && a.Arrived.Before(back) {
				r.DownAttempts++
			}
			if a.Attempt == 1 {
				reach = append(reach, max(a.Arrived.Sub(c.begin), 0))
				if !c.begin.Before(down) && c.begin.Before(back) && !a.Arrived.Before(back) {
					r.OutageLate++
				}
			}
			switch {
			case a.Rejected && a.Code == codes.ResourceExhausted:
				r.ServerRefused++
				count(&r.Refused, bin(a.Arrived))
				switch {
				case a.Arrived.Before(down):
					r.RefusedBefore++
				case !a.Arrived.Before(back):
					r.RefusedAfter++
					if a.Attempt == 1 && !c.begin.Before(back) {
						r.RefusedFresh++
					}
				}
			case a.Rejected && a.Code == codes.Unavailable:
				r.ServerUnavailable++
			}
		}
		d := c.end.Sub(c.begin)
		r.Longest = max(r.Longest, d)
		if c.ok {
			r.Served++
			ok = append(ok, d)
		} else {
			failed = append(failed, d)
			if c.code == codes.Canceled {
				r.Cut++
			}
		}
		if !c.begin.Before(down) && c.begin.Before(back) {
			r.OutageCalls++
			if !c.end.Before(back) {
				r.HeldAtReturn++
			}
			if c.ok {
				r.OutageServed++
				held = append(held, max(c.end.Sub(back), 0))
			}
		}
	}
	reasons, after := map[string]int{}, map[string]int{}
	for _, c := range calls {
		if c.ok || c.end.Before(back) {
			continue
		}
		r.FailedAfter++
		after[c.reason]++
		b := bin(c.end)
		at := func(b int) int {
			if b < 0 || b >= len(r.Refused) {
				return 0
			}
			return r.Refused[b]
		}
		if at(b) == 0 && at(b-1) == 0 {
			r.FailedRoom++
			reasons[c.reason]++
		}
	}
	r.RoomReasons, r.AfterReasons = byCount(reasons), byCount(after)
	rb := bin(back)
	for b := rb; b < len(r.Load); b++ {
		n := float64(r.Load[b])
		r.PeakAfter = max(r.PeakAfter, n/perBin)
		if n > 1.1*perBin {
			r.Above11 += Bin
		}
		if n > perBin {
			r.Above10 += Bin
		}
		if b < rb+int(time.Second/Bin) {
			r.FirstSecond += r.Load[b]
		}
	}
	r.ReturnBins = make([]int, 3*int(time.Second/Bin))
	for i := range r.ReturnBins {
		if rb+i < len(r.Load) {
			r.ReturnBins[i] = r.Load[rb+i]
		}
	}
	if r.OutageCalls > 0 {
		r.DownPerCall = float64(r.DownAttempts) / float64(r.OutageCalls)
	}
	for _, s := range [][]time.Duration{ok, failed, held, reach} {
		slices.Sort(s)
	}
	r.P50, r.P99 = percentile(ok, 0.5), percentile(ok, 0.99)
	r.FailP50, r.FailP99 = percentile(failed, 0.5), percentile(failed, 0.99)
	r.HeldP50, r.HeldP90, r.HeldMax = percentile(held, 0.5), percentile(held, 0.9), percentile(held, 1)
	r.ReachP99, r.ReachMax = percentile(reach, 0.99), percentile(reach, 1)
	return r
}

// byCount lists counts, most first.
func byCount(counts map[string]int) []FleetReason {
	var rs []FleetReason
	for k, n := range counts {
		rs = append(rs, FleetReason{k, n})
	}
	sort.Slice(rs, func(i, j int) bool {
		a, b := rs[i], rs[j]
		if a.Count != b.Count {
			return a.Count > b.Count
		}
		return a.Reason < b.Reason
	})
	return rs
}

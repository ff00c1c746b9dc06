package lab

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors/retry"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/stagger-go/stagger/internal/fleet"
	"github.com/stagger-go/stagger/policy"
	testingv1 "github.com/stagger-go/stagger/proto/stagger/testing/v1"
	"github.com/stagger-go/stagger/testserver"
)

// The migration scenarios (RunMigrate) are what a team met moving one
// client from go-grpc-middleware's retry interceptor to stagger by the
// migration guide: one client process, one backend, the old policy beside
// the new. They have their own configuration (MigrateConfig) and report
// (MigrateReport), so they are not among Scenarios and Run does not run
// them.
const (
	// ScenarioMigrateRefused: the backend refuses each attempt with
	// RESOURCE_EXHAUSTED, without a pushback, with probability
	// FailureRate (0.3), independently; no trigger, no deadline, 30
	// calls/s for 10 s.
	ScenarioMigrateRefused Scenario = "migrate-refused"
	// ScenarioMigrateOutage: the backend answers UNAVAILABLE from 2 s to
	// 5 s of an 8 s load of 20 calls/s, each call with a 1 s deadline.
	ScenarioMigrateOutage Scenario = "migrate-outage"
	// ScenarioMigrateBurst: the backend refuses every attempt with
	// RESOURCE_EXHAUSTED, without a pushback, for the first 2 s of an 8 s
	// load of 20 calls/s, then serves every attempt (a backend with room
	// to spare). No deadline. MigrateResult.TriggerLastEnd says how long
	// after the burst its calls were still waiting.
	ScenarioMigrateBurst Scenario = "migrate-burst"
)

// MigrateScenarios lists the migration scenarios, in the order the CLI
// shows them.
func MigrateScenarios() []Scenario {
	return []Scenario{ScenarioMigrateRefused, ScenarioMigrateOutage, ScenarioMigrateBurst}
}

// MigrateAttempts and MigrateBackoff are the team's policy, the same for
// stagger and go-grpc-middleware (MigrateContenders): 5 attempts, the
// first included (go-grpc-middleware's WithMax(5)), pauses from 0.1 s
// doubling; stagger caps them at 10 s with gRFC A6's jitter, where
// go-grpc-middleware's BackoffExponential has neither (100, 200, 400 and
// 800 ms).
const MigrateAttempts = 5

// MigrateBackoff is stagger's side of the team's backoff (see
// MigrateAttempts).
var MigrateBackoff = policy.Backoff{Initial: 100 * time.Millisecond, Max: 10 * time.Second, Multiplier: 2, Jitter: policy.JitterProportional}

// MigrateConfig describes a migration run: one client per contender (one
// process, with its own default budgets for stagger), calling a backend of
// its own that fails as the scenario says, open loop. The zero value of
// each field means its default. A MigrateConfig is a plain value.
type MigrateConfig struct {
	// Scenario is one of MigrateScenarios; default ScenarioMigrateRefused.
	Scenario Scenario
	// Duration is how long calls are offered; default 10 s
	// (ScenarioMigrateRefused), 8 s (the others). A Duration of
	// TriggerEnd ends the load with the trigger: the backend is then idle
	// but for the retries.
	Duration time.Duration
	// TriggerStart and TriggerEnd bound the outage (default 2 s to 5 s) or
	// the burst (default 0 to 2 s), counted from the start of the load;
	// taken when both are zero. ScenarioMigrateRefused has no trigger and
	// ignores them.
	TriggerStart, TriggerEnd time.Duration
	// Rate is the calls per second the client offers; default 30
	// (ScenarioMigrateRefused), 20 (the others).
	Rate float64
	// Deadline is every call's deadline; default none, 1 s in
	// ScenarioMigrateOutage. A negative Deadline means none.
	Deadline time.Duration
	// FailureRate is the probability with which ScenarioMigrateRefused's
	// backend refuses each attempt; default 0.3. Each call's refusals are
	// drawn from the client's seeded source, so that every contender
	// meets the same ones. The other scenarios ignore it.
	FailureRate float64
	// TCP runs the calls over loopback TCP instead of bufconn (bufconn,
	// the default, also runs inside a testing/synctest bubble).
	TCP bool
	// Drain bounds how long the lab waits, once the load has ended, for
	// the calls still in flight; those it then cancels count in
	// MigrateResult.Cut. Default 60 s.
	Drain time.Duration
	// Contenders names the contenders to run, all at once, each against
	// its own backend; default every one of MigrateContenders.
	Contenders []string
}

// Defaults returns c with every zero field set to its default.
func (c MigrateConfig) Defaults() MigrateConfig {
	if c.Scenario == "" {
		c.Scenario = ScenarioMigrateRefused
	}
	if c.TriggerStart == 0 && c.TriggerEnd == 0 {
		switch c.Scenario {
		case ScenarioMigrateOutage:
			c.TriggerStart, c.TriggerEnd = 2*time.Second, 5*time.Second
		case ScenarioMigrateBurst:
			c.TriggerEnd = 2 * time.Second
		}
	}
	if c.Duration == 0 {
		c.Duration = 8 * time.Second
		if c.Scenario == ScenarioMigrateRefused {
			c.Duration = 10 * time.Second
		}
	}
	if c.Rate == 0 {
		c.Rate = 20
		if c.Scenario == ScenarioMigrateRefused {
			c.Rate = 30
		}
	}
	if c.Deadline == 0 && c.Scenario == ScenarioMigrateOutage {
		c.Deadline = time.Second
	}
	if c.FailureRate == 0 {
		c.FailureRate = 0.3
	}
	if c.Drain == 0 {
		c.Drain = time.Minute
	}
	if c.Contenders == nil {
		c.Contenders = namesOf(MigrateContenders())
	}
	return c
}

// Validate reports every field of c (after Defaults) that a run cannot use.
func (c MigrateConfig) Validate() error {
	var errs []error
	bad := func(field, rule string, v any) {
		errs = append(errs, fmt.Errorf("lab: %s: %s: %s, got %v", c.Scenario, field, rule, v))
	}
	if !slices.Contains(MigrateScenarios(), c.Scenario) {
		bad("Scenario", "must be one of "+strings.Join(migrateNames(), ", "), fmt.Sprintf("%q", c.Scenario))
	}
	if c.Duration <= 0 || c.Duration > time.Hour {
		bad("Duration", "must be in (0, 1h]", c.Duration)
	}
	if c.triggered() && (c.TriggerStart < 0 || c.TriggerEnd <= c.TriggerStart || c.TriggerEnd > c.Duration) {
		bad("TriggerStart/TriggerEnd", "must satisfy 0 <= start < end <= Duration", fmt.Sprintf("[%v, %v) of %v", c.TriggerStart, c.TriggerEnd, c.Duration))
	}
	if !(c.Rate > 0) || c.Rate > 10000 {
		bad("Rate", "must be in (0, 10000] calls per second", c.Rate)
	}
	if !(c.FailureRate >= 0) || c.FailureRate > 1 {
		bad("FailureRate", "must be in [0, 1]", c.FailureRate)
	}
	if c.Drain <= 0 {
		bad("Drain", "must be > 0", c.Drain)
	}
	checkContenders(c.Contenders, MigrateContenders(), bad)
	return errors.Join(errs...)
}

// triggered reports whether c's scenario has a trigger (an outage or a
// burst) from TriggerStart to TriggerEnd.
func (c MigrateConfig) triggered() bool { return c.Scenario != ScenarioMigrateRefused }

// deadline is every call's deadline; 0 for none.
func (c MigrateConfig) deadline() time.Duration { return max(c.Deadline, 0) }

func migrateNames() []string {
	var out []string
	for _, s := range MigrateScenarios() {
		out = append(out, string(s))
	}
	return out
}

// migrateFile is the team's stagger policy file, as the migration guide
// has it: the policy of MigrateAttempts and MigrateBackoff on both codes,
// and no retryThrottling, so that stagger.DialOptions installs the default
// budgets.
var migrateFile = fmt.Sprintf(`{"methodConfig": [{"name": [{"service": "stagger.testing.v1.TestService"}],
  "retryPolicy": {"maxAttempts": %d, "initialBackoff": %q, "maxBackoff": %q, "backoffMultiplier": %g, "jitter": %q,
    "retryableStatusCodes": ["UNAVAILABLE", "RESOURCE_EXHAUSTED"]}}]}`,
	MigrateAttempts, protoDuration(MigrateBackoff.Initial), protoDuration(MigrateBackoff.Max), MigrateBackoff.Multiplier, MigrateBackoff.Jitter)

// MigrateContenders lists the migration scenarios' contenders: stagger
// from the team's policy file (migrateFile), with default budgets of the
// client's own (budget.NewBackends(budget.DefaultSettings()), what
// stagger.DialOptions installs as budget.DefaultBackends in a process);
// go-grpc-middleware's retry as the team had it, WithMax(5),
// BackoffExponential(100 ms), on UNAVAILABLE and RESOURCE_EXHAUSTED; and
// no retry.
func MigrateContenders() []Contender {
	return []Contender{
		{
			Name: "stagger",
			Gets: func(Config) string {
				return fmt.Sprintf("policy file: maxAttempts %d, initialBackoff %v, maxBackoff %v, multiplier %g, %v jitter, UNAVAILABLE and RESOURCE_EXHAUSTED; no budget declared: the default budgets",
					MigrateAttempts, MigrateBackoff.Initial, MigrateBackoff.Max, MigrateBackoff.Multiplier, MigrateBackoff.Jitter)
			},
			dialOptions: func(*Config) ([]grpc.DialOption, error) { return staggerOwnBudgets(migrateFile) },
		},
		{
			Name: "grpc-middleware",
			Gets: func(Config) string {
				return fmt.Sprintf("WithMax(%d), BackoffExponential(%v) (no jitter, no cap), UNAVAILABLE and RESOURCE_EXHAUSTED", MigrateAttempts, MigrateBackoff.Initial)
			},
			dialOptions: func(*Config) ([]grpc.DialOption, error) {
				return []grpc.DialOption{
					grpc.WithChainUnaryInterceptor(retry.UnaryClientInterceptor(
						retry.WithMax(MigrateAttempts),
						retry.WithBackoff(retry.BackoffExponential(MigrateBackoff.Initial)),
						retry.WithCodes(retryCodes...),
					)),
					grpc.WithDisableRetry(),
				}, nil
			},
		},
		noRetry(),
	}
}

// MigrateReport is a migration run's configuration (defaults filled in)
// and its results, in the order of MigrateConfig.Contenders.
type MigrateReport struct {
	Config  MigrateConfig
	Results []MigrateResult
	// Wall is how long the run took on the time package's clock.
	Wall time.Duration
}

// MigrateResult is what one contender did in a migration run.
type MigrateResult struct {
	Contender string
	// Calls is the calls made; Successes those that succeeded;
	// SuccessRate, Successes ÷ Calls.
	Calls, Successes int
	SuccessRate      float64
	// Attempts is the attempts the client began (its stats handler;
	// transparent retries not counted); AttemptsPerCall, ÷ Calls.
	Attempts        int
	AttemptsPerCall float64
	// P50 and P99 are of the calls that succeeded, FailP50 and FailP99 of
	// those that failed (zero when none); Longest is the longest call.
	P50, P99, FailP50, FailP99, Longest time.Duration
	// TriggerCalls is the calls made during the trigger (the outage, the
	// burst; 0 in ScenarioMigrateRefused), TriggerServed those of them
	// that succeeded.
	TriggerCalls, TriggerServed int
	// TriggerLastEnd is when the last call made during the trigger ended,
	// counted from the trigger's end (in ScenarioMigrateRefused, which has
	// none, the last call of all, from the load's end); 0 when it ended
	// before.
	TriggerLastEnd time.Duration
	// Reasons counts the failed calls by error (for stagger's give-ups
	// its reason and the rule that ended a wait; else the code; then the
	// text, digits as #), most first.
	Reasons []FleetReason
	// Cut is the calls the lab cancelled past Drain.
	Cut int
}

// RunMigrate fills in cfg's defaults, validates it, and runs every
// contender at the same time, each with one client against a backend of
// its own. It returns when every call and backend has ended. Cancelling
// ctx cancels the calls in flight (the results then cover what ran).
func RunMigrate(ctx context.Context, cfg MigrateConfig) (*MigrateReport, error) {
	cfg = cfg.Defaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	start := time.Now()
	results := make([]MigrateResult, len(cfg.Contenders))
	errs := make([]error, len(cfg.Contenders))
	var wg sync.WaitGroup
	for i, name := range cfg.Contenders {
		c, _ := contenderIn(MigrateContenders(), name)
		wg.Add(1)
		go func() {
			defer wg.Done()
			results[i], errs[i] = runMigrateContender(ctx, &cfg, c)
			if errs[i] != nil {
				errs[i] = fmt.Errorf("lab: %s: %s: %w", cfg.Scenario, name, errs[i])
			}
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return &MigrateReport{Config: cfg, Results: results, Wall: time.Since(start)}, nil
}

// refusalWindow makes a backend refuse every attempt that arrives in
// [from, to) with RESOURCE_EXHAUSTED and no pushback: the testserver's own
// outage window answers UNAVAILABLE.
type refusalWindow struct {
	mu       sync.Mutex
	from, to time.Time
}

func (w *refusalWindow) set(from, to time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.from, w.to = from, to
}

func (w *refusalWindow) unary(ctx context.Context, req any, _ *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	now := time.Now()
	w.mu.Lock()
	in := !w.from.IsZero() && !now.Before(w.from) && now.Before(w.to)
	w.mu.Unlock()
	if in {
		return nil, status.Error(codes.ResourceExhausted, "lab: burst: every attempt refused")
	}
	return handler(ctx, req)
}

// migrateCall is one call of a migration run.
type migrateCall struct {
	timedCall
	cut bool // cancelled by the lab, past Drain
}

func runMigrateContender(ctx context.Context, cfg *MigrateConfig, c Contender) (MigrateResult, error) {
	burst := &refusalWindow{}
	opts := []testserver.Option{testserver.WithServerOptions(grpc.ChainUnaryInterceptor(burst.unary))}
	if cfg.TCP {
		opts = append(opts, testserver.WithTCP())
	}
	srv := testserver.New(opts...)
	defer srv.Close()
	counter := &attemptCounter{}
	dopts, err := c.dialOptions(&Config{})
	if err != nil {
		return MigrateResult{}, err
	}
	dopts = append(dopts, grpc.WithStatsHandler(counter))
	var cc *grpc.ClientConn
	if cfg.TCP {
		cc, err = srv.DialTCP(dopts...)
	} else {
		cc, err = srv.Dial(dopts...)
	}
	if err != nil {
		return MigrateResult{}, fmt.Errorf("dial: %w", err)
	}
	defer cc.Close()
	if err := connectAll(ctx, []*grpc.ClientConn{cc}); err != nil {
		return MigrateResult{}, err
	}
	t0 := loadStart(srv)
	from, to := t0.Add(cfg.TriggerStart), t0.Add(cfg.TriggerEnd)
	switch cfg.Scenario {
	case ScenarioMigrateOutage:
		srv.SetOutageWindow(from, to)
	case ScenarioMigrateBurst:
		burst.set(from, to)
	}
	end := t0.Add(cfg.Duration)

	callCtx, cut := context.WithCancel(ctx)
	defer cut()
	client := testingv1.NewTestServiceClient(cc)
	rng := rand.New(rand.NewChaCha8(slowSeed(0)))
	var (
		mu    sync.Mutex
		calls []*migrateCall
		wg    sync.WaitGroup
		seq   int
	)
	offer(callCtx, t0, end, time.Duration(float64(time.Second)/cfg.Rate), func() {
		seq++
		sc := &testingv1.Script{}
		if cfg.Scenario == ScenarioMigrateRefused {
			// The key makes the server count the call's attempts.
			sc.Key, sc.FailAttempts, sc.Code = fmt.Sprintf("m%d", seq), leadingFailures(rng, cfg.FailureRate), int32(codes.ResourceExhausted)
		}
		call := &migrateCall{}
		mu.Lock()
		calls = append(calls, call)
		mu.Unlock()
		wg.Add(1)
		go func() {
			defer wg.Done()
			migrateOne(callCtx, client, sc, call, cfg.deadline())
		}()
	})
	// Past the load, the calls still in flight get Drain to end.
	awaitCalls(&wg, end.Add(cfg.Drain), cut)
	attempts := counter.began()
	r := summarizeMigrate(cfg, c.Name, calls, t0)
	r.Attempts = attempts
	if r.Calls > 0 {
		r.AttemptsPerCall = float64(attempts) / float64(r.Calls)
	}
	return r, ctx.Err()
}

// migrateOne makes one call under runCtx (which the lab cancels
// past Drain) and logs its outcome in call.
func migrateOne(runCtx context.Context, client testingv1.TestServiceClient, sc *testingv1.Script, call *migrateCall, deadline time.Duration) {
	if err := call.get(runCtx, client, sc, deadline); err != nil {
		call.cut = runCtx.Err() != nil
	}
}

// summarizeMigrate works out a contender's figures from its calls.
func summarizeMigrate(cfg *MigrateConfig, name string, calls []*migrateCall, t0 time.Time) MigrateResult {
	r := MigrateResult{Contender: name, Calls: len(calls)}
	from, to := t0.Add(cfg.TriggerStart), t0.Add(cfg.TriggerEnd)
	if !cfg.triggered() {
		to = t0.Add(cfg.Duration)
	}
	var ok, failed []time.Duration
	reasons := map[string]int{}
	for _, c := range calls {
		d := c.end.Sub(c.begin)
		r.Longest = max(r.Longest, d)
		in := cfg.triggered() && !c.begin.Before(from) && c.begin.Before(to)
		if in {
			r.TriggerCalls++
		}
		if in || !cfg.triggered() {
			r.TriggerLastEnd = max(r.TriggerLastEnd, c.end.Sub(to))
		}
		if c.ok {
			r.Successes++
			ok = append(ok, d)
			if in {
				r.TriggerServed++
			}
			continue
		}
		failed = append(failed, d)
		reasons[c.reason]++
		if c.cut {
			r.Cut++
		}
	}
	if r.Calls > 0 {
		r.SuccessRate = float64(r.Successes) / float64(r.Calls)
	}
	slices.Sort(ok)
	slices.Sort(failed)
	r.P50, r.P99 = percentile(ok, 0.5), percentile(ok, 0.99)
	r.FailP50, r.FailP99 = percentile(failed, 0.5), percentile(failed, 0.99)
	r.Reasons = fleet.ByCount(reasons)
	return r
}

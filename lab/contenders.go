package lab

import (
	"fmt"
	"strings"
	"time"

	"connectrpc.com/connect"
	"github.com/failsafe-go/failsafe-go"
	"github.com/failsafe-go/failsafe-go/failsafegrpc"
	"github.com/failsafe-go/failsafe-go/timeout"
	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors/retry"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"

	"github.com/stagger-go/stagger"
	"github.com/stagger-go/stagger/breaker"
	"github.com/stagger-go/stagger/budget"
	"github.com/stagger-go/stagger/interceptor"
	"github.com/stagger-go/stagger/policy"
	"github.com/stagger-go/stagger/server"
)

// Contender is a retry layer the lab compares. It is an immutable value.
type Contender struct {
	// Name is how the CLI and Config.Contenders call it.
	Name string
	// Gets says, in one line, what the contender is given.
	Gets func(cfg Config) string
	// dialOptions builds one client connection's retry layer (in
	// ScenarioChain, a user's connection to A).
	dialOptions func(cfg *Config) ([]grpc.DialOption, error)
	// below builds, in ScenarioChain, the retry layer of the connections
	// from A to B and from B to C; nil means dialOptions.
	below func(cfg *Config) ([]grpc.DialOption, error)
	// serverSide builds, in ScenarioChain, stagger's server side of A or
	// of B (one each, as two processes have); nil means none.
	serverSide func() (*server.Interceptors, error)
	// connect, when set, makes the contender a connect-go client (the
	// gRPC protocol over h2c) with these interceptors, outermost first,
	// in place of dialOptions (connect.go).
	connect func(cfg *Config) ([]connect.Interceptor, error)
}

// retryCodes are what every contender retries.
var retryCodes = []codes.Code{codes.Unavailable, codes.ResourceExhausted}

// Contenders lists the contenders in the order the lab shows them.
func Contenders() []Contender {
	return []Contender{
		{
			Name: "stagger",
			Gets: func(c Config) string {
				tb := budget.DefaultSettings().TokenBucket
				how := ""
				if c.Scenario.flaky() {
					how = ", from a policy file that declares no budget"
				}
				return fmt.Sprintf("%d attempts%s%s, %v jitter, default budget per client (token bucket cap %v, start %v, retry cost %v, reward %v)",
					c.MaxAttempts, perAttempt(c, "perAttemptRecvTimeout"), how, c.Backoff.Jitter, tb.Capacity, tb.Initial, tb.RetryCost, tb.SuccessReward)
			},
			dialOptions: func(c *Config) ([]grpc.DialOption, error) {
				b, err := budget.New(budget.DefaultSettings())
				if err != nil {
					return nil, err
				}
				if c.Scenario.flaky() {
					// As a user would: a file without a budget, which
					// stagger.DialOptions gives the default budget (a
					// fresh one per client, as each process has its own).
					file, err := policy.ParseConfig([]byte(staggerFile(c)))
					if err != nil {
						return nil, err
					}
					return stagger.DialOptions(file, interceptor.WithBudget(b)), nil
				}
				return stagger.DialOptions(nil, interceptor.WithPolicy(staggerPolicy(c)), interceptor.WithBudget(b)), nil
			},
		},
		{
			Name: "stagger-nobudget",
			Gets: func(c Config) string {
				return fmt.Sprintf("%d attempts%s, %v jitter, no budget", c.MaxAttempts, perAttempt(c, "perAttemptRecvTimeout"), c.Backoff.Jitter)
			},
			dialOptions: staggerNoBudget,
		},
		guarded("stagger-breaker", breaker.Settings{}, "a circuit breaker per client (defaults: opens at 50 %% of ≥ 20 first attempts failing in 10 s, or 5 in a row)"),
		guarded("stagger-throttling", breaker.Settings{NoTrip: true, ThrottleK: breaker.DefaultThrottleK}, "client-side adaptive throttling per client (K = 2)"),
		{
			Name: "grpc-middleware",
			Gets: func(c Config) string {
				return fmt.Sprintf("WithMax(%d)%s, BackoffExponentialWithJitter(%v, 0.2), no cap", c.MaxAttempts, perAttempt(c, "WithPerRetryTimeout"), c.Backoff.Initial)
			},
			dialOptions: grpcMiddleware,
		},
		{
			Name: "failsafe-go",
			Gets: func(c Config) string {
				t := ""
				if c.Scenario.timeouts() {
					t = fmt.Sprintf(" around timeout.New(%v) per attempt", c.PerAttemptTimeout)
				}
				return fmt.Sprintf("retrypolicy WithMaxAttempts(%d)%s, WithBackoffFactor(%v, %v, %g), WithJitterFactor(0.2), budget.New() per client (retries at most 20 %% of executions in flight, at least 3)",
					c.MaxAttempts, t, c.Backoff.Initial, c.Backoff.Max, c.Backoff.Multiplier)
			},
			dialOptions: func(c *Config) ([]grpc.DialOption, error) {
				policies := []failsafe.Policy[any]{failsafeRetry(c)}
				if c.Scenario.timeouts() {
					// The retry policy outside, the timeout inside: a
					// timeout per attempt.
					policies = append(policies, timeout.New[any](c.PerAttemptTimeout))
				}
				return []grpc.DialOption{
					grpc.WithChainUnaryInterceptor(failsafegrpc.NewUnaryClientInterceptor[any](policies...)),
					grpc.WithDisableRetry(),
				}, nil
			},
		},
		{
			Name: "grpc-go",
			Gets: func(c Config) string {
				return fmt.Sprintf("service config maxAttempts %d, ×U(0.8, 1.2) jitter (gRFC A6, grpc-go since v1.69), no throttling%s", c.MaxAttempts, noPerAttempt(c))
			},
			dialOptions: grpcBuiltIn,
		},
		{
			Name: "grpc-go-throttle",
			Gets: func(c Config) string {
				return fmt.Sprintf("service config maxAttempts %d, ×U(0.8, 1.2) jitter, retryThrottling 10/0.1 per connection%s", c.MaxAttempts, noPerAttempt(c))
			},
			dialOptions: func(c *Config) ([]grpc.DialOption, error) {
				return []grpc.DialOption{grpc.WithDefaultServiceConfig(serviceConfig(c, true))}, nil
			},
		},
		{
			Name: "naive",
			Gets: func(c Config) string {
				return fmt.Sprintf("loop of %d attempts%s, fixed %v pause", c.MaxAttempts, perAttempt(c, "context.WithTimeout"), c.Backoff.Initial)
			},
			dialOptions: func(c *Config) ([]grpc.DialOption, error) {
				return []grpc.DialOption{grpc.WithChainUnaryInterceptor(naiveRetry(c.MaxAttempts, c.Backoff.Initial, perAttemptTimeout(c))), grpc.WithDisableRetry()}, nil
			},
		},
		noRetry(),
	}
}

// noRetry is the client that does not retry: a plain connection, grpc-go's
// own retry off, the same deadline as everyone's.
func noRetry() Contender {
	return Contender{
		Name: "no-retry",
		Gets: func(Config) string {
			return "no retry layer (grpc.WithDisableRetry), one attempt per call, the same deadline"
		},
		dialOptions: func(*Config) ([]grpc.DialOption, error) {
			return []grpc.DialOption{grpc.WithDisableRetry()}, nil
		},
	}
}

// perAttemptTimeout is cfg's per-attempt timeout in the scenarios that
// give one, else 0.
func perAttemptTimeout(c *Config) time.Duration {
	if c.Scenario.timeouts() {
		return c.PerAttemptTimeout
	}
	return 0
}

// perAttempt describes a contender's per-attempt timeout, set through
// what, in the scenarios that give one.
func perAttempt(c Config, what string) string {
	if !c.Scenario.timeouts() {
		return ""
	}
	return fmt.Sprintf(", %s %v", what, c.PerAttemptTimeout)
}

// noPerAttempt says that grpc-go has no per-attempt timeout, in the
// scenarios that give the others one.
func noPerAttempt(c Config) string {
	if !c.Scenario.timeouts() {
		return ""
	}
	return "; no per-attempt timeout (grpc-go has none)"
}

// staggerFile is the policy file of the stagger contender in the flaky
// scenarios: the lab's policy for every method of the test service, and
// no budget.
func staggerFile(c *Config) string {
	return fmt.Sprintf(`{"methodConfig": [{"name": [{"service": "stagger.testing.v1.TestService"}],
  "retryPolicy": {"maxAttempts": %d, "initialBackoff": %q, "maxBackoff": %q, "backoffMultiplier": %g,
    "retryableStatusCodes": ["UNAVAILABLE", "RESOURCE_EXHAUSTED"]}}]}`,
		c.MaxAttempts, protoDuration(c.Backoff.Initial), protoDuration(c.Backoff.Max), c.Backoff.Multiplier)
}

// staggerNoBudget is stagger with the lab's policy, without a retry budget
// or breakers.
func staggerNoBudget(c *Config) ([]grpc.DialOption, error) {
	return stagger.DialOptions(nil, interceptor.WithPolicy(staggerPolicy(c)), interceptor.WithBudget(nil)), nil
}

// grpcMiddleware is go-grpc-middleware v2's retry interceptor with the
// lab's attempts and initial pause (see the package comment).
func grpcMiddleware(c *Config) ([]grpc.DialOption, error) {
	opts := []retry.CallOption{
		retry.WithMax(uint(c.MaxAttempts)),
		retry.WithBackoff(retry.BackoffExponentialWithJitter(c.Backoff.Initial, 0.2)),
		retry.WithCodes(retryCodes...),
	}
	if d := perAttemptTimeout(c); d > 0 {
		opts = append(opts, retry.WithPerRetryTimeout(d))
	}
	return []grpc.DialOption{
		grpc.WithChainUnaryInterceptor(retry.UnaryClientInterceptor(opts...)),
		grpc.WithDisableRetry(),
	}, nil
}

// grpcBuiltIn is grpc-go's built-in retry from a service config, without
// retryThrottling.
func grpcBuiltIn(c *Config) ([]grpc.DialOption, error) {
	return []grpc.DialOption{grpc.WithDefaultServiceConfig(serviceConfig(c, false))}, nil
}

// guarded is stagger as the "stagger" contender has it, with breakers of
// settings s, one set per client (a process's), which also pace the
// waitForReady calls held while the connection was down.
func guarded(name string, s breaker.Settings, what string) Contender {
	return Contender{
		Name: name,
		Gets: func(c Config) string {
			return fmt.Sprintf("%d attempts%s, %v jitter, default budget per client, "+what+"; waitForReady calls paced after a reconnection", c.MaxAttempts, perAttempt(c, "perAttemptRecvTimeout"), c.Backoff.Jitter)
		},
		dialOptions: func(c *Config) ([]grpc.DialOption, error) {
			b, err := budget.New(budget.DefaultSettings())
			if err != nil {
				return nil, err
			}
			bs, err := breaker.NewSet(s, nil)
			if err != nil {
				return nil, err
			}
			return stagger.DialOptions(nil, interceptor.WithPolicy(staggerPolicy(c)), interceptor.WithBudget(b), interceptor.WithBreakers(bs)), nil
		},
	}
}

func contenderIn(cs []Contender, name string) (Contender, bool) {
	for _, c := range cs {
		if c.Name == name {
			return c, true
		}
	}
	return Contender{}, false
}

// OverloadContenders lists the contenders of ScenarioOverload: every one of
// Contenders, then those only the overload shows.
func OverloadContenders() []Contender {
	only := []Contender{
		// Overload protection other than retry budgets goes here, one
		// entry each.
	}
	return append(Contenders(), only...)
}

// MixedCriticalityContenders lists the contenders of
// ScenarioMixedCriticality: every one of Contenders, then
// stagger-criticality, stagger with the default budget that says each
// call's criticality (the header the server side reads, and the budget's
// and the gate's admission by criticality). The others' calls all count
// as CRITICAL: stagger's without the criticality, the peers' for want of
// a way to say it.
func MixedCriticalityContenders() []Contender {
	stg, _ := contenderByName(ScenarioUnavailable, "stagger")
	return append(Contenders(), Contender{
		Name: "stagger-criticality",
		Gets: func(c Config) string {
			return stg.Gets(c) + fmt.Sprintf("; says each call's criticality (%.0f %% CRITICAL, the others SHEDDABLE)", 100*CriticalShare)
		},
		dialOptions: func(c *Config) ([]grpc.DialOption, error) {
			dopts, err := stg.dialOptions(c)
			if err != nil {
				return nil, err
			}
			// Outermost, so that stagger's interceptor sees the level.
			return append([]grpc.DialOption{grpc.WithChainUnaryInterceptor(sayCriticality)}, dopts...), nil
		},
	})
}

// ContenderNames lists the names of Contenders, in order.
func ContenderNames() []string { return namesOf(Contenders()) }

// staggerOwnBudgets is stagger's dial options from a policy file that
// declares no budget, with default budgets of the client's own:
// budget.NewBackends(budget.DefaultSettings()), where stagger.DialOptions
// would install the process's budget.DefaultBackends (a fleet's clients
// stand for separate processes).
func staggerOwnBudgets(file string) ([]grpc.DialOption, error) {
	parsed, err := policy.ParseConfig([]byte(file))
	if err != nil {
		return nil, err
	}
	bs, err := budget.NewBackends(budget.DefaultSettings())
	if err != nil {
		return nil, err
	}
	return stagger.DialOptions(parsed, interceptor.WithDefaultBudgets(bs)), nil
}

// checkContenders reports through bad each way names fails to pick
// contenders from among: naming none, naming one not among them, naming
// one twice.
func checkContenders(names []string, among []Contender, bad func(field, rule string, v any)) {
	if len(names) == 0 {
		bad("Contenders", "must name at least one", "none")
	}
	seen := map[string]bool{}
	for _, n := range names {
		if _, ok := contenderIn(among, n); !ok {
			bad("Contenders", "must be among "+strings.Join(namesOf(among), ", "), fmt.Sprintf("%q", n))
		}
		if seen[n] {
			bad("Contenders", "must not repeat a name", fmt.Sprintf("%q", n))
		}
		seen[n] = true
	}
}

func namesOf(cs []Contender) []string {
	var out []string
	for _, c := range cs {
		out = append(out, c.Name)
	}
	return out
}

// ContendersFor lists the contenders of scenario s, in the order the lab
// shows them: HedgingContenders for ScenarioSlowReplica,
// HedgingStreamContenders for ScenarioSlowReplicaStream,
// OverloadContenders for ScenarioOverload, ChainContenders for
// ScenarioChain, BadReplicaContenders for ScenarioBadReplica,
// SlowReplica3Contenders for ScenarioSlowReplica3, Contenders and stagger-hedge-timeout (stagger with
// hedgeOnPerTryTimeout) for the scenarios with per-attempt timeouts
// (slowdown, slowdown-90, metastable), Contenders and the Connect clients
// (stagger-connect, connect-no-retry) for unavailable, blip and
// flaky-quiet, Contenders for the others.
func ContendersFor(s Scenario) []Contender { return contendersFor(s) }

func contendersFor(s Scenario) []Contender {
	switch s {
	case ScenarioSlowReplica:
		return HedgingContenders()
	case ScenarioSlowReplicaStream:
		return HedgingStreamContenders()
	case ScenarioOverload:
		return OverloadContenders()
	case ScenarioMixedCriticality:
		return MixedCriticalityContenders()
	case ScenarioChain:
		return ChainContenders()
	case ScenarioBadReplica:
		return BadReplicaContenders()
	case ScenarioSlowReplica3:
		return SlowReplica3Contenders()
	}
	if s.timeouts() {
		return append(Contenders(), hedgeOnTimeoutContender())
	}
	switch s {
	case ScenarioUnavailable, ScenarioBlip, ScenarioFlakyQuiet:
		return append(Contenders(), connectContenders()...)
	}
	return Contenders()
}

// hedgeOnTimeoutContender is stagger with hedgeOnPerTryTimeout: when its
// per-attempt timer fires and a retry can go, the attempt keeps running
// beside the retry and the first answer wins. Only the scenarios with
// per-attempt timeouts show it.
func hedgeOnTimeoutContender() Contender {
	return Contender{
		Name: "stagger-hedge-timeout",
		Gets: func(c Config) string {
			return fmt.Sprintf("%d attempts%s, hedgeOnPerTryTimeout, %v jitter, default budget per client", c.MaxAttempts, perAttempt(c, "perAttemptRecvTimeout"), c.Backoff.Jitter)
		},
		dialOptions: func(c *Config) ([]grpc.DialOption, error) {
			b, err := budget.New(budget.DefaultSettings())
			if err != nil {
				return nil, err
			}
			p := staggerPolicy(c)
			p.HedgeOnPerTryTimeout = true
			return stagger.DialOptions(nil, interceptor.WithPolicy(p), interceptor.WithBudget(b)), nil
		},
	}
}

// ContenderByName finds a contender of scenario s.
func ContenderByName(s Scenario, name string) (Contender, bool) { return contenderByName(s, name) }

func contenderByName(s Scenario, name string) (Contender, bool) {
	for _, c := range contendersFor(s) {
		if c.Name == name {
			return c, true
		}
	}
	return Contender{}, false
}

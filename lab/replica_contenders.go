package lab

import (
	"fmt"

	"google.golang.org/grpc"

	"github.com/stagger-go/stagger"
	"github.com/stagger-go/stagger/balancer/elsewhere"
	"github.com/stagger-go/stagger/budget"
	"github.com/stagger-go/stagger/interceptor"
	"github.com/stagger-go/stagger/policy"
)

// HedgingContenders lists the contenders of ScenarioSlowReplica: stagger
// with its retry policy only, and with a hedging policy of at most 3
// attempts, with a fixed delay of SlowHedgeDelay and with the adaptive delay.
// Each client has its own default budget, which hedges draw on as retries do.
func HedgingContenders() []Contender {
	hedged := func(name, delay string, adaptive bool) Contender {
		file := fmt.Sprintf(`{"methodConfig": [{"name": [{"service": "stagger.testing.v1.TestService", "method": "Get"}],
  "hedgingPolicy": {"maxAttempts": 3, "hedgingDelay": %q, "nonFatalStatusCodes": ["UNAVAILABLE"], "adaptive": %t}}]}`, delay, adaptive)
		return Contender{
			Name: name,
			Gets: func(Config) string {
				if adaptive {
					return fmt.Sprintf("hedging, 3 attempts, adaptive delay (the method's p95; %v until known), default budget per client", SlowHedgeDelay)
				}
				return fmt.Sprintf("hedging, 3 attempts, hedgingDelay %v, default budget per client", SlowHedgeDelay)
			},
			dialOptions: hedgingDialOptions(file),
		}
	}
	plain := Contenders()[0]
	plain.Name = "stagger-nohedge"
	return []Contender{
		plain,
		hedged("stagger-hedge", protoDuration(SlowHedgeDelay), false),
		hedged("stagger-hedge-adaptive", protoDuration(SlowHedgeDelay), true),
		noRetry(),
	}
}

// HedgingStreamContenders lists the contenders of
// ScenarioSlowReplicaStream: HedgingContenders' three, for ListItems (marked
// idempotent in their file, as the test service's streams are not in the
// proto): stagger with its retry policy only, and hedging with at most 3
// attempts, SlowHedgeDelay apart or the adaptive delay (the method's p95
// time to commit). Each client has its own default budget.
func HedgingStreamContenders() []Contender {
	cs := HedgingContenders()
	for i := range cs[1 : len(cs)-1] { // the hedging ones
		c := &cs[i+1]
		adaptive := c.Name == "stagger-hedge-adaptive"
		gets := c.Gets
		c.Gets = func(cfg Config) string { return gets(cfg) + "; the stream hedged until it commits" }
		file := fmt.Sprintf(`{"methodConfig": [{"name": [{"service": "stagger.testing.v1.TestService", "method": "ListItems"}], "idempotent": true,
  "hedgingPolicy": {"maxAttempts": 3, "hedgingDelay": %q, "nonFatalStatusCodes": ["UNAVAILABLE"], "adaptive": %t}}]}`, protoDuration(SlowHedgeDelay), adaptive)
		c.dialOptions = hedgingDialOptions(file)
	}
	return cs
}

// hedgingDialOptions returns the dial options of a hedging contender: the
// policy file's, and a default budget of the client's own.
func hedgingDialOptions(file string) func(*Config) ([]grpc.DialOption, error) {
	return func(*Config) ([]grpc.DialOption, error) {
		cfg, err := policy.ParseConfig([]byte(file))
		if err != nil {
			return nil, err
		}
		b, err := budget.New(budget.DefaultSettings())
		if err != nil {
			return nil, err
		}
		return stagger.DialOptions(cfg, interceptor.WithBudget(b)), nil
	}
}

// roundRobin is the service config of the bad replica's contenders but
// stagger-elsewhere.
const roundRobin = `{"loadBalancingConfig": [{"round_robin": {}}]}`

// BadReplicaContenders lists the contenders of ScenarioBadReplica: stagger,
// go-grpc-middleware's retry, grpc-go's and no retry, each over
// round_robin, and stagger-elsewhere: stagger over the stagger_elsewhere
// policy (package balancer/elsewhere), which sends a retry to a replica the
// call has not met yet.
func BadReplicaContenders() []Contender {
	balanced := func(c Contender, sc, how string) Contender {
		dial, gets := c.dialOptions, c.Gets
		c.dialOptions = func(cfg *Config) ([]grpc.DialOption, error) {
			opts, err := dial(cfg)
			return append(opts, grpc.WithDefaultServiceConfig(sc)), err
		}
		c.Gets = func(cfg Config) string { return gets(cfg) + "; " + how }
		return c
	}
	all := Contenders()
	plain, _ := contenderIn(all, "stagger")
	mw, _ := contenderIn(all, "grpc-middleware")
	elsewhereC := balanced(plain, elsewhere.ServiceConfig, "stagger_elsewhere over round_robin")
	elsewhereC.Name = "stagger-elsewhere"
	grpcGo := Contender{
		Name: "grpc-go",
		Gets: func(c Config) string {
			return fmt.Sprintf("service config maxAttempts %d, ×U(0.8, 1.2) jitter (gRFC A6), no throttling; round_robin", c.MaxAttempts)
		},
		dialOptions: func(c *Config) ([]grpc.DialOption, error) {
			// One service config holds both the retry policy and the
			// balancer: a second WithDefaultServiceConfig would replace it.
			sc := serviceConfig(c, false)
			return []grpc.DialOption{grpc.WithDefaultServiceConfig(`{"loadBalancingConfig": [{"round_robin": {}}], ` + sc[1:])}, nil
		},
	}
	return []Contender{
		balanced(plain, roundRobin, "round_robin"),
		elsewhereC,
		balanced(mw, roundRobin, "round_robin"),
		grpcGo,
		balanced(noRetry(), roundRobin, "round_robin"),
	}
}

// SlowReplica3Contenders lists the contenders of ScenarioSlowReplica3:
// stagger hedging (3 attempts, SlowHedgeDelay apart, a default budget per
// client, as stagger-hedge of HedgingContenders) over round_robin, the same
// over the stagger_elsewhere policy (stagger-elsewhere), whose hedges go to
// replicas the call has not used, and no-retry over round_robin.
func SlowReplica3Contenders() []Contender {
	var hedge Contender
	for _, c := range HedgingContenders() {
		if c.Name == "stagger-hedge" {
			hedge = c
		}
	}
	balanced := func(c Contender, name, sc, how string) Contender {
		dial, gets := c.dialOptions, c.Gets
		c.Name = name
		c.dialOptions = func(cfg *Config) ([]grpc.DialOption, error) {
			opts, err := dial(cfg)
			return append(opts, grpc.WithDefaultServiceConfig(sc)), err
		}
		c.Gets = func(cfg Config) string { return gets(cfg) + "; " + how }
		return c
	}
	return []Contender{
		balanced(hedge, "stagger", roundRobin, "round_robin"),
		balanced(hedge, "stagger-elsewhere", elsewhere.ServiceConfig, "stagger_elsewhere over round_robin"),
		balanced(noRetry(), "no-retry", roundRobin, "round_robin"),
	}
}

package lab

import (
	"context"
	"fmt"
	"time"

	"google.golang.org/grpc"

	testingv1 "github.com/stagger-go/stagger/proto/stagger/testing/v1"
	"github.com/stagger-go/stagger/server"
	"github.com/stagger-go/stagger/testserver"
)

// ChainContenders lists the contenders of ScenarioChain. Each puts a retry
// layer on every hop of the chain (the users' calls to A, A's to B, B's to
// C), all with MaxAttempts attempts and the Backoff. Only stagger has a
// retry budget; the others have no budget or breakers, so that what they
// make of C's outage is propagation alone:
//
//   - stagger: stagger as a user has it (as the stagger contender has it:
//     its default budget, a fresh one per connection, with its Gate) on
//     every hop, and stagger's server side (server.New: "do not retry"
//     propagation) on A and B. B's Gate holds the retries through C's
//     outage and lets them go once C serves again;
//   - stagger-nobudget: the same without a budget, so without the Gate:
//     propagation alone;
//   - stagger-no-server: stagger-nobudget without the server side;
//   - grpc-go: grpc-go's built-in retry on every hop (as the grpc-go
//     contender has it);
//   - grpc-middleware: go-grpc-middleware's retry on every hop (as the
//     grpc-middleware contender has it), which ignores pushback;
//   - mixed: grpc-go's built-in retry on the users' calls, stagger with its
//     server side below: the signal works across libraries;
//   - grpc-middleware-top: go-grpc-middleware on the users' calls, stagger below,
//     with the server side and server.WithRetryAtOneLayer on A and B: what
//     retrying at one layer bounds when the top ignores "do not retry".
func ChainContenders() []Contender {
	propagate := func() (*server.Interceptors, error) { return server.New() }
	oneLayer := func() (*server.Interceptors, error) { return server.New(server.WithRetryAtOneLayer()) }
	def, _ := contenderIn(Contenders(), "stagger")
	return []Contender{
		chained("stagger", "stagger on every hop, %d attempts, its default budget (a fresh one per connection); server side on A and B", def.dialOptions, nil, propagate),
		chained("stagger-nobudget", "stagger on every hop, %d attempts, no budget; server side on A and B", staggerNoBudget, nil, propagate),
		chained("stagger-no-server", "stagger on every hop, %d attempts, no budget; no server side", staggerNoBudget, nil, nil),
		chained("grpc-go", "grpc-go's built-in retry on every hop, maxAttempts %d, no throttling", grpcBuiltIn, nil, nil),
		chained("grpc-middleware", "go-grpc-middleware on every hop, WithMax(%d) (ignores pushback)", grpcMiddleware, nil, nil),
		chained("mixed", "grpc-go's built-in retry (maxAttempts %d) from the users; stagger, no budget, below; server side on A and B",
			grpcBuiltIn, staggerNoBudget, propagate),
		chained("grpc-middleware-top", "go-grpc-middleware (WithMax(%d), ignores pushback) from the users; stagger, no budget, below; server side with WithRetryAtOneLayer on A and B",
			grpcMiddleware, staggerNoBudget, oneLayer),
		noRetryChained(),
	}
}

// noRetryChained is the chain without a retry layer on any hop.
func noRetryChained() Contender {
	c := chained("no-retry", "", noRetry().dialOptions, nil, nil)
	c.Gets = func(Config) string { return "no retry layer on any hop: one attempt per hop" }
	return c
}

// chained is a contender of ScenarioChain: top on the users' connections,
// below (nil: top) on A's and B's, side (nil: none) on A and B. gets
// formats MaxAttempts.
func chained(name, gets string, top, below func(*Config) ([]grpc.DialOption, error), side func() (*server.Interceptors, error)) Contender {
	return Contender{
		Name:        name,
		Gets:        func(c Config) string { return fmt.Sprintf(gets, c.MaxAttempts) },
		dialOptions: top,
		below:       below,
		serverSide:  side,
	}
}

// chain is one contender's call chain in ScenarioChain: the servers A (top),
// B (middle) and C (bottom), A and B relaying every unary call
// (testserver.WithRelay) through a connection to the next, toMiddle and
// toBottom. A and B record each attempt under its call's key, as C does.
// Over bufconn, so that it runs inside a synctest bubble too.
type chain struct {
	top, middle, bottom *testserver.Server
	toMiddle, toBottom  *grpc.ClientConn
}

// newChain starts c's chain from the bottom up and connects the relays'
// connections.
func newChain(ctx context.Context, cfg *Config, c Contender) (ch *chain, err error) {
	ch = &chain{bottom: testserver.New(testserver.WithArrivalBucket(Bin))}
	defer func() {
		if err != nil {
			ch.close()
		}
	}()
	if ch.toBottom, ch.middle, err = relayTo(cfg, c, ch.bottom); err != nil {
		return nil, err
	}
	if ch.toMiddle, ch.top, err = relayTo(cfg, c, ch.middle); err != nil {
		return nil, err
	}
	if err := connectAll(ctx, []*grpc.ClientConn{ch.toMiddle, ch.toBottom}); err != nil {
		return nil, err
	}
	return ch, nil
}

// relayTo starts a server that relays to next through a connection with
// c's retry layer for the hops below the users, and c's server side.
func relayTo(cfg *Config, c Contender, next *testserver.Server) (*grpc.ClientConn, *testserver.Server, error) {
	below := c.below
	if below == nil {
		below = c.dialOptions
	}
	dopts, err := below(cfg)
	if err != nil {
		return nil, nil, err
	}
	opts := []testserver.Option{testserver.WithArrivalBucket(Bin)}
	if c.serverSide != nil {
		side, err := c.serverSide()
		if err != nil {
			return nil, nil, err
		}
		opts = append(opts, testserver.WithServerOptions(side.ServerOptions()...))
	}
	cc, err := next.Dial(dopts...)
	if err != nil {
		return nil, nil, fmt.Errorf("dial: %w", err)
	}
	opts = append(opts, testserver.WithRelay(testingv1.NewTestServiceClient(cc)))
	return cc, testserver.New(opts...), nil
}

// close closes the chain from the top down, each server before the
// connection its handlers relay through. It may be called more than once.
func (ch *chain) close() {
	for _, s := range []struct {
		srv *testserver.Server
		cc  *grpc.ClientConn
	}{{ch.top, ch.toMiddle}, {ch.middle, ch.toBottom}, {ch.bottom, nil}} {
		if s.srv != nil {
			// Close returns once every handler has ended: the records are
			// complete.
			s.srv.Close()
		}
		if s.cc != nil {
			_ = s.cc.Close() // a second Close only reports it was closed
		}
	}
}

// measure sets r's figures of the chain from the servers' records of the
// calls (close the chain first, so that no attempt is still arriving): the
// attempts that reached C during its outage [from, to), OutageLoad with
// them, the outage calls' attempts at each server, and SuccessAfter.
func (ch *chain) measure(cfg *Config, r *Result, calls []keyedCall, from, to time.Time) {
	in := func(t time.Time) bool { return !t.Before(from) && t.Before(to) }
	var top, middle, bottom, after, afterOK int
	r.OutageAttempts, r.OutageCalls = 0, 0
	for _, c := range calls {
		atC := ch.bottom.Attempts(c.key)
		for _, a := range atC {
			if in(a.Arrived) {
				r.OutageAttempts++
			}
		}
		switch {
		case !c.begin.Before(to):
			after++
			if c.ok {
				afterOK++
			}
		case in(c.begin) && c.end.Before(to):
			// Every attempt the call caused arrived while it was in
			// flight, so within the outage.
			r.OutageCalls++
			top += len(ch.top.Attempts(c.key))
			middle += len(ch.middle.Attempts(c.key))
			bottom += len(atC)
		}
	}
	r.OutageLoad = outageLoad(cfg, r.OutageAttempts)
	if n := float64(r.OutageCalls); n > 0 {
		r.TopAttemptsPerCall, r.MiddleAttemptsPerCall, r.BottomAttemptsPerCall = float64(top)/n, float64(middle)/n, float64(bottom)/n
	}
	if after > 0 {
		r.SuccessAfter = float64(afterOK) / float64(after)
	}
}

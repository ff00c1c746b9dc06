package lab

import (
	"context"
	"errors"
	"net"
	"net/http"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/stats"
	"google.golang.org/grpc/status"

	"github.com/stagger-go/stagger/budget"
	staggerconnect "github.com/stagger-go/stagger/connect"
	"github.com/stagger-go/stagger/interceptor"
	"github.com/stagger-go/stagger/policy"
	testingv1 "github.com/stagger-go/stagger/proto/stagger/testing/v1"
	"github.com/stagger-go/stagger/testserver"
)

// connectContenders are connect-go clients (the gRPC protocol over h2c, to
// the same grpc-go server): stagger-connect, which gets what stagger gets,
// through package staggerconnect, and connect-no-retry, a Connect client
// without a retry layer. The unavailable, blip and flaky-quiet scenarios
// show them, to compare the Connect front end with the gRPC one.
func connectContenders() []Contender {
	return []Contender{
		{
			Name: "stagger-connect",
			Gets: func(c Config) string {
				stg, _ := contenderIn(Contenders(), "stagger")
				return "connect-go (gRPC protocol, h2c) with staggerconnect.NewClient: " + stg.Gets(c)
			},
			connect: func(c *Config) ([]connect.Interceptor, error) {
				b, err := budget.New(budget.DefaultSettings())
				if err != nil {
					return nil, err
				}
				// As the stagger contender: the file in the flaky
				// scenarios, the lab's policy in the others.
				file, opts := `{}`, []interceptor.Option{interceptor.WithPolicy(staggerPolicy(c)), interceptor.WithBudget(b)}
				if c.Scenario.flaky() {
					file, opts = staggerFile(c), []interceptor.Option{interceptor.WithBudget(b)}
				}
				cfg, err := policy.ParseConfig([]byte(file))
				if err != nil {
					return nil, err
				}
				retry, err := staggerconnect.NewClient(cfg, opts...)
				if err != nil {
					return nil, err
				}
				return []connect.Interceptor{retry}, nil
			},
		},
		{
			Name: "connect-no-retry",
			Gets: func(Config) string {
				return "connect-go (gRPC protocol, h2c) without a retry layer, one attempt per call, the same deadline"
			},
			connect: func(*Config) ([]connect.Interceptor, error) { return nil, nil },
		},
	}
}

// getMethod is the test service's Get, the schema a generated Connect
// client would give.
var getMethod = testingv1.File_stagger_testing_v1_test_proto.Services().ByName("TestService").Methods().ByName("Get")

// dialConnect returns a Connect client of srv's Get over bufconn, with
// interceptors ics (outermost first) and, innermost, one that counts each
// attempt as grpc-go's stats handler does for the others; and a function
// that closes its connections.
func dialConnect(srv *testserver.Server, ics []connect.Interceptor, counter *attemptCounter) (testingv1.TestServiceClient, func()) {
	var p http.Protocols
	p.SetUnencryptedHTTP2(true)
	tr := &http.Transport{
		Protocols: &p,
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return srv.DialContext(ctx)
		},
	}
	ics = append(ics[:len(ics):len(ics)], attemptCounting{counter})
	get := connect.NewClient[testingv1.GetRequest, testingv1.GetResponse](&http.Client{Transport: tr},
		"http://bufnet/"+string(getMethod.Parent().FullName())+"/"+string(getMethod.Name()),
		connect.WithGRPC(), connect.WithInterceptors(ics...), connect.WithSchema(getMethod),
		connect.WithIdempotency(connect.IdempotencyNoSideEffects))
	return &connectClient{get: get}, tr.CloseIdleConnections
}

// connectClient is a Connect client as the lab's calls use a gRPC one
// (only Get): its error is a gRPC status of the same code.
type connectClient struct {
	testingv1.TestServiceClient // nil: the lab calls Get only
	get                         *connect.Client[testingv1.GetRequest, testingv1.GetResponse]
}

func (c *connectClient) Get(ctx context.Context, in *testingv1.GetRequest, _ ...grpc.CallOption) (*testingv1.GetResponse, error) {
	resp, err := c.get.CallUnary(ctx, connect.NewRequest(in))
	if err != nil {
		return nil, status.Error(codes.Code(connect.CodeOf(err)), err.Error())
	}
	return resp.Msg, nil
}

// attemptCounting counts a Connect client's attempts: placed after the
// retry layer, it sees each one.
type attemptCounting struct{ counter *attemptCounter }

func (a attemptCounting) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		a.counter.HandleRPC(ctx, &stats.Begin{Client: true, BeginTime: time.Now()})
		resp, err := next(ctx, req)
		a.counter.HandleRPC(ctx, &stats.End{Client: true, EndTime: time.Now()})
		return resp, err
	}
}

func (a attemptCounting) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return next
}

func (a attemptCounting) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return next
}

// errConnectScenario: the Connect contenders run over bufconn, one server.
var errConnectScenario = errors.New("the Connect contenders run only in scenarios over bufconn with one server")

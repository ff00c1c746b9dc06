package staggerconnect

import (
	"context"
	"errors"
	"reflect"
	"sync"

	"connectrpc.com/connect"
	"google.golang.org/grpc"

	"github.com/stagger-go/stagger/interceptor"
	"github.com/stagger-go/stagger/policy"
)

// Client is a connect.Interceptor for clients that runs every call through
// stagger's retry engine, the one package interceptor's gRPC interceptors
// run (the package documentation has the model). Build one per set of
// options and pass it to every client (connect.WithInterceptors): like the
// gRPC interceptors built from one Config, the clients then share the
// file's budgets, kept per backend (the host a call goes to: its tokens,
// a Gate per method), and its breakers.
//
// A Client is safe for concurrent use.
type Client struct {
	unary  grpc.UnaryClientInterceptor
	stream grpc.StreamClientInterceptor
	// safe holds the procedures whose Spec().IdempotencyLevel says they are
	// safe to run more than once.
	safe sync.Map
}

var _ connect.Interceptor = (*Client)(nil)

// ErrNilConfig is the error of NewClient given a nil *policy.Config, and of
// NewClientFromSource given a nil source.
var ErrNilConfig = errors.New("staggerconnect: nil policy config")

// NewClient returns a Client that follows the policy file cfg, with the
// options of package interceptor (WithBudget, WithBreakers,
// WithIdempotencyKey, WithCriticality, WithCallHook, ...; staggerotel.Option
// for the OpenTelemetry metrics): the same file and options decide as they
// would for a grpc-go client. A nil cfg is ErrNilConfig. It fails, naming
// the reason, when the connect-go it is built with has a connect.Request
// that staggerconnect cannot copy (a copy gives each attempt a header of its
// own; see cloneRequest).
func NewClient(cfg *policy.Config, opts ...interceptor.Option) (*Client, error) {
	if cfg == nil {
		return nil, ErrNilConfig
	}
	return newClient(interceptor.WithConfig(cfg), opts)
}

// NewClientFromSource returns a Client that follows src, a reloading policy
// file (*policy.Source): each call reads the policy in force when it starts.
// A nil src (or a nil *policy.Source) is ErrNilConfig.
func NewClientFromSource(src interceptor.ConfigSource, opts ...interceptor.Option) (*Client, error) {
	if src == nil {
		return nil, ErrNilConfig
	}
	if v := reflect.ValueOf(src); v.Kind() == reflect.Pointer && v.IsNil() {
		return nil, ErrNilConfig
	}
	return newClient(interceptor.WithConfigSource(src), opts)
}

// newClient builds a Client, once connect-go's request is known to copy
// (requestCopies): a connect-go whose Request changed fails here, with
// the reason, rather than every call.
func newClient(cfg interceptor.Option, opts []interceptor.Option) (*Client, error) {
	if err := requestCopies(); err != nil {
		return nil, err
	}
	c := new(Client)
	all := make([]interceptor.Option, 0, len(opts)+3)
	// One State for both interceptors (interceptor.State): a target's
	// unary and stream calls spend the same tokens.
	all = append(all, cfg, interceptor.WithState(interceptor.NewState()))
	all = append(all, opts...)
	all = append(all, interceptor.WithIdempotentMethods(c.idempotent))
	c.unary = interceptor.UnaryClientInterceptor(all...)
	c.stream = interceptor.StreamClientInterceptor(all...)
	return c, nil
}

// idempotent reports whether a procedure's Spec said it is safe to run
// more than once (the engine asks when neither the call nor the file says).
func (c *Client) idempotent(procedure string) bool {
	_, ok := c.safe.Load(procedure)
	return ok
}

// learn notes the idempotency spec gives its procedure.
func (c *Client) learn(spec connect.Spec) {
	if spec.IdempotencyLevel == connect.IdempotencyNoSideEffects || spec.IdempotencyLevel == connect.IdempotencyIdempotent {
		if _, ok := c.safe.Load(spec.Procedure); !ok {
			c.safe.Store(spec.Procedure, struct{}{})
		}
	}
}

type callOptionsKey struct{}

// WithCallOptions returns ctx carrying options of package interceptor for
// the calls made with it (interceptor.Idempotent, interceptor.WithReport,
// interceptor.WithMaxAttempts, interceptor.Disable, ...): a Connect call has
// no call options, so its context carries them. Options given again replace
// the earlier ones.
func WithCallOptions(ctx context.Context, opts ...interceptor.Option) context.Context {
	return context.WithValue(ctx, callOptionsKey{}, opts)
}

// callOptions returns the call's options from ctx, with room for more.
func callOptions(ctx context.Context, more int) []grpc.CallOption {
	opts, _ := ctx.Value(callOptionsKey{}).([]interceptor.Option)
	out := make([]grpc.CallOption, len(opts), len(opts)+more)
	for i, o := range opts {
		out[i] = o
	}
	return out
}

package server

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/stagger-go/stagger/criticality"
	"github.com/stagger-go/stagger/internal/chain"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/orca"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
)

// Header names this package reads and writes.
const (
	// PushbackKey is gRFC A6's trailer: a base-10 int32 of milliseconds to
	// wait before the retry, or a negative value for "do not retry".
	PushbackKey = "grpc-retry-pushback-ms"
	// PreviousAttemptsKey is gRFC A6's request header: how many attempts of
	// the call came before this one (absent on the first). grpc-go's
	// built-in retry and stagger send it on retries and on hedges.
	PreviousAttemptsKey = "grpc-previous-rpc-attempts"
	// MiddlewareAttemptKey is go-grpc-middleware's retry header (the
	// attempt number, absent on the first), read as PreviousAttemptsKey.
	MiddlewareAttemptKey = "x-retry-attempt"
	// UpstreamRetryKey is the request header ("1") that WithRetryAtOneLayer
	// adds to every call a retried request's handler makes, whatever client
	// makes it: the server below then treats the request as retried too, so
	// that one layer's retry does not restart the retries of every layer
	// under it (A's single attempt to B is B's first attempt, but it is
	// part of a retry the layer above A is making).
	UpstreamRetryKey = "stagger-upstream-retry"
)

// HealthCheckMethod is the standard health check, which shedding exempts
// unless told otherwise (WithExempt): a load balancer that finds a busy
// server unhealthy would move its load onto the others at the worst time.
const HealthCheckMethod = "/grpc.health.v1.Health/Check"

// Interceptors are the server side's unary and stream interceptors, built
// once by New and safe for concurrent use by any number of servers.
type Interceptors struct {
	propagate bool
	oneLayer  bool
	// limit is the concurrency limit (0: no shedding); inFlight counts the
	// unary calls running under it; bound is, per criticality
	// (Level.Index), how many may run when one of it is admitted.
	limit      int64
	bound      [criticality.NumLevels]int64
	inFlight   atomic.Int64
	minPB      time.Duration
	maxPB      time.Duration
	exempt     map[string]bool
	serviceEMA atomic.Int64 // nanoseconds; 0 before the first observation
	// shed counts the refused calls per criticality (Level.Index).
	shed [criticality.NumLevels]atomic.Uint64
	// badCriticality: a request with an invalid criticality header was
	// logged.
	badCriticality atomic.Bool
	// dedup is WithIdempotency's (nil: off).
	dedup *dedup
}

// settings is what the Options build; errs are their bad values.
type settings struct {
	propagate    bool
	oneLayer     bool
	limit        int
	limitSet     bool
	shares       CriticalityShares
	sharesSet    bool
	minPB, maxPB time.Duration
	exempt       []string
	dedup        *dedup
	errs         []error
}

// Option configures New.
type Option func(*settings)

// Defaults of the shedding pushback range (WithPushbackRange).
const (
	DefaultMinPushback = time.Millisecond
	DefaultMaxPushback = 30 * time.Second
)

// maxPushback is the largest pushback gRFC A6's trailer can carry.
const maxPushback = math.MaxInt32 * time.Millisecond

// WithoutPropagation turns don't-retry propagation off: the server side
// then never adds the "do not retry" pushback, and DontRetry has no effect.
func WithoutPropagation() Option {
	return func(s *settings) { s.propagate = false }
}

// WithRetryAtOneLayer makes a request that arrives as a retry or a hedge
// (PreviousAttemptsKey, or go-grpc-middleware's MiddlewareAttemptKey, above
// 0) run its downstream stagger calls with one attempt each and no hedges:
// the layer above is retrying already, and retries at two layers multiply
// (the SRE book: retry at the layer just above the failure). A hedge counts
// as a retry here: the layer above is already sending the request more than
// once. The downstream call that fails then ends with reason "retried
// request", which propagation reports upward as "do not retry". The calls
// carry UpstreamRetryKey, so that servers further down with this option
// treat them as retried too: the whole chain below a retrying layer makes
// one attempt per hop.
func WithRetryAtOneLayer() Option {
	return func(s *settings) { s.oneLayer = true }
}

// WithConcurrencyLimit sheds load: past limit unary calls running at once,
// a new one is answered RESOURCE_EXHAUSTED at once, without running its
// handler, with a pushback (PushbackKey, and a google.rpc.RetryInfo
// detail) that says when to come back: the observed service time (a moving
// average of the handlers' durations) times a random factor in [0.5, 1.5),
// so that shed callers come back spread over about one turnover of the
// running calls, kept within WithPushbackRange. gRFC A6 clients that retry
// RESOURCE_EXHAUSTED wait exactly that long instead of their backoff.
// limit must be at least 1. Streams are not limited: a stream's lifetime is
// not a service time, and one long stream would hold a slot for hours.
//
// The less critical calls (criticality.Header, sent by stagger's client)
// are shed first: each is admitted only while the calls running are fewer
// than its share of the limit (CriticalityShares has the rule and the
// defaults; WithCriticalityShares changes them). A shed SHEDDABLE call's
// pushback is twice the above, a SHEDDABLE_PLUS one's 1.5 times: each
// finds room again only once the running calls fall below its share.
// ShedLevel counts the refusals by criticality.
func WithConcurrencyLimit(limit int) Option {
	return func(s *settings) {
		s.limitSet = true
		s.limit = limit
		if limit < 1 {
			s.errs = append(s.errs, fmt.Errorf("server: WithConcurrencyLimit: limit must be at least 1, got %d", limit))
		}
	}
}

// WithPushbackRange bounds the pushback a shed call gets (defaults
// DefaultMinPushback and DefaultMaxPushback). min must be at least 1ms (a
// pushback of 0 asks for an immediate retry), max at least min and at most
// gRFC A6's limit (2^31-1 ms).
func WithPushbackRange(min, max time.Duration) Option {
	return func(s *settings) {
		s.minPB, s.maxPB = min, max
		switch {
		case min < time.Millisecond:
			s.errs = append(s.errs, fmt.Errorf("server: WithPushbackRange: min must be at least 1ms, got %v", min))
		case max < min:
			s.errs = append(s.errs, fmt.Errorf("server: WithPushbackRange: max must be at least min (%v), got %v", min, max))
		case max > maxPushback:
			s.errs = append(s.errs, fmt.Errorf("server: WithPushbackRange: max must be at most %v (gRFC A6's int32 of milliseconds), got %v", maxPushback, max))
		}
	}
}

// WithExempt names the methods ("/package.Service/Method") that shedding
// never refuses, in place of the default, HealthCheckMethod. With none, no
// method is exempt.
func WithExempt(methods ...string) Option {
	return func(s *settings) {
		s.exempt = append([]string{}, methods...)
		for i, m := range methods {
			if len(m) < 3 || m[0] != '/' {
				s.errs = append(s.errs, fmt.Errorf("server: WithExempt: methods[%d]: want a full method name such as %q, got %q", i, HealthCheckMethod, m))
			}
		}
	}
}

// New builds the server side's interceptors. With no Option they propagate
// "do not retry" (see the package documentation) and nothing else. A bad
// Option value makes New return an error naming the option and the field.
func New(opts ...Option) (*Interceptors, error) {
	st := settings{propagate: true, minPB: DefaultMinPushback, maxPB: DefaultMaxPushback, exempt: []string{HealthCheckMethod}}
	for i, o := range opts {
		if o == nil {
			st.errs = append(st.errs, fmt.Errorf("server: New: option %d is nil", i))
			continue
		}
		o(&st)
	}
	if st.sharesSet && !st.limitSet {
		st.errs = append(st.errs, errors.New("server: WithCriticalityShares: needs WithConcurrencyLimit, whose limit it shares"))
	}
	if len(st.errs) > 0 {
		return nil, errors.Join(st.errs...)
	}
	s := &Interceptors{propagate: st.propagate, oneLayer: st.oneLayer, limit: int64(st.limit), minPB: st.minPB, maxPB: st.maxPB, dedup: st.dedup}
	if s.limit > 0 {
		s.bound = bounds(s.limit, st.shares)
	}
	if s.dedup != nil {
		s.dedup.serve = s.serve
	}
	if st.limitSet && len(st.exempt) > 0 {
		s.exempt = make(map[string]bool, len(st.exempt))
		for _, m := range st.exempt {
			s.exempt[m] = true
		}
	}
	return s, nil
}

// ServerOptions returns the server options that install both interceptors
// (grpc.ChainUnaryInterceptor and grpc.ChainStreamInterceptor), for
// grpc.NewServer. Put them first in the chain, so that the pushback they add
// covers every error the inner interceptors and the handler return.
func (s *Interceptors) ServerOptions() []grpc.ServerOption {
	return []grpc.ServerOption{grpc.ChainUnaryInterceptor(s.Unary()), grpc.ChainStreamInterceptor(s.Stream())}
}

// Shed returns how many calls shedding refused so far, of every
// criticality (ShedLevel counts them by criticality).
func (s *Interceptors) Shed() uint64 {
	var n uint64
	for i := range s.shed {
		n += s.shed[i].Load()
	}
	return n
}

// Unary returns the unary server interceptor.
func (s *Interceptors) Unary() grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		l, named := s.incomingCriticality(ctx)
		if s.limit > 0 && !s.exempt[info.FullMethod] {
			running, ok := s.admit(s.bound[l.Index()])
			if !ok {
				s.reportLoad(ctx, running)
				return nil, s.refuse(ctx, running, l.Effective())
			}
			s.reportLoad(ctx, running+1)
			start := time.Now()
			defer s.done(start)
		}
		if named {
			ctx = criticality.NewContext(ctx, l)
		}
		if s.dedup != nil {
			return s.dedup.unary(ctx, req, info, handler)
		}
		return s.serve(ctx, req, handler)
	}
}

// serve runs the handler under a chain.Request when the interceptors need
// one, and adds "do not retry" to a marked failure.
func (s *Interceptors) serve(ctx context.Context, req any, handler grpc.UnaryHandler) (any, error) {
	retried := s.oneLayer && retriedRequest(ctx)
	if !s.propagate && !retried {
		return handler(ctx, req)
	}
	r := chain.New(downstream(ctx, retried), retried)
	resp, err := handler(r, req)
	if err != nil && s.propagate && (r.Marked() || gaveUp(err)) {
		// The trailer goes with the status the handler returned, which is
		// left as it is. SetTrailer fails only when the stream is gone.
		_ = grpc.SetTrailer(ctx, dontRetryTrailer())
	}
	return resp, err
}

// Stream returns the stream server interceptor: propagation,
// WithRetryAtOneLayer and the request's criticality as for unary calls
// (the handler's stream context carries them); streams are never shed.
func (s *Interceptors) Stream() grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		ctx := ss.Context()
		l, named := s.incomingCriticality(ctx)
		if named {
			ctx = criticality.NewContext(ctx, l)
		}
		retried := s.oneLayer && retriedRequest(ctx)
		if !s.propagate && !retried {
			if !named {
				return handler(srv, ss)
			}
			return handler(srv, &serverStream{ServerStream: ss, ctx: ctx})
		}
		r := chain.New(downstream(ctx, retried), retried)
		err := handler(srv, &serverStream{ServerStream: ss, ctx: r})
		if err != nil && s.propagate && (r.Marked() || gaveUp(err)) {
			ss.SetTrailer(dontRetryTrailer())
		}
		return err
	}
}

// serverStream gives the handler a context that carries the request (a
// *chain.Request) or its criticality.
type serverStream struct {
	grpc.ServerStream
	ctx context.Context
}

func (w *serverStream) Context() context.Context { return w.ctx }

// DontRetry asks that the caller of the request ctx belongs to not retry
// when the handler returns an error: the server side adds gRFC A6's
// negative pushback to it. It reports false, and does nothing, when ctx is
// not a request served by these interceptors with propagation on.
func DontRetry(ctx context.Context) bool {
	r := chain.From(ctx)
	if r == nil {
		return false
	}
	r.DontRetry()
	return true
}

// RetriedRequest reports whether the request ctx belongs to arrived as a
// retry or a hedge and its downstream stagger calls make one attempt
// (WithRetryAtOneLayer).
func RetriedRequest(ctx context.Context) bool { return chain.RetriedRequest(ctx) }

// gaveUp reports whether err says a retry layer already gave up on it
// (stagger's *interceptor.Error: GaveUp), wrapped or not.
func gaveUp(err error) bool {
	var g interface{ GaveUp() bool }
	return errors.As(err, &g) && g.GaveUp()
}

// dontRetryTrailer is gRFC A6's "do not retry": a negative pushback. Made
// per use: grpc keeps the map it is given.
func dontRetryTrailer() metadata.MD {
	return metadata.MD{PushbackKey: []string{"-1"}}
}

// downstream is the context a handler runs under: ctx, and for a retried
// request, UpstreamRetryKey on its outgoing calls.
func downstream(ctx context.Context, retried bool) context.Context {
	if !retried {
		return ctx
	}
	return metadata.AppendToOutgoingContext(ctx, UpstreamRetryKey, "1")
}

// retriedRequest reports whether the request ctx belongs to says it is a
// retry or a hedge (PreviousAttemptsKey or MiddlewareAttemptKey above 0),
// or part of one a layer above makes (UpstreamRetryKey).
func retriedRequest(ctx context.Context) bool {
	// ValueFromIncomingContext copies only a header that is there;
	// FromIncomingContext would copy every header of every request.
	for _, k := range [...]string{PreviousAttemptsKey, MiddlewareAttemptKey, UpstreamRetryKey} {
		for _, v := range metadata.ValueFromIncomingContext(ctx, k) {
			if n, err := strconv.Atoi(v); err == nil && n > 0 {
				return true
			}
		}
	}
	return false
}

// admit counts one more call running unless bound calls run already; it
// returns how many ran before. A compare-and-swap, not an add undone on
// refusal: the refused calls (of a less critical level, most often) must
// not raise the count that the more critical, arriving at that moment, are
// judged by.
func (s *Interceptors) admit(bound int64) (running int64, ok bool) {
	for {
		n := s.inFlight.Load()
		if n >= bound {
			return n, false
		}
		if s.inFlight.CompareAndSwap(n, n+1) {
			return n, true
		}
	}
}

// reportLoad writes the call's load report (gRFC A51) through grpc-go's
// orca package, when the server installed it (orca.CallMetricsServerOption):
// application utilization, the calls running over the limit, at most 1. It
// asks for the call's recorder, so a refused call carries a report too.
func (s *Interceptors) reportLoad(ctx context.Context, running int64) {
	if r := orca.CallMetricsRecorderFromContext(ctx); r != nil {
		r.SetApplicationUtilization(min(float64(running)/float64(s.limit), 1))
	}
}

// done ends a shed-counted call that started at start.
func (s *Interceptors) done(start time.Time) {
	d := int64(time.Since(start))
	s.inFlight.Add(-1)
	if d <= 0 {
		d = 1
	}
	for {
		old := s.serviceEMA.Load()
		next := d
		if old > 0 {
			next = old + (d-old)/serviceEMAWeight
		}
		if s.serviceEMA.CompareAndSwap(old, next) {
			return
		}
	}
}

// refuse answers a call of criticality l that shedding refused, with
// running calls in flight.
func (s *Interceptors) refuse(ctx context.Context, running int64, l criticality.Level) error {
	s.shed[l.Index()].Add(1)
	pb := s.pushback(shedPushbackFactor[l.Index()])
	ms := int64((pb + time.Millisecond - 1) / time.Millisecond)
	_ = grpc.SetTrailer(ctx, metadata.MD{PushbackKey: []string{strconv.FormatInt(ms, 10)}})
	var st *status.Status
	if b := s.bound[l.Index()]; b < s.limit {
		st = status.Newf(codes.ResourceExhausted, "server: overloaded (%d calls running, limit %d; %v calls admitted below %d); retry after %dms", running, s.limit, l, b, ms)
	} else {
		st = status.Newf(codes.ResourceExhausted, "server: overloaded (%d calls running, limit %d); retry after %dms", running, s.limit, ms)
	}
	if d, err := st.WithDetails(&errdetails.RetryInfo{RetryDelay: durationpb.New(time.Duration(ms) * time.Millisecond)}); err == nil {
		st = d
	}
	return st.Err()
}

// pushback is when a shed call should come back: the service time's moving
// average times U(pushbackJitterMin, pushbackJitterMin+1) times factor (shedPushbackFactor), within
// [minPB, maxPB].
func (s *Interceptors) pushback(factor float64) time.Duration {
	ema := time.Duration(s.serviceEMA.Load())
	pb := time.Duration(float64(ema) * (pushbackJitterMin + rand.Float64()) * factor)
	return min(max(pb, s.minPB), s.maxPB)
}

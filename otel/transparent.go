package staggerotel

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"google.golang.org/grpc"
	"google.golang.org/grpc/stats"
)

// transparentRetriesDesc is A96's description of
// grpc.client.call.transparent_retries.
const transparentRetriesDesc = "Number of transparent retries during the client call. If there were no transparent retries, 0 is not reported."

// transparentRetriesHistogram creates grpc.client.call.transparent_retries
// on m: Option and TransparentRetries create it alike, so that on one
// MeterProvider they share one instrument.
func transparentRetriesHistogram(m metric.Meter) (metric.Int64Histogram, error) {
	h, err := m.Int64Histogram(MetricTransparentRetries, metric.WithUnit("{transparent_retry}"),
		metric.WithDescription(transparentRetriesDesc), metric.WithExplicitBucketBoundaries(transparentRetryBuckets...))
	if err != nil {
		return nil, fmt.Errorf("staggerotel: instrument %s: %w", MetricTransparentRetries, err)
	}
	return h, nil
}

// TransparentRetries returns the dial options that record
// grpc.client.call.transparent_retries (opt-in: see the package
// documentation for what they cost) on o.MeterProvider (nil:
// otel.GetMeterProvider()), with grpc.method and grpc.target as Option
// records them (o.PerTarget, o.TargetAttributeFilter); o's other fields
// are ignored. Put them before
// stagger.DialOptions, so that their interceptors run outside stagger's and
// see the whole call:
//
//	tr, err := staggerotel.TransparentRetries(staggerotel.Options{MeterProvider: mp})
//	opts := append(tr, stagger.DialOptions(cfg, metrics)...)
//
// They are a unary and a stream interceptor, which give each call a counter
// in its context and record it when the call ends (a stream when RecvMsg
// returns an error, io.EOF included, or when it could not be created), if it
// is above 0, with grpc.method and grpc.target; and a stats.Handler, which
// adds one to the counter at each attempt grpc-go begins as a transparent
// retry (stats.Begin.IsTransparentRetryAttempt).
func TransparentRetries(o Options) ([]grpc.DialOption, error) {
	mp := o.MeterProvider
	if mp == nil {
		mp = otel.GetMeterProvider()
	}
	h, err := transparentRetriesHistogram(mp.Meter(ScopeName))
	if err != nil {
		return nil, err
	}
	t := &transparent{hist: h, targets: newTargetNames(o)}
	return []grpc.DialOption{
		grpc.WithChainUnaryInterceptor(t.unary),
		grpc.WithChainStreamInterceptor(t.stream),
		grpc.WithStatsHandler(transparentHandler{}),
	}, nil
}

// transparent records grpc.client.call.transparent_retries.
type transparent struct {
	hist    metric.Int64Histogram
	targets *targetNames
}

// callCounterKey is the context key of a call's *callCounter.
type callCounterKey struct{}

// callCounter counts a call's transparent retries.
type callCounter struct {
	n    atomic.Int64
	done atomic.Bool // recorded
}

// record records c's count, once, if it is above 0.
func (t *transparent) record(ctx context.Context, c *callCounter, method string, cc *grpc.ClientConn, static bool) {
	if c.done.Swap(true) {
		return
	}
	n := c.n.Load()
	if n <= 0 {
		return
	}
	m := Other
	if static {
		m = strings.TrimPrefix(method, "/")
	}
	target := t.targets.name(cc.Target(), cc.CanonicalTarget)
	if target == "" {
		target = Other
	}
	t.hist.Record(ctx, n, metric.WithAttributes(attribute.String(AttrMethod, m), attribute.String(AttrTarget, target)))
}

// staticMethod reports whether opts hold grpc.StaticMethodCallOption, which
// generated code passes for the methods it registers.
func staticMethod(opts []grpc.CallOption) bool {
	for _, opt := range opts {
		if _, ok := opt.(grpc.StaticMethodCallOption); ok {
			return true
		}
	}
	return false
}

func (t *transparent) unary(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	c := new(callCounter)
	err := invoker(context.WithValue(ctx, callCounterKey{}, c), method, req, reply, cc, opts...)
	t.record(ctx, c, method, cc, staticMethod(opts))
	return err
}

func (t *transparent) stream(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
	c := new(callCounter)
	s, err := streamer(context.WithValue(ctx, callCounterKey{}, c), desc, cc, method, opts...)
	static := staticMethod(opts)
	if err != nil {
		t.record(ctx, c, method, cc, static)
		return nil, err
	}
	return &transparentStream{ClientStream: s, t: t, c: c, ctx: ctx, method: method, cc: cc, static: static}, nil
}

// transparentStream records its call's count when RecvMsg returns an error.
type transparentStream struct {
	grpc.ClientStream
	t      *transparent
	c      *callCounter
	ctx    context.Context
	method string
	cc     *grpc.ClientConn
	static bool
}

func (s *transparentStream) RecvMsg(m any) error {
	err := s.ClientStream.RecvMsg(m)
	if err != nil {
		s.t.record(s.ctx, s.c, s.method, s.cc, s.static)
	}
	return err
}

// transparentHandler counts the transparent retries in the call's counter.
type transparentHandler struct{}

func (transparentHandler) TagRPC(ctx context.Context, _ *stats.RPCTagInfo) context.Context {
	return ctx
}

func (transparentHandler) HandleRPC(ctx context.Context, s stats.RPCStats) {
	if b, ok := s.(*stats.Begin); ok && b.IsTransparentRetryAttempt {
		if c, ok := ctx.Value(callCounterKey{}).(*callCounter); ok {
			c.n.Add(1)
		}
	}
}

func (transparentHandler) TagConn(ctx context.Context, _ *stats.ConnTagInfo) context.Context {
	return ctx
}

func (transparentHandler) HandleConn(context.Context, stats.ConnStats) {}

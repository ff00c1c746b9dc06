package testserver

import (
	"context"
	"time"

	testingv1 "github.com/stagger-go/stagger/proto/stagger/testing/v1"
	"google.golang.org/grpc"
)

// Clock is the server's source of time: arrival times, outage windows, the
// per-second capacity window, the arrival buckets and scripted delays all read it.
// The default uses the time package, which inside a testing/synctest bubble is the
// bubble's virtual clock. Implementations must be safe for concurrent use.
type Clock interface {
	// Now returns the current time.
	Now() time.Time
	// Sleep waits for d, or until ctx is done; it returns ctx.Err() when ctx
	// ended first and nil otherwise.
	Sleep(ctx context.Context, d time.Duration) error
}

type realClock struct{}

func (realClock) Now() time.Time { return time.Now() }

func (realClock) Sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Option configures a Server at New.
type Option func(*config)

type config struct {
	clock             Clock
	idempotencyHeader string
	bucket            time.Duration
	serverOptions     []grpc.ServerOption
	tcp               bool
	outage            bool
	outageFrom        time.Time
	outageTo          time.Time
	capacity          Capacity
	workers           Workers
	failureRate       float64
	resets            bool
	delayFactor       float64
	seed              int64
	bufSize           int
	relay             testingv1.TestServiceClient
}

func defaultConfig() config {
	return config{
		clock:             realClock{},
		idempotencyHeader: "idempotency-key",
		bucket:            100 * time.Millisecond,
		bufSize:           1 << 20,
	}
}

// WithClock sets the server's clock (default: the time package). A nil clock is
// ignored.
func WithClock(c Clock) Option {
	return func(cfg *config) {
		if c != nil {
			cfg.clock = c
		}
	}
}

// WithIdempotencyHeader sets the request header recorded as
// AttemptRecord.IdempotencyKey (default "idempotency-key"). gRPC metadata keys are
// lower case; the name is matched as metadata.MD does.
func WithIdempotencyHeader(name string) Option {
	return func(cfg *config) {
		if name != "" {
			cfg.idempotencyHeader = name
		}
	}
}

// WithArrivalBucket sets the width of the buckets Arrivals counts attempts in
// (default 100 ms). Non-positive widths are ignored.
func WithArrivalBucket(d time.Duration) Option {
	return func(cfg *config) {
		if d > 0 {
			cfg.bucket = d
		}
	}
}

// WithServerOptions adds options to the underlying grpc.Servers (bufconn and TCP).
func WithServerOptions(opts ...grpc.ServerOption) Option {
	return func(cfg *config) { cfg.serverOptions = append(cfg.serverOptions, opts...) }
}

// WithTCP makes New also serve on a TCP listener on 127.0.0.1 (a free port); see
// Addr. When the listener cannot be opened, New still returns a server whose
// Addr is "" and StartTCP can be called to get the error.
func WithTCP() Option {
	return func(cfg *config) { cfg.tcp = true }
}

// WithOutage starts the server in an outage (see SetOutage).
func WithOutage(on bool) Option {
	return func(cfg *config) { cfg.outage = on }
}

// WithOutageWindow starts the server with an outage window (see SetOutageWindow).
func WithOutageWindow(from, to time.Time) Option {
	return func(cfg *config) { cfg.outageFrom, cfg.outageTo = from, to }
}

// WithCapacity starts the server with a capacity limit (see SetCapacity).
func WithCapacity(c Capacity) Option {
	return func(cfg *config) { cfg.capacity = c }
}

// WithWorkers starts the server with the Workers mode (see SetWorkers).
func WithWorkers(w Workers) Option {
	return func(cfg *config) { cfg.workers = w }
}

// WithFailureRate makes each admitted attempt fail with UNAVAILABLE with
// probability p (clamped to [0, 1]), drawn from a source seeded with seed.
func WithFailureRate(p float64, seed int64) Option {
	return func(cfg *config) { cfg.failureRate, cfg.seed = p, seed }
}

// WithResets starts the server in the reset mode (see SetResets).
func WithResets(on bool) Option {
	return func(cfg *config) { cfg.resets = on }
}

// WithDelayFactor starts the server with a delay factor (see SetDelayFactor).
func WithDelayFactor(f float64) Option {
	return func(cfg *config) { cfg.delayFactor = f }
}

// WithBufferSize sets the bufconn buffer size in bytes (default 1 MiB).
func WithBufferSize(n int) Option {
	return func(cfg *config) {
		if n > 0 {
			cfg.bufSize = n
		}
	}
}

// Capacity limits how many attempts the server admits. Attempts beyond a limit
// fail with RESOURCE_EXHAUSTED. The zero value means no limit.
type Capacity struct {
	// MaxConcurrent is how many attempts may be in a handler at once; 0 means no
	// limit.
	MaxConcurrent int
	// PerSecond is how many attempts are admitted per one-second window of the
	// server's clock, the windows counted from New (a fixed-window counter); 0
	// means no limit.
	PerSecond int
	// Pushback, when not empty, is sent verbatim as the grpc-retry-pushback-ms
	// trailer of every rejection.
	Pushback string
}

package testserver

import (
	"context"
	"time"

	testingv1 "github.com/stagger-go/stagger/proto/stagger/testing/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// WithRelay makes the server the middle of a call chain: its unary methods
// (Get, Put, Write) do not run the request's Script but send the request
// unchanged to next, under the handler's own context (so the caller's
// deadline, and whatever a server interceptor put in the context, reach the
// call), and answer with next's reply or error unchanged. The attempt is
// recorded under the script's key as usual, and server-wide modes (outage,
// capacity, failure rate, Workers) still refuse attempts before they are
// relayed. Streaming methods are not relayed.
func WithRelay(next testingv1.TestServiceClient) Option {
	return func(cfg *config) { cfg.relay = next }
}

// relay serves one relayed unary attempt of method: call is the call to the
// next server.
func relay[R any](s *Server, ctx context.Context, method string, sc *testingv1.Script, call func(context.Context) (R, error)) (R, error) {
	var zero R
	at := s.clock.Now()
	a := s.arrive(ctx, method, sc.GetKey(), at)
	var deadline time.Time
	if d, ok := ctx.Deadline(); ok {
		// As in begin: the deadline on the server's clock.
		deadline = at.Add(time.Until(d))
	}
	if rej := s.admit(a, at, deadline); rej != nil {
		if rej.pushback != "" {
			_ = grpc.SetTrailer(ctx, metadata.MD{PushbackTrailer: []string{rej.pushback}})
		}
		a.end(rej.st.Code(), endRejected)
		return zero, rej.st.Err()
	}
	r, err := call(ctx)
	switch code := status.Code(err); {
	case err == nil:
		a.end(codes.OK, endServed)
	case ctx.Err() != nil:
		a.end(code, endCancelled)
	default:
		a.end(code, endFailed)
	}
	return r, err
}

package interceptor

import (
	"context"

	"google.golang.org/grpc"
)

// StreamClientInterceptor returns the stream client interceptor.
//
// PLACEHOLDER: until the stream engine lands (replay buffer, commit rules),
// it passes streams through untouched, dropping stagger's per-call Options so
// they never reach grpc. It does not retry streams.
func StreamClientInterceptor(opts ...Option) grpc.StreamClientInterceptor {
	return func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, callOpts ...grpc.CallOption) (grpc.ClientStream, error) {
		for i, opt := range callOpts {
			if _, ok := opt.(Option); ok {
				kept := make([]grpc.CallOption, 0, len(callOpts)-1)
				kept = append(kept, callOpts[:i]...)
				for _, o := range callOpts[i+1:] {
					if _, ok := o.(Option); !ok {
						kept = append(kept, o)
					}
				}
				callOpts = kept
				break
			}
		}
		return streamer(ctx, desc, cc, method, callOpts...)
	}
}

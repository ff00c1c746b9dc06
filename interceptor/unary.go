package interceptor

import (
	"context"
	"sync"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/proto"
)

// UnaryClientInterceptor returns the retrying unary client interceptor. See
// the package documentation for the model and where it belongs in a chain.
func UnaryClientInterceptor(opts ...Option) grpc.UnaryClientInterceptor {
	k := newCore(opts)
	return func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		return k.unary(ctx, method, req, reply, cc, invoker, opts)
	}
}

// unaryAttempt holds what each attempt hands to grpc to learn of headers and
// trailers. Pooled: the addresses escape into grpc, and the success path must
// not allocate. own holds grpc.Header and grpc.Trailer pointing at header and
// trailer, built once per pooled value, so that a call without options of its
// own passes own as is.
type unaryAttempt struct {
	header, trailer metadata.MD
	own             [2]grpc.CallOption
	opts            []grpc.CallOption
}

var unaryAttempts = sync.Pool{New: func() any {
	ua := new(unaryAttempt)
	ua.own = [2]grpc.CallOption{grpc.Header(&ua.header), grpc.Trailer(&ua.trailer)}
	return ua
}}

func (k *core) unary(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts []grpc.CallOption) error {
	var c call
	callCtx, cancel, grpcOpts, run := k.start(ctx, method, opts, &c)
	defer cancel()
	if !run {
		return invoker(ctx, method, req, reply, cc, grpcOpts...)
	}
	if err := c.admitFirst(callCtx, cc, grpcOpts); err != nil {
		c.end(cc, err)
		return err
	}
	if c.hedged != nil {
		if len(c.fileOpts) > 0 {
			grpcOpts = append(c.fileOpts[:len(c.fileOpts):len(c.fileOpts)], grpcOpts...)
		}
		// A copy, so that c itself stays on the stack when it does not hedge:
		// the hedging engine's goroutines may keep the pointer.
		hc := c
		err := k.hedge(callCtx, &hc, req, reply, cc, invoker, grpcOpts)
		hc.end(cc, err)
		return err
	}
	if !c.retrying {
		c.attempt = 1
		if len(c.fileOpts) > 0 {
			grpcOpts = append(c.fileOpts[:len(c.fileOpts):len(c.fileOpts)], grpcOpts...)
		}
		err := invoker(callCtx, method, req, reply, cc, grpcOpts...)
		if contextCode(err) && callerEnded(callCtx, err) {
			err = callerErr(callCtx, err)
		}
		c.afterAttempt(callCtx, err, nil, false, false)
		c.end(cc, err)
		return err
	}

	if c.hedgeOnTimeout {
		// hedgeOnPerTryTimeout needs a reply per attempt, which stagger
		// makes only for a proto.Message; others cut attempts off.
		if callerReply, ok := reply.(proto.Message); ok && callerReply != nil {
			if len(c.fileOpts) > 0 {
				grpcOpts = append(c.fileOpts[:len(c.fileOpts):len(c.fileOpts)], grpcOpts...)
			}
			// A copy, so that c itself stays on the stack when the call
			// does not hedge.
			tc := c
			err := k.timeoutHedge(callCtx, &tc, callerReply, req, cc, invoker, grpcOpts)
			tc.end(cc, err)
			return err
		}
	}

	ua := unaryAttempts.Get().(*unaryAttempt)
	err := k.unaryAttempts(&c, callCtx, method, req, reply, cc, invoker, grpcOpts, ua)
	if len(ua.opts) > 0 {
		clear(ua.opts)
		ua.opts = ua.opts[:0]
	}
	ua.header, ua.trailer = nil, nil
	unaryAttempts.Put(ua)
	c.end(cc, err)
	return err
}

// unaryAttempts runs the attempts of a call that may retry.
func (k *core) unaryAttempts(c *call, callCtx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, grpcOpts []grpc.CallOption, ua *unaryAttempt) error {
	// Learn of headers and trailers through the caller's own Header and
	// Trailer options when it passed them (grpc fills them per attempt, so
	// the caller ends with the last attempt's), else through ours.
	//
	// Why every attempt pays for them, even one that succeeds: the header is
	// the only sign, in grpc-go's API, that an attempt was committed (a
	// Trailers-Only failure leaves it nil), and the trailer carries
	// grpc-retry-pushback-ms; neither can be asked for after the attempt,
	// only before, and grpc's HeaderCallOption and TrailerCallOption copy the
	// stream's metadata (metadata.MD.Copy) whatever the outcome. A
	// CallOption with methods of its own cannot be written outside grpc
	// (unexported methods), OnFinish hears only the error, and a
	// stats.Handler's InHeader copies the header too and needs a dial
	// option. So a successful call over a real connection costs the copies
	// of its header and trailer: with a grpc-go server, 3 and 1 allocations.
	headerAddr, trailerAddr := &ua.header, &ua.trailer
	for _, opt := range grpcOpts {
		switch o := opt.(type) {
		case grpc.HeaderCallOption:
			headerAddr = o.HeaderAddr
		case grpc.TrailerCallOption:
			trailerAddr = o.TrailerAddr
		}
	}
	attemptOpts := ua.own[:]
	if len(c.fileOpts)+len(grpcOpts) > 0 {
		ua.opts = append(append(ua.opts, c.fileOpts...), grpcOpts...)
		if headerAddr == &ua.header {
			ua.opts = append(ua.opts, ua.own[0])
		}
		if trailerAddr == &ua.trailer {
			ua.opts = append(ua.opts, ua.own[1])
		}
		attemptOpts = ua.opts
	}

	for {
		actx, acancel, timer := c.nextAttempt(callCtx)
		// grpc writes these only when the attempt got a stream; a stale value
		// from an earlier attempt must not count.
		*headerAddr, *trailerAddr = nil, nil
		err := invoker(actx, method, req, reply, cc, attemptOpts...)
		// Stop the timer before judging: an attempt that ended while it was
		// armed ended on its own; once it fired, the attempt was cut off.
		err, timedOut := attemptOutcome(callCtx, err, c.stopTimer(timer))
		acancel()
		// A Trailers-Only response leaves the header nil; headers that
		// arrived, even with no entries, leave it non-nil: committed.
		// Except for a call with an idempotency key: a unary call shows
		// the application nothing of an attempt before the call returns,
		// so commitment protects nothing there but the server from running
		// the request twice, and the key does that (the server replays the
		// first run's outcome). Such a call is retried after headers as
		// before them: a reset after the server ran it heals.
		committed := *headerAddr != nil && c.o.idemKey == ""
		retry, pause := c.afterAttempt(callCtx, err, *trailerAddr, committed, timedOut)
		if !retry {
			return c.finish(err)
		}
		if perr := c.pause(callCtx, pause, err); perr != nil {
			return perr
		}
	}
}

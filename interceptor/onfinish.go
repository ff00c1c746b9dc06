package interceptor

import (
	"context"
	"sync"

	"google.golang.org/grpc/status"
)

// onFinishOnce holds a stream's grpc.OnFinish functions, taken out of its
// attempts' options (grpc would run them once per attempt): the stream runs
// them once, with the call's final error, or when the caller's context ends
// first (as grpc does for a stream the caller abandons).
type onFinishOnce struct {
	onFinish  []func(error)
	stopWatch func() bool // stops the watch on the caller's context
	// once makes a second caller wait until the first has run them, so
	// the end is announced after OnFinish returned.
	once sync.Once
}

// watchCaller runs the OnFinish functions when ctx, the caller's, ends
// before the stream does. The watch never reads stopWatch: when ctx has
// already ended, context.AfterFunc starts it before stopWatch is assigned.
func (f *onFinishOnce) watchCaller(ctx context.Context) {
	f.stopWatch = context.AfterFunc(ctx, func() {
		f.run(status.FromContextError(ctx.Err()).Err())
	})
}

// finishOnce stops the watch and runs the caller's OnFinish functions, the
// first time only; when the watch is running them, it waits for it. The
// stream calls it after watchCaller returned.
func (f *onFinishOnce) finishOnce(err error) {
	if len(f.onFinish) == 0 {
		return
	}
	f.stopWatch()
	f.run(err)
}

func (f *onFinishOnce) run(err error) {
	f.once.Do(func() {
		for _, fn := range f.onFinish {
			fn(err)
		}
	})
}

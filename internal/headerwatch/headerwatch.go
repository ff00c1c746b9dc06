// Package headerwatch tells a unary call's engine when an attempt's response
// headers arrived, which grpc-go shows a unary interceptor only with the
// attempt's end: a grpc stats.Handler (Handler) hears them as the transport
// reads them, in the attempt's context (Attempt).
package headerwatch

import (
	"context"
	"sync/atomic"
	"time"

	"google.golang.org/grpc/stats"
)

type key struct{}

// watcher is what Handler finds in an attempt's context.
type watcher interface{ arrived() }

// Attempt is the context of one attempt an engine watches: its parent's,
// plus the time its response headers arrived, and a wake-up event sent
// (never waited for: the transport's reader calls) on wake as they do.
// An attempt that ended may still hear of its headers: an Attempt is
// never reused.
type Attempt[E any] struct {
	context.Context
	at   atomic.Int64 // since base, +1; 0: not yet
	wake chan<- E
	ev   E
}

// base is the monotonic origin of Attempt's times.
var base = time.Now()

// New returns the context of an attempt under parent that sends ev on wake
// when its headers arrive, if wake has room or a receiver waits.
func New[E any](parent context.Context, wake chan<- E, ev E) *Attempt[E] {
	return &Attempt[E]{Context: parent, wake: wake, ev: ev}
}

// Value returns a itself for Handler, else its parent's value.
func (a *Attempt[E]) Value(k any) any {
	if k == (key{}) {
		return a
	}
	return a.Context.Value(k)
}

func (a *Attempt[E]) arrived() {
	if a.at.CompareAndSwap(0, int64(time.Since(base))+1) {
		select {
		case a.wake <- a.ev:
		default: // the engine reads Arrived at its next event
		}
	}
}

// Arrived returns when the attempt's response headers arrived; ok false:
// not yet.
func (a *Attempt[E]) Arrived() (at time.Time, ok bool) {
	if d := a.at.Load(); d != 0 {
		return base.Add(time.Duration(d - 1)), true
	}
	return at, false
}

// Attempts is one call's watched attempts in flight, each with its cancel;
// its zero value has none. One goroutine uses it.
type Attempts[E any] struct {
	list []watched[E]
	buf  [4]watched[E] // list's first room
}

type watched[E any] struct {
	n      int
	a      *Attempt[E]
	cancel context.CancelFunc
}

// Watch returns the context of attempt n under parent (New's), cancel its
// cancel func.
func (s *Attempts[E]) Watch(parent context.Context, n int, cancel context.CancelFunc, wake chan<- E, ev E) context.Context {
	if s.list == nil {
		s.list = s.buf[:0]
	}
	a := New(parent, wake, ev)
	s.list = append(s.list, watched[E]{n, a, cancel})
	return a
}

// First returns the attempt whose headers arrived first, and when (n 0:
// none yet).
func (s *Attempts[E]) First() (n int, first time.Time) {
	for _, w := range s.list {
		if at, ok := w.a.Arrived(); ok && (n == 0 || at.Before(first)) {
			n, first = w.n, at
		}
	}
	return n, first
}

// Drop cancels attempt n and forgets it.
func (s *Attempts[E]) Drop(n int) {
	for i, w := range s.list {
		if w.n == n {
			w.cancel()
			last := len(s.list) - 1
			s.list[i], s.list[last] = s.list[last], watched[E]{}
			s.list = s.list[:last]
			return
		}
	}
}

// CancelOthers cancels every attempt but n.
func (s *Attempts[E]) CancelOthers(n int) {
	for _, w := range s.list {
		if w.n != n {
			w.cancel()
		}
	}
}

// Handler is the stats.Handler that tells each watched attempt of its
// response headers (a Trailers-Only response has none) or, failing those,
// its first message. It keeps nothing and allocates nothing.
type Handler struct{}

func (Handler) TagRPC(ctx context.Context, _ *stats.RPCTagInfo) context.Context { return ctx }

func (Handler) HandleRPC(ctx context.Context, s stats.RPCStats) {
	switch s.(type) {
	case *stats.InHeader, *stats.InPayload:
		if s.IsClient() {
			if w, ok := ctx.Value(key{}).(watcher); ok {
				w.arrived()
			}
		}
	}
}

func (Handler) TagConn(ctx context.Context, _ *stats.ConnTagInfo) context.Context { return ctx }

func (Handler) HandleConn(context.Context, stats.ConnStats) {}

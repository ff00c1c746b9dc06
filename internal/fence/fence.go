// Package fence runs user code (a hook, a logger, a predicate, a resume
// function, a breaker's listener) where its panic is recovered: the panic
// is counted, logged once per kind of callback and interval, and turned by
// the caller into a skipped event or that call's error, so that no
// goroutine the library owns dies of it and no other call sees it.
package fence

import (
	"context"
	"fmt"
	"log/slog"
	"runtime/debug"
	"sync/atomic"
	"time"

	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors/logging"
)

// Site names the kind of callback that panicked (the log's stagger.callback).
type Site uint8

const (
	Hook Site = iota
	Logger
	Predicate
	Idempotent
	Resume
	OnFinish
	BreakerChange
	sites
)

var siteNames = [sites]string{"hook", "logger", "predicate", "idempotent methods", "resume", "OnFinish", "breaker onChange"}

// logEvery: not measured; as refusedlog's summary, so a hook that panics on
// every event costs one line per 10 s, not one per call.
const logEvery = 10 * time.Second

var (
	panics atomic.Int64
	// lastLog is each site's latest line, in Unix nanoseconds (0: none).
	lastLog [sites]atomic.Int64
)

const msgPanicked = "stagger: a callback panicked; recovered, the call goes on without it"

// Panics returns the number of panics recovered in the process.
func Panics() int64 { return panics.Load() }

// Run calls f and returns what it panicked with (nil: it did not); a
// panic is recovered, counted and logged (slog.Default, at error: the
// callback may be the logger), at most once per site per logEvery.
func Run(site Site, f func()) (panicked any) {
	done := false
	defer func() {
		if done {
			return
		}
		if panicked = recover(); panicked == nil {
			return // runtime.Goexit (a test's FailNow in a hook) goes on
		}
		panics.Add(1)
		now, last := time.Now().UnixNano(), &lastLog[site]
		if l := last.Load(); (l == 0 || now-l >= int64(logEvery)) && last.CompareAndSwap(l, now) {
			slog.Default().Error(msgPanicked, "stagger.callback", siteNames[site],
				"stagger.panic", fmt.Sprint(panicked), "stagger.stack", string(debug.Stack()), "stagger.panics", panics.Load())
		}
	}()
	f()
	done = true
	return nil
}

// NewHook returns fn fenced: a panic skips the event for fn alone.
func NewHook[E any](fn func(E)) func(E) {
	return func(e E) { Run(Hook, func() { fn(e) }) }
}

// NewCallHook is NewHook for a hook that also takes the call's context.
func NewCallHook[E any](fn func(context.Context, E)) func(context.Context, E) {
	return func(ctx context.Context, e E) { Run(Hook, func() { fn(ctx, e) }) }
}

// NewLogger returns l fenced (nil: nil): a panic loses that line alone.
func NewLogger(l logging.Logger) logging.Logger {
	if l == nil {
		return nil
	}
	return fencedLogger{l}
}

type fencedLogger struct{ l logging.Logger }

func (f fencedLogger) Log(ctx context.Context, level logging.Level, msg string, fields ...any) {
	Run(Logger, func() { f.l.Log(ctx, level, msg, fields...) })
}

// NewPredicate returns p (a policy.Predicate) fenced (nil: nil): a panic decides "no retry", so
// the call ends with the attempt's error.
func NewPredicate(p func(error) (retry, decided bool)) func(error) (retry, decided bool) {
	if p == nil {
		return nil
	}
	return func(err error) (retry, decided bool) {
		if Run(Predicate, func() { retry, decided = p(err) }) != nil {
			return false, true
		}
		return retry, decided
	}
}

// NewSafe returns safe (a method's idempotency) fenced (nil: nil): a panic
// says "not idempotent".
func NewSafe(safe func(string) bool) func(string) bool {
	if safe == nil {
		return nil
	}
	return func(method string) (ok bool) {
		if Run(Idempotent, func() { ok = safe(method) }) != nil {
			return false
		}
		return ok
	}
}

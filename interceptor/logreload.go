package interceptor

import (
	"context"
	"log/slog"

	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors/logging"

	"github.com/stagger-go/stagger/policy"
)

// warnedSource is the part of policy.Source that says which reloads swapped
// in a file with warnings.
type warnedSource interface {
	Warned() (n uint64, ev policy.SourceEvent)
	ClaimWarned() (ev policy.SourceEvent, ok bool)
}

// logWarnedReload says that cfg, which a call follows for the first time,
// came from a reload with warnings: the file is valid and in force, so
// nothing else would say that retries the program had are gone.
func (k *core) logWarnedReload(cfg *policy.Config) {
	ws, ok := k.opts.source.(warnedSource)
	if !ok {
		return
	}
	_, ev := ws.Warned()
	if ev.Config != cfg {
		return
	}
	fields := []any{"stagger.file", ev.Path, "stagger.warnings", ev.Warnings}
	if k.opts.logger != nil {
		k.opts.logger.Log(context.Background(), logging.LevelError, msgReloadWarned, fields...)
		return
	}
	if ev, ok := ws.ClaimWarned(); ok && ev.Config == cfg {
		slog.Default().Error(msgReloadWarned, fields...)
	}
}

// servedSource is the part of policy.Source that hears which methods the
// process calls: a reload naming them names a method, linked or not.
type servedSource interface {
	Served(fullMethod string)
}

// served tells the interceptor's source that a call of method was made.
func (k *core) served(method string) {
	if s, ok := k.opts.source.(servedSource); ok {
		s.Served(method)
	}
}

// Package filelog tells the interceptors' logger, or slog.Default()
// without one, what a policy file says that would otherwise go unheard: its
// warnings, a method it nearly names, and a reload its policy.Source refused
// or made with warnings (interceptor.WithLogger lists the lines).
package filelog

import (
	"context"
	"log/slog"
	"strings"
	"sync/atomic"

	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors/logging"

	"github.com/stagger-go/stagger/policy"
)

// The lines' messages: each a constant, what changes is in attributes.
const (
	msgPolicyWarning = "stagger: policy file warning (stagger.warning)"
	msgNearlyNamed   = "stagger: the policy file nearly names the method (a typo?): the call does not follow that entry"
	msgReloadRefused = "stagger: policy file not reloaded, the last good one stays in force (stagger.error)"
	msgReloadWarned  = "stagger: policy file reloaded with warnings: it names no known method or turns a method's retries off (stagger.warnings)"
)

// Reporter says one interceptor's policy file warnings and reloads. Set
// its fields before its first use; then it is safe for concurrent use.
type Reporter struct {
	// Logger hears every line; nil: slog.Default() hears the likely typos
	// and nearly named methods once per First set, and the reloads once in
	// the process.
	Logger logging.Logger
	// Source is the interceptor's source when it records its reloads (nil:
	// it records none).
	Source *policy.Source
	// First reports whether key is said for the first time by the
	// interceptors sharing a State.
	First func(key string) bool
	// refusalSeen is the number of the last refusal logged.
	refusalSeen atomic.Uint64
}

// Warnings tells the logger what the parse of cfg found: a file with
// such a mistake is valid, so without this line it would fail silently.
func (r *Reporter) Warnings(cfg *policy.Config) {
	for _, w := range cfg.Warnings() {
		if r.Logger == nil && (!w.Typo || !r.First(w.Path+": "+w.Message)) {
			continue
		}
		fields := []any{"stagger.field", w.Path}
		if w.Line > 0 {
			fields = append(fields, "stagger.line", w.Line, "stagger.column", w.Column)
		}
		if w.File != "" {
			fields = append(fields, "stagger.file", w.File)
		}
		r.warnLoud(msgPolicyWarning, append(fields, "stagger.warning", w.Message)...)
	}
	if r.Source != nil {
		// cfg, which a call follows for the first time, may come from a
		// reload with warnings: the file is valid and in force, so nothing
		// else would say that retries the program had are gone.
		r.Reload(cfg)
	}
}

// NearlyNamed says that cfg nearly names method without naming it: a
// typo silently leaves the method without its policy. A misspelt service
// is said once, not once per method.
func (r *Reporter) NearlyNamed(cfg *policy.Config, method string) {
	name := cfg.NearlyNamed(method)
	if name == "" {
		return
	}
	key := method
	if svc := method[:strings.LastIndexByte(method, '/')+1]; !strings.HasPrefix(name, svc) {
		key = svc
	}
	if !r.First("call " + key + " " + name) {
		return
	}
	r.warnLoud(msgNearlyNamed, "grpc.method", method, "stagger.name", name)
}

// Reload logs at error level a reload the Source (not nil) recorded: the
// latest refused (cfg nil), which each logger hears once (refusalSeen, its
// number), or the one with warnings that swapped in cfg. Without a logger slog.Default() hears it once in the
// process: the first of the Source's readers to claim it says it. Without
// this line a file and the policy in force differ in silence.
func (r *Reporter) Reload(cfg *policy.Config) {
	s, refusal := r.Source, cfg == nil
	var ev policy.SourceEvent
	var ok bool
	switch {
	case refusal && r.Logger == nil:
		ev, ok = s.ClaimRefused()
	case refusal:
		var n uint64
		n, ev = s.Refused()
		seen := r.refusalSeen.Load()
		ok = ev.Err != nil && seen != n && r.refusalSeen.CompareAndSwap(seen, n)
	default:
		// Not claimed unless it is cfg's: the claim is the process's only one.
		_, ev = s.Warned()
		if ok = ev.Config == cfg; ok && r.Logger == nil {
			ev, ok = s.ClaimWarned()
			ok = ok && ev.Config == cfg
		}
	}
	if !ok {
		return
	}
	msg, fields := msgReloadWarned, []any{"stagger.file", ev.Path, "stagger.warnings", ev.Warnings}
	if refusal {
		msg, fields = msgReloadRefused, []any{"stagger.error", ev.Err.Error(), "stagger.file", ev.Path}
	}
	if r.Logger == nil {
		slog.Default().Error(msg, fields...)
		return
	}
	r.Logger.Log(context.Background(), logging.LevelError, msg, fields...)
}

func (r *Reporter) warnLoud(msg string, fields ...any) {
	if r.Logger != nil {
		r.Logger.Log(context.Background(), logging.LevelWarn, msg, fields...)
		return
	}
	slog.Default().Warn(msg, fields...)
}

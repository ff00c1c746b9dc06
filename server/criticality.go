package server

import (
	"context"
	"fmt"
	"log/slog"
	"math"

	"github.com/stagger-go/stagger/criticality"
	"google.golang.org/grpc/metadata"
)

// CriticalityShares are the shares of WithConcurrencyLimit's limit that the
// less critical calls may fill: a call of criticality SHEDDABLE is admitted
// only while fewer than limit × Sheddable calls run (of every
// criticality), a SHEDDABLE_PLUS one while fewer than limit ×
// SheddablePlus, a CRITICAL one (and one that names no criticality) while
// fewer than limit × Critical, and a CRITICAL_PLUS one while fewer than
// limit. So as the server fills up it sheds the least critical first, and
// the share between Critical and 1 is kept for CRITICAL_PLUS calls alone.
// Each bound is at least 1 call: a call of any criticality runs on a server
// where nothing else does.
//
// The part of the limit above a share is headroom for the more critical: a
// burst of them is admitted at once however much less critical work waits,
// and it stays idle when none come, the price of that. A zero field is its
// default: Sheddable 0.8 and SheddablePlus 0.9 (a server loaded with
// sheddable work alone runs at 80 % of its limit, and keeps a fifth of it
// for CRITICAL calls), Critical 1 (no reserve for CRITICAL_PLUS: a server
// whose callers name no criticality runs up to its limit, as it did
// without criticality; set Critical below 1 when some callers send
// CRITICAL_PLUS). Each must be in (0, 1], and Sheddable ≤ SheddablePlus ≤
// Critical.
type CriticalityShares struct {
	Sheddable, SheddablePlus, Critical float64
}

// The default shares (CriticalityShares has the reasons).
const (
	defaultShareSheddable     = 0.8
	defaultShareSheddablePlus = 0.9
	defaultShareCritical      = 1
)

// WithCriticalityShares sets the shares of WithConcurrencyLimit's limit by
// criticality (see CriticalityShares); it needs WithConcurrencyLimit.
func WithCriticalityShares(sh CriticalityShares) Option {
	return func(s *settings) {
		s.sharesSet = true
		fields := [...]struct {
			name  string
			v     *float64
			deflt float64
		}{
			{"Sheddable", &sh.Sheddable, defaultShareSheddable},
			{"SheddablePlus", &sh.SheddablePlus, defaultShareSheddablePlus},
			{"Critical", &sh.Critical, defaultShareCritical},
		}
		ok := true
		for _, f := range fields {
			switch {
			case *f.v == 0:
				*f.v = f.deflt
			case !(*f.v > 0 && *f.v <= 1):
				s.errs = append(s.errs, fmt.Errorf("server: WithCriticalityShares: %s must be in (0, 1] (0: the default, %v), got %v", f.name, f.deflt, *f.v))
				ok = false
			}
		}
		if !ok {
			return
		}
		for i := 1; i < len(fields); i++ {
			lo, hi := fields[i-1], fields[i]
			if *hi.v < *lo.v {
				s.errs = append(s.errs, fmt.Errorf("server: WithCriticalityShares: %s (%v) must be at least %s (%v): a more critical call may fill at least as much as a less critical one", hi.name, *hi.v, lo.name, *lo.v))
			}
		}
		s.shares = sh
	}
}

// bounds returns, per criticality (Level.Index), how many calls may run
// when one of that criticality is admitted: limit × its share, at least 1,
// and limit for CRITICAL_PLUS.
func bounds(limit int64, sh CriticalityShares) [criticality.NumLevels]int64 {
	if sh == (CriticalityShares{}) {
		sh = CriticalityShares{defaultShareSheddable, defaultShareSheddablePlus, defaultShareCritical}
	}
	var b [criticality.NumLevels]int64
	for i, share := range [...]float64{sh.Sheddable, sh.SheddablePlus, sh.Critical, 1} {
		// The epsilon keeps 0.7 × 10 at 7 despite the float's rounding.
		b[i] = max(1, int64(math.Floor(float64(limit)*share+1e-9)))
	}
	return b
}

// Criticality returns the criticality of the request ctx belongs to: the
// one its caller sent (criticality.Header), which these interceptors put in
// the handler's context (criticality.FromContext reads it too), or
// CRITICAL when it sent none or an invalid one. A handler may use it to do
// less for the less critical (skip an optional enrichment, say).
func Criticality(ctx context.Context) criticality.Level {
	l, _ := criticality.FromContext(ctx)
	return l.Effective()
}

// maxLoggedHeader bounds the part of an invalid header the log line quotes.
const maxLoggedHeader = 64

// incomingCriticality reads the criticality the request ctx belongs to
// carries in criticality.Header. named is false when it carries none, or
// no valid one: the request then counts as CRITICAL, as one without the
// header, so a caller gains nothing by sending garbage; the first such
// request is logged (slog.Default()), once per Interceptors. Of several
// valid values the least critical counts, so that repeating the header
// never raises a request either.
func (s *Interceptors) incomingCriticality(ctx context.Context) (l criticality.Level, named bool) {
	vals := metadata.ValueFromIncomingContext(ctx, criticality.Header)
	if len(vals) == 0 {
		return criticality.Unset, false
	}
	bad := ""
	for _, v := range vals {
		got, err := criticality.Parse(v)
		if err != nil {
			bad = v
			continue
		}
		if !named || got < l {
			l, named = got, true
		}
	}
	if !named && !s.badCriticality.Swap(true) {
		if len(bad) > maxLoggedHeader {
			bad = bad[:maxLoggedHeader] + "..."
		}
		slog.Default().Warn("server: a request carries a criticality header that names no criticality; such requests count as CRITICAL, as without the header (logged once)", "stagger.header", criticality.Header, "stagger.value", bad)
	}
	return l, named
}

// ShedLevel returns how many calls of criticality l shedding refused so far
// (a call that named none, or an invalid one, counts as CRITICAL).
func (s *Interceptors) ShedLevel(l criticality.Level) uint64 {
	return s.shed[l.Index()].Load()
}

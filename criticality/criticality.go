// Package criticality names how much a call matters when a server or a
// client must shed work, after the four levels of Google's production RPC
// stack (SRE book, "Handling Overload"): CRITICAL_PLUS, CRITICAL,
// SHEDDABLE_PLUS and SHEDDABLE. A call that names none is CRITICAL.
//
// A Level travels three ways: in a context (NewContext, FromContext), on the
// wire in the Header metadata key, and in a policy file's per-method
// "criticality" key. The package imports the standard library only, so the
// budget, the breaker, the interceptors and the server side share it without
// importing one another.
package criticality

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
)

// Level is a call's criticality. The zero Level is unset, and counts as
// Critical (Effective). A higher Level matters more: Sheddable <
// SheddablePlus < Critical < CriticalPlus, so levels compare with < and >.
type Level uint8

const (
	// Unset: no criticality was named; it counts as Critical.
	Unset Level = iota
	// Sheddable: shed first; the caller expects it to fail under overload
	// (batch work, prefetches, recommendations).
	Sheddable
	// SheddablePlus: shed before Critical; a partial failure is tolerable
	// (work a caller retries later on its own).
	SheddablePlus
	// Critical: the default; a failure is seen by a user.
	Critical
	// CriticalPlus: shed last; the most important calls (a checkout, a
	// login), to be kept within a small share of the load.
	CriticalPlus
)

// NumLevels is how many levels there are: Levels' length, for arrays
// indexed by Level.Index.
const NumLevels = 4

// Levels returns the levels from the least critical to the most (a copy:
// the caller may change it).
func Levels() [NumLevels]Level {
	return [NumLevels]Level{Sheddable, SheddablePlus, Critical, CriticalPlus}
}

// Header is the metadata key a call's criticality travels in, its value one
// of the names String returns.
const Header = "stagger-criticality"

// Effective returns l, or Critical when l is Unset or not a level.
func (l Level) Effective() Level {
	if l == Unset || l > CriticalPlus {
		return Critical
	}
	return l
}

// Valid reports whether l is one of the four levels (Unset is not).
func (l Level) Valid() bool { return l >= Sheddable && l <= CriticalPlus }

// Index returns l's place in Levels (0 for Sheddable, 3 for CriticalPlus),
// counting Unset as Critical: the index of a per-level array.
func (l Level) Index() int { return int(l.Effective()) - 1 }

// String returns the level's name as on the wire: "SHEDDABLE",
// "SHEDDABLE_PLUS", "CRITICAL", "CRITICAL_PLUS", or "UNSET".
func (l Level) String() string {
	switch l {
	case Unset:
		return "UNSET"
	case Sheddable:
		return "SHEDDABLE"
	case SheddablePlus:
		return "SHEDDABLE_PLUS"
	case Critical:
		return "CRITICAL"
	case CriticalPlus:
		return "CRITICAL_PLUS"
	}
	return fmt.Sprintf("Level(%d)", uint8(l))
}

// Parse returns the level s names: one of String's names, in any case,
// with '-' accepted for '_'. Anything else is an error that lists the names.
func Parse(s string) (Level, error) {
	switch strings.ReplaceAll(strings.ToUpper(strings.TrimSpace(s)), "-", "_") {
	case "SHEDDABLE":
		return Sheddable, nil
	case "SHEDDABLE_PLUS":
		return SheddablePlus, nil
	case "CRITICAL":
		return Critical, nil
	case "CRITICAL_PLUS":
		return CriticalPlus, nil
	}
	return Unset, fmt.Errorf("criticality: %q is not one of CRITICAL_PLUS, CRITICAL, SHEDDABLE_PLUS, SHEDDABLE", s)
}

type key struct{}

// inUse: NewContext gave a context a level in this process. Until then
// FromContext answers without asking the context (a look-up that walks
// every value the context carries), so that a process that names no
// criticality pays nothing for it on every call. A context NewContext
// made reaches another goroutine only through something that orders the
// store before that goroutine's load.
var inUse atomic.Bool

// NewContext returns a copy of parent that carries l. Calls made under it
// carry l, unless a call option names another. An invalid l (Unset
// included) returns parent unchanged.
func NewContext(parent context.Context, l Level) context.Context {
	if !l.Valid() {
		return parent
	}
	if !inUse.Load() {
		inUse.Store(true)
	}
	return context.WithValue(parent, key{}, l)
}

// FromContext returns the level ctx carries, and whether it carries one.
func FromContext(ctx context.Context) (Level, bool) {
	if !inUse.Load() {
		return Unset, false
	}
	l, ok := ctx.Value(key{}).(Level)
	return l, ok
}

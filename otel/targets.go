package staggerotel

import (
	"strings"
	"sync"
	"sync/atomic"

	"github.com/stagger-go/stagger/interceptor"
)

// targetNames names targets as grpc.target records them.
type targetNames struct {
	perTarget bool
	filter    func(string) bool
	// byDialled maps a target as dialled (Event.Target) to the
	// grpc.target recorded for it (PerTarget only), so that a call's end
	// neither builds its canonical target nor asks the filter again.
	byDialled boundedMap
}

func newTargetNames(o Options) *targetNames {
	return &targetNames{perTarget: o.PerTarget, filter: o.TargetAttributeFilter}
}

// name returns the grpc.target recorded for a target dialled as dialled,
// whose canonical form canonical returns: "" without PerTarget.
func (n *targetNames) name(dialled string, canonical func() string) string {
	if !n.perTarget {
		return ""
	}
	if v, ok := n.byDialled.load(dialled); ok {
		return v.(string)
	}
	return n.byDialled.loadOrStore(dialled, n.accept(canonical())).(string)
}

// accept returns the grpc.target recorded for a canonical target under
// PerTarget.
func (n *targetNames) accept(target string) string {
	if target == "" || n.filter != nil && !n.filter(target) {
		return Other
	}
	return target
}

// gauge returns the budget gauges' key for a budget's target, the
// canonical target budget.Backends keys it by (or a front end's target):
// with PerTarget, the target as the call metrics record it (the filter
// applied to it); without, ("", false): every target's budgets add up per
// kind.
func (n *targetNames) gauge(canonical string) (string, bool) {
	if !n.perTarget {
		return "", false
	}
	return n.accept(canonical), true
}

// boundedMap is a sync.Map of at most cacheMax keys: past that it starts
// afresh.
type boundedMap struct {
	m sync.Map
	n atomic.Int64
}

func (b *boundedMap) load(k any) (any, bool) { return b.m.Load(k) }

// loadOrStore stores v under k unless k has a value, and returns k's value.
func (b *boundedMap) loadOrStore(k, v any) any {
	if b.n.Add(1) > cacheMax {
		b.m.Clear()
		b.n.Store(1)
	}
	v, _ = b.m.LoadOrStore(k, v)
	return v
}

// recordedTarget returns the grpc.target recorded for e's call ("" without
// PerTarget).
func (r *recorder) recordedTarget(e *interceptor.Event) string {
	return r.targets.name(e.Target, func() string {
		if e.CanonicalTarget != "" {
			return e.CanonicalTarget
		}
		return e.Target // an event built by hand
	})
}

// recordedMethod returns the grpc.method recorded for e's call: the method
// without its leading slash for a method generated code registered
// (Event.StaticMethod), else "other".
func recordedMethod(e *interceptor.Event) string {
	if !e.StaticMethod {
		return Other
	}
	return strings.TrimPrefix(e.Method, "/")
}

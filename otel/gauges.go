package staggerotel

import (
	"context"
	"fmt"

	"github.com/stagger-go/stagger/budget"
	"github.com/stagger-go/stagger/interceptor"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
)

// registerBudgetGauges creates the budget and Gate gauges on m and the
// callback that reads o's budgets when the metrics are collected.
func registerBudgetGauges(m metric.Meter, o Options, targets *targetNames) error {
	level, err := m.Float64ObservableGauge(MetricBudgetLevel, metric.WithUnit("{retry}"),
		metric.WithDescription("The retry budget's current level (tokens, or the retries it could allow now)."))
	if err != nil {
		return fmt.Errorf("staggerotel: instrument %s: %w", MetricBudgetLevel, err)
	}
	capacity, err := m.Float64ObservableGauge(MetricBudgetCapacity, metric.WithUnit("{retry}"),
		metric.WithDescription("The largest level the retry budget can reach."))
	if err != nil {
		return fmt.Errorf("staggerotel: instrument %s: %w", MetricBudgetCapacity, err)
	}
	waiting, err := m.Int64ObservableGauge(MetricGateWaiting, metric.WithUnit("{call}"),
		metric.WithDescription("Calls whose retry waits in a Gate now (held: the budget refused it, the call waits for a later admission)."))
	if err != nil {
		return fmt.Errorf("staggerotel: instrument %s: %w", MetricGateWaiting, err)
	}
	health, err := m.Int64ObservableGauge(MetricGateHealth, metric.WithUnit("{gate}"),
		metric.WithDescription("Gates (one per method of a backend) by their view of the server, stagger.gate.health: quiet, failing, outage or recovering."))
	if err != nil {
		return fmt.Errorf("staggerotel: instrument %s: %w", MetricGateHealth, err)
	}
	budgets, backends, states := o.Budgets, o.Backends, o.States
	if budgets == nil && backends == nil && states == nil {
		backends = []*budget.Backends{budget.DefaultBackends()}
	}
	budgets = uniqueBudgets(budgets)
	if len(budgets) == 0 && len(backends) == 0 && len(states) == 0 {
		return nil
	}
	healths := budget.Healths()
	_, err = m.RegisterCallback(func(_ context.Context, obs metric.Observer) error {
		sums, gates := budgetSums(budgets, backends, states, targets.gauge)
		for k, v := range sums {
			attrs := []attribute.KeyValue{attribute.String(AttrBudgetKind, k.kind)}
			if k.backend {
				attrs = append(attrs, attribute.String(AttrTarget, k.target))
			}
			opt := metric.WithAttributes(attrs...)
			obs.ObserveFloat64(level, v.level, opt)
			obs.ObserveFloat64(capacity, v.capacity, opt)
		}
		for k, v := range gates {
			var attrs []attribute.KeyValue
			if k.backend {
				attrs = append(attrs, attribute.String(AttrTarget, k.target))
			}
			obs.ObserveInt64(waiting, int64(v.waiting), metric.WithAttributes(attrs...))
			// Every health, 0 included: a point that vanished would
			// read as no data, not as an outage that ended.
			for _, h := range healths {
				obs.ObserveInt64(health, int64(v.health[h]), metric.WithAttributes(append(attrs[:len(attrs):len(attrs)], attribute.String(AttrGateHealth, h))...))
			}
		}
		return nil
	}, level, capacity, waiting, health)
	if err != nil {
		return fmt.Errorf("staggerotel: callback of %s, %s, %s and %s: %w", MetricBudgetLevel, MetricBudgetCapacity, MetricGateWaiting, MetricGateHealth, err)
	}
	return nil
}

// gaugeKey is one point of the budget gauges: a kind, and for a backend's
// budget its target.
type gaugeKey struct {
	kind, target string
	backend      bool
}

// gaugeSum is the level and capacity of the budgets under one gaugeKey.
type gaugeSum struct{ level, capacity float64 }

// gateKey is one point of the Gate gauges: for a backend's Gates, its
// target.
type gateKey struct {
	target  string
	backend bool
}

// gateSum is the Gates under one gateKey: the calls waiting in them, and
// how many stand at each health (budget.State.Health).
type gateSum struct {
	waiting int
	health  map[string]int
}

// budgetSums reads every budget once and adds up those under one key: two
// budgets of one kind for one target (two States, each holding a file's
// budget for it, or a State and budget.DefaultBackends()) are two sets of
// tokens the process spends on that target, and an SDK keeps one of two
// observations under the same attributes, so each would hide the other.
// A Backends named twice counts once; a target's methods' Gates share its
// tokens and count once. gates adds up the Gates (a budget with a
// State.Health) the same way, each of a target's methods' counted.
//
// target maps a budget's target as dialled to its key: ("", false) adds
// up every target's budgets of a kind with the process-wide Budgets'.
func budgetSums(budgets []budget.Budget, backends []*budget.Backends, states []*interceptor.State, target func(string) (string, bool)) (sums map[gaugeKey]gaugeSum, gates map[gateKey]gateSum) {
	sums, gates = map[gaugeKey]gaugeSum{}, map[gateKey]gateSum{}
	add := func(k gaugeKey, st budget.State) {
		v := sums[k]
		sums[k] = gaugeSum{v.level + st.Level, v.capacity + st.Capacity}
	}
	addGate := func(k gateKey, st budget.State) {
		if st.Health == "" {
			return
		}
		v := gates[k]
		if v.health == nil {
			v.health = map[string]int{}
		}
		v.waiting += st.Waiting
		v.health[st.Health]++
		gates[k] = v
	}
	for _, b := range budgets {
		st := b.State()
		add(gaugeKey{kind: st.Kind}, st)
		addGate(gateKey{}, st)
	}
	all := backends
	for _, st := range states {
		all = append(all[:len(all):len(all)], st.Budgets()...)
	}
	seen := map[*budget.Backends]bool{}
	for _, bs := range all {
		if bs == nil || seen[bs] {
			continue
		}
		seen[bs] = true
		last := ""
		for i, st := range bs.States() {
			t, per := target(st.Target)
			addGate(gateKey{t, per}, st.State)
			if i > 0 && st.Target == last {
				continue // the target's other methods' Gates: the same tokens
			}
			last = st.Target
			add(gaugeKey{st.Kind, t, per}, st.State)
		}
	}
	return sums, gates
}

// uniqueBudgets returns bs without nil budgets and repeats.
func uniqueBudgets(bs []budget.Budget) []budget.Budget {
	out := make([]budget.Budget, 0, len(bs))
next:
	for _, b := range bs {
		if b == nil {
			continue
		}
		for _, seen := range out {
			if sameBudget(seen, b) {
				continue next
			}
		}
		out = append(out, b)
	}
	return out
}

// sameBudget compares two budgets, false for incomparable dynamic types.
func sameBudget(a, b budget.Budget) (same bool) {
	defer func() {
		if recover() != nil {
			same = false
		}
	}()
	return a == b
}

package staggerotel

import (
	"context"
	"fmt"
	"sync"

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
	var opts gateOptions
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
		opts.observe(obs, gates, waiting, health)
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
// how many stand at each health (healths' order).
type gateSum struct {
	waiting int
	health  []int
}

// healths are the values of budget.State.Health, in order.
var healths = budget.Healths()

// healthIndex returns h's index in healths, or -1.
func healthIndex(h string) int {
	for i, x := range healths {
		if x == h {
			return i
		}
	}
	return -1
}

// gateOptions keeps the Gate gauges' attributes per gateKey from one
// collection to the next, so that a collection with PerTarget builds a
// target's 5 attribute sets once, not at each collection; it forgets the
// keys a collection did not see (a target the Backends forgot). Safe for
// concurrent use (two readers may collect at once).
type gateOptions struct {
	mu    sync.Mutex
	byKey map[gateKey]*gateKeyOptions
}

// gateKeyOptions are one gateKey's observe options: the waiting gauge's,
// and the health gauge's per health.
type gateKeyOptions struct {
	waiting metric.ObserveOption
	health  []metric.ObserveOption
}

func newGateKeyOptions(k gateKey) *gateKeyOptions {
	var attrs []attribute.KeyValue
	if k.backend {
		attrs = append(attrs, attribute.String(AttrTarget, k.target))
	}
	o := &gateKeyOptions{waiting: metric.WithAttributeSet(attribute.NewSet(attrs...))}
	for _, h := range healths {
		o.health = append(o.health, metric.WithAttributeSet(attribute.NewSet(append(attrs[:len(attrs):len(attrs)], attribute.String(AttrGateHealth, h))...)))
	}
	return o
}

// observe reports gates: each key's waiting calls, and its Gates at every
// health, 0 included (a point that vanished would read as no data, not as
// an outage that ended).
func (g *gateOptions) observe(obs metric.Observer, gates map[gateKey]gateSum, waiting, health metric.Int64ObservableGauge) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.byKey == nil {
		g.byKey = map[gateKey]*gateKeyOptions{}
	}
	for k, v := range gates {
		o := g.byKey[k]
		if o == nil {
			o = newGateKeyOptions(k)
			g.byKey[k] = o
		}
		obs.ObserveInt64(waiting, int64(v.waiting), o.waiting)
		for i, n := range v.health {
			obs.ObserveInt64(health, int64(n), o.health[i])
		}
	}
	for k := range g.byKey {
		if _, ok := gates[k]; !ok {
			delete(g.byKey, k)
		}
	}
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
// target maps a budget's target (its canonical target: budget.Backends
// keys a backend by it) to its key: ("", false) adds up every target's
// budgets of a kind with the process-wide Budgets'.
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
			v.health = make([]int, len(healths))
		}
		v.waiting += st.Waiting
		if i := healthIndex(st.Health); i >= 0 {
			v.health[i]++
		}
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

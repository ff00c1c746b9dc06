package interceptor

import (
	"sync/atomic"

	"github.com/stagger-go/stagger/breaker"
	"github.com/stagger-go/stagger/budget"
	"github.com/stagger-go/stagger/internal/bounded"
	"github.com/stagger-go/stagger/policy"
)

// State holds the live state that the interceptors build from a policy
// file's settings, on first use: the budgets (one budget.Backends per
// budget settings: each target its tokens and Gates) and the circuit
// breakers (one breaker.Set per breaker settings).
//
// Interceptors built with the same State (WithState) share it, per target;
// stagger.DialOptions makes one for the two interceptors it returns, so
// two DialOptions calls share nothing, as grpc-go's channels do not.
//
// Settings are the key: configs with equal settings share the state, so a
// reload through a policy.Source that keeps them keeps every backend's
// tokens, Gates and breakers. One that changes them starts afresh: the
// State drops the old state when the first call follows the new file
// (calls in flight keep theirs), and a file that goes back to the old
// settings starts afresh too. A State keeps the state of at most 64
// distinct budget settings and 64 breaker settings; past that, a config's
// are built for the call that needs them and not kept (its breakers once
// per method an interceptor follows, for every call of the method,
// whatever its options).
//
// The zero value is an empty State, ready to use, as NewState's is. A State
// is safe for concurrent use and must not be copied after first use.
type State struct {
	keptBudgets  bounded.Kept[budget.Settings, *budget.Backends]
	keptBreakers bounded.Kept[breaker.Settings, *breaker.Set]
	said         said
	fileOff      atomic.Bool // the file's switch (core.fileSwitch)
}

// said is what the interceptors sharing a State said of their files, once
// between them: warned, the last file whose warnings were said; loud, the
// likely typos said (firstLoud).
type said struct {
	warned atomic.Pointer[policy.Config]
	loud   saidOnce
}

// NewState returns an empty State.
func NewState() *State { return new(State) }

// WithState makes the interceptor keep its budgets and breakers in st,
// shared with every interceptor given the same st (see State). A nil st
// gives the interceptor a State of its own, as without the option.
func WithState(st *State) Option {
	return Option{apply: func(o *options) { o.state = st }}
}

// Budgets returns the budgets the State holds, one budget.Backends per
// budget settings in use, in no particular order; for metrics.
func (s *State) Budgets() []*budget.Backends {
	if s == nil {
		return nil
	}
	return s.keptBudgets.Values()
}

// Breakers returns the breaker sets the State holds, one per breaker
// settings in use, in no particular order; for metrics and checks
// (breaker.Set.Snapshots).
func (s *State) Breakers() []*breaker.Set {
	if s == nil {
		return nil
	}
	return s.keptBreakers.Values()
}

// budgets returns the budgets of cfg's budget settings (nil: none), made
// on first use and kept when keep says so.
func (s *State) budgets(cfg *policy.Config, keep bool) *budget.Backends {
	key := cfg.BudgetSettings()
	if key.Kind == budget.KindNone {
		return nil
	}
	return s.keptBudgets.Get(key, stateCap, cfg.NewBudgets, keep)
}

// breakers returns the breakers of cfg's calls matched to m (nil: no
// entry), made on first use and kept when keep says so; nil: none.
func (s *State) breakers(cfg *policy.Config, m *policy.Method, keep bool) *breaker.Set {
	st := cfg.BreakerSettingsFor(m)
	if st == nil {
		return nil
	}
	return s.keptBreakers.Get(*st, stateCap, func() (*breaker.Set, error) { return cfg.NewBreakers(*st) }, keep)
}

// moved drops the state that prev (a Source's last config) used and next
// (its new one) does not, by State's reload rule.
func (s *State) moved(prev, next *policy.Config) {
	if prev == nil {
		return
	}
	if old := prev.BudgetSettings(); old != next.BudgetSettings() {
		s.keptBudgets.Drop(func(k budget.Settings) bool { return k == old })
	}
	unused := map[breaker.Settings]bool{}
	for _, st := range breakerSettings(prev) {
		unused[st] = true
	}
	for _, st := range breakerSettings(next) {
		delete(unused, st)
	}
	s.keptBreakers.Drop(func(k breaker.Settings) bool { return unused[k] })
}

func breakerSettings(cfg *policy.Config) []breaker.Settings {
	var out []breaker.Settings
	if st := cfg.BreakerSettingsFor(nil); st != nil {
		out = append(out, *st)
	}
	for _, e := range cfg.Entries() {
		if st := e.Method.Breaker; st != nil {
			out = append(out, *st)
		}
	}
	return out
}

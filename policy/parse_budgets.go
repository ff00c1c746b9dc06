package policy

import (
	"encoding/json"
	"errors"
	"strconv"
	"strings"
	"time"

	"github.com/stagger-go/stagger/budget"
)

func (w *walker) throttle(n *node, path string, c *Config) {
	c.budgetPath = path
	if !w.object(n, path, "maxTokens", "tokenRatio", "defer") {
		return
	}
	def, defOK := w.deferSettings(n, path)
	var s budget.ThrottleSettings
	okAll := true
	if v := get(n, "maxTokens"); v == nil {
		w.fail(join(path, "maxTokens"), "is required", shownValue("nothing"))
		okAll = false
	} else if f, ok := w.number(v, join(path, "maxTokens")); !ok {
		okAll = false
	} else if f <= 0 || f > 1000 {
		w.fail(join(path, "maxTokens"), "must be in (0, 1000]", json.Number(v.s))
		okAll = false
	} else {
		s.MaxTokens = f
	}
	if v := get(n, "tokenRatio"); v == nil {
		w.fail(join(path, "tokenRatio"), "is required", shownValue("nothing"))
		okAll = false
	} else if f, ok := w.number(v, join(path, "tokenRatio")); !ok {
		okAll = false
	} else if f <= 0 {
		w.fail(join(path, "tokenRatio"), "must be > 0", json.Number(v.s))
		okAll = false
	} else {
		t := truncate3(f)
		if t == 0 {
			w.fail(join(path, "tokenRatio"), "must be at least 0.001 (gRFC A6 keeps 3 decimals)", json.Number(v.s))
			okAll = false
		} else if t != f {
			w.warn(join(path, "tokenRatio"), "%s kept to 3 decimals as gRFC A6 says: %s (grpc-go uses every digit)", v.s, strconv.FormatFloat(t, 'f', -1, 64))
		}
		s.TokenRatio = t
	}
	if okAll && defOK {
		c.budgetSettings = budget.Settings{Kind: budget.KindThrottle, Throttle: s, Defer: def}
	}
}

// truncate3 keeps 3 decimals of f, as gRFC A6 (and grpc C-core, which counts
// milli-tokens) does. It works on the shortest decimal form of f, so 1.005
// stays 1.005 instead of becoming 1.004 through binary rounding.
func truncate3(f float64) float64 {
	s := strconv.FormatFloat(f, 'f', -1, 64)
	if i := strings.IndexByte(s, '.'); i >= 0 && len(s) > i+4 {
		s = s[:i+4]
	}
	t, err := strconv.ParseFloat(s, 64)
	if err != nil {
		return 0
	}
	return t
}

// retryBudget reads a retryBudget: a tokenBucket or a ratio, each field
// optional (an absent one takes the kind's own default, written beside it
// in budget.TokenBucketSettings and budget.RatioSettings: an empty
// tokenBucket is the AWS SDKs' bucket, 500 tokens starting full), and an
// optional "defer"; "defer" alone is stagger's default budget
// (budget.DefaultSettings: 100 tokens starting at 9) with that setting.
func (w *walker) retryBudget(n *node, path string, c *Config) {
	c.budgetPath = path
	if !w.object(n, path, "tokenBucket", "ratio", "defer") {
		return
	}
	def, defOK := w.deferSettings(n, path)
	if !defOK {
		return
	}
	tb, ra := get(n, "tokenBucket"), get(n, "ratio")
	switch {
	case tb != nil && ra != nil:
		w.fail(path, "must hold one of tokenBucket or ratio, not both", shownValue("both"))
	case tb != nil:
		p := join(path, "tokenBucket")
		if !w.object(tb, p, "capacity", "initial", "retryCost", "timeoutRetryCost", "successReward") {
			return
		}
		before := len(w.errs)
		s := budget.Settings{Kind: budget.KindTokenBucket, TokenBucket: budget.TokenBucketSettings{
			Capacity:         w.optNumber(tb, p, "capacity"),
			Initial:          w.optNumber(tb, p, "initial"),
			RetryCost:        w.optNumber(tb, p, "retryCost"),
			TimeoutRetryCost: w.optNumber(tb, p, "timeoutRetryCost"),
			SuccessReward:    w.optNumber(tb, p, "successReward"),
		}, Defer: def}
		w.budgetSettings(s, p, before, c)
	case ra != nil:
		p := join(path, "ratio")
		if !w.object(ra, p, "percent", "window", "minRetriesPerSecond") {
			return
		}
		before := len(w.errs)
		var window time.Duration
		if v := get(ra, "window"); v != nil {
			window, _ = w.duration(v, join(p, "window"))
		}
		s := budget.Settings{Kind: budget.KindRatio, Ratio: budget.RatioSettings{
			Percent:             w.optNumber(ra, p, "percent"),
			Window:              window,
			MinRetriesPerSecond: w.optNumber(ra, p, "minRetriesPerSecond"),
		}, Defer: def}
		w.budgetSettings(s, p, before, c)
	case get(n, "defer") != nil:
		// "defer" alone: stagger's default budget (budget.DefaultSettings,
		// the one stagger.DialOptions installs), waiting or not as it says.
		s := budget.DefaultSettings()
		s.Defer = def
		w.budgetSettings(s, path, len(w.errs), c)
	default:
		w.fail(path, "must hold tokenBucket, ratio or defer", shownValue("none"))
	}
}

// deferSettings reads the budget's optional "defer" (a stagger extension):
// true or false, or an object {"maxWaiting": n, "maxWait": "10s"}, which
// means true. Absent: the kind's default (budget.DeferAuto).
func (w *walker) deferSettings(n *node, path string) (budget.DeferSettings, bool) {
	var d budget.DeferSettings
	v := get(n, "defer")
	if v == nil {
		return d, true
	}
	p := join(path, "defer")
	switch v.kind {
	case nodeBool:
		d.Mode = budget.DeferOff
		if v.b {
			d.Mode = budget.DeferOn
		}
		return d, true
	case nodeObject:
	default:
		w.wrongKind(p, `must be true, false or an object {"maxWaiting": n, "maxWait": "10s"}`, v)
		return d, false
	}
	if !w.object(v, p, "maxWaiting", "maxWait") {
		return d, false
	}
	d.Mode = budget.DeferOn
	ok := true
	if m := get(v, "maxWaiting"); m != nil {
		i, iok := w.integer(m, join(p, "maxWaiting"))
		switch {
		case !iok:
			ok = false
		case i < 1 || i > 1e6:
			w.fail(join(p, "maxWaiting"), "must be in [1, 1e6]", json.Number(m.s))
			ok = false
		default:
			d.MaxWaiting = int(i)
		}
	}
	if m := get(v, "maxWait"); m != nil {
		dur, dok := w.duration(m, join(p, "maxWait"))
		switch {
		case !dok:
			ok = false
		case dur < time.Millisecond || dur > time.Hour:
			w.fail(join(p, "maxWait"), "must be in [1ms, 1h]", m.s)
			ok = false
		default:
			d.MaxWait = dur
		}
	}
	return d, ok
}

// optNumber reads an optional number; 0 (or absent) takes the budget's
// default.
func (w *walker) optNumber(n *node, path, key string) float64 {
	v := get(n, key)
	if v == nil {
		return 0
	}
	f, _ := w.number(v, join(path, key))
	return f
}

// budgetSettings checks s with the budget package's own rules (so the file
// and code agree on them) and keeps it when the file's part had no error.
func (w *walker) budgetSettings(s budget.Settings, path string, before int, c *Config) {
	if len(w.errs) != before {
		return
	}
	if err := s.Validate(); err != nil {
		var se *budget.SettingsError
		if errors.As(err, &se) {
			v := se.Value
			if d, ok := v.(time.Duration); ok {
				v = d.String()
			}
			w.fail(join(path, fileKey(se.Field)), se.Rule, v)
		} else {
			w.fail(path, "must be a valid budget", err.Error())
		}
		return
	}
	c.budgetSettings = s
}

// fileKey is the policy file's key of a budget or breaker setting named by
// its Go field (a dotted path for nested ones): "MaxTokens" is "maxTokens",
// "Defer.MaxWait" is "defer.maxWait".
func fileKey(field string) string {
	parts := strings.Split(field, ".")
	for i, p := range parts {
		if p != "" {
			parts[i] = strings.ToLower(p[:1]) + p[1:]
		}
	}
	return strings.Join(parts, ".")
}

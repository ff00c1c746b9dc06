package policy

import (
	"encoding/json"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/stagger-go/stagger/criticality"
	"google.golang.org/grpc/balancer"
	"google.golang.org/grpc/codes"
)

var jitterByName = map[string]Jitter{
	"PROPORTIONAL": JitterProportional, "FULL": JitterFull, "EQUAL": JitterEqual,
	"DECORRELATED": JitterDecorrelated, "NONE": JitterNone,
}

// lbConfig checks loadBalancingConfig as grpc-go does (a list of one-key
// objects, the first policy registered with grpc-go chosen and its config
// parsed by its builder), so a file grpc-go refuses is refused here too.
func (w *walker) lbConfig(v *node, path string, c *Config) {
	if v.kind != nodeArray {
		w.wrongKind(path, "must be an array of {policyName: config} objects", v)
		return
	}
	var names []string
	for i, e := range v.arr {
		if e.kind != nodeObject {
			w.wrongKind(index(path, i), "must be an object with exactly one key", e)
			return
		}
		if len(distinctKeys(e.keys)) != 1 {
			w.fail(index(path, i), "must be an object with exactly one key", len(distinctKeys(e.keys)))
			return
		}
		names = append(names, e.keys[len(e.keys)-1])
	}
	for i, name := range names {
		b := balancer.Get(name)
		if b == nil {
			continue
		}
		c.lbPolicy = name
		if parser, ok := b.(balancer.ConfigParser); ok {
			raw, _ := json.Marshal(toAny(v.arr[i].vals[len(v.arr[i].vals)-1]))
			if _, err := safeParseLB(parser, raw); err != nil {
				w.fail(join(index(path, i), name), "must be a config grpc-go accepts for policy "+strconv.Quote(name), err.Error())
				return
			}
		}
		w.warn(path, "policy %q is grpc-go's to apply; stagger does not apply it", name)
		return
	}
	w.fail(path, "must name a load-balancing policy registered with grpc-go", strings.Join(names, ", "))
}

func safeParseLB(p balancer.ConfigParser, raw []byte) (cfg any, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("parser panicked: %v", r)
		}
	}()
	return p.ParseConfig(raw)
}

// distinctKeys lists keys without exact repeats (encoding/json decodes an
// object into a map, where the last of equal keys wins).
func distinctKeys(keys []string) []string {
	seen := map[string]bool{}
	var out []string
	for _, k := range keys {
		if !seen[k] {
			seen[k] = true
			out = append(out, k)
		}
	}
	return out
}

// toAny turns a subtree back into plain Go values, for a load-balancing
// policy's own parser.
func toAny(n *node) any {
	switch n.kind {
	case nodeBool:
		return n.b
	case nodeNumber:
		return json.Number(n.s)
	case nodeString:
		return n.s
	case nodeArray:
		out := make([]any, len(n.arr))
		for i, e := range n.arr {
			out[i] = toAny(e)
		}
		return out
	case nodeObject:
		out := make(map[string]any, len(n.keys))
		for i, k := range n.keys {
			out[k] = toAny(n.vals[i])
		}
		return out
	}
	return nil
}

func (w *walker) methodConfigs(v *node, c *Config) {
	if v.kind != nodeArray {
		w.wrongKind("methodConfig", "must be an array", v)
		return
	}
	owner := map[string]int{}
	for i, e := range v.arr {
		path := index("methodConfig", i)
		if e.kind == nodeNull {
			w.warn(path, "null entry, skipped (as grpc-go skips it)")
			continue
		}
		if !w.object(e, path, "name", "retryPolicy", "hedgingPolicy", "idempotent", "timeout",
			"waitForReady", "maxRequestMessageBytes", "maxResponseMessageBytes",
			"circuitBreaker", "adaptiveThrottling", "criticality") {
			continue
		}
		m := w.method(e, path)
		entry := Entry{Index: i, Method: m}
		nameNode := get(e, "name")
		if nameNode == nil {
			w.warn(path, "entry has no name, so it applies to no method (grpc-go skips it too)")
		} else if nameNode.kind != nodeArray {
			w.wrongKind(join(path, "name"), "must be an array of {service, method}", nameNode)
		} else {
			for j, nn := range nameNode.arr {
				np := index(join(path, "name"), j)
				if nn.kind == nodeNull {
					// encoding/json decodes null into a zero {service, method}:
					// grpc-go reads it as the default entry.
					nn = &node{kind: nodeObject}
				}
				if !w.object(nn, np, "service", "method") {
					continue
				}
				var svc, meth string
				okName := true
				if s := get(nn, "service"); s != nil {
					svc, okName = w.str(s, join(np, "service"))
				}
				if s := get(nn, "method"); s != nil {
					var ok bool
					meth, ok = w.str(s, join(np, "method"))
					okName = okName && ok
				}
				if !okName {
					continue
				}
				if svc == "" && meth != "" {
					w.fail(join(np, "method"), "a method needs a service", meth)
					continue
				}
				key := ""
				if svc != "" {
					key = "/" + svc + "/" + meth
				}
				if first, dup := owner[key]; dup {
					w.fail(np, fmt.Sprintf("duplicate name, already given in methodConfig[%d]", first), shownValue(displayName(key)))
					continue
				}
				owner[key] = i
				w.checkName(np, svc, meth)
				c.methods[key] = m
				entry.Names = append(entry.Names, key)
			}
			if len(nameNode.arr) == 0 {
				w.warn(join(path, "name"), "empty list, so the entry applies to no method")
			}
		}
		c.entries = append(c.entries, entry)
	}
	c.defaultMethod = c.methods[""]
}

// displayName shows a method-config key as a user reads it.
func displayName(key string) string {
	if key == "" {
		return "{} (the default entry)"
	}
	return key
}

func (w *walker) method(e *node, path string) *Method {
	m := &Method{}
	if v := get(e, "timeout"); v != nil {
		if d, ok := w.duration(v, join(path, "timeout")); ok {
			switch {
			case d < 0:
				w.warn(join(path, "timeout"), "negative, so ignored (as grpc-go ignores it)")
			case d == 0:
				w.warn(join(path, "timeout"), "0s: grpc-go would fail every call at once; stagger ignores it")
			default:
				m.Timeout = d
			}
		}
	}
	if v := get(e, "waitForReady"); v != nil {
		if b, ok := w.boolean(v, join(path, "waitForReady")); ok {
			m.WaitForReady = &b
		}
	}
	m.MaxRequestMessageBytes = w.messageBytes(e, path, "maxRequestMessageBytes")
	m.MaxResponseMessageBytes = w.messageBytes(e, path, "maxResponseMessageBytes")
	if v := get(e, "idempotent"); v != nil {
		if b, ok := w.boolean(v, join(path, "idempotent")); ok {
			m.Idempotent = &b
		}
	}
	if v := get(e, "criticality"); v != nil {
		if s, ok := w.str(v, join(path, "criticality")); ok {
			l, err := criticality.Parse(s)
			if err != nil {
				w.fail(join(path, "criticality"), "must be one of CRITICAL_PLUS, CRITICAL, SHEDDABLE_PLUS, SHEDDABLE", s)
			}
			m.Criticality = l
		}
	}
	rp, hp := get(e, "retryPolicy"), get(e, "hedgingPolicy")
	if rp != nil && hp != nil {
		w.fail(path, "a method has retryPolicy or hedgingPolicy, not both (gRFC A6)", shownValue("both"))
	}
	if rp != nil {
		m.Retry = w.retryPolicy(rp, join(path, "retryPolicy"))
	}
	if hp != nil {
		m.Hedging = w.hedgingPolicy(hp, join(path, "hedgingPolicy"))
	}
	m.Breaker = w.resolveBreaker(w.fileBreaker, w.breakerFields(e, path, true), path)
	return m
}

func (w *walker) messageBytes(e *node, path, key string) *int {
	v := get(e, key)
	if v == nil {
		return nil
	}
	i, ok := w.integer(v, join(path, key))
	if !ok {
		return nil
	}
	// grpc-go clamps to the largest int.
	if i > int64(math.MaxInt) {
		i = int64(math.MaxInt)
	}
	n := int(i)
	return &n
}

func (w *walker) maxAttempts(n *node, path string) int {
	if n == nil {
		w.fail(path, "is required", shownValue("nothing"))
		return 0
	}
	v, ok := w.integer(n, path)
	if !ok {
		return 0
	}
	if v < 2 {
		w.fail(path, "must be at least 2 (it counts the first attempt: 2 means 1 retry)", v)
		return 0
	}
	if v > int64(w.opts.cap) {
		w.warn(path, "%d is above the cap, so %d is used (gRFC A6; raise the cap with WithMaxAttemptsCap)", v, w.opts.cap)
		v = int64(w.opts.cap)
	}
	return int(v)
}

func (w *walker) positiveDuration(n *node, path string, required bool) time.Duration {
	if n == nil {
		if required {
			w.fail(path, "is required", shownValue("nothing"))
		}
		return 0
	}
	d, ok := w.duration(n, path)
	if !ok {
		return 0
	}
	if d <= 0 {
		w.fail(path, "must be > 0", n.s)
		return 0
	}
	return d
}

func (w *walker) retryPolicy(n *node, path string) *Policy {
	if !w.object(n, path, "maxAttempts", "initialBackoff", "maxBackoff", "backoffMultiplier",
		"retryableStatusCodes", "jitter", "perAttemptRecvTimeout", "hedgeOnPerTryTimeout") {
		return nil
	}
	p := &Policy{}
	p.MaxAttempts = w.maxAttempts(get(n, "maxAttempts"), join(path, "maxAttempts"))
	p.Backoff.Initial = w.positiveDuration(get(n, "initialBackoff"), join(path, "initialBackoff"), true)
	p.Backoff.Max = w.positiveDuration(get(n, "maxBackoff"), join(path, "maxBackoff"), true)
	if v := get(n, "backoffMultiplier"); v == nil {
		w.fail(join(path, "backoffMultiplier"), "is required", shownValue("nothing"))
	} else if f, ok := w.number(v, join(path, "backoffMultiplier")); ok {
		if f <= 0 {
			w.fail(join(path, "backoffMultiplier"), "must be > 0 (1 keeps every pause at initialBackoff, 2 doubles them)", json.Number(v.s))
		}
		p.Backoff.Multiplier = f
	}
	if v := get(n, "jitter"); v != nil {
		if s, ok := w.str(v, join(path, "jitter")); ok {
			j, found := jitterByName[strings.ToUpper(s)]
			if !found {
				w.fail(join(path, "jitter"), "must be one of PROPORTIONAL, FULL, EQUAL, DECORRELATED, NONE", s)
			}
			p.Backoff.Jitter = j
		}
	}
	p.PerAttemptRecvTimeout = w.positiveDuration(get(n, "perAttemptRecvTimeout"), join(path, "perAttemptRecvTimeout"), false)
	if v := get(n, "hedgeOnPerTryTimeout"); v != nil {
		p.HedgeOnPerTryTimeout, _ = w.boolean(v, join(path, "hedgeOnPerTryTimeout"))
		if p.HedgeOnPerTryTimeout && p.PerAttemptRecvTimeout == 0 {
			w.warn(join(path, "hedgeOnPerTryTimeout"), "has no effect without perAttemptRecvTimeout")
		}
	}
	codesPath := join(path, "retryableStatusCodes")
	if v := get(n, "retryableStatusCodes"); v != nil {
		set, count, ok := w.codeSet(v, codesPath)
		if ok && count == 0 && p.PerAttemptRecvTimeout == 0 {
			// grpc C-core allows an empty list when perAttemptRecvTimeout is
			// set: the policy then retries only attempts it timed out.
			w.fail(codesPath, "must not be empty (unless perAttemptRecvTimeout is set)", shownValue("[]"))
		}
		p.RetryableCodes = set
		if set.Has(codes.OK) {
			w.warn(codesPath, "OK is listed; a successful attempt is never retried")
		}
	} else if p.PerAttemptRecvTimeout == 0 {
		w.fail(codesPath, "is required (unless perAttemptRecvTimeout is set)", shownValue("nothing"))
	}
	return p
}

func (w *walker) hedgingPolicy(n *node, path string) *Hedging {
	if !w.object(n, path, "maxAttempts", "hedgingDelay", "nonFatalStatusCodes", "adaptive") {
		return nil
	}
	h := &Hedging{}
	h.MaxAttempts = w.maxAttempts(get(n, "maxAttempts"), join(path, "maxAttempts"))
	if v := get(n, "hedgingDelay"); v != nil {
		if d, ok := w.duration(v, join(path, "hedgingDelay")); ok {
			if d < 0 {
				w.fail(join(path, "hedgingDelay"), "must be >= 0", v.s)
			}
			h.Delay = d
		}
	}
	if v := get(n, "nonFatalStatusCodes"); v != nil {
		h.NonFatalCodes, _, _ = w.codeSet(v, join(path, "nonFatalStatusCodes"))
	}
	if v := get(n, "adaptive"); v != nil {
		h.Adaptive, _ = w.boolean(v, join(path, "adaptive"))
	}
	return h
}

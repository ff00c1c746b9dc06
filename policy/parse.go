package policy

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/stagger-go/stagger/budget"
	"google.golang.org/grpc/balancer"
	"google.golang.org/grpc/codes"
)

// ParseOption changes how a policy file is parsed or watched. Options that
// only concern watching (WithPollInterval, OnReload, ...) are ignored by
// ParseConfig and LoadFile.
type ParseOption func(*parseOptions)

type parseOptions struct {
	strict     bool
	cap        int
	format     string
	budgetOpts []budget.Option
	poll       time.Duration
	ticks      <-chan time.Time
	onReload   func(SourceEvent)
	noPoll     bool
	// file names the file in syntax errors (LoadFile, WatchFile).
	file string
	// protos checks methodConfig names (WithProtoFiles); unset means
	// protoregistry.GlobalFiles.
	protos    ProtoResolver
	protosSet bool
	// onWarnings receives every parse's warnings (OnWarnings).
	onWarnings func([]Warning)
}

func buildParseOptions(opts []ParseOption) parseOptions {
	o := parseOptions{cap: DefaultMaxAttemptsCap, poll: DefaultPollInterval}
	for _, opt := range opts {
		if opt != nil {
			opt(&o)
		}
	}
	if o.cap < 2 {
		o.cap = DefaultMaxAttemptsCap
	}
	return o
}

// MaxAttemptsCapLimit is the largest cap WithMaxAttemptsCap accepts. A
// thousand attempts already retry for longer than any sensible deadline
// (even at 1ms pauses) or hedge a call a thousand times over; a larger cap
// only lets a typo in a file ("maxAttempts": 2000000000) reach the
// interceptors and every tool that reasons about the policy.
const MaxAttemptsCapLimit = 1000

// checkCap reports a cap WithMaxAttemptsCap set above MaxAttemptsCapLimit.
func (o *parseOptions) checkCap() error {
	if o.cap > MaxAttemptsCapLimit {
		return &FieldError{Path: "WithMaxAttemptsCap", Rule: "must be at most " + strconv.Itoa(MaxAttemptsCapLimit) + " (MaxAttemptsCapLimit)", Value: o.cap}
	}
	return nil
}

// Strict makes unknown keys errors instead of warnings, so that a typo
// ("maxAtempts") fails the parse.
func Strict() ParseOption { return func(o *parseOptions) { o.strict = true } }

// WithMaxAttemptsCap raises (or lowers) the cap on a file's maxAttempts, for
// retry and hedging alike; gRFC A6's cap, DefaultMaxAttemptsCap, applies
// otherwise. A value below 2 keeps the default, as grpc-go's
// grpc.WithMaxCallAttempts does; a value above MaxAttemptsCapLimit makes
// ParseConfig, LoadFile and WatchFile fail with a *FieldError whose Path is
// "WithMaxAttemptsCap".
func WithMaxAttemptsCap(n int) ParseOption { return func(o *parseOptions) { o.cap = n } }

// OnWarnings calls fn with the warnings of each parse that finds some,
// whether the file is valid or not: Config.Warnings has them only for a valid
// file, and a mistake that is a warning (a misspelt key) often explains an
// error (a required key missing). fn runs on the goroutine that parses (the
// caller of ParseConfig, LoadFile, WatchFile or Reload, or a Source's
// polling goroutine) and may keep the slice.
func OnWarnings(fn func([]Warning)) ParseOption {
	return func(o *parseOptions) { o.onWarnings = fn }
}

// WithBudgetOptions passes options (a clock, ...) to the budget that a file
// declares, when the Config builds it.
func WithBudgetOptions(opts ...budget.Option) ParseOption {
	return func(o *parseOptions) { o.budgetOpts = append(o.budgetOpts, opts...) }
}

// AsYAML and AsJSON force the syntax of the data. Without them a document
// whose first character is '{' or '[' is JSON (read exactly as grpc-go reads
// it) and anything else is YAML; LoadFile also reads .yaml and .yml files as
// YAML.
func AsYAML() ParseOption { return func(o *parseOptions) { o.format = "yaml" } }

// AsJSON: see AsYAML.
func AsJSON() ParseOption { return func(o *parseOptions) { o.format = "json" } }

// ParseConfig parses a policy file: a gRPC service config (gRFC A6) in JSON or
// YAML, with stagger's extensions. It returns every error in the file at once,
// joined with errors.Join: each is a *FieldError naming the path, the rule and
// the value. Unknown keys and fields stagger does not apply are reported by
// Config.Warnings. It never panics, whatever data holds.
func ParseConfig(data []byte, opts ...ParseOption) (*Config, error) {
	o := buildParseOptions(opts)
	return parseConfig(data, &o)
}

// LoadFile reads and parses the policy file at path (see ParseConfig).
func LoadFile(path string, opts ...ParseOption) (*Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("policy: %w", err)
	}
	o := buildParseOptions(opts)
	o.format = formatFor(path, o.format)
	o.file = path
	return parseConfig(data, &o)
}

func formatFor(path, forced string) string {
	if forced != "" {
		return forced
	}
	switch strings.ToLower(filepath.Ext(path)) {
	case ".yaml", ".yml":
		return "yaml"
	}
	return ""
}

func parseConfig(data []byte, o *parseOptions) (*Config, error) {
	if err := o.checkCap(); err != nil {
		return nil, err
	}
	if len(strings.TrimSpace(string(data))) == 0 {
		return nil, errors.New("policy: empty policy file")
	}
	var root *node
	var err error
	switch {
	case o.format == "json" || (o.format == "" && looksLikeJSON(data)):
		root, err = decodeJSON(data)
	default:
		root, err = decodeYAML(data)
	}
	if err != nil {
		var se *SyntaxError
		if errors.As(err, &se) {
			se.File = o.file
		}
		return nil, err
	}
	w := &walker{opts: o}
	c := w.config(root)
	w.placeAll(root)
	if o.onWarnings != nil && len(w.warns) > 0 {
		o.onWarnings(append([]Warning(nil), w.warns...))
	}
	if err := joinErrors(w.errs); err != nil {
		return nil, err
	}
	c.warnings = w.warns
	if c.budgetSettings.Kind != budget.KindNone {
		b, err := budget.New(c.budgetSettings, o.budgetOpts...)
		if err != nil {
			return nil, fmt.Errorf("policy: %s: %w", c.budgetPath, err)
		}
		c.budget = b
	}
	if err := c.buildBreakers(o.budgetOpts); err != nil {
		return nil, fmt.Errorf("policy: circuitBreaker: %w", err)
	}
	return c, nil
}

// walker walks the tree of a policy file, collecting errors and warnings.
type walker struct {
	opts  *parseOptions
	errs  []error
	warns []Warning
	// fileBreaker is the file's top-level breaker, which entries override.
	fileBreaker *budget.BreakerSettings
	// misspelt maps the path of a key an object lacks to the unknown key
	// of that object that looks like it ("...retryPolicy.maxAttempts" ->
	// "maxAtempts"), so that "is required" can say so.
	misspelt map[string]string
	// services lists the services of the proto files, once a name needs
	// suggestions.
	services []string
}

// placeAll gives every error and warning the line and column of the value
// its path names.
func (w *walker) placeAll(root *node) {
	for _, e := range w.errs {
		if fe, ok := e.(*FieldError); ok {
			if n := locate(root, fe.Path); n != nil {
				fe.Line, fe.Column = n.line, n.col
			}
		}
	}
	for i := range w.warns {
		if n := locate(root, w.warns[i].Path); n != nil {
			w.warns[i].Line, w.warns[i].Column = n.line, n.col
		}
	}
}

// shownValue prints a value of the wrong kind without quotes: "got an object".
type shownValue string

func (s shownValue) String() string { return string(s) }

func (w *walker) fail(path, rule string, v any) {
	if k, ok := w.misspelt[path]; ok && strings.HasPrefix(rule, "is required") {
		rule += fmt.Sprintf(" (the key %q is unknown: did you mean %q?)", k, path[strings.LastIndexByte(path, '.')+1:])
	}
	w.errs = append(w.errs, &FieldError{Path: path, Rule: rule, Value: v})
}

func (w *walker) warn(path, format string, args ...any) {
	w.warns = append(w.warns, Warning{Path: path, Message: fmt.Sprintf(format, args...)})
}

func (w *walker) wrongKind(path, rule string, n *node) {
	var v any
	switch n.kind {
	case nodeString:
		v = n.s
	case nodeNumber:
		v = json.Number(n.s)
	case nodeBool:
		v = n.b
	default:
		v = shownValue(n.kind.String())
	}
	w.fail(path, rule, v)
}

func join(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

func index(path string, i int) string { return path + "[" + strconv.Itoa(i) + "]" }

// snake turns a lowerCamel key into its proto field name: maxAttempts ->
// max_attempts.
func snake(camel string) string {
	var b strings.Builder
	for _, r := range camel {
		if r >= 'A' && r <= 'Z' {
			b.WriteByte('_')
			r += 'a' - 'A'
		}
		b.WriteRune(r)
	}
	return b.String()
}

// object checks that n is an object and reports its keys that are not in
// known (unknown keys are warnings, or errors under Strict) and keys given
// twice. It returns false, after reporting, when n is not an object.
func (w *walker) object(n *node, path string, known ...string) bool {
	if n.kind != nodeObject {
		w.wrongKind(path, "must be an object", n)
		return false
	}
	seen := make(map[string]bool, len(n.keys))
	for _, k := range n.keys {
		name := ""
		for _, kn := range known {
			if strings.EqualFold(k, kn) || strings.EqualFold(k, snake(kn)) {
				name = kn
				break
			}
		}
		if name == "" {
			hint, strictRule := "", "must hold only known keys (Strict)"
			if s := suggestKey(k, known); s != "" {
				hint = fmt.Sprintf(" (did you mean %q?)", s)
				strictRule = fmt.Sprintf("must hold only known keys (Strict; did you mean %q?)", s)
				if get(n, s) == nil {
					if w.misspelt == nil {
						w.misspelt = map[string]string{}
					}
					w.misspelt[join(path, s)] = k
				}
			}
			if w.opts.strict {
				w.fail(path, strictRule, k)
			} else {
				w.warn(join(path, k), "unknown key, ignored%s", hint)
			}
			continue
		}
		if seen[name] {
			w.warn(join(path, name), "key given more than once; the last one is used")
		}
		seen[name] = true
	}
	return true
}

// suggestKey returns the key of known that k most likely misspells: the
// closest by edit distance, ignoring case and '_' (so "max_atempts" finds
// maxAttempts), within 2 edits and a third of its length; "" when none is
// that close.
func suggestKey(k string, known []string) string {
	norm := func(s string) string { return strings.ToLower(strings.ReplaceAll(s, "_", "")) }
	nk := norm(k)
	best, bestD := "", 3
	for _, kn := range known {
		c := norm(kn)
		if d := editDistance(nk, c); d < bestD && 3*d <= len(c) {
			best, bestD = kn, d
		}
	}
	return best
}

// editDistance is the Levenshtein distance between a and b, in bytes.
func editDistance(a, b string) int {
	if len(a) > 64 || len(b) > 64 {
		// Keys that long are no misspelling of ours; spare the work.
		if a == b {
			return 0
		}
		return len(a) + len(b)
	}
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

// get returns the field named camel (or its proto name) of object n; nil when
// absent or null, which the schema treats alike.
func get(n *node, camel string) *node {
	v := n.field(camel, snake(camel))
	if v == nil || v.kind == nodeNull {
		return nil
	}
	return v
}

func (w *walker) str(n *node, path string) (string, bool) {
	if n.kind != nodeString {
		w.wrongKind(path, "must be a string", n)
		return "", false
	}
	return n.s, true
}

func (w *walker) boolean(n *node, path string) (bool, bool) {
	if n.kind != nodeBool {
		w.wrongKind(path, "must be true or false", n)
		return false, false
	}
	return n.b, true
}

// integer reads an integer as encoding/json reads one into an int64: a
// literal with a fraction or an exponent is refused, as grpc-go refuses it.
func (w *walker) integer(n *node, path string) (int64, bool) {
	if n.kind != nodeNumber {
		w.wrongKind(path, "must be an integer", n)
		return 0, false
	}
	i, err := strconv.ParseInt(n.s, 10, 64)
	if err != nil {
		w.fail(path, "must be an integer", json.Number(n.s))
		return 0, false
	}
	return i, true
}

func (w *walker) number(n *node, path string) (float64, bool) {
	if n.kind != nodeNumber {
		w.wrongKind(path, "must be a number", n)
		return 0, false
	}
	f, err := strconv.ParseFloat(n.s, 64)
	if err != nil || math.IsInf(f, 0) {
		w.fail(path, "must be a finite number", json.Number(n.s))
		return 0, false
	}
	return f, true
}

const durationRule = `must be a duration such as "0.1s" (proto3 JSON) or "100ms" (Go)`

// duration reads a proto3 JSON duration ("0.1s"), exactly as grpc-go does, or
// a Go duration ("100ms", a stagger extension).
func (w *walker) duration(n *node, path string) (time.Duration, bool) {
	if n.kind != nodeString {
		w.wrongKind(path, durationRule, n)
		return 0, false
	}
	if d, ok := parseProtoDuration(n.s); ok {
		return d, true
	}
	if d, err := time.ParseDuration(n.s); err == nil {
		return d, true
	}
	w.fail(path, durationRule, n.s)
	return 0, false
}

// parseProtoDuration is grpc-go's reading of a proto3 JSON duration
// (internal/serviceconfig.Duration): "[-]S[.F]s", at most 9 fraction digits,
// saturating at the limits of time.Duration.
func parseProtoDuration(s string) (time.Duration, bool) {
	if !strings.HasSuffix(s, "s") {
		return 0, false
	}
	neg := false
	if s[0] == '-' {
		neg = true
		s = s[1:]
	}
	ss := strings.SplitN(s[:len(s)-1], ".", 3)
	if len(ss) > 2 {
		return 0, false
	}
	hasDigits := false
	var sec, ns int64
	if len(ss[0]) > 0 {
		var err error
		if sec, err = strconv.ParseInt(ss[0], 10, 64); err != nil {
			return 0, false
		}
		if sec > 315_576_000_000 {
			return 0, false
		}
		hasDigits = true
	}
	if len(ss) == 2 && len(ss[1]) > 0 {
		if len(ss[1]) > 9 {
			return 0, false
		}
		var err error
		if ns, err = strconv.ParseInt(ss[1], 10, 64); err != nil {
			return 0, false
		}
		for i := 9; i > len(ss[1]); i-- {
			ns *= 10
		}
		hasDigits = true
	}
	if !hasDigits {
		return 0, false
	}
	if neg {
		sec, ns = -sec, -ns
	}
	const maxSeconds = math.MaxInt64 / int64(time.Second)
	const maxNanosAtMaxSeconds = math.MaxInt64 % int64(time.Second)
	const minSeconds = math.MinInt64 / int64(time.Second)
	const minNanosAtMinSeconds = math.MinInt64 % int64(time.Second)
	switch {
	case sec > maxSeconds || (sec == maxSeconds && ns >= maxNanosAtMaxSeconds):
		return math.MaxInt64, true
	case sec < minSeconds || (sec == minSeconds && ns <= minNanosAtMinSeconds):
		return math.MinInt64, true
	}
	return time.Duration(sec*int64(time.Second) + ns), true
}

// CodeName returns the name gRFC A6 and a policy file give code c:
// "UNAVAILABLE", "DEADLINE_EXCEEDED", "OK", "CANCELLED". The parser accepts
// exactly these names (and their lower-case forms). A code above 16 is
// printed as its number.
func CodeName(c codes.Code) string {
	if c <= 16 {
		return codeNamesByCode[c]
	}
	return strconv.FormatUint(uint64(c), 10)
}

var codeNamesByCode = func() (out [17]string) {
	for name, c := range codeNames {
		out[c] = name
	}
	return out
}()

var codeNames = map[string]codes.Code{
	"OK": codes.OK, "CANCELLED": codes.Canceled, "UNKNOWN": codes.Unknown,
	"INVALID_ARGUMENT": codes.InvalidArgument, "DEADLINE_EXCEEDED": codes.DeadlineExceeded,
	"NOT_FOUND": codes.NotFound, "ALREADY_EXISTS": codes.AlreadyExists,
	"PERMISSION_DENIED": codes.PermissionDenied, "RESOURCE_EXHAUSTED": codes.ResourceExhausted,
	"FAILED_PRECONDITION": codes.FailedPrecondition, "ABORTED": codes.Aborted,
	"OUT_OF_RANGE": codes.OutOfRange, "UNIMPLEMENTED": codes.Unimplemented,
	"INTERNAL": codes.Internal, "UNAVAILABLE": codes.Unavailable,
	"DATA_LOSS": codes.DataLoss, "UNAUTHENTICATED": codes.Unauthenticated,
}

const codeRule = "must be a status code: an upper-case name such as UNAVAILABLE, or an integer 0-16"

// codeSet reads a list of status codes: names as grpc-go reads them
// ("UNAVAILABLE"), lower-case names (a stagger extension) and integers 0-16.
func (w *walker) codeSet(n *node, path string) (CodeSet, int, bool) {
	if n.kind != nodeArray {
		w.wrongKind(path, "must be an array of status codes", n)
		return 0, 0, false
	}
	var set CodeSet
	ok := true
	for i, e := range n.arr {
		p := index(path, i)
		switch e.kind {
		case nodeNumber:
			u, err := strconv.ParseUint(e.s, 10, 32)
			if err != nil || u > 16 {
				w.fail(p, codeRule, json.Number(e.s))
				ok = false
				continue
			}
			set |= 1 << u
		case nodeString:
			c, found := codeNames[e.s]
			if !found {
				c, found = codeNames[strings.ToUpper(e.s)]
			}
			if !found || strings.ToLower(e.s) != e.s && strings.ToUpper(e.s) != e.s {
				w.fail(p, codeRule, e.s)
				ok = false
				continue
			}
			set |= 1 << c
		case nodeNull:
			// grpc-go's codes.Code reads null as a no-op: code 0, OK.
			set |= 1 << codes.OK
		default:
			w.wrongKind(p, codeRule, e)
			ok = false
		}
	}
	return set, len(n.arr), ok
}

var jitterByName = map[string]Jitter{
	"PROPORTIONAL": JitterProportional, "FULL": JitterFull, "EQUAL": JitterEqual,
	"DECORRELATED": JitterDecorrelated, "NONE": JitterNone,
}

func (w *walker) config(root *node) *Config {
	c := &Config{methods: map[string]*Method{}, maxAttemptsCap: w.opts.cap}
	if root.kind == nodeNull {
		// json.Unmarshal of "null" into grpc-go's struct succeeds: an empty
		// service config.
		return c
	}
	if !w.object(root, "", "methodConfig", "retryThrottling", "retryBudget",
		"loadBalancingPolicy", "loadBalancingConfig", "healthCheckConfig",
		"circuitBreaker", "adaptiveThrottling") {
		return c
	}
	// Before the entries: theirs override the file's.
	c.breaker = w.resolveBreaker(nil, w.breakerFields(root, "", false), "")
	w.fileBreaker = c.breaker
	if v := get(root, "loadBalancingPolicy"); v != nil {
		if s, ok := w.str(v, "loadBalancingPolicy"); ok {
			w.warn("loadBalancingPolicy", "%q is grpc-go's to apply (through the service config); stagger does not apply it", s)
		}
	}
	if v := get(root, "loadBalancingConfig"); v != nil {
		w.lbConfig(v, "loadBalancingConfig", c)
	} else if v := get(root, "loadBalancingPolicy"); v != nil && v.kind == nodeString {
		c.lbPolicy = v.s
	}
	if v := get(root, "healthCheckConfig"); v != nil {
		if w.object(v, "healthCheckConfig", "serviceName") {
			if s := get(v, "serviceName"); s != nil {
				w.str(s, "healthCheckConfig.serviceName")
			}
			w.warn("healthCheckConfig", "grpc-go's to apply; stagger does not apply it")
		}
	}
	if v := get(root, "methodConfig"); v != nil {
		w.methodConfigs(v, c)
	}
	thr, bud := get(root, "retryThrottling"), get(root, "retryBudget")
	if thr != nil && bud != nil {
		w.fail("retryBudget", "at most one budget per file: retryThrottling or retryBudget, not both", shownValue("both"))
	}
	if thr != nil {
		w.throttle(thr, "retryThrottling", c)
	} else if bud != nil {
		w.retryBudget(bud, "retryBudget", c)
	}
	return c
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
			"circuitBreaker", "adaptiveThrottling") {
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
		"retryableStatusCodes", "jitter", "perAttemptRecvTimeout") {
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
	default:
		w.fail(path, "must hold tokenBucket or ratio", shownValue("neither"))
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
			w.fail(join(path, se.Field), se.Rule, v)
		} else {
			w.fail(path, "must be a valid budget", err.Error())
		}
		return
	}
	c.budgetSettings = s
}

// sortedNames is used by Config to list its entries in a stable order.
func sortedNames(m map[string]*Method) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

package policy

import (
	"errors"
	"fmt"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/stagger-go/stagger/breaker"
	"github.com/stagger-go/stagger/budget"
)

// ParseOption changes how a policy file is parsed or watched. Options that
// only concern watching (WithPollInterval, OnReload, ...) are ignored by
// ParseConfig and LoadFile.
type ParseOption func(*parseOptions)

type parseOptions struct {
	strict      bool
	cap         int
	format      string
	budgetOpts  []budget.Option
	breakerOpts []breaker.Option
	poll        time.Duration
	ticks       <-chan time.Time
	onReload    func(SourceEvent)
	noPoll      bool
	// file names the file in errors and warnings (LoadFile, WatchFile,
	// Named).
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
// ("maxAtempts") fails the parse, and so are service and method names that
// the proto files of the name check (WithProtoFiles; the program's linked
// files by default) do not declare: such an entry matches no call.
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

// WithBudgetOptions passes options (a clock, ...) to the budgets that a
// file declares, wherever they are built from the Config (Config.NewBudgets:
// the interceptors build them on first use). The Config keeps the options.
func WithBudgetOptions(opts ...budget.Option) ParseOption {
	return func(o *parseOptions) { o.budgetOpts = append(o.budgetOpts, opts...) }
}

// WithBreakerOptions passes options (a clock, ...) to the circuit breakers
// that a file declares, wherever they are built from the Config
// (Config.NewBreakers: the interceptors build them on first use). The
// Config keeps the options.
func WithBreakerOptions(opts ...breaker.Option) ParseOption {
	return func(o *parseOptions) { o.breakerOpts = append(o.breakerOpts, opts...) }
}

// AsYAML and AsJSON force the syntax of the data. Without them a document
// whose first character is '{' or '[' is JSON (read exactly as grpc-go reads
// it) and anything else is YAML; LoadFile also reads .yaml and .yml files as
// YAML.
func AsYAML() ParseOption { return func(o *parseOptions) { o.format = "yaml" } }

// AsJSON: see AsYAML.
func AsJSON() ParseOption { return func(o *parseOptions) { o.format = "json" } }

// Named names the document for ParseConfig's errors and warnings, which
// then place themselves as LoadFile's do ("name:line:col: ..."): a
// document read from standard input, say. LoadFile and WatchFile name it
// by its path, whatever Named says.
func Named(name string) ParseOption { return func(o *parseOptions) { o.file = name } }

// ParseConfig parses a policy file: a gRPC service config (gRFC A6) in JSON or
// YAML, with stagger's extensions. It returns every error in the file at once,
// joined with errors.Join: each is a *FieldError naming the path, the rule and
// the value. Unknown keys and fields stagger does not apply are reported by
// Config.Warnings. It never panics, whatever data holds; data larger than
// a policy file's bound (4 MiB) is refused unread.
func ParseConfig(data []byte, opts ...ParseOption) (*Config, error) {
	o := buildParseOptions(opts)
	return parseConfig(data, &o)
}

// LoadFile reads and parses the policy file at path (see ParseConfig). It
// reads only a regular file of at most 4 MiB: a larger one, a named pipe,
// a device, a socket or a directory is refused, naming the path.
func LoadFile(path string, opts ...ParseOption) (*Config, error) {
	data, err := readFile(path)
	if err != nil {
		return nil, err
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
	if len(data) > maxFileSize {
		return nil, fmt.Errorf("policy: the document is %w", errTooLarge(fmt.Sprintf("%d bytes", len(data))))
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
	w.unknownKeysUnlisted()
	w.placeAll(root)
	if o.onWarnings != nil && len(w.warns) > 0 {
		o.onWarnings(append([]Warning(nil), w.warns...))
	}
	if err := joinErrors(w.errs); err != nil {
		return nil, err
	}
	c.warnings = w.warns
	c.budgetOpts, c.breakerOpts = o.budgetOpts, o.breakerOpts
	// The settings and options are checked here, once, so that what the
	// interceptors build from them later cannot fail; the budgets built to
	// check them are dropped, empty.
	if _, err := c.NewBudgets(); err != nil {
		return nil, err
	}
	if err := c.checkBreakers(); err != nil {
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
	fileBreaker *breaker.Settings
	// misspelt maps the path of a key an object lacks to the unknown key
	// of that object that looks like it ("...retryPolicy.maxAttempts" ->
	// "maxAtempts"), so that "is required" can say so.
	misspelt map[string]string
	// services lists the services of the proto files, once a name needs
	// suggestions.
	services []string
	// unknownKeys and repeatedKeys count the file's unknown keys and
	// keys given more than once (object).
	unknownKeys, repeatedKeys int
}

// placeAll gives every error and warning the file and the place of the key
// at fault (see place).
func (w *walker) placeAll(root *node) {
	for _, e := range w.errs {
		if fe, ok := e.(*FieldError); ok {
			fe.Line, fe.Column = place(root, fe.Path)
			if fe.Line > 0 {
				fe.File = w.opts.file
			}
		}
	}
	for i := range w.warns {
		w.warns[i].Line, w.warns[i].Column = place(root, w.warns[i].Path)
		if w.warns[i].Line > 0 {
			w.warns[i].File = w.opts.file
		}
	}
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
		"circuitBreaker", "adaptiveThrottling", "disabled") {
		return c
	}
	if v := get(root, "disabled"); v != nil {
		c.disabled, _ = w.boolean(v, "disabled")
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
	w.warnLongPauses(c)
	return c
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

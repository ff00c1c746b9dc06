package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/bufbuild/protocompile"
	"github.com/bufbuild/protocompile/reporter"
	"github.com/stagger-go/stagger/balancer/elsewhere"
	"github.com/stagger-go/stagger/breaker"
	"github.com/stagger-go/stagger/budget"
	"github.com/stagger-go/stagger/interceptor"
	"github.com/stagger-go/stagger/internal/gatetune"
	"github.com/stagger-go/stagger/policy"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/descriptorpb"
)

func init() {
	commands["check"] = command{
		summary: "validate a policy file and explain it: check [-format text|json] [-strict] [-max-attempts-cap N] [-descriptor-set FILE] [-proto FILE.proto ...] [-proto-path DIR ...] FILE",
		run:     runCheck,
	}
}

// checkReport is what `stagger check` finds, and its -format json output.
type checkReport struct {
	File     string        `json:"file"`
	Valid    bool          `json:"valid"`
	Errors   []string      `json:"errors,omitempty"`
	Warnings []string      `json:"warnings,omitempty"`
	Methods  []checkMethod `json:"methods,omitempty"`
	// NameCheck says whether service and method names were checked
	// against proto files, and which.
	NameCheck string       `json:"nameCheck"`
	Budget    *checkBudget `json:"budget,omitempty"`
	// Breaker explains the file's top-level circuitBreaker and
	// adaptiveThrottling (methods no entry names use it).
	Breaker *checkBreaker `json:"breaker,omitempty"`
	// Disabled says that the environment turns stagger off in this
	// process, and so in the programs started from the same environment
	// (interceptor.DisableEnv), or that the file's "disabled": true does:
	// the file then retries nothing.
	Disabled string `json:"disabled,omitempty"`
}

// checkBreaker explains one breaker setting.
type checkBreaker struct {
	Settings    string `json:"settings"`
	Explanation string `json:"explanation"`
}

type checkMethod struct {
	Entry int      `json:"entry"`
	Names []string `json:"names"`
	// Kind is "retry", "hedging" or "none".
	Kind                  string        `json:"kind"`
	MaxAttempts           int           `json:"maxAttempts,omitempty"`
	Codes                 []string      `json:"codes,omitempty"`
	Backoff               *checkBackoff `json:"backoff,omitempty"`
	HedgingDelay          string        `json:"hedgingDelay,omitempty"`
	Adaptive              bool          `json:"adaptive,omitempty"`
	PerAttemptRecvTimeout string        `json:"perAttemptRecvTimeout,omitempty"`
	HedgeOnPerTryTimeout  bool          `json:"hedgeOnPerTryTimeout,omitempty"`
	Timeout               string        `json:"timeout,omitempty"`
	Idempotent            string        `json:"idempotent"`
	// Criticality is the entry's criticality, CRITICAL when it names
	// none; CriticalitySet says it does.
	Criticality    string `json:"criticality"`
	CriticalitySet bool   `json:"criticalitySet,omitempty"`
	// Ambiguous says what a retry policy does after an attempt that may
	// have run on the server and ended without its status (a connection
	// reset, EOF or GOAWAY after the request left).
	Ambiguous string       `json:"ambiguous,omitempty"`
	Pauses    []checkPause `json:"pauses,omitempty"`
	// WorstCase is the longest a call can spend in pauses between
	// attempts (and in timed-out attempts, when perAttemptRecvTimeout is
	// set: every attempt but the last, which is never cut off), without
	// server pushback.
	WorstCase     string `json:"worstCaseRetrying,omitempty"`
	WorstCaseNote string `json:"worstCaseNote,omitempty"`
	// Breaker is the breaker and throttling that guard the entry's
	// methods, when they differ from the file's.
	Breaker *checkBreaker `json:"breaker,omitempty"`
	// Chain says what the policy makes of a call chain whose layers all
	// retry, with and without stagger's server side.
	Chain string `json:"chain,omitempty"`
}

type checkBackoff struct {
	Initial    string  `json:"initial"`
	Max        string  `json:"max"`
	Multiplier float64 `json:"multiplier"`
	Jitter     string  `json:"jitter"`
}

type checkPause struct {
	// Retry is the retry the row is about; when Last is set, the row is
	// about every retry from Retry to Last. Median and P99 are "-" for such
	// a row when they were not worked out (only Min and Max are exact).
	Retry  int    `json:"retry"`
	Last   int    `json:"last,omitempty"`
	Min    string `json:"min"`
	Median string `json:"median"`
	P99    string `json:"p99"`
	Max    string `json:"max"`
	// AtCap is the share of pauses equal to maxBackoff (decorrelated
	// jitter bunches there).
	AtCap float64 `json:"atCap,omitempty"`
}

type checkBudget struct {
	Kind     string `json:"kind"`
	Settings string `json:"settings"`
	// Amplification is the worst-case attempts per call the budget allows
	// once a total outage has drained it, and Burst the retries it allows
	// before that.
	Amplification float64 `json:"amplification"`
	Burst         float64 `json:"burst,omitempty"`
	Explanation   string  `json:"explanation"`
	// Deferral says what happens to a retry the budget refuses, during an
	// outage and after it.
	Deferral string `json:"deferral,omitempty"`
	// DeferralRules are the Gate's rules, when refused retries wait.
	DeferralRules []checkRule `json:"deferral_rules,omitempty"`
	// PerBackend says what the budget keeps per backend, its bounds and
	// what they cost in memory (budget.Backends).
	PerBackend string `json:"per_backend,omitempty"`
}

// checkRule is one of the Gate's rules: its name and what it says.
type checkRule struct {
	Name string `json:"name"`
	Says string `json:"says"`
}

func runCheck(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("check", flag.ContinueOnError)
	fs.SetOutput(stderr)
	format := fs.String("format", "text", "output format: text or json")
	strict := fs.Bool("strict", false, "treat unknown keys as errors")
	capN := fs.Int("max-attempts-cap", policy.DefaultMaxAttemptsCap, "cap on maxAttempts, at most policy.MaxAttemptsCapLimit (1000); below 2 keeps gRFC A6's 5")
	width := fs.Int("width", textWidth(stdout), "wrap the text output to this many columns; 0 does not wrap (the default unless stdout is a terminal)")
	descSet := fs.String("descriptor-set", "", "check service and method names, and read idempotency_level options, from this descriptor set\n(a FileDescriptorSet, as `buf build -o FILE` or `protoc --include_imports --descriptor_set_out=FILE` write it);\nwithout it or -proto, names are not checked")
	var protoFiles, protoPaths stringsFlag
	fs.Var(&protoFiles, "proto", "check service and method names, and read idempotency_level options, from this .proto source file\n(repeatable; compiled here, with its imports found under the -proto-path directories)")
	fs.Var(&protoPaths, "proto-path", "a directory -proto files and their imports are found under, as protoc's --proto_path\n(repeatable; default: the current directory, and a -proto file's own directory when it is outside);\ngoogle/protobuf's own files need none")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: stagger check [-format text|json] [-width N] [-strict] [-max-attempts-cap N] [-descriptor-set FILE] [-proto FILE.proto ...] [-proto-path DIR ...] FILE")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	// Accept flags after the file too: check FILE -format json.
	rest := fs.Args()
	if len(rest) == 0 {
		fs.Usage()
		return 2
	}
	file := rest[0]
	if err := fs.Parse(rest[1:]); err != nil || fs.NArg() != 0 {
		fs.Usage()
		return 2
	}
	if *format != "text" && *format != "json" {
		fmt.Fprintf(stderr, "stagger check: -format must be text or json, got %q\n", *format)
		return 2
	}
	if _, err := policy.ParseConfig([]byte("{}"), policy.WithMaxAttemptsCap(*capN)); err != nil {
		// The cap is refused before any file is read (it is no fault of
		// the file's).
		fmt.Fprintln(stderr, "stagger check: -max-attempts-cap:", err)
		return 2
	}
	var files *protoregistry.Files
	var sources []string
	if *descSet != "" {
		var err error
		if files, err = loadDescriptorSet(*descSet); err != nil {
			fmt.Fprintln(stderr, "stagger check: -descriptor-set:", err)
			return 2
		}
		sources = append(sources, *descSet)
	}
	if len(protoFiles) > 0 {
		var err error
		if files, err = compileProtos(files, protoFiles, protoPaths); err != nil {
			fmt.Fprintln(stderr, "stagger check: -proto:", err)
			return 2
		}
		sources = append(sources, protoFiles...)
	} else if len(protoPaths) > 0 {
		fmt.Fprintln(stderr, "stagger check: -proto-path without -proto: name the .proto files to compile with -proto FILE")
		return 2
	}
	rep := checkFile(file, files, strings.Join(sources, ", "), *strict, policy.WithMaxAttemptsCap(*capN))
	if *format == "json" {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(rep); err != nil {
			fmt.Fprintln(stderr, "stagger check:", err)
			return 1
		}
	} else {
		writeCheckText(stdout, rep, *width)
	}
	if !rep.Valid {
		if *format == "text" {
			for _, e := range rep.Errors {
				fmt.Fprintln(stderr, e)
			}
		}
		return 1
	}
	return 0
}

// loadDescriptorSet reads a FileDescriptorSet. Files whose imports the set
// lacks (protoc without --include_imports) are kept: their unresolved types
// do not matter to service and method names.
func loadDescriptorSet(path string) (*protoregistry.Files, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var set descriptorpb.FileDescriptorSet
	if err := proto.Unmarshal(data, &set); err != nil {
		return nil, fmt.Errorf("%s is not a FileDescriptorSet: %w", path, err)
	}
	files, err := protodesc.FileOptions{AllowUnresolvable: true}.NewFiles(&set)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return files, nil
}

// giveProtos says how to give check the protos it checks names against.
const giveProtos = "give the protos: -proto FILE.proto (with -proto-path DIR for its imports), or -descriptor-set FILE (written by `buf build -o FILE` or `protoc --include_imports --descriptor_set_out=FILE`)"

// checkFile parses file and explains it. With files (from source: the
// descriptor set and the .proto files given), names are checked against
// them and idempotency read from them; a name they do not declare is an
// error (the user gave the protos to check the names against). Without,
// names are not checked (the registry of this binary holds none of the
// user's protos, only stagger's test service), which -strict refuses, and
// idempotency comes from that registry. With strict, the file is parsed
// with policy.Strict.
func checkFile(file string, files *protoregistry.Files, source string, strict bool, opts ...policy.ParseOption) checkReport {
	rep := checkReport{File: file, Disabled: disabledNote()}
	var nameErrs []string
	if files != nil {
		n := 0
		files.RangeFiles(func(f protoreflect.FileDescriptor) bool { n += f.Services().Len(); return true })
		rep.NameCheck = fmt.Sprintf("service and method names checked against the %d services of %s", n, source)
		// The names are checked in a parse of their own, never Strict
		// (which would fail the parse with the library's words), so that
		// a name the protos lack is the same error with -strict or
		// without.
		_, _ = policy.LoadFile(file, append(slices.Clone(opts), policy.WithProtoFiles(files), policy.OnWarnings(func(ws []policy.Warning) {
			for _, w := range ws {
				if isNameCheck(w) {
					nameErrs = append(nameErrs, nameError(file, w, source))
				}
			}
		}))...)
	} else {
		rep.NameCheck = "service and method names not checked against proto files (" + giveProtos + ")"
	}
	opts = append(opts, policy.WithProtoFiles(nil))
	if strict {
		opts = append(opts, policy.Strict())
	}
	// Warnings come through OnWarnings, so that an invalid file shows them
	// too: a misspelt key (a warning) often explains an error.
	var warns []policy.Warning
	opts = append(opts, policy.OnWarnings(func(w []policy.Warning) { warns = w }))
	cfg, err := policy.LoadFile(file, opts...)
	for _, w := range warns {
		s := w.String()
		if pos := w.Position(); pos != "" {
			s = pos + ": " + s
		}
		rep.Warnings = append(rep.Warnings, s)
	}
	if err != nil {
		rep.Errors = append(errorLines(file, err), nameErrs...)
		rep.Warnings = dropExplained(rep.Warnings, warns, rep.Errors)
		return rep
	}
	if len(nameErrs) > 0 {
		rep.Errors = nameErrs
		return rep
	}
	if strict && files == nil && namesServices(cfg) {
		rep.Errors = []string{file + ": -strict: service and method names could not be checked: " + giveProtos}
		return rep
	}
	if cfg.Disabled() && rep.Disabled == "" {
		rep.Disabled = `the file's "disabled": true turns stagger off: a program that follows it makes each call once, with no retry, no hedge and no wait, and ends the calls its Gates hold, until a reload without it`
	} else if len(cfg.Names()) == 0 && cfg.BreakerSettings() == nil {
		// Valid to gRPC and to policy.WatchFile, which swaps it in: every
		// call runs as if there were no file. Most often a misspelt
		// methodConfig, so said first.
		none := []string{file + ": " + nothingConfigured(warns)}
		rep.Warnings = append(none, dropExplained(rep.Warnings, warns, none)...)
	}
	rep.Valid = true
	if files == nil {
		rep.Warnings = append(rep.Warnings, packagelessNames(cfg)...)
	}
	maxAttempts := 1
	rep.Breaker = explainBreaker(cfg.BreakerSettings())
	for _, e := range cfg.Entries() {
		m := explainMethod(e, files)
		if b := e.Method.Breaker; (b == nil) != (cfg.BreakerSettings() == nil) || b != nil && *b != *cfg.BreakerSettings() {
			m.Breaker = explainBreaker(b)
			if m.Breaker == nil {
				m.Breaker = &checkBreaker{Settings: "off", Explanation: "no circuit breaker or adaptive throttling for these methods"}
			}
		}
		rep.Methods = append(rep.Methods, m)
		if m.MaxAttempts > maxAttempts {
			maxAttempts = m.MaxAttempts
		}
		rep.Warnings = append(rep.Warnings, methodWarnings(cfg, e, m, files)...)
	}
	if s := cfg.BudgetSettings(); s.Kind != budget.KindNone {
		rep.Budget = explainBudget(s, maxAttempts)
		rep.Budget.Deferral = explainDeferral(s)
		rep.Budget.PerBackend = explainPerBackend(s)
		if defers(s) {
			rep.Budget.DeferralRules = deferralRules()
		}
	} else {
		// What stagger.DialOptions installs: the process's default budget.
		rep.Budget = explainBudget(budget.DefaultSettings(), maxAttempts)
		rep.Budget.Kind = "default, " + rep.Budget.Kind + " (the file declares none: stagger.DialOptions installs budget.DefaultBackends(), one per backend; the bare interceptors have none)"
		rep.Budget.Deferral = explainDeferral(budget.DefaultSettings())
		rep.Budget.PerBackend = explainPerBackend(budget.DefaultSettings())
		rep.Budget.DeferralRules = deferralRules()
	}
	return rep
}

// nothingConfigured says why a file configures no method, naming the key
// likely meant when the file has a misspelt one at its top level.
func nothingConfigured(warns []policy.Warning) string {
	msg := "configures no method: there is no methodConfig entry with a name (and no circuitBreaker or adaptiveThrottling), so every call runs as without a file"
	for _, w := range warns {
		if !strings.Contains(w.Path, ".") && !strings.Contains(w.Path, "[") && strings.HasPrefix(w.Message, "unknown key") {
			if _, hint, ok := strings.Cut(w.Message, "did you mean "); ok {
				msg += fmt.Sprintf(" (the top-level key %q is unknown: did you mean %s)", w.Path, strings.TrimSuffix(hint, ")"))
			}
		}
	}
	return msg
}

// dropExplained removes from shown (the text of warns) the unknown-key
// warnings an error already names (`the key "k" is unknown`), so that each
// problem is reported once.
func dropExplained(shown []string, warns []policy.Warning, errs []string) []string {
	all := strings.Join(errs, "\n")
	var out []string
	for i, s := range shown {
		if i < len(warns) && strings.HasPrefix(warns[i].Message, "unknown key") {
			k := warns[i].Path[strings.LastIndexAny(warns[i].Path, ".]")+1:]
			if strings.Contains(all, fmt.Sprintf("key %q is unknown", k)) {
				continue
			}
		}
		out = append(out, s)
	}
	return out
}

// errorLines splits a joined error into one line per error, each placed as
// compilers place theirs: "file:line:col: message" for a syntax error,
// "file: path: rule, got value" for a field.
func errorLines(file string, err error) []string {
	var out []string
	var walk func(error)
	walk = func(e error) {
		if j, ok := e.(interface{ Unwrap() []error }); ok {
			for _, x := range j.Unwrap() {
				walk(x)
			}
			return
		}
		msg := strings.TrimPrefix(e.Error(), "policy: ")
		var se *policy.SyntaxError
		var fe *policy.FieldError
		var pe *fs.PathError
		switch {
		case errors.As(e, &se) && se.File != "", errors.As(e, &fe) && fe.File != "":
			// Placed already.
		case errors.As(e, &pe):
			// "open FILE: no such file or directory" names the file.
		default:
			msg = file + ": " + msg
		}
		out = append(out, strings.Split(msg, "\n")...)
	}
	walk(err)
	return out
}

func displayNames(names []string) []string {
	out := make([]string, len(names))
	for i, n := range names {
		if n == "" {
			n = "{} (default)"
		}
		out[i] = n
	}
	return out
}

// codeNames lists s by the names a policy file uses (gRFC A6's).
func codeNames(s policy.CodeSet) []string {
	var out []string
	for _, c := range s.Codes() {
		out = append(out, policy.CodeName(c))
	}
	return out
}

// fmtDur prints d for a reader: rounded, and the largest Duration (where
// every figure of check saturates) as what it is.
func fmtDur(d time.Duration) string {
	switch {
	case d == math.MaxInt64:
		return "more than 292 years"
	case d >= time.Second:
		d = d.Round(time.Millisecond)
	case d >= time.Millisecond:
		d = d.Round(time.Microsecond)
	}
	return d.String()
}

func explainMethod(e policy.Entry, files *protoregistry.Files) checkMethod {
	m := e.Method
	out := checkMethod{Entry: e.Index, Names: displayNames(e.Names), Kind: "none", Idempotent: "not marked"}
	if m.Idempotent != nil {
		out.Idempotent = fmt.Sprint(*m.Idempotent)
	}
	out.Criticality, out.CriticalitySet = m.Criticality.Effective().String(), m.Criticality.Valid()
	if m.Timeout > 0 {
		out.Timeout = fmtDur(m.Timeout)
	}
	switch {
	case m.Retry != nil:
		p := m.Retry
		out.Kind = "retry"
		out.Ambiguous = "retried: the method is idempotent"
		if !entryIdempotent(e, files) {
			out.Ambiguous = "not retried (reason ambiguous): the method is not known to be idempotent, and the attempt may have run; calls with interceptor.WithIdempotencyKey are retried"
		}
		out.MaxAttempts = p.MaxAttempts
		out.Codes = codeNames(p.RetryableCodes)
		out.Backoff = &checkBackoff{Initial: fmtDur(p.Backoff.Initial), Max: fmtDur(p.Backoff.Max), Multiplier: p.Backoff.Multiplier, Jitter: p.Backoff.Jitter.String()}
		if p.PerAttemptRecvTimeout > 0 {
			out.PerAttemptRecvTimeout = fmtDur(p.PerAttemptRecvTimeout)
			out.HedgeOnPerTryTimeout = p.HedgeOnPerTryTimeout
		}
		table, worst := pauseTable(p.Backoff, p.MaxAttempts-1)
		for _, row := range table {
			cp := checkPause{Retry: row.retry, Min: fmtDur(row.q[0]), Median: fmtDur(row.q[1]), P99: fmtDur(row.q[2]), Max: fmtDur(row.q[3]), AtCap: row.atCap}
			if row.last != row.retry {
				cp.Last = row.last
			}
			if row.elided {
				cp.Median, cp.P99 = "-", "-"
			}
			out.Pauses = append(out.Pauses, cp)
		}
		note := "pauses only; each attempt's own time comes on top, bounded by the caller's deadline"
		if p.PerAttemptRecvTimeout > 0 {
			// The last attempt is never cut off: no retry can follow it.
			worst = satAdd(worst, satMul(p.PerAttemptRecvTimeout, int64(p.MaxAttempts-1)))
			note = "pauses plus every attempt but the last cut off by perAttemptRecvTimeout; the last runs on to its answer (longer while the server is slow for every attempt: the timer then waits further periods)"
		}
		if m.Timeout > 0 && worst > m.Timeout {
			worst = m.Timeout
			note += "; capped by the method's timeout"
		}
		out.WorstCase = fmtDur(worst)
		out.WorstCaseNote = note + "; server pushback can add up to " + fmtDur(policy.DefaultPushbackCeiling) + " per retry"
		out.Chain = chainNote(p.MaxAttempts, "attempts")
	case m.Hedging != nil:
		h := m.Hedging
		out.Kind = "hedging"
		out.MaxAttempts = h.MaxAttempts
		out.Codes = codeNames(h.NonFatalCodes)
		out.HedgingDelay = fmtDur(h.Delay)
		out.Adaptive = h.Adaptive
		out.WorstCase = fmtDur(satMul(h.Delay, int64(h.MaxAttempts-1)))
		out.WorstCaseNote = "until the last hedge is sent; hedges run at once, so this adds no waiting after a failure"
		out.Chain = chainNote(h.MaxAttempts, "hedges")
	}
	return out
}

// chainNote says what n attempts (or hedges) per layer make of a call
// chain A → B → C whose layers all retry alike.
func chainNote(n int, what string) string {
	// n is at most policy.MaxAttemptsCapLimit (1,000), so n³ fits an int64;
	// the figures are written out in full ("1,000,000", not "1e+06").
	pow := func(k int) string {
		v := int64(1)
		for i := 0; i < k; i++ {
			v *= int64(n)
		}
		return groupThousands(v)
	}
	return fmt.Sprintf("if the callers of this service retry too, %s multiply down the chain: a dependency that is down sees up to %s per user call at 2 layers, %s at 3; "+
		"install stagger's server side (package server: server.New()) on every server that is also a client: a layer whose calls gave up answers \"do not retry\" (gRFC A6's negative pushback), which stagger and grpc-go's built-in retry obey, so the dependency sees this layer's %d only; "+
		"with callers that ignore pushback (go-grpc-middleware), server.WithRetryAtOneLayer makes a request that arrives as a retry or hedge call down without retrying",
		what, pow(2), pow(3), n)
}

// groupThousands writes v >= 0 with a comma between groups of three digits.
func groupThousands(v int64) string {
	d := strconv.FormatInt(v, 10)
	var b strings.Builder
	for i, c := range d {
		if i > 0 && (len(d)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	return b.String()
}

// satAdd is a + b for durations >= 0, saturating at the largest Duration.
func satAdd(a, b time.Duration) time.Duration {
	if a > math.MaxInt64-b {
		return math.MaxInt64
	}
	return a + b
}

// satMul is d × n for d, n >= 0, saturating at the largest Duration.
func satMul(d time.Duration, n int64) time.Duration {
	if n <= 0 || d <= 0 {
		return 0
	}
	if int64(d) > math.MaxInt64/n {
		return math.MaxInt64
	}
	return d * time.Duration(n)
}

// durationOf converts nanoseconds to a Duration, saturating.
func durationOf(ns float64) time.Duration {
	switch {
	case !(ns > 0):
		return 0
	case ns >= math.MaxInt64:
		return math.MaxInt64
	}
	return time.Duration(ns)
}

// pauseRow is one row of the pause table: retries retry to last (last ==
// retry for a single retry) pause alike. elided marks a run of rows whose
// min and max are given but whose quantiles were not worked out.
type pauseRow struct {
	retry, last int
	q           [4]time.Duration // min, median, p99, max
	atCap       float64
	elided      bool
}

// pauseGrid is how finely the jitter's u is integrated: pauses are computed
// from Backoff.Delay on a grid of u, not by drawing random numbers, so the
// table is the same on every run.
const pauseGrid = 200

// pauseRowsShown is how many retries the table shows one by one; later
// retries that pause differently are summed up in one row (their min and
// max), so that the table, and the work behind it, stay small whatever
// maxAttempts says.
const pauseRowsShown = 8

// pauseTable gives the distribution of the pause before each retry, from
// Backoff.Delay itself, and the sum of the longest pauses (saturating at the
// largest Duration). The work is bounded whatever retries is: at most
// pauseRowsShown rows are worked out, and the rest is found by bisection
// and closed forms (see pauseTableSimple and pauseTableDecorrelated).
func pauseTable(b policy.Backoff, retries int) ([]pauseRow, time.Duration) {
	if retries < 1 {
		return nil, 0
	}
	if b.Jitter == policy.JitterDecorrelated {
		return pauseTableDecorrelated(b, retries)
	}
	return pauseTableSimple(b, retries)
}

// pauseTableSimple: for every jitter but decorrelated the pause depends on u
// and the term alone and is monotone in u, so its quantiles are Delay at
// those quantiles of u; and the term is monotone in the retry number (it
// grows to Max, or shrinks), so the retries that pause alike form one run at
// the end, found by bisection.
func pauseTableSimple(b policy.Backoff, retries int) ([]pauseRow, time.Duration) {
	uMax := math.Nextafter(1, 0)
	row := func(r int) pauseRow {
		return pauseRow{retry: r, last: r, q: [4]time.Duration{
			b.Delay(r, b.Initial, 0), b.Delay(r, b.Initial, 0.5), b.Delay(r, b.Initial, 0.99), b.Delay(r, b.Initial, uMax),
		}}
	}
	final := row(retries)
	// k is the first retry that pauses as the last one does: every row
	// from k on is final's (the rows are monotone in r).
	k := sort.Search(retries, func(i int) bool { return row(i+1).q == final.q }) + 1
	var rows []pauseRow
	var worst time.Duration
	shown := min(k-1, pauseRowsShown)
	for r := 1; r <= shown; r++ {
		x := row(r)
		if n := len(rows); n > 0 && rows[n-1].q == x.q {
			rows[n-1].last = r
		} else {
			rows = append(rows, x)
		}
		worst = satAdd(worst, x.q[3])
	}
	if shown < k-1 {
		// Retries shown+1 .. k-1: terms Initial × Multiplier^(r-1), uncapped;
		// their longest pauses are that term times Delay's factor at uMax.
		first, last := row(shown+1), row(k-1)
		rows = append(rows, pauseRow{retry: shown + 1, last: k - 1, elided: true,
			q: [4]time.Duration{min(first.q[0], last.q[0]), 0, 0, max(first.q[3], last.q[3])}})
		worst = satAdd(worst, geometricSum(b, shown+1, k-1, uMax))
	}
	final.retry = k
	rows = append(rows, final)
	worst = satAdd(worst, satMul(final.q[3], int64(retries-k+1)))
	return rows, worst
}

// geometricSum is the sum of the longest pauses of retries from to to,
// whose terms are all below Max: Initial × f × Σ Multiplier^(r-1), in
// closed form.
func geometricSum(b policy.Backoff, from, to int, uMax float64) time.Duration {
	f := 0.8 + 0.4*uMax // the factor Delay applies to the term at uMax
	switch b.Jitter {
	case policy.JitterFull:
		f = uMax
	case policy.JitterEqual:
		f = 0.5 + 0.5*uMax
	case policy.JitterNone:
		f = 1
	}
	m, n := b.Multiplier, float64(to-from+1)
	var s float64
	if m == 1 {
		s = n
	} else {
		s = math.Pow(m, float64(from-1)) * (math.Pow(m, n) - 1) / (m - 1)
	}
	return durationOf(float64(b.Initial) * f * s)
}

// pauseTableDecorrelated: decorrelated jitter depends on the previous pause
// too. Its distribution is carried from retry to retry as pauseGrid equally
// likely values, each combined with pauseGrid values of u (a deterministic
// numeric integration), for the first pauseRowsShown retries; the later ones
// get their exact min and max only. The extremes are exact: Delay is
// monotone in prev and u, the shortest pause is always min(Initial, Max),
// and the longest triples until it reaches Max, within about 40 retries.
func pauseTableDecorrelated(b policy.Backoff, retries int) ([]pauseRow, time.Duration) {
	uMax := math.Nextafter(1, 0)
	var rows []pauseRow
	var worst time.Duration
	prev := []time.Duration{b.Initial}
	lo, hi := b.Initial, b.Initial
	shown := min(retries, pauseRowsShown)
	for r := 1; r <= shown; r++ {
		lo, hi = b.Delay(r, lo, 0), b.Delay(r, hi, uMax)
		worst = satAdd(worst, hi)
		all := decorrelatedPauses(b, r, prev)
		var row pauseRow
		if len(prev) == 1 {
			// One previous pause: the pause depends on u alone, exactly.
			p := prev[0]
			row = pauseRow{q: [4]time.Duration{b.Delay(r, p, 0), b.Delay(r, p, 0.5), b.Delay(r, p, 0.99), b.Delay(r, p, uMax)}}
			if row.q[3] >= b.Max && 3*p > b.Initial {
				// Delay is min(Max, Initial + u(3p - Initial)): the share of u
				// that lands on Max.
				row.atCap = max(0, 1-float64(b.Max-b.Initial)/float64(3*p-b.Initial))
			}
		} else {
			atCap := 0
			for _, d := range all {
				if d >= b.Max {
					atCap++
				}
			}
			row = pauseRow{q: [4]time.Duration{lo, quantile(all, 0.5), quantile(all, 0.99), hi}, atCap: float64(atCap) / float64(len(all))}
		}
		row.retry, row.last = r, r
		rows = append(rows, row)
		if r < shown {
			next := make([]time.Duration, pauseGrid)
			for i := range next {
				next[i] = all[i*len(all)/pauseGrid+len(all)/pauseGrid/2]
			}
			prev = next
		}
	}
	if retries == shown {
		return rows, worst
	}
	// The longest pause triples until it reaches its limit (Max, within
	// about 40 retries): sum the growing ones, then the rest at once.
	r := shown + 1
	for ; r <= retries; r++ {
		next := b.Delay(r, hi, uMax)
		if next == hi {
			break
		}
		hi = next
		worst = satAdd(worst, hi)
	}
	worst = satAdd(worst, satMul(hi, int64(retries-r+1)))
	rows = append(rows, pauseRow{retry: shown + 1, last: retries, elided: true, q: [4]time.Duration{b.Delay(retries, lo, 0), 0, 0, hi}})
	return rows, worst
}

// decorrelatedPauses is the sorted pauses before retry r, from every pause
// in prev (equally likely) and pauseGrid values of u.
func decorrelatedPauses(b policy.Backoff, r int, prev []time.Duration) []time.Duration {
	all := make([]time.Duration, 0, len(prev)*pauseGrid)
	for _, p := range prev {
		for i := 0; i < pauseGrid; i++ {
			all = append(all, b.Delay(r, p, (float64(i)+0.5)/pauseGrid))
		}
	}
	slices.Sort(all)
	return all
}

func quantile(sorted []time.Duration, q float64) time.Duration {
	i := int(q * float64(len(sorted)))
	if i >= len(sorted) {
		i = len(sorted) - 1
	}
	return sorted[i]
}

func methodWarnings(cfg *policy.Config, e policy.Entry, m checkMethod, files *protoregistry.Files) []string {
	var out []string
	where := fmt.Sprintf("methodConfig[%d]", e.Index)
	meth := e.Method
	if meth.Retry != nil && meth.Retry.Backoff.Jitter == policy.JitterDecorrelated {
		for _, p := range m.Pauses {
			if p.AtCap > 0 {
				out = append(out, fmt.Sprintf("%s.retryPolicy.jitter: decorrelated jitter bunches at maxBackoff (%s): %.0f%% of clients pause exactly that long before retry %d; FULL or EQUAL jitter spread past the cap",
					where, m.Backoff.Max, 100*p.AtCap, p.Retry))
				break
			}
		}
	}
	needsIdempotent := ""
	switch {
	case meth.Hedging != nil:
		needsIdempotent = "hedgingPolicy"
	case meth.Retry != nil && meth.Retry.PerAttemptRecvTimeout > 0:
		needsIdempotent = "retryPolicy.perAttemptRecvTimeout"
	}
	if needsIdempotent != "" && !entryIdempotent(e, files) {
		out = append(out, fmt.Sprintf("%s.%s: needs an idempotent method, and %s is not marked idempotent (set \"idempotent\": true or the proto option idempotency_level): stagger will not apply it",
			where, needsIdempotent, strings.Join(displayNames(e.Names), ", ")))
	}
	if meth.Hedging != nil {
		switch lb := cfg.LoadBalancingPolicy(); lb {
		case "", "pick_first":
			out = append(out, fmt.Sprintf("%s.hedgingPolicy: the load-balancing policy is pick_first, so every hedge goes to the same backend; use %s (package balancer/elsewhere: a call's hedges go to distinct backends) or round_robin for hedging to help", where, elsewhere.Name))
		case elsewhere.Name:
		default:
			out = append(out, fmt.Sprintf("%s.hedgingPolicy: the load-balancing policy %s may send two hedges of one call to the same backend; %s over it sends them to distinct ones", where, lb, elsewhere.Name))
		}
	}
	return out
}

// entryIdempotent: the file says so, or every name is a full method whose
// proto option says so (in files, or else in this binary's registry).
func entryIdempotent(e policy.Entry, files *protoregistry.Files) bool {
	if e.Method.Idempotent != nil {
		return *e.Method.Idempotent
	}
	if len(e.Names) == 0 {
		return false
	}
	for _, n := range e.Names {
		if n == "" || strings.HasSuffix(n, "/") {
			return false
		}
		if files == nil {
			if !policy.IdempotencyOf(n).Safe() {
				return false
			}
			continue
		}
		d, _ := files.FindDescriptorByName(protoreflect.FullName(strings.Replace(strings.TrimPrefix(n, "/"), "/", ".", 1)))
		md, ok := d.(protoreflect.MethodDescriptor)
		if !ok {
			return false
		}
		opts, _ := md.Options().(*descriptorpb.MethodOptions)
		if l := opts.GetIdempotencyLevel(); l != descriptorpb.MethodOptions_NO_SIDE_EFFECTS && l != descriptorpb.MethodOptions_IDEMPOTENT {
			return false
		}
	}
	return true
}

// packagelessNames warns, when names are not checked against protos, of
// services named without a package: gRPC names a service with its proto
// package, so "TestService" rarely matches anything.
func packagelessNames(cfg *policy.Config) []string {
	var out []string
	for _, e := range cfg.Entries() {
		for j, n := range e.Names {
			svc, _, _ := strings.Cut(strings.TrimPrefix(n, "/"), "/")
			if svc != "" && !strings.Contains(svc, ".") {
				out = append(out, fmt.Sprintf("methodConfig[%d].name[%d].service: %q has no package, but gRPC names a service with its proto package (\"pkg.v1.%s\"): unless the .proto file declares no package, this entry matches no call (-descriptor-set FILE checks names)",
					e.Index, j, svc, svc))
			}
		}
	}
	return out
}

// explainBreaker says what a circuit breaker and adaptive throttling with
// settings s do; nil when s is nil.
func explainBreaker(s *breaker.Settings) *checkBreaker {
	if s == nil {
		return nil
	}
	var set, how []string
	if !s.NoTrip {
		set = append(set, fmt.Sprintf("circuitBreaker: failureRatio %v, minimumThroughput %d, consecutiveFailures %d, samplingWindow %v, breakDuration %v, probeEvery %d, maxBreakDuration %v, scope %s",
			s.FailureRatio, s.MinimumThroughput, s.ConsecutiveFailures, s.SamplingWindow, s.BreakDuration, s.ProbeEvery, s.MaxBreakDuration, strings.ToUpper(s.Scope.String())))
		how = append(how, fmt.Sprintf("one breaker per %s; it opens when, over the last %v, at least %d first attempts were answered and %.0f%% or more of them failed (UNAVAILABLE, RESOURCE_EXHAUSTED, or cut off by perAttemptRecvTimeout), or, with fewer answers, when %d first attempts failed in a row (retries do not count: they repeat the calls that failed); "+
			"open, first attempts fail at once with UNAVAILABLE naming the breaker (reason breaker) and retries and hedges are refused (with a deferring budget a refused retry waits, within its deadline, for the breaker's probe); "+
			"after at least %v and %d refused first attempts (or %v however few), one attempt goes as a probe (a new call's, or a waiting retry let go by the budget's gate): success closes it, failure opens it again with both doubled",
			scopeWhat(s.Scope), s.SamplingWindow, s.MinimumThroughput, 100*s.FailureRatio, s.ConsecutiveFailures, s.BreakDuration, s.ProbeEvery, s.MaxBreakDuration))
	}
	if s.ThrottleK > 0 {
		set = append(set, fmt.Sprintf("adaptiveThrottling: k %v, window %v", s.ThrottleK, s.SamplingWindow))
		how = append(how, fmt.Sprintf("first attempts are rejected locally (reason throttled) with probability max(0, (requests - %v x accepts) / (requests + 1)) over the last %v, at most 0.8: the server sees at most about %vx the attempts it answers without failing, and at least a fifth of them and one a second, so that a recovered server gets its traffic back", s.ThrottleK, s.SamplingWindow, s.ThrottleK))
	}
	if !s.NoPacing {
		how = append(how, "waitForReady calls held while their connection fails to connect go, once it is ready, one at a time at the rate the server answered over the window (at least 1/s), not all at once")
	}
	return &checkBreaker{Settings: strings.Join(set, "; "), Explanation: strings.Join(how, ". ")}
}

func scopeWhat(s breaker.Scope) string {
	if s == breaker.ScopeTarget {
		return "target (every method of a connection target together)"
	}
	return "target and method"
}

// defers reports whether a budget of s defers the retries it refuses:
// whether budget.New puts it behind a Gate, a budget.Deferrer.
func defers(s budget.Settings) bool {
	b, err := budget.New(s)
	_, ok := b.(budget.Deferrer)
	return err == nil && ok
}

// explainDeferral says what a refused retry does under s (budget.Gate).
func explainDeferral(s budget.Settings) string {
	if s.Kind == budget.KindNone {
		return "no budget: nothing is refused (stagger.DialOptions installs the default budget, whose refused retries wait as a retryBudget's do)"
	}
	if !defers(s) {
		out := "a retry the budget refuses ends its call at once (reason budget)"
		if s.Kind == budget.KindThrottle {
			out += `, as gRFC A6 says; "defer": true makes refused retries wait for the server to come back instead`
		}
		return out
	}
	d := s.WithDefaults().Defer
	return fmt.Sprintf("a retry the budget refuses waits instead of failing (at most %d calls at once per backend, all its methods together, "+
		"and %d across the backends of the process's budget: each holds its goroutine and its request, a few KiB; "+
		"within the call's deadline, or %v for a call without one), "+
		"and goes, or its call ends with its last status (reason deferred), by the wait contract below (budget.Gate); "+
		`"defer": false ends refused calls at once`, d.MaxWaiting, waitingAll(s), d.MaxWait)
}

// explainPerBackend says what a budget of settings s keeps per backend
// (budget.Backends), its bounds and what they cost.
func explainPerBackend(s budget.Settings) string {
	bs, err := budget.NewBackends(s)
	if err != nil {
		return ""
	}
	l := bs.Limits()
	var out string
	if l.MethodsPerTarget > 0 {
		out = fmt.Sprintf("each backend (a target: the replicas behind one share it) has its own tokens, and each of its methods its own Gate over them, a KiB or two each; "+
			"at most %d targets and %d methods per target are kept", l.Targets, l.MethodsPerTarget)
	} else {
		out = fmt.Sprintf("each backend (a target: the replicas behind one share it) has its own tokens, a KiB or two; at most %d targets are kept", l.Targets)
	}
	out += fmt.Sprintf(" (past that, the least recently used are forgotten), and a key nobody called for %v is forgotten within a minute more: "+
		"its next call starts afresh; nothing a call waits on is forgotten", l.Idle)
	return out
}

// waitingAll is the bound of the calls waiting at once on all the
// backends of one budget of settings s (budget.Backends).
func waitingAll(s budget.Settings) int {
	bs, err := budget.NewBackends(s)
	if err != nil {
		return 0
	}
	return bs.Limits().Waiting
}

// deferralRules is the Gate's rules, by name, from the package's snapshot.
func deferralRules() []checkRule {
	var out []checkRule
	for _, r := range gatetune.Current() {
		out = append(out, checkRule{Name: r.Name, Says: r.Says})
	}
	return out
}

// explainBudget works out the most attempts per call the budget lets
// through once a total outage has drained it (every attempt fails).
func explainBudget(s budget.Settings, maxAttempts int) *checkBudget {
	unbounded := float64(maxAttempts)
	switch s.Kind {
	case budget.KindThrottle:
		t := s.Throttle
		return &checkBudget{Kind: "throttle (retryThrottling, gRFC A6)",
			Settings:      fmt.Sprintf("maxTokens %v, tokenRatio %v", t.MaxTokens, t.TokenRatio),
			Amplification: 1, Burst: math.Ceil(t.MaxTokens / 2),
			Explanation: fmt.Sprintf("each failed attempt costs 1 token and retries stop at %v tokens or fewer: in an outage about %v retries go out, then only first attempts (1.0x); unthrottled the file allows %.0fx",
				t.MaxTokens/2, math.Ceil(t.MaxTokens/2), unbounded)}
	case budget.KindTokenBucket:
		t := s.WithDefaults().TokenBucket
		start := t.Capacity
		if t.Initial > 0 {
			start = t.Initial
		}
		burst := math.Floor(start / t.RetryCost)
		return &checkBudget{Kind: "token bucket (retryBudget.tokenBucket)",
			Settings:      fmt.Sprintf("capacity %v, retryCost %v, timeoutRetryCost %v, successReward %v", t.Capacity, t.RetryCost, t.TimeoutRetryCost, t.SuccessReward),
			Amplification: 1, Burst: burst,
			Explanation: fmt.Sprintf("in an outage the bucket (%v tokens) pays for %v, then refills only from first-try successes: 1.0x after that; unthrottled the file allows %.0fx",
				start, retriesWord(burst), unbounded)}
	case budget.KindRatio:
		r := s.WithDefaults().Ratio
		amp := math.Min(1+r.Percent/100, unbounded)
		return &checkBudget{Kind: "ratio (retryBudget.ratio)",
			Settings:      fmt.Sprintf("percent %v, window %v, minRetriesPerSecond %v", r.Percent, r.Window, r.MinRetriesPerSecond),
			Amplification: amp,
			Explanation: fmt.Sprintf("retries stay under %v%% of requests over %v, plus a floor of %v retries/s: at most %.2fx the offered load (more only when traffic is below %v requests/s)",
				r.Percent, r.Window, r.MinRetriesPerSecond, amp, r.MinRetriesPerSecond*100/r.Percent)}
	}
	return &checkBudget{Kind: "none", Settings: "no retryThrottling or retryBudget",
		Amplification: unbounded,
		Explanation:   fmt.Sprintf("unlimited: in an outage every call makes up to %.0f attempts (%.0fx load); stagger.DialOptions installs stagger's default budget, the bare interceptors do not", unbounded, unbounded)}
}

// retriesWord is "1 retry", "2 retries".
func retriesWord(n float64) string {
	if n == 1 {
		return "1 retry"
	}
	return fmt.Sprintf("%v retries", n)
}

// checkWidth is the width `stagger check` wraps its text to on a terminal
// whose width the environment does not give ($COLUMNS): the width of a
// terminal split in two, wide enough for the pause table.
const checkWidth = 100

// textWidth is the -width flag's default: the terminal's width when
// stdout is one, else 0 (no wrapping: a pipe or a file gets one line per
// item, for grep).
func textWidth(stdout io.Writer) int {
	f, ok := stdout.(*os.File)
	if !ok {
		return 0
	}
	if st, err := f.Stat(); err != nil || st.Mode()&os.ModeCharDevice == 0 {
		return 0
	}
	if n, err := strconv.Atoi(os.Getenv("COLUMNS")); err == nil && n >= 40 {
		return n
	}
	return checkWidth
}

func writeCheckText(out io.Writer, rep checkReport, width int) {
	var buf strings.Builder
	defer func() { io.WriteString(out, wrapText(buf.String(), width)) }()
	w := &buf
	if rep.Disabled != "" {
		fmt.Fprintf(w, "stagger is off: %s\n\n", rep.Disabled)
	}
	if !rep.Valid {
		fmt.Fprintf(w, "%s: invalid, %d error(s) (listed on stderr)\n", rep.File, len(rep.Errors))
		writeWarnings(w, rep.Warnings)
		return
	}
	if n := len(rep.Warnings); n > 0 {
		// A warning (a service named without its package) can make an
		// entry match no call: say so before the long explanation.
		fmt.Fprintf(w, "%s: valid, %d warning(s) (listed at the end)\n", rep.File, n)
	} else {
		fmt.Fprintf(w, "%s: valid\n", rep.File)
	}
	fmt.Fprintf(w, "%s\n", rep.NameCheck)
	for _, m := range rep.Methods {
		fmt.Fprintf(w, "\nmethodConfig[%d]: %s\n", m.Entry, strings.Join(m.Names, ", "))
		switch m.Kind {
		case "retry":
			fmt.Fprintf(w, "  retry: maxAttempts %d (%s) on %s\n", m.MaxAttempts, retriesWord(float64(m.MaxAttempts-1)), strings.Join(m.Codes, ", "))
			fmt.Fprintf(w, "  backoff: initial %s, max %s, multiplier %v, jitter %s\n", m.Backoff.Initial, m.Backoff.Max, m.Backoff.Multiplier, m.Backoff.Jitter)
			if m.PerAttemptRecvTimeout != "" {
				fmt.Fprintf(w, "  perAttemptRecvTimeout: %s: an attempt with no response header or message by then is cut off and retried when a retry can go (attempts left, a pause that ends before the caller's deadline, through which the attempt runs on, then the budget and the breaker admitting it), unless the attempts sent after it are unanswered too (a server slow for every attempt: the timer waits another period, with one scout retry at a time); otherwise it runs on and its answer is the call's\n", m.PerAttemptRecvTimeout)
				if m.HedgeOnPerTryTimeout {
					fmt.Fprintln(w, "  hedgeOnPerTryTimeout: an attempt whose retry goes is not cut off but keeps running beside it; the first success wins and the other attempts are cancelled (unary calls; streams are cut off)")
				}
			}
		case "hedging":
			fmt.Fprintf(w, "  hedging: maxAttempts %d, a hedge every %s, non-fatal codes: %s\n", m.MaxAttempts, m.HedgingDelay, strings.Join(m.Codes, ", "))
			if m.Adaptive {
				fmt.Fprintln(w, "  adaptive: hedge after the observed p95 latency")
			}
		default:
			fmt.Fprintln(w, "  no retry or hedging")
		}
		if m.Timeout != "" {
			fmt.Fprintf(w, "  timeout: %s\n", m.Timeout)
		}
		fmt.Fprintf(w, "  idempotent: %s\n", m.Idempotent)
		if m.CriticalitySet {
			fmt.Fprintf(w, "  criticality: %s, for calls that neither a call option nor the request being served names one for (a request's criticality goes down the chain: the file never raises it)\n", m.Criticality)
		} else {
			fmt.Fprintf(w, "  criticality: %s (the default), unless a call option or the request being served names another\n", m.Criticality)
		}
		if m.Ambiguous != "" {
			fmt.Fprintf(w, "  after a reset (no status from the server): %s\n", m.Ambiguous)
		}
		if len(m.Pauses) > 0 {
			tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
			fmt.Fprintln(tw, "  retry\tmin\tmedian\tp99\tmax\t")
			for _, p := range m.Pauses {
				retry := strconv.Itoa(p.Retry)
				if p.Last != 0 {
					retry += "-" + strconv.Itoa(p.Last)
				}
				fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\t%s\t\n", retry, p.Min, p.Median, p.P99, p.Max)
			}
			tw.Flush()
		}
		if m.WorstCase != "" {
			fmt.Fprintf(w, "  worst case: %s (%s)\n", m.WorstCase, m.WorstCaseNote)
		}
		if m.Breaker != nil {
			fmt.Fprintf(w, "  breaker: %s: %s\n", m.Breaker.Settings, m.Breaker.Explanation)
		}
		if m.Chain != "" {
			fmt.Fprintf(w, "  in a call chain: %s\n", m.Chain)
		}
	}
	if rep.Budget != nil {
		fmt.Fprintf(w, "\nbudget: %s: %s\n", rep.Budget.Kind, rep.Budget.Settings)
		fmt.Fprintf(w, "  worst-case load amplification: %.2fx (%s)\n", rep.Budget.Amplification, rep.Budget.Explanation)
		if rep.Budget.PerBackend != "" {
			fmt.Fprintf(w, "  per backend: %s\n", rep.Budget.PerBackend)
		}
		if rep.Budget.Deferral != "" {
			fmt.Fprintf(w, "  refused retries: %s\n", rep.Budget.Deferral)
			for _, r := range rep.Budget.DeferralRules {
				fmt.Fprintf(w, "    the %s rule: %s\n", r.Name, r.Says)
			}
		}
	}
	if rep.Breaker != nil {
		fmt.Fprintf(w, "\nbreaker: %s\n  %s\n", rep.Breaker.Settings, rep.Breaker.Explanation)
	}
	writeWarnings(w, rep.Warnings)
}

// disabledNote says, when the environment turns stagger off
// (interceptor.DisableEnv, read when the program starts), what that does
// to a program that follows the file; "" when it does not.
func disabledNote() string {
	if !interceptor.Disabled() {
		return ""
	}
	return interceptor.DisableEnv + "=" + strconv.Quote(os.Getenv(interceptor.DisableEnv)) + " turns stagger off: a program started with it makes each call once, with no retry, no hedge and no wait, whatever this file says, until interceptor.SetDisabled(false)"
}

func writeWarnings(w io.Writer, warnings []string) {
	if len(warnings) > 0 {
		fmt.Fprintf(w, "\nwarnings:\n")
		for _, s := range warnings {
			fmt.Fprintf(w, "  %s\n", s)
		}
	}
}

// isNameCheck tells the name check's warnings (policy.WithProtoFiles): a
// service or a method the proto files do not declare.
func isNameCheck(w policy.Warning) bool {
	return strings.HasPrefix(w.Path, "methodConfig[") && (strings.HasSuffix(w.Path, ".service") || strings.HasSuffix(w.Path, ".method"))
}

// didYouMeanHint finds the policy package's "did you mean" in a message.
var didYouMeanHint = regexp.MustCompile(`did you mean [^?]*\?`)

// nameError is the error for a name the protos given do not declare,
// placed as compilers place theirs: the policy file, the field, the name,
// and the closest names the protos declare, when some are close.
func nameError(file string, w policy.Warning, source string) string {
	name, _ := strconv.Unquote(strings.Fields(w.Message)[1])
	what := "a service of the protos given"
	if _, svc, ok := strings.Cut(w.Message, " is not a method of "); ok {
		svc, _, _ = strings.Cut(svc, ";")
		svc, _, _ = strings.Cut(svc, " (")
		what = "a method of " + svc + " in the protos given"
	}
	pos := w.Position()
	if pos == "" {
		pos = file
	}
	msg := fmt.Sprintf("%s: %s: %q is not %s (%s)", pos, w.Path, name, what, source)
	if hint := didYouMeanHint.FindString(w.Message); hint != "" {
		msg += "; " + hint
	}
	if packaged := " (a service is named with its proto package)"; strings.HasSuffix(w.Message, packaged) && !strings.Contains(name, ".") {
		msg += packaged
	}
	return msg
}

// namesServices reports whether any methodConfig entry of cfg names a
// service ("/svc/" or "/svc/method"; "" is the default entry), whose name
// the protos would check.
func namesServices(cfg *policy.Config) bool {
	return slices.ContainsFunc(cfg.Names(), func(n string) bool { return n != "" })
}

// stringsFlag is a repeatable flag: each use adds a value.
type stringsFlag []string

func (f *stringsFlag) String() string { return strings.Join(*f, ",") }

func (f *stringsFlag) Set(v string) error {
	*f = append(*f, v)
	return nil
}

// compileProtos compiles the .proto source files protoFiles, their imports
// found under protoPaths (google/protobuf's own files are built in), and
// adds them and their imports to files (a new registry when nil). A file
// is named, as protoc names it, by its path under the first proto path
// that holds it. Without protoPaths, the current directory is the proto
// path, and a file outside it adds its own directory.
func compileProtos(files *protoregistry.Files, protoFiles, protoPaths []string) (*protoregistry.Files, error) {
	implicit := len(protoPaths) == 0
	if implicit {
		protoPaths = []string{"."}
	}
	names := make([]string, len(protoFiles))
	for i, f := range protoFiles {
		name, err := protoName(f, protoPaths)
		if err != nil && implicit {
			protoPaths = append(protoPaths, filepath.Dir(f))
			name, err = protoName(f, protoPaths)
		}
		if err != nil {
			return nil, err
		}
		names[i] = name
	}
	var errs []error
	compiler := protocompile.Compiler{
		Resolver: protocompile.WithStandardImports(&protocompile.SourceResolver{ImportPaths: protoPaths}),
		// Every error, not only the first, each placed (file:line:col).
		Reporter: reporter.NewReporter(func(err reporter.ErrorWithPos) error { errs = append(errs, err); return nil }, nil),
	}
	compiled, err := compiler.Compile(context.Background(), names...)
	if len(errs) > 0 {
		err := errors.Join(errs...)
		if strings.Contains(err.Error(), "editions are not yet supported") {
			// The compiler linked here (protocompile v0.8.0, which keeps
			// the core module at protobuf v1.33) reads proto2 and proto3.
			err = fmt.Errorf("%w\n(this command compiles proto2 and proto3 sources; for a file with an edition, give a descriptor set: -descriptor-set FILE, from `buf build -o FILE` or `protoc --include_imports --descriptor_set_out=FILE`)", err)
		}
		return nil, err
	}
	if err != nil {
		return nil, err
	}
	if files == nil {
		files = new(protoregistry.Files)
	}
	var add func(f protoreflect.FileDescriptor) error
	add = func(f protoreflect.FileDescriptor) error {
		if _, err := files.FindFileByPath(f.Path()); err == nil {
			return nil
		}
		imps := f.Imports()
		for i := 0; i < imps.Len(); i++ {
			if err := add(imps.Get(i).FileDescriptor); err != nil {
				return err
			}
		}
		return files.RegisterFile(f)
	}
	for _, f := range compiled {
		if err := add(f); err != nil {
			return nil, err
		}
	}
	return files, nil
}

// protoName is the name protoc gives file: its path relative to the first
// of protoPaths that holds it.
func protoName(file string, protoPaths []string) (string, error) {
	abs, err := filepath.Abs(file)
	if err != nil {
		return "", err
	}
	if _, err := os.Stat(abs); err != nil {
		return "", err
	}
	for _, p := range protoPaths {
		dir, err := filepath.Abs(p)
		if err != nil {
			return "", err
		}
		if rel, err := filepath.Rel(dir, abs); err == nil && rel != ".." && !strings.HasPrefix(rel, ".."+string(filepath.Separator)) {
			return filepath.ToSlash(rel), nil
		}
	}
	return "", fmt.Errorf("%s is not under any -proto-path (%s): a .proto file is named by its path under one", file, strings.Join(protoPaths, ", "))
}

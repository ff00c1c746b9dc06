package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"slices"
	"strings"

	"github.com/stagger-go/stagger/budget"
	"github.com/stagger-go/stagger/internal/gatetune"
	"github.com/stagger-go/stagger/policy"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
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
	// Gate is the Gate's estimate and its two rules, when refused retries
	// wait; DeferralRules, its rules in detail.
	Gate          []checkRule `json:"gate,omitempty"`
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
		fmt.Fprintln(stderr, "usage: stagger check [-format text|json] [-width N] [-strict] [-max-attempts-cap N] [-descriptor-set FILE] [-proto FILE.proto ...] [-proto-path DIR ...] FILE\n\nFILE - reads the policy file from standard input (at most 4 MiB).")
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
	load := func(opts ...policy.ParseOption) (*policy.Config, error) { return policy.LoadFile(file, opts...) }
	if file == "-" {
		// Standard input, read to its end up to the bound on a policy
		// file, and named <stdin> where the file's path would be.
		data, err := io.ReadAll(io.LimitReader(stdin, maxStdinBytes+1))
		if err != nil {
			fmt.Fprintln(stderr, "stagger check: standard input:", err)
			return 2
		}
		file = "<stdin>"
		load = func(opts ...policy.ParseOption) (*policy.Config, error) {
			return policy.ParseConfig(data, append(slices.Clone(opts), policy.Named(file))...)
		}
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
	rep := checkFile(file, load, files, strings.Join(sources, ", "), *strict, policy.WithMaxAttemptsCap(*capN))
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

// checkFile parses file, as load reads it, and explains it. With files (from source: the
// descriptor set and the .proto files given), names are checked against
// them and idempotency read from them; a name they do not declare is an
// error (the user gave the protos to check the names against). Without,
// names are not checked (the registry of this binary holds none of the
// user's protos, only stagger's test service), which -strict refuses, and
// idempotency comes from that registry. With strict, the file is parsed
// with policy.Strict.
func checkFile(file string, load func(...policy.ParseOption) (*policy.Config, error), files *protoregistry.Files, source string, strict bool, opts ...policy.ParseOption) checkReport {
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
		_, _ = load(append(slices.Clone(opts), policy.WithProtoFiles(files), policy.OnWarnings(func(ws []policy.Warning) {
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
	cfg, err := load(opts...)
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
	if cfg.Disabled() {
		if rep.Disabled == "" {
			rep.Disabled = `the file's "disabled": true turns stagger off: a program that follows it makes each call once, with no retry, no hedge and no wait, and ends the calls its Gates hold, until a reload without it`
		}
	} else if len(cfg.Names()) == 0 && cfg.BreakerSettings() == nil {
		// Valid to gRPC and to policy.WatchFile, which swaps it in: every
		// call runs as if there were no file. Most often a misspelt
		// methodConfig, so an error here, where a CI step relies on the
		// exit code; a file meant to turn stagger off says so ("disabled").
		rep.Errors = []string{file + ": " + nothingConfigured(warns)}
		rep.Warnings = dropExplained(rep.Warnings, warns, rep.Errors)
		return rep
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
			rep.Budget.Gate, rep.Budget.DeferralRules = gateRules(gatetune.Gate()), gateRules(gatetune.Current())
		}
	} else {
		// What stagger.DialOptions installs: the process's default budget.
		rep.Budget = explainBudget(budget.DefaultSettings(), maxAttempts)
		rep.Budget.Kind = "default, " + rep.Budget.Kind + " (the file declares none: stagger.DialOptions installs budget.DefaultBackends(), one per backend; the bare interceptors have none)"
		rep.Budget.Deferral = explainDeferral(budget.DefaultSettings())
		rep.Budget.PerBackend = explainPerBackend(budget.DefaultSettings())
		rep.Budget.Gate, rep.Budget.DeferralRules = gateRules(gatetune.Gate()), gateRules(gatetune.Current())
	}
	return rep
}

// nothingConfigured says why a file configures no method, naming the key
// likely meant when the file has a misspelt one at its top level: check
// fails such a file (a switch file, "disabled": true, excepted).
func nothingConfigured(warns []policy.Warning) string {
	msg := "configures no method: there is no methodConfig entry with a name (and no circuitBreaker or adaptiveThrottling), so every call would run as without a file"
	for _, w := range warns {
		if !strings.Contains(w.Path, ".") && !strings.Contains(w.Path, "[") && strings.HasPrefix(w.Message, "unknown key") {
			if _, hint, ok := strings.Cut(w.Message, "did you mean "); ok {
				msg += fmt.Sprintf(" (the top-level key %q is unknown: did you mean %s)", w.Path, strings.TrimSuffix(hint, ")"))
			}
		}
	}
	return msg + `; a file meant to turn stagger off says "disabled": true`
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

package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/stagger-go/stagger/budget"
	"github.com/stagger-go/stagger/internal/ceiling"
	"github.com/stagger-go/stagger/policy"
	"github.com/stagger-go/stagger/sim"
)

func init() {
	commands["sim"] = command{
		summary: "simulate retry storms on a virtual clock (occ, failrate, partial, outage, blip, fleet)",
		run:     runSim,
	}
}

const simUsage = `usage: stagger sim MODEL [flags]

Models (package sim's documentation: go doc github.com/stagger-go/stagger/sim):
  occ       OCC contention (AWS 2015): work and time per backoff strategy
  failrate  random failures (Brooker 2022): amplification and success per budget
  partial   partial failure (Brooker 2022): a fraction of keys fails every
            attempt, the others never; amplification and success per budget
  outage    outage and recovery: load during the outage, peak after, drain time
  blip      the outage model as the lab's blip: 50 clients × 1 call/s,
            capacity 500/s, UNAVAILABLE from 2 s to 3.5 s of 8 s, 2 s deadlines
  fleet     the lab's fleet scenario: N processes, each its own budget (for
            stagger its own Gate), a server with room for 1,000 attempts/s
            (50 at a time, no queue), UNAVAILABLE for 10 s; outage calls
            served, held calls' finish after the return, peak, refusals

Run "stagger sim MODEL -h" for a model's flags.
`

// errUsage marks an error in the command line: the exit status is 2.
var errUsage = errors.New("usage")

func runSim(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, simUsage)
		return 2
	}
	var err error
	switch args[0] {
	case "occ":
		err = simOCC(args[1:], stdout, stderr)
	case "failrate":
		err = simFailRate(args[1:], stdout, stderr)
	case "partial":
		err = simPartial(args[1:], stdout, stderr)
	case "outage":
		err = simOutage("outage", args[1:], stdout, stderr)
	case "blip":
		err = simOutage("blip", args[1:], stdout, stderr)
	case "fleet":
		err = simFleet(args[1:], stdout, stderr)
	case "-h", "-help", "--help", "help":
		fmt.Fprint(stdout, simUsage)
		return 0
	default:
		fmt.Fprintf(stderr, "stagger sim: unknown model %q\n%s", args[0], simUsage)
		return 2
	}
	switch {
	case err == nil:
		return 0
	case errors.Is(err, flag.ErrHelp):
		return 0
	case errors.Is(err, errUsage):
		fmt.Fprintf(stderr, "stagger sim %s: %v\n", args[0], errors.Unwrap(err))
		return 2
	}
	fmt.Fprintf(stderr, "stagger sim %s: %v\n", args[0], err)
	return 1
}

// usageError wraps err so that runSim exits 2.
type usageError struct{ err error }

func (e usageError) Error() string        { return e.err.Error() }
func (e usageError) Unwrap() error        { return e.err }
func (e usageError) Is(target error) bool { return target == errUsage }

func usagef(format string, a ...any) error { return usageError{fmt.Errorf(format, a...)} }

// newFlagSet returns a flag set that reports its own errors to stderr and
// returns them (flag.ContinueOnError) so that the caller picks the exit code.
func newFlagSet(name string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet("stagger sim "+name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	return fs
}

// parseFlags parses args and rejects leftover arguments.
func parseFlags(fs *flag.FlagSet, args []string) error {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		// The flag package already printed the error and the usage.
		return usageError{err}
	}
	if fs.NArg() > 0 {
		return usagef("unexpected argument %q", fs.Arg(0))
	}
	return nil
}

// intList is a comma-separated list of integers, as a flag.
type intList []int

func (l *intList) String() string {
	if l == nil {
		return ""
	}
	return joinList(*l, strconv.Itoa)
}

func (l *intList) Set(v string) error { return setList((*[]int)(l), v, "an integer", strconv.Atoi) }

// floatList is a comma-separated list of numbers, as a flag.
type floatList []float64

func (l *floatList) String() string {
	if l == nil {
		return ""
	}
	return joinList(*l, func(x float64) string { return strconv.FormatFloat(x, 'g', -1, 64) })
}

func (l *floatList) Set(v string) error {
	return setList((*[]float64)(l), v, "a number", func(f string) (float64, error) { return strconv.ParseFloat(f, 64) })
}

func joinList[T any](l []T, format func(T) string) string {
	s := make([]string, len(l))
	for i, v := range l {
		s[i] = format(v)
	}
	return strings.Join(s, ",")
}

// setList replaces *dst only when every element parses, so a bad flag value
// leaves the default in place.
func setList[T any](dst *[]T, v, what string, parse func(string) (T, error)) error {
	var out []T
	for _, f := range strings.Split(v, ",") {
		x, err := parse(strings.TrimSpace(f))
		if err != nil {
			return fmt.Errorf("%q is not %s", f, what)
		}
		out = append(out, x)
	}
	*dst = out
	return nil
}

// format is the -format flag: table (the default), csv or json.
type format string

func (f *format) String() string { return string(*f) }

func (f *format) Set(v string) error {
	switch v {
	case "table", "csv", "json":
		*f = format(v)
		return nil
	}
	return fmt.Errorf("must be table, csv or json, got %q", v)
}

func simOCC(args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("occ", stderr)
	clients := intList{10, 50, 100, 190}
	fs.Var(&clients, "clients", "comma-separated numbers of contending clients")
	runs := fs.Int("runs", 100, "runs averaged per client count and strategy")
	seed := fs.Uint64("seed", 1, "random seed (same seed, same output)")
	out := format("table")
	fs.Var(&out, "format", "output: table, csv or json")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if *runs < 1 || *runs > 100000 {
		return usagef("-runs must be in [1, 100000], got %d", *runs)
	}
	res, err := sim.OCC(sim.OCCConfig{Clients: clients, Runs: *runs, Seed: *seed})
	if err != nil {
		return usageError{err}
	}
	return writeOCC(stdout, out, res)
}

// contenderFlags are the flags that choose the contenders of failrate,
// partial and outage.
type contenderFlags struct {
	only   *string
	file   *string
	method *string
}

func addContenderFlags(fs *flag.FlagSet) contenderFlags {
	return contenderFlags{
		only:   fs.String("contenders", "", "comma-separated subset of: "+strings.Join(contenderNames(), ", ")+" (default all)"),
		file:   fs.String("policy", "", "also simulate a policy FILE's own behaviour (its retry policy and budget)"),
		method: fs.String("method", "/stagger.testing.v1.TestService/Unary", "the method whose policy -policy FILE applies"),
	}
}

func contenderNames() []string {
	var names []string
	for _, c := range sim.Contenders() {
		names = append(names, c.Name)
	}
	return names
}

// contenders returns the line-up the flags ask for.
func (f contenderFlags) contenders() ([]sim.Contender, error) {
	all := sim.Contenders()
	var cs []sim.Contender
	if *f.only == "" {
		cs = all
	} else {
		byName := map[string]sim.Contender{}
		for _, c := range all {
			byName[c.Name] = c
		}
		for _, name := range strings.Split(*f.only, ",") {
			c, ok := byName[strings.TrimSpace(name)]
			if !ok {
				return nil, usagef("-contenders: unknown contender %q (known: %s)", name, strings.Join(contenderNames(), ", "))
			}
			cs = append(cs, c)
		}
	}
	if *f.file != "" {
		c, err := fileContender(*f.file, *f.method)
		if err != nil {
			return nil, err
		}
		cs = append(cs, c)
	}
	if len(cs) == 0 {
		return nil, usagef("-contenders: no contender chosen")
	}
	return cs, nil
}

// fileContender is a policy file's own behaviour for method: its retry
// policy (none: no retries) and its budget (none: unlimited, as the
// interceptors alone follow the file).
func fileContender(path, method string) (sim.Contender, error) {
	cfg, err := policy.LoadFile(path)
	if err != nil {
		return sim.Contender{}, err
	}
	c := sim.Contender{Name: "file:" + filepath.Base(path), Policy: policy.Policy{MaxAttempts: 1}}
	if m := cfg.Method(method); m != nil && m.Retry != nil {
		c.Policy = *m.Retry
	}
	c.Budget = cfg.BudgetSettings()
	if c.Budget.Kind != budget.KindNone {
		c.Name += "+" + c.Budget.Kind.String()
	}
	return c, nil
}

// failureFlags are the flags of the failure models, failrate and partial,
// but their parameter's.
type failureFlags struct {
	clients  intList
	rate     *float64
	duration *time.Duration
	timeout  *time.Duration
	seed     *uint64
	out      format
	cf       contenderFlags
}

func addFailureFlags(fs *flag.FlagSet) *failureFlags {
	f := &failureFlags{clients: intList{100}, out: "table"}
	fs.Var(&f.clients, "clients", "comma-separated numbers of client processes sharing the traffic, each with its own budget")
	f.rate = fs.Float64("rate", 1000, "total calls per second of all clients")
	f.duration = fs.Duration("duration", 10*time.Second, "how long calls arrive")
	f.timeout = fs.Duration("call-timeout", 0, "deadline of each call (0: none)")
	f.seed = fs.Uint64("seed", 1, "random seed (same seed, same output)")
	fs.Var(&f.out, "format", "output: table, csv or json")
	f.cf = addContenderFlags(fs)
	return f
}

// parse parses args into the models' shared settings.
func (f *failureFlags) parse(fs *flag.FlagSet, args []string) (sim.FailureConfig, error) {
	if err := parseFlags(fs, args); err != nil {
		return sim.FailureConfig{}, err
	}
	if *f.duration <= 0 {
		return sim.FailureConfig{}, usagef("-duration must be > 0, got %v", *f.duration)
	}
	cs, err := f.cf.contenders()
	if err != nil {
		return sim.FailureConfig{}, err
	}
	return sim.FailureConfig{Clients: f.clients, Rate: *f.rate, Duration: *f.duration, CallTimeout: *f.timeout, Seed: *f.seed, Contenders: cs}, nil
}

func simFailRate(args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("failrate", stderr)
	ps := floatList{0.05, 0.1, 0.2, 0.5, 0.75, 1}
	fs.Var(&ps, "p", "comma-separated probabilities that the server fails an attempt")
	f := addFailureFlags(fs)
	cfg, err := f.parse(fs, args)
	if err != nil {
		return err
	}
	res, err := sim.FailRate(sim.FailRateConfig{P: ps, FailureConfig: cfg})
	if err != nil {
		return usageError{err}
	}
	return writeFailRate(stdout, f.out, res, len(cfg.Clients) > 1)
}

func simPartial(args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("partial", stderr)
	keys := floatList{0.2}
	fs.Var(&keys, "fail-keys", "comma-separated fractions of keys whose calls the server fails, every attempt")
	f := addFailureFlags(fs)
	cfg, err := f.parse(fs, args)
	if err != nil {
		return err
	}
	res, err := sim.Partial(sim.PartialConfig{FailKeys: keys, FailureConfig: cfg})
	if err != nil {
		return usageError{err}
	}
	return writePartial(stdout, f.out, res, len(cfg.Clients) > 1)
}

// simOutage runs the outage model; model "blip" starts from
// sim.BlipConfig's settings instead of the outage model's defaults.
func simOutage(model string, args []string, stdout, stderr io.Writer) error {
	d := sim.OutageConfig{Capacity: 1000, Load: 800, Clients: 100, Duration: 10 * time.Second,
		OutageStart: 2 * time.Second, OutageEnd: 5 * time.Second}
	if model == "blip" {
		d = sim.BlipConfig()
	}
	fs := newFlagSet(model, stderr)
	capacity := fs.Float64("capacity", d.Capacity, "attempts per second the server can serve (in 100 ms bins)")
	load := fs.Float64("load", d.Load, "total calls per second of all clients")
	clients := fs.Int("clients", d.Clients, "client processes, each with its own budget")
	duration := fs.Duration("duration", d.Duration, "how long calls arrive")
	start := fs.Duration("outage-start", d.OutageStart, "when the server goes down")
	end := fs.Duration("outage-end", d.OutageEnd, "when the server comes back")
	timeout := fs.Duration("call-timeout", d.CallTimeout, "deadline of each call (0: none)")
	seed := fs.Uint64("seed", 1, "random seed (same seed, same output)")
	out := format("table")
	fs.Var(&out, "format", "output: table, csv or json")
	cf := addContenderFlags(fs)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	cs, err := cf.contenders()
	if err != nil {
		return err
	}
	cfg := sim.OutageConfig{Capacity: *capacity, Load: *load, Clients: *clients, Duration: *duration, OutageStart: *start, OutageEnd: *end,
		CallTimeout: *timeout, Seed: *seed, Contenders: cs}
	// Zero means "default" to sim; on the command line it is a mistake.
	switch {
	case *capacity == 0:
		return usagef("-capacity must be > 0")
	case *load == 0:
		return usagef("-load must be > 0")
	case *clients == 0:
		return usagef("-clients must be > 0")
	case *duration == 0:
		return usagef("-duration must be > 0")
	}
	res, err := sim.Outage(cfg)
	if err != nil {
		return usageError{err}
	}
	return writeOutage(stdout, out, &cfg, res, outageCeiling(&cfg))
}

// outageCeiling is the outage model's ceiling (the lab's ceiling, internal/ceiling): the success
// rate an ideal client could reach without ever sending more than the
// capacity, for calls offered evenly at the model's load (the model's own
// are Poisson, so a run's figure can pass it a little).
func outageCeiling(cfg *sim.OutageConfig) float64 {
	var starts []time.Duration
	for i := 0; ; i++ {
		t := time.Duration(float64(i) / cfg.Load * float64(time.Second))
		if t >= cfg.Duration {
			break
		}
		starts = append(starts, t)
	}
	return ceiling.Of(ceiling.Input{Starts: starts, Capacity: cfg.Capacity,
		OutageStart: cfg.OutageStart, OutageEnd: cfg.OutageEnd, CallTimeout: cfg.CallTimeout})
}

package main

import (
	"fmt"
	"io"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/stagger-go/stagger/interceptor"
	"github.com/stagger-go/stagger/policy"
)

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
			for _, r := range rep.Budget.Gate {
				name := "the " + r.Name + " rule"
				if r.Name == "estimate" {
					name = "the estimate"
				}
				fmt.Fprintf(w, "    %s: %s\n", name, r.Says)
			}
			var names []string
			for _, r := range rep.Budget.DeferralRules {
				names = append(names, r.Name)
			}
			fmt.Fprintf(w, "    in detail (-format json, deferral_rules): the %s rules\n", strings.Join(names, ", "))
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

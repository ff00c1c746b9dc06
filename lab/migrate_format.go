package lab

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"
)

// WriteMigrate writes rep as text: what ran, one row of figures per
// contender, and each contender's most frequent failures.
func WriteMigrate(w io.Writer, rep *MigrateReport) error {
	c := rep.Config
	var b strings.Builder
	transport := "bufconn"
	if c.TCP {
		transport = "loopback TCP"
	}
	deadline := deadlineText(c.deadline())
	var what, trigger string
	switch c.Scenario {
	case ScenarioMigrateRefused:
		what = fmt.Sprintf("each attempt refused with RESOURCE_EXHAUSTED with probability %g, no pushback", c.FailureRate)
	case ScenarioMigrateOutage:
		what = fmt.Sprintf("UNAVAILABLE from %v to %v", c.TriggerStart, c.TriggerEnd)
		trigger = "OUTAGE"
	case ScenarioMigrateBurst:
		what = fmt.Sprintf("every attempt refused with RESOURCE_EXHAUSTED, no pushback, from %v to %v; then every attempt served", c.TriggerStart, c.TriggerEnd)
		trigger = "BURST"
	}
	fmt.Fprintf(&b, "%s: one client per contender, %g calls/s for %v over %s, %s; %s\n", c.Scenario, c.Rate, c.Duration, transport, deadline, what)
	for _, name := range c.Contenders {
		ct, _ := contenderIn(MigrateContenders(), name)
		fmt.Fprintf(&b, "  %-16s %s\n", name, ct.Gets(Config{}))
	}
	fmt.Fprintf(&b, "contenders at the same time, each with its own backend; wall %v\n\n", rep.Wall.Round(100*time.Millisecond))

	tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', tabwriter.AlignRight)
	head := "CONTENDER\tCALLS\tSUCCESS\tATT/CALL\tOK P50/P99\tFAIL P50/P99\tLONGEST\t"
	if c.triggered() {
		head += trigger + " CALLS SERVED\t"
	}
	last := "LAST CALL ENDED AFTER LOAD"
	if c.triggered() {
		last = "ITS LAST ENDED AFTER " + trigger
	}
	fmt.Fprintln(tw, head+last+"\tCUT\t")
	for _, r := range rep.Results {
		fmt.Fprintf(tw, "%s\t%d\t%.1f%%\t%.2f\t%s/%s\t%s/%s\t%s\t", r.Contender, r.Calls, 100*r.SuccessRate, r.AttemptsPerCall,
			migrateSec(r.P50), migrateSec(r.P99), migrateSec(r.FailP50), migrateSec(r.FailP99), migrateSec(r.Longest))
		if c.triggered() {
			fmt.Fprintf(tw, "%s\t", fleetPct(r.TriggerServed, r.TriggerCalls))
		}
		fmt.Fprintf(tw, "%s\t%d\t\n", migrateSec(r.TriggerLastEnd), r.Cut)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	b.WriteString("\nfailures by reason, the most frequent first:\n")
	for _, r := range rep.Results {
		migrateReasons.write(&b, r.Contender, r.Reasons)
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// migrateSec shows a duration in seconds to the hundredth: the figures
// compared are go-grpc-middleware's 1.5 s pauses and stagger's waits.
func migrateSec(d time.Duration) string { return fmt.Sprintf("%.2fs", d.Seconds()) }

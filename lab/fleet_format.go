package lab

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"
)

// WriteFleet writes rep as text: what ran, one row of figures per
// contender, the attempts per 100 ms of the return's first 3 s, the
// failures while the server had room, and the counts that check the
// measurement (the clients' attempts against the server's records) with
// what the machine did.
func WriteFleet(w io.Writer, rep *FleetReport) error {
	c := rep.Config
	var b strings.Builder
	deadline := deadlineText(c.Deadline)
	fmt.Fprintf(&b, "fleet: %d clients, each its own connection and retry layer, against one server over loopback TCP: %d workers × %v = %d attempts/s, no queue (RESOURCE_EXHAUSTED past that)\n",
		c.Clients, c.Workers, c.ServiceTime(), c.Capacity)
	fmt.Fprintf(&b, "load %.0f%% of capacity (%.0f calls/s, %s arrivals), %s; UNAVAILABLE from %v to %v (the return), load until %v; policy %d attempts, %v-%v ×%g, UNAVAILABLE and RESOURCE_EXHAUSTED\n",
		100*c.Load, c.Rate(), c.Arrivals, deadline, c.Warmup, c.Warmup+c.Outage, c.Warmup+c.Outage+c.After,
		FleetAttempts, FleetBackoff.Initial, FleetBackoff.Max, FleetBackoff.Multiplier)
	reports := ""
	if c.Reports {
		reports = "; the server reports its load (busy workers over workers) on every answer"
	}
	fmt.Fprintf(&b, "contenders one after another, each with its own server%s; wall %v\n", reports, rep.Wall.Round(time.Second))
	b.WriteString("ROOM'S LIMIT: the outage calls an oracle serves, sending them from the return on, earliest bound first, into the room the calls after the return leave, never above capacity\n\n")

	tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "CONTENDER\tFIRST S BACK\tPEAK\t>1.1x\t>1.0x\tREFUSED AFTER\tOF FRESH 1STS\tOUTAGE SERVED\tROOM'S LIMIT\tHELD DONE P50/P90/MAX\tFAILED AFTER\tWITH ROOM\tATT/CALL DOWN\tLONGEST\tOK P50/P99\tFAIL P50/P99\t")
	for _, r := range rep.Results {
		fmt.Fprintf(tw, "%s\t%d/s %.2fx\t%.2fx\t%s\t%s\t%d\t%d\t%s\t%.1f%%\t%s/%s/%s\t%d\t%d\t%.2f\t%s\t%s/%s\t%s/%s\t\n",
			r.Contender, r.FirstSecond, float64(r.FirstSecond)/float64(c.Capacity), r.PeakAfter,
			fleetSec(r.Above11), fleetSec(r.Above10), r.RefusedAfter, r.RefusedFresh,
			fleetPct(r.OutageServed, r.OutageCalls), 100*r.Limit,
			fleetSec(r.HeldP50), fleetSec(r.HeldP90), fleetSec(r.HeldMax),
			r.FailedAfter, r.FailedRoom, r.DownPerCall, fleetSec(r.Longest),
			fleetSec(r.P50), fleetSec(r.P99), fleetSec(r.FailP50), fleetSec(r.FailP99))
	}
	if err := tw.Flush(); err != nil {
		return err
	}

	fmt.Fprintf(&b, "\nattempts arriving per 100 ms in the first 3 s after the return, × capacity (%d/s):\n", c.Capacity)
	perBin := float64(c.Capacity) * Bin.Seconds()
	for _, r := range rep.Results {
		fmt.Fprintf(&b, "%-17s", r.Contender)
		for i, n := range r.ReturnBins {
			if i > 0 && i%10 == 0 {
				b.WriteString(" |")
			}
			fmt.Fprintf(&b, " %.2f", float64(n)/perBin)
		}
		b.WriteString("\n")
	}

	b.WriteString("\nattempts arriving in each second after the return, × capacity; after the |, the load has ended:\n")
	back := int((c.Warmup + c.Outage) / Bin)
	loadEnd := int((c.Warmup + c.Outage + c.After) / Bin)
	perSecond := int(time.Second / Bin)
	for _, r := range rep.Results {
		fmt.Fprintf(&b, "%-17s", r.Contender)
		for s := back; s < len(r.Load); s += perSecond {
			if s == loadEnd {
				b.WriteString(" |")
			}
			n := 0
			for _, v := range r.Load[s:min(s+perSecond, len(r.Load))] {
				n += v
			}
			fmt.Fprintf(&b, " %.2f", float64(n)/float64(c.Capacity))
		}
		b.WriteString("\n")
	}

	b.WriteString("\nfailed after the return while the server had room (it refused nothing in that 100 ms and the one before), by rule and text:\n")
	for _, r := range rep.Results {
		fleetReasons.write(&b, r.Contender, r.RoomReasons)
	}

	b.WriteString("\nthe measurement: attempts the clients began, the server received, the server's records; RESOURCE_EXHAUSTED (in the warmup) and UNAVAILABLE it sent;\ncalls in flight at the return, calls cut by the lab; the machine: calls made late p99/max, first attempt reaching the server p99/max, CPU cores used\n")
	tw = tabwriter.NewWriter(&b, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "CONTENDER\tCALLS\tCLIENT ATT\tSERVER RCVD\tRECORDED\tREFUSED (WARMUP)\tUNAVAILABLE\tHELD AT RETURN\tCUT\tLATE P99/MAX\tREACH P99/MAX\tCPU\t")
	for _, r := range rep.Results {
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\t%d (%d)\t%d\t%d\t%d\t%s/%s\t%s/%s\t%.2f\t\n",
			r.Contender, r.Calls, r.ClientAttempts, r.ServerReceived, r.RecordedAttempts, r.ServerRefused, r.RefusedBefore,
			r.ServerUnavailable, r.HeldAtReturn, r.Cut, fleetMS(r.IssueLateP99), fleetMS(r.IssueLateMax),
			fleetMS(r.ReachP99), fleetMS(r.ReachMax), r.CPU)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	_, err := io.WriteString(w, b.String())
	return err
}

func fleetSec(d time.Duration) string { return fmt.Sprintf("%.1fs", d.Seconds()) }

func fleetMS(d time.Duration) string {
	return fmt.Sprintf("%.0fms", float64(d)/float64(time.Millisecond))
}

func fleetPct(n, d int) string {
	if d == 0 {
		return "-"
	}
	return fmt.Sprintf("%.1f%% of %d", 100*float64(n)/float64(d), d)
}

// deadlineText names a scenario's deadline, zero for none.
func deadlineText(d time.Duration) string {
	if d > 0 {
		return "deadline " + d.String()
	}
	return "no deadline"
}

// reasonRows lays out a contender's failures by kind, the most frequent
// first, three at the most: each row starts with indent and the name
// padded to name, the count padded to count; more says how many kinds
// were left out.
type reasonRows struct {
	indent      string
	name, count int
	more        string
}

var (
	fleetReasons   = reasonRows{indent: "", name: 17, count: 6, more: "... %d kinds more"}
	migrateReasons = reasonRows{indent: "  ", name: 16, count: 5, more: "and %d other kinds"}
)

func (l reasonRows) write(b *strings.Builder, contender string, reasons []FleetReason) {
	if len(reasons) == 0 {
		fmt.Fprintf(b, "%s%-*s none\n", l.indent, l.name, contender)
		return
	}
	for i, why := range reasons {
		if i == 3 {
			fmt.Fprintf(b, "%s%-*s "+l.more+"\n", l.indent, l.name, "", len(reasons)-i)
			return
		}
		name := contender
		if i > 0 {
			name = ""
		}
		fmt.Fprintf(b, "%s%-*s %*d  %s\n", l.indent, l.name, name, l.count, why.Count, why.Reason)
	}
}

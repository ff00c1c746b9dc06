package main

import (
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/stagger-go/stagger/lab"
)

type labJSON struct {
	Scenario        string  `json:"scenario"`
	Contender       string  `json:"contender"`
	Calls           int     `json:"calls"`
	Attempts        int     `json:"attempts"`
	Successes       int     `json:"successes"`
	AttemptsPerCall float64 `json:"attempts_per_call"`
	SuccessRate     float64 `json:"success_rate"`
	OutageLoad      float64 `json:"outage_load"`
	PeakAfter       float64 `json:"peak_after"`
	P50MS           float64 `json:"p50_ms"`
	P99MS           float64 `json:"p99_ms"`
	P999MS          float64 `json:"p999_ms"`
	LoadPer100ms    []int   `json:"load_per_100ms"`
	WallMS          float64 `json:"wall_ms"`
	// Versions are the peers' modules and versions (lab.Versions).
	Versions map[string]string `json:"versions"`
	// Ceiling is the scenario's (lab.Report.Ceiling), the same in every
	// record of a scenario.
	Ceiling float64 `json:"ceiling"`
	// The peaks: lab.Result.PeakInFlight, PeakAttemptsInFlight,
	// PeakWaiting and PeakGoroutines.
	PeakInFlight         int `json:"peak_in_flight"`
	PeakAttemptsInFlight int `json:"peak_attempts_in_flight"`
	PeakWaiting          int `json:"peak_waiting"`
	PeakGoroutines       int `json:"peak_goroutines"`
	// Goodput is lab.Result.Goodput (1.0 = the reduced capacity), in the
	// overload scenario's records only: the others have none.
	Goodput *float64 `json:"goodput,omitempty"`
	// The chain scenario's records only (the others have none):
	// lab.Result.OutageCalls, BottomAttemptsPerCall (attempts reaching C ÷
	// user calls, over the calls made and returned during C's outage),
	// MiddleAttemptsPerCall (B), TopAttemptsPerCall (A) and SuccessAfter
	// (the success rate of the user calls made once C is back).
	OutageCalls           *int     `json:"outage_calls,omitempty"`
	BottomAttemptsPerCall *float64 `json:"bottom_attempts_per_call,omitempty"`
	MiddleAttemptsPerCall *float64 `json:"middle_attempts_per_call,omitempty"`
	TopAttemptsPerCall    *float64 `json:"top_attempts_per_call,omitempty"`
	SuccessAfter          *float64 `json:"success_after,omitempty"`
	// The slow-replica-stream scenario's records only: lab.Result.FirstP50,
	// FirstP99 and FirstP999, the time to a stream's first message.
	FirstP50MS  *float64 `json:"first_p50_ms,omitempty"`
	FirstP99MS  *float64 `json:"first_p99_ms,omitempty"`
	FirstP999MS *float64 `json:"first_p999_ms,omitempty"`
}

// labGoodput is r's goodput where the scenario measures one, else nil.
func labGoodput(s lab.Scenario, r lab.Result) *float64 {
	if s != lab.ScenarioOverload {
		return nil
	}
	return &r.Goodput
}

// labVersions lists the modules the contenders come from, with their
// versions: "google.golang.org/grpc v1.85.0, ...".
func labVersions() string {
	var parts []string
	for _, m := range lab.Versions() {
		parts = append(parts, m.Path+" "+m.Version)
	}
	return strings.Join(parts, ", ")
}

func msFloat(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

func writeLabJSON(w io.Writer, reps []*lab.Report) error {
	out := []labJSON{}
	versions := map[string]string{}
	for _, m := range lab.Versions() {
		versions[m.Path] = m.Version
	}
	for _, rep := range reps {
		for _, r := range rep.Results {
			out = append(out, labJSON{
				Scenario: string(rep.Config.Scenario), Contender: r.Contender,
				Calls: r.Calls, Attempts: r.Attempts, Successes: r.Successes,
				AttemptsPerCall: r.AttemptsPerCall, SuccessRate: r.SuccessRate,
				OutageLoad: r.OutageLoad, PeakAfter: r.PeakAfter,
				P50MS: msFloat(r.P50), P99MS: msFloat(r.P99), P999MS: msFloat(r.P999),
				LoadPer100ms: r.Load, WallMS: msFloat(rep.Wall), Versions: versions,
				Ceiling:      rep.Ceiling,
				PeakInFlight: r.PeakInFlight, PeakAttemptsInFlight: r.PeakAttemptsInFlight,
				PeakWaiting: r.PeakWaiting, PeakGoroutines: r.PeakGoroutines,
				Goodput: labGoodput(rep.Config.Scenario, r),
			})
			if rep.Config.Scenario == lab.ScenarioChain {
				rec := &out[len(out)-1]
				rec.OutageCalls, rec.BottomAttemptsPerCall, rec.MiddleAttemptsPerCall = &r.OutageCalls, &r.BottomAttemptsPerCall, &r.MiddleAttemptsPerCall
				rec.TopAttemptsPerCall, rec.SuccessAfter = &r.TopAttemptsPerCall, &r.SuccessAfter
			}
			if rep.Config.Scenario == lab.ScenarioSlowReplicaStream {
				rec := &out[len(out)-1]
				p50, p99, p999 := msFloat(r.FirstP50), msFloat(r.FirstP99), msFloat(r.FirstP999)
				rec.FirstP50MS, rec.FirstP99MS, rec.FirstP999MS = &p50, &p99, &p999
			}
		}
	}
	return writeJSON(w, out)
}

func writeLabCSV(w io.Writer, reps []*lab.Report) error {
	var rows [][]string
	for _, rep := range reps {
		for _, r := range rep.Results {
			goodput := "" // not measured
			if g := labGoodput(rep.Config.Scenario, r); g != nil {
				goodput = fmtFloat(*g, 4)
			}
			chain := []string{"", "", ""} // not measured
			if rep.Config.Scenario == lab.ScenarioChain {
				chain = []string{fmtFloat(r.BottomAttemptsPerCall, 3), fmtFloat(r.MiddleAttemptsPerCall, 3), fmtFloat(r.SuccessAfter, 4)}
			}
			first := []string{"", "", ""} // not measured
			if rep.Config.Scenario == lab.ScenarioSlowReplicaStream {
				first = []string{ms(r.FirstP50), ms(r.FirstP99), ms(r.FirstP999)}
			}
			rows = append(rows, slices.Concat([]string{string(rep.Config.Scenario), r.Contender, strconv.Itoa(r.Calls),
				fmtFloat(r.AttemptsPerCall, 3), fmtFloat(r.SuccessRate, 4), fmtFloat(r.OutageLoad, 3),
				fmtFloat(r.PeakAfter, 3), ms(r.P50), ms(r.P99), ms(r.P999), goodput}, chain, first))
		}
	}
	return writeCSV(w, []string{"scenario", "contender", "calls", "attempts_per_call", "success_rate",
		"outage_load", "peak_after", "p50_ms", "p99_ms", "p999_ms", "goodput",
		"bottom_attempts_per_call", "middle_attempts_per_call", "success_after",
		"first_p50_ms", "first_p99_ms", "first_p999_ms"}, rows)
}

// writeLabTable prints one scenario: what each contender gets, the table,
// and the load chart, in the style of "stagger sim outage".
func writeLabTable(w io.Writer, rep *lab.Report) error {
	c := rep.Config
	stream := c.Scenario == lab.ScenarioSlowReplicaStream
	slow := c.Scenario == lab.ScenarioSlowReplica || stream
	overload := c.Scenario == lab.ScenarioOverload
	chain := c.Scenario == lab.ScenarioChain
	switch {
	case stream:
		fmt.Fprintf(w, "scenario %s: capacity %d attempts/s, %.0f server streams/s (%d messages each) from %d clients per contender for %v, an attempt's first message takes %v, one in %.0f takes %d× as long, call deadline %v\n",
			c.Scenario, c.Capacity, c.Rate, lab.SlowStreamMessages, c.Clients, c.Duration, lab.SlowBase, 1/lab.SlowOdds, lab.SlowFactor, c.CallTimeout)
		fmt.Fprintln(w, "FIRST: time to a stream's first message; EXTRA ATTEMPTS: attempts per call − 1")
	case slow:
		fmt.Fprintf(w, "scenario %s: capacity %d attempts/s, %.0f calls/s from %d clients per contender for %v, attempts take %v, one in %.0f takes %d× as long, call deadline %v\n",
			c.Scenario, c.Capacity, c.Rate, c.Clients, c.Duration, lab.SlowBase, 1/lab.SlowOdds, lab.SlowFactor, c.CallTimeout)
	case overload:
		fmt.Fprintf(w, "scenario %s: %d workers, %v per attempt (%v per rejection), queue %d; capacity %d attempts/s, %.0f with %d workers in the overload [%v, %v) of %v; %.0f calls/s from %d clients per contender, call deadline %v\n",
			c.Scenario, c.Workers, c.ServiceTime(), c.ServiceTime()/10, c.Queue, c.Capacity, c.ReducedCapacity(), c.Workers/2,
			c.OutageStart, c.OutageEnd, c.Duration, c.Rate, c.Clients, c.CallTimeout)
		fmt.Fprintf(w, "goodput: calls that succeeded in the overload, per second, ÷ %.0f/s (1 = every worker busy with calls that succeed)\n",
			c.ReducedCapacity())
	case chain:
		n := c.MaxAttempts
		fmt.Fprintf(w, "scenario %s: users → A → B → C, %d attempts on every hop, C answers UNAVAILABLE in [%v, %v) of %v; %.0f calls/s from %d clients per contender, call deadline %v\n",
			c.Scenario, n, c.OutageStart, c.OutageEnd, c.Duration, c.Rate, c.Clients, c.CallTimeout)
		fmt.Fprintf(w, "attempts reaching C, B and A per user call made and returned in C's outage (%d at C without coordination, %d without amplification); success of the calls made once C is back\n",
			n*n*n, n)
	default:
		fmt.Fprintf(w, "scenario %s: capacity %d attempts/s, %.0f calls/s from %d clients per contender, outage [%v, %v) of %v, call deadline %v\n",
			c.Scenario, c.Capacity, c.Rate, c.Clients, c.OutageStart, c.OutageEnd, c.Duration, c.CallTimeout)
	}
	if !chain {
		// No server of the chain limits its attempts.
		fmt.Fprintf(w, "ceiling %s%%: the success an ideal client could reach without ever sending more than the capacity\n", fmtFloat(100*rep.Ceiling, 1))
	}
	fmt.Fprintf(w, "peers: %s\n", labVersions())
	nameW := 0
	for _, r := range rep.Results {
		nameW = max(nameW, len(r.Contender))
	}
	for _, r := range rep.Results {
		if con, ok := lab.ContenderByName(c.Scenario, r.Contender); ok {
			fmt.Fprintf(w, "  %-*s  %s\n", nameW, r.Contender, con.Gets(c))
		}
	}
	fmt.Fprintln(w)
	var maxPer, maxBottom float64
	for _, r := range rep.Results {
		maxPer = max(maxPer, r.AttemptsPerCall)
		maxBottom = max(maxBottom, r.BottomAttemptsPerCall)
	}
	rows := make([][]string, len(rep.Results))
	for i, r := range rep.Results {
		rows[i] = []string{r.Contender, fmtFloat(r.AttemptsPerCall, 2), fmtFloat(100*r.SuccessRate, 1) + "%",
			ms(r.P50), ms(r.P99), fmtFloat(r.OutageLoad, 2) + "×", fmtFloat(r.PeakAfter, 2) + "×",
			strconv.Itoa(r.PeakInFlight), strconv.Itoa(r.PeakWaiting), strconv.Itoa(r.PeakGoroutines),
			bar(r.AttemptsPerCall, maxPer, 16)}
		switch {
		case stream:
			rows[i] = []string{r.Contender, fmtFloat(r.AttemptsPerCall, 3), fmtFloat(100*(r.AttemptsPerCall-1), 1) + "%",
				fmtFloat(100*r.SuccessRate, 1) + "%", ms(r.FirstP50), ms(r.FirstP99), ms(r.FirstP999), ms(r.P99),
				bar(float64(r.FirstP99), float64(rep.Results[0].FirstP99), 16)}
		case slow:
			rows[i] = []string{r.Contender, fmtFloat(r.AttemptsPerCall, 3), fmtFloat(100*r.SuccessRate, 1) + "%",
				ms(r.P50), ms(r.P99), ms(r.P999), bar(float64(r.P99), float64(rep.Results[0].P99), 16)}
		case chain:
			rows[i] = []string{r.Contender, fmtFloat(r.BottomAttemptsPerCall, 2), fmtFloat(r.MiddleAttemptsPerCall, 2),
				fmtFloat(r.TopAttemptsPerCall, 2), strconv.Itoa(r.OutageCalls), fmtFloat(100*r.SuccessAfter, 1) + "%",
				fmtFloat(100*r.SuccessRate, 1) + "%", ms(r.P50), ms(r.P99), strconv.Itoa(r.PeakInFlight),
				strconv.Itoa(r.PeakGoroutines), bar(r.BottomAttemptsPerCall, maxBottom, 16)}
		}
	}
	header := []string{"CONTENDER", "ATTEMPTS/CALL", "SUCCESS", "P50 (ms)", "P99 (ms)",
		"OUTAGE ATTEMPTS ÷ CAP", "PEAK/100ms AFTER ÷ CAP", "PEAK IN FLIGHT", "PEAK WAITING", "PEAK GOROUTINES", "ATTEMPTS PER CALL"}
	switch {
	case stream:
		header = []string{"CONTENDER", "ATTEMPTS/CALL", "EXTRA ATTEMPTS", "SUCCESS", "FIRST P50 (ms)", "FIRST P99 (ms)", "FIRST P99.9 (ms)",
			"P99 (ms)", "FIRST P99 (vs first row)"}
	case slow:
		header = []string{"CONTENDER", "ATTEMPTS/CALL", "SUCCESS", "P50 (ms)", "P99 (ms)", "P99.9 (ms)", "P99 (vs first row)"}
	case chain:
		header = []string{"CONTENDER", "AT C/CALL", "AT B/CALL", "AT A/CALL", "OUTAGE CALLS", "SUCCESS AFTER", "SUCCESS",
			"P50 (ms)", "P99 (ms)", "PEAK IN FLIGHT", "PEAK GOROUTINES", "ATTEMPTS AT C PER CALL"}
	case overload:
		// Goodput after success; the attempts in the overload are ÷ the
		// reduced capacity.
		header = slices.Concat(header[:3], []string{"GOODPUT"}, header[3:5], []string{"OVERLOAD ATTEMPTS ÷ CAP"}, header[6:])
		for i, r := range rep.Results {
			rows[i] = slices.Concat(rows[i][:3], []string{fmtFloat(r.Goodput, 2)}, rows[i][3:])
		}
	}
	if err := writeTable(w, header, rows); err != nil {
		return err
	}
	if slow {
		fmt.Fprintf(w, "wall time %s\n\n", labSeconds(rep.Wall))
		return nil
	}
	// One column per 100 ms bin, on one scale for every contender so that
	// heights compare; the ruler marks the outage.
	top, width := 0, 0
	for _, r := range rep.Results {
		for _, n := range r.Load {
			top = max(top, n)
		}
		width = max(width, len(r.Load))
	}
	if chain {
		fmt.Fprintf(w, "\nattempts C received per 100 ms (full block = %d)\n", top)
	} else {
		fmt.Fprintf(w, "\nattempts the server received per 100 ms (full block = %d, capacity = %.0f)\n", top, float64(c.Capacity)*lab.Bin.Seconds())
	}
	for _, r := range rep.Results {
		fmt.Fprintf(w, "%-*s │%s\n", nameW, r.Contender, spark(r.Load, top))
	}
	fmt.Fprintf(w, "%-*s └%s\n", nameW, "", outageRuler(width, lab.Bin, c.OutageStart, c.OutageEnd))
	what := "outage"
	switch {
	case overload:
		what = "overload (half the workers)"
	case chain:
		what = "C's outage"
	}
	fmt.Fprintf(w, "%-*s  ▔ = %s; one column per 100 ms, ┴ every second; wall time %s\n\n", nameW, "", what, labSeconds(rep.Wall))
	return nil
}

package main

import (
	"fmt"
	"io"
	"math"
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
	// MeanInFlight is lab.Result.MeanInFlight: the mean number of calls
	// in flight during the trigger; none in the scenarios without one.
	MeanInFlight *float64 `json:"mean_in_flight,omitempty"`
	// Goodput is lab.Result.Goodput: the calls that succeeded from the
	// trigger's start ÷ the attempts the server could serve then.
	Goodput float64 `json:"goodput"`
	// Wasted is lab.Result.Wasted: the share of the server's work done
	// for callers that had gone (0 without a worker server).
	Wasted float64 `json:"wasted"`
	// FailP50MS and FailP99MS are lab.Result.FailP50 and FailP99, the
	// latency of the failed calls.
	FailP50MS float64 `json:"fail_p50_ms"`
	FailP99MS float64 `json:"fail_p99_ms"`
	// RecoverS is lab.Result.Recover in seconds when Recovered, else null
	// (never recovered, or a scenario without a trigger).
	RecoverS *float64 `json:"recover_s"`
	// SuccessAfter is lab.Result.SuccessAfter (in the chain, the success
	// of the user calls made once C is back), and CallsAfter the calls it
	// counts; none in the scenarios without a trigger.
	SuccessAfter *float64 `json:"success_after,omitempty"`
	CallsAfter   *int     `json:"calls_after,omitempty"`
	// Timeline is lab.Result.Timeline, one record per second.
	Timeline []labSecondJSON `json:"timeline"`
	// The chain scenario's records only (the others have none):
	// lab.Result.OutageCalls, BottomAttemptsPerCall (attempts reaching C ÷
	// user calls, over the calls made and returned during C's outage),
	// MiddleAttemptsPerCall (B) and TopAttemptsPerCall (A).
	OutageCalls           *int     `json:"outage_calls,omitempty"`
	BottomAttemptsPerCall *float64 `json:"bottom_attempts_per_call,omitempty"`
	MiddleAttemptsPerCall *float64 `json:"middle_attempts_per_call,omitempty"`
	TopAttemptsPerCall    *float64 `json:"top_attempts_per_call,omitempty"`
	// The slow-replica-stream scenario's records only: lab.Result.FirstP50,
	// FirstP99 and FirstP999, the time to a stream's first message.
	FirstP50MS  *float64 `json:"first_p50_ms,omitempty"`
	FirstP99MS  *float64 `json:"first_p99_ms,omitempty"`
	FirstP999MS *float64 `json:"first_p999_ms,omitempty"`
	// The bad-replica scenario's records only: lab.Result.BadRepeats (calls
	// that met the bad replica more than once) and BadCalls (at all).
	BadRepeats *int `json:"bad_repeats,omitempty"`
	BadCalls   *int `json:"bad_calls,omitempty"`
	// The slow-replica-3 scenario's records only: lab.Result.HedgeRepeats
	// (calls that sent a hedge to the replica their first attempt went to).
	HedgeRepeats *int `json:"hedge_repeats,omitempty"`
	// The mixed-criticality scenario's records only: lab.Result's success
	// rates of the CRITICAL calls and of the SHEDDABLE ones, and their
	// counts.
	CriticalSuccess  *float64 `json:"critical_success,omitempty"`
	SheddableSuccess *float64 `json:"sheddable_success,omitempty"`
	CriticalCalls    *int     `json:"critical_calls,omitempty"`
	SheddableCalls   *int     `json:"sheddable_calls,omitempty"`
}

// labSecondJSON is one second of a contender's run (lab.Second), with
// the server's capacity at its start (null where the server limits
// nothing).
type labSecondJSON struct {
	Second         int      `json:"t_s"`
	Calls          int      `json:"calls"`
	CallsSucceeded int      `json:"calls_succeeded"`
	Attempts       int      `json:"attempts"`
	Successes      int      `json:"successes"`
	Capacity       *float64 `json:"capacity"`
}

func labTimeline(c lab.Config, tl []lab.Second) []labSecondJSON {
	out := make([]labSecondJSON, len(tl))
	for i, s := range tl {
		out[i] = labSecondJSON{Second: i, Calls: s.Calls, CallsSucceeded: s.CallsSucceeded, Attempts: s.Attempts, Successes: s.Successes}
		if capacity := c.CapacityAt(time.Duration(i) * time.Second); !math.IsInf(capacity, 1) {
			out[i].Capacity = &capacity
		}
	}
	return out
}

// labRecover is r's recovery time in seconds, or nil.
func labRecover(r lab.Result) *float64 {
	if !r.Recovered {
		return nil
	}
	s := r.Recover.Seconds()
	return &s
}

// labRecoverText is r's recovery for the table and CSV: seconds, "never",
// or "-" in a scenario without a trigger.
func labRecoverText(s lab.Scenario, r lab.Result, never string) string {
	switch {
	case !s.HasTrigger():
		return ""
	case !r.Recovered:
		return never
	}
	return fmtFloat(r.Recover.Seconds(), 0)
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
				Goodput: r.Goodput, Wasted: r.Wasted, FailP50MS: msFloat(r.FailP50), FailP99MS: msFloat(r.FailP99),
				RecoverS: labRecover(r), Timeline: labTimeline(rep.Config, r.Timeline),
			})
			rec := &out[len(out)-1]
			if rep.Config.Scenario.HasTrigger() {
				rec.SuccessAfter, rec.CallsAfter = &r.SuccessAfter, &r.CallsAfter
				rec.MeanInFlight = &r.MeanInFlight
			}
			if rep.Config.Scenario == lab.ScenarioChain {
				rec.OutageCalls, rec.BottomAttemptsPerCall, rec.MiddleAttemptsPerCall = &r.OutageCalls, &r.BottomAttemptsPerCall, &r.MiddleAttemptsPerCall
				rec.TopAttemptsPerCall = &r.TopAttemptsPerCall
			}
			if rep.Config.Scenario == lab.ScenarioBadReplica {
				rec.BadRepeats, rec.BadCalls = &r.BadRepeats, &r.BadCalls
			}
			if rep.Config.Scenario == lab.ScenarioSlowReplica3 {
				rec.HedgeRepeats = &r.HedgeRepeats
			}
			if rep.Config.Scenario == lab.ScenarioMixedCriticality {
				rec.CriticalSuccess, rec.SheddableSuccess = &r.CriticalSuccess, &r.SheddableSuccess
				rec.CriticalCalls, rec.SheddableCalls = &r.CriticalCalls, &r.SheddableCalls
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
			s := rep.Config.Scenario
			chain := []string{"", "", ""} // not measured
			if s == lab.ScenarioChain {
				chain[0], chain[1] = fmtFloat(r.BottomAttemptsPerCall, 3), fmtFloat(r.MiddleAttemptsPerCall, 3)
			}
			mean := "" // not measured
			if s.HasTrigger() {
				chain[2] = fmtFloat(r.SuccessAfter, 4)
				mean = fmtFloat(r.MeanInFlight, 1)
			}
			first := []string{"", "", ""} // not measured
			if rep.Config.Scenario == lab.ScenarioSlowReplicaStream {
				first = []string{ms(r.FirstP50), ms(r.FirstP99), ms(r.FirstP999)}
			}
			rows = append(rows, slices.Concat([]string{string(rep.Config.Scenario), r.Contender, strconv.Itoa(r.Calls),
				fmtFloat(r.AttemptsPerCall, 3), fmtFloat(r.SuccessRate, 4), fmtFloat(r.OutageLoad, 3),
				fmtFloat(r.PeakAfter, 3), ms(r.P50), ms(r.P99), ms(r.P999), fmtFloat(r.Goodput, 4)}, chain, first,
				[]string{labRecoverText(s, r, ""), fmtFloat(r.Wasted, 4), ms(r.FailP50), ms(r.FailP99), strconv.Itoa(r.PeakInFlight), mean}))
		}
	}
	return writeCSV(w, []string{"scenario", "contender", "calls", "attempts_per_call", "success_rate",
		"outage_load", "peak_after", "p50_ms", "p99_ms", "p999_ms", "goodput",
		"bottom_attempts_per_call", "middle_attempts_per_call", "success_after",
		"first_p50_ms", "first_p99_ms", "first_p999_ms", "recover_s", "wasted", "fail_p50_ms", "fail_p99_ms",
		"peak_in_flight", "mean_in_flight"}, rows)
}

// writeLabTable prints one scenario: what each contender gets, the table,
// and the load chart, in the style of "stagger sim outage".
func writeLabTable(out io.Writer, rep *lab.Report, full bool) error {
	// The prose above the table goes through intro: wrapped at labWidth
	// columns unless full.
	var intro strings.Builder
	w := io.Writer(&intro)
	c := rep.Config
	stream := c.Scenario == lab.ScenarioSlowReplicaStream
	stragglers := c.Scenario == lab.ScenarioStragglers
	slow := c.Scenario == lab.ScenarioSlowReplica || stream || stragglers
	mixed := c.Scenario == lab.ScenarioMixedCriticality
	overload := c.Scenario == lab.ScenarioOverload || mixed
	chain := c.Scenario == lab.ScenarioChain
	slowdown := c.Scenario == lab.ScenarioSlowdown || c.Scenario == lab.ScenarioSlowdown90
	metastable := c.Scenario == lab.ScenarioMetastable
	flaky := c.Scenario == lab.ScenarioFlakyQuiet || c.Scenario == lab.ScenarioFlakyQuietRandom
	bad := c.Scenario == lab.ScenarioBadReplica
	slow3 := c.Scenario == lab.ScenarioSlowReplica3
	server := fmt.Sprintf("%d workers of %v (%v per rejection), queue %d", c.Workers, c.ServiceTime(), c.ServiceTime()/10, c.Queue)
	switch {
	case stream:
		fmt.Fprintf(w, "scenario %s: no capacity limit, %.0f server streams/s (%d messages each) from %d clients per contender for %v, an attempt's first message takes %v, one in %.0f takes %d× as long, call deadline %v\n",
			c.Scenario, c.Rate, lab.SlowStreamMessages, c.Clients, c.Duration, lab.SlowBase, 1/lab.SlowOdds, lab.SlowFactor, c.CallTimeout)
		fmt.Fprintln(w, "FIRST: time to a stream's first message; EXTRA ATTEMPTS: attempts per call − 1")
	case stragglers:
		fmt.Fprintf(w, "scenario %s: no capacity limit, %.0f calls/s from %d clients per contender for %v, attempts take %v, one in %.0f takes %d× as long, %d attempts, per-attempt timeout %v, call deadline %v\n",
			c.Scenario, c.Rate, c.Clients, c.Duration, lab.StragglerBase, 1/lab.StragglerOdds, lab.StragglerFactor, c.MaxAttempts, c.PerAttemptTimeout, c.CallTimeout)
	case slow:
		fmt.Fprintf(w, "scenario %s: no capacity limit, %.0f calls/s from %d clients per contender for %v, attempts take %v, one in %.0f takes %d× as long, call deadline %v\n",
			c.Scenario, c.Rate, c.Clients, c.Duration, lab.SlowBase, 1/lab.SlowOdds, lab.SlowFactor, c.CallTimeout)
	case overload:
		fmt.Fprintf(w, "scenario %s: %d workers, %v per attempt (%v per rejection), queue %d; capacity %d attempts/s, %.0f with %d workers in the overload [%v, %v) of %v; %.0f calls/s from %d clients per contender, call deadline %v\n",
			c.Scenario, c.Workers, c.ServiceTime(), c.ServiceTime()/10, c.Queue, c.Capacity, c.ReducedCapacity(), c.Workers/2,
			c.OutageStart, c.OutageEnd, c.Duration, c.Rate, c.Clients, c.CallTimeout)
		if mixed {
			fmt.Fprintf(w, "%.0f%% of every client's calls CRITICAL, the others SHEDDABLE; in front of the workers stagger's server side limits the calls in the server to %d (its refusals cost a rejection each); CRITICAL and SHEDDABLE: success of each\n",
				100*lab.CriticalShare, c.ConcurrencyLimit())
		}
	case slowdown:
		fmt.Fprintf(w, "scenario %s: capacity %d attempts/s (%s), %.0f while %g× slower in [%v, %v) of %v; %.0f calls/s (%.0f%% of capacity) from %d clients per contender, call deadline %v, per-attempt timeout %v (grpc-go has none)\n",
			c.Scenario, c.Capacity, server, float64(c.Capacity)/c.Slow, c.Slow, c.OutageStart, c.OutageEnd, c.Duration,
			c.Rate, 100*c.Rate/float64(c.Capacity), c.Clients, c.CallTimeout, c.PerAttemptTimeout)
	case metastable:
		fmt.Fprintf(w, "scenario %s: capacity %d attempts/s (%s), UNAVAILABLE in [%v, %v) of %v (the trigger), then the same load; %.0f calls/s (%.0f%% of capacity) from %d clients per contender, call deadline %v, per-attempt timeout %v (grpc-go has none)\n",
			c.Scenario, c.Capacity, server, c.OutageStart, c.OutageEnd, c.Duration,
			c.Rate, 100*c.Rate/float64(c.Capacity), c.Clients, c.CallTimeout, c.PerAttemptTimeout)
	case flaky:
		what := fmt.Sprintf("the first %d attempts of every call fail UNAVAILABLE", lab.FlakyFailAttempts)
		if c.Scenario == lab.ScenarioFlakyQuietRandom {
			what = fmt.Sprintf("every attempt fails UNAVAILABLE with probability %g", c.FailureRate)
		}
		fmt.Fprintf(w, "scenario %s: no capacity limit, %s; %.0f calls/s from %d clients per contender for %v, %d attempts, backoff %v doubling, call deadline %v\n",
			c.Scenario, what, c.Rate, c.Clients, c.Duration, c.MaxAttempts, c.Backoff.Initial, c.CallTimeout)
	case slow3:
		fmt.Fprintf(w, "scenario %s: three replicas behind every connection, attempts take %v, every one on the first replica %d× as long; %.0f calls/s from %d clients per contender for %v, call deadline %v\n",
			c.Scenario, lab.SlowBase, lab.SlowFactor, c.Rate, c.Clients, c.Duration, c.CallTimeout)
		fmt.Fprintln(w, "HEDGE REPEATS: calls that sent a hedge to the replica their first attempt went to (the replicas' records)")
	case bad:
		fmt.Fprintf(w, "scenario %s: three replicas behind every connection, the first answers every attempt UNAVAILABLE; %.0f calls/s from %d clients per contender for %v, %d attempts, call deadline %v\n",
			c.Scenario, c.Rate, c.Clients, c.Duration, c.MaxAttempts, c.CallTimeout)
		fmt.Fprintln(w, "MET BAD: calls that met the bad replica; BAD REPEATS: those that met it more than once (its own records)")
	case chain:
		n := c.MaxAttempts
		fmt.Fprintf(w, "scenario %s: users → A → B → C, %d attempts on every hop, C answers UNAVAILABLE in [%v, %v) of %v; %.0f calls/s from %d clients per contender, call deadline %v\n",
			c.Scenario, n, c.OutageStart, c.OutageEnd, c.Duration, c.Rate, c.Clients, c.CallTimeout)
		fmt.Fprintf(w, "attempts reaching C, B and A per user call made and returned in C's outage (%d at C without coordination, %d without amplification); success of the calls made once C is back\n",
			n*n*n, n)
	default:
		fmt.Fprintf(w, "scenario %s: capacity %d attempts/s (%s), %.0f calls/s from %d clients per contender, outage [%v, %v) of %v, call deadline %v\n",
			c.Scenario, c.Capacity, server, c.Rate, c.Clients, c.OutageStart, c.OutageEnd, c.Duration, c.CallTimeout)
	}
	if !chain {
		// No server of the chain limits its attempts.
		fmt.Fprintf(w, "reference %s%%: the success of the lab's ideal client (lab.Ceiling: never more than the capacity, nothing into the outage), a yardstick and not an upper bound\n", fmtFloat(100*rep.Ceiling, 1))
	}
	if c.Scenario.HasTrigger() && !chain {
		fmt.Fprintf(w, "SUCCESS AFTER: calls made from %v after the trigger's end; RECOVER: seconds from the trigger's end until every later second succeeds at ≥ %.0f%%; GOODPUT: calls that succeeded from the trigger's start ÷ what the server could serve; WASTED: the server's work done for callers that had gone\n",
			lab.AfterGap, 100*lab.RecoverThreshold)
	}
	fmt.Fprintf(w, "peers: %s\n", labVersions())
	nameW := 0
	for _, r := range rep.Results {
		nameW = max(nameW, len(r.Contender))
	}
	if full {
		for _, r := range rep.Results {
			if con, ok := lab.ContenderByName(c.Scenario, r.Contender); ok {
				fmt.Fprintf(w, "  %-*s  %s\n", nameW, r.Contender, con.Gets(c))
			}
		}
	}
	fmt.Fprintln(w)
	if full {
		io.WriteString(out, intro.String())
	} else {
		io.WriteString(out, wrapText(intro.String(), labWidth))
	}
	w = out
	var maxPer, maxBottom float64
	for _, r := range rep.Results {
		maxPer = max(maxPer, r.AttemptsPerCall)
		maxBottom = max(maxBottom, r.BottomAttemptsPerCall)
	}
	pct := func(v float64) string { return fmtFloat(100*v, 1) + "%" }
	rows := make([][]string, len(rep.Results))
	for i, r := range rep.Results {
		rows[i] = []string{r.Contender, fmtFloat(r.AttemptsPerCall, 2), pct(r.SuccessRate), pct(r.SuccessAfter),
			labRecoverText(c.Scenario, r, "never"), fmtFloat(r.Goodput, 2), pct(r.Wasted),
			ms(r.P50), ms(r.P99), ms(r.FailP50), ms(r.FailP99), fmtFloat(r.OutageLoad, 2) + "×", fmtFloat(r.PeakAfter, 2) + "×",
			strconv.Itoa(r.PeakInFlight), fmtFloat(r.MeanInFlight, 1), strconv.Itoa(r.PeakWaiting), strconv.Itoa(r.PeakGoroutines),
			bar(r.AttemptsPerCall, maxPer, 16)}
		switch {
		case stream:
			rows[i] = []string{r.Contender, fmtFloat(r.AttemptsPerCall, 3), fmtFloat(100*(r.AttemptsPerCall-1), 1) + "%",
				pct(r.SuccessRate), ms(r.FirstP50), ms(r.FirstP99), ms(r.FirstP999), ms(r.P99), ms(r.FailP50), ms(r.FailP99),
				bar(float64(r.FirstP99), float64(rep.Results[0].FirstP99), 16)}
		case slow:
			rows[i] = []string{r.Contender, fmtFloat(r.AttemptsPerCall, 3), pct(r.SuccessRate),
				ms(r.P50), ms(r.P99), ms(r.P999), ms(r.FailP50), ms(r.FailP99), bar(float64(r.P99), float64(rep.Results[0].P99), 16)}
		case flaky:
			rows[i] = []string{r.Contender, fmtFloat(r.AttemptsPerCall, 2), pct(r.SuccessRate), fmtFloat(r.Goodput, 2),
				ms(r.P50), ms(r.P99), ms(r.FailP50), ms(r.FailP99),
				strconv.Itoa(r.PeakInFlight), strconv.Itoa(r.PeakWaiting), strconv.Itoa(r.PeakGoroutines),
				bar(r.AttemptsPerCall, maxPer, 16)}
		case slow3:
			rows[i] = []string{r.Contender, fmtFloat(r.AttemptsPerCall, 3), pct(r.SuccessRate), strconv.Itoa(r.HedgeRepeats),
				ms(r.P50), ms(r.P99), ms(r.P999), ms(r.FailP50), ms(r.FailP99), bar(float64(r.P99), float64(rep.Results[0].P99), 16)}
		case bad:
			rows[i] = []string{r.Contender, fmtFloat(r.AttemptsPerCall, 3), pct(r.SuccessRate), strconv.Itoa(r.BadCalls), strconv.Itoa(r.BadRepeats),
				ms(r.P50), ms(r.P99), ms(r.FailP50), ms(r.FailP99), bar(r.AttemptsPerCall, maxPer, 16)}
		case mixed:
			rows[i] = []string{r.Contender, fmtFloat(r.AttemptsPerCall, 2), pct(r.SuccessRate), pct(r.CriticalSuccess), pct(r.SheddableSuccess),
				fmtFloat(r.Goodput, 2), pct(r.Wasted), ms(r.P50), ms(r.P99), ms(r.FailP50), ms(r.FailP99), fmtFloat(r.OutageLoad, 2) + "×",
				bar(r.AttemptsPerCall, maxPer, 16)}
		case chain:
			rows[i] = []string{r.Contender, fmtFloat(r.BottomAttemptsPerCall, 2), fmtFloat(r.MiddleAttemptsPerCall, 2),
				fmtFloat(r.TopAttemptsPerCall, 2), strconv.Itoa(r.OutageCalls), pct(r.SuccessAfter),
				pct(r.SuccessRate), ms(r.P50), ms(r.P99), ms(r.FailP50), ms(r.FailP99), strconv.Itoa(r.PeakInFlight),
				strconv.Itoa(r.PeakGoroutines), bar(r.BottomAttemptsPerCall, maxBottom, 16)}
		}
	}
	header := []string{"CONTENDER", "ATTEMPTS/CALL", "SUCCESS", "SUCCESS AFTER", "RECOVER (s)", "GOODPUT", "WASTED",
		"P50 (ms)", "P99 (ms)", "FAIL P50 (ms)", "FAIL P99 (ms)",
		"OUTAGE ATTEMPTS ÷ CAP", "PEAK/100ms AFTER ÷ CAP", "PEAK IN FLIGHT", "MEAN IN FLIGHT IN TRIGGER", "PEAK WAITING", "PEAK GOROUTINES", "ATTEMPTS PER CALL"}
	switch {
	case stream:
		header = []string{"CONTENDER", "ATTEMPTS/CALL", "EXTRA ATTEMPTS", "SUCCESS", "FIRST P50 (ms)", "FIRST P99 (ms)", "FIRST P99.9 (ms)",
			"P99 (ms)", "FAIL P50 (ms)", "FAIL P99 (ms)", "FIRST P99 (vs first row)"}
	case slow:
		header = []string{"CONTENDER", "ATTEMPTS/CALL", "SUCCESS", "P50 (ms)", "P99 (ms)", "P99.9 (ms)", "FAIL P50 (ms)", "FAIL P99 (ms)", "P99 (vs first row)"}
	case flaky:
		header = []string{"CONTENDER", "ATTEMPTS/CALL", "SUCCESS", "GOODPUT", "P50 (ms)", "P99 (ms)", "FAIL P50 (ms)", "FAIL P99 (ms)",
			"PEAK IN FLIGHT", "PEAK WAITING", "PEAK GOROUTINES", "ATTEMPTS PER CALL"}
	case slow3:
		header = []string{"CONTENDER", "ATTEMPTS/CALL", "SUCCESS", "HEDGE REPEATS", "P50 (ms)", "P99 (ms)", "P99.9 (ms)", "FAIL P50 (ms)", "FAIL P99 (ms)", "P99 (vs first row)"}
	case bad:
		header = []string{"CONTENDER", "ATTEMPTS/CALL", "SUCCESS", "MET BAD", "BAD REPEATS", "P50 (ms)", "P99 (ms)", "FAIL P50 (ms)", "FAIL P99 (ms)", "ATTEMPTS PER CALL"}
	case chain:
		header = []string{"CONTENDER", "AT C/CALL", "AT B/CALL", "AT A/CALL", "OUTAGE CALLS", "SUCCESS AFTER", "SUCCESS",
			"P50 (ms)", "P99 (ms)", "FAIL P50 (ms)", "FAIL P99 (ms)", "PEAK IN FLIGHT", "PEAK GOROUTINES", "ATTEMPTS AT C PER CALL"}
	case mixed:
		header = []string{"CONTENDER", "ATTEMPTS/CALL", "SUCCESS", "CRITICAL", "SHEDDABLE", "GOODPUT", "WASTED",
			"P50 (ms)", "P99 (ms)", "FAIL P50 (ms)", "FAIL P99 (ms)", "OVERLOAD ATTEMPTS ÷ CAP", "ATTEMPTS PER CALL"}
	case overload:
		// The attempts in the overload are ÷ the reduced capacity.
		header[11] = "OVERLOAD ATTEMPTS ÷ CAP"
	case slowdown:
		header[11] = "SLOWDOWN ATTEMPTS ÷ CAP"
	}
	if !full {
		header, rows = compactColumns(header, rows)
	}
	if err := writeTable(w, header, rows); err != nil {
		return err
	}
	if v := labVerdict(rep); v != "" {
		io.WriteString(w, wrapText(v+"\n", labWidth))
	}
	if slow || bad || slow3 {
		fmt.Fprintf(w, "wall time %s\n\n", labSeconds(rep.Wall))
		return nil
	}
	// One column per 100 ms bin, on one scale for every contender so that
	// heights compare; the ruler marks the trigger.
	top, width := 0, 0
	// Compact: bins merged (their largest) so that a line fits labWidth.
	group := 1
	loads := make([][]int, len(rep.Results))
	for i, r := range rep.Results {
		loads[i] = r.Load
		width = max(width, len(r.Load))
	}
	if room := labWidth - nameW - 3; !full && width > room {
		group = (width + room - 1) / room
		for i := range loads {
			loads[i] = mergeBins(loads[i], group)
		}
		width = (width + group - 1) / group
	}
	for _, l := range loads {
		for _, n := range l {
			top = max(top, n)
		}
	}
	bin := lab.Bin * time.Duration(group)
	per := strconv.FormatInt(bin.Milliseconds(), 10) + " ms"
	switch {
	case chain:
		fmt.Fprintf(w, "\nattempts C received per %s (full block = %d)\n", per, top)
	case flaky:
		fmt.Fprintf(w, "\nattempts the server received per %s (full block = %d)\n", per, top)
	default:
		fmt.Fprintf(w, "\nattempts the server received per %s (full block = %d, capacity = %.0f)\n", per, top, float64(c.Capacity)*bin.Seconds())
	}
	for i, r := range rep.Results {
		fmt.Fprintf(w, "%-*s │%s\n", nameW, r.Contender, spark(loads[i], top))
	}
	if flaky {
		fmt.Fprintf(w, "%-*s └%s\n", nameW, "", outageRuler(width, bin, 0, 0))
		fmt.Fprintf(w, "%-*s  one column per %s, ┴ every second; wall time %s\n\n", nameW, "", per, labSeconds(rep.Wall))
		return nil
	}
	fmt.Fprintf(w, "%-*s └%s\n", nameW, "", outageRuler(width, bin, c.OutageStart, c.OutageEnd))
	what := "outage"
	switch {
	case overload:
		what = "overload (half the workers)"
	case slowdown:
		what = "slowdown"
	case metastable:
		what = "outage (the trigger)"
	case chain:
		what = "C's outage"
	}
	legend := fmt.Sprintf("%-*s  ▔ = %s; one column per %s, ┴ every second; wall time %s\n\n", nameW, "", what, per, labSeconds(rep.Wall))
	if !full {
		legend = wrapText(legend, labWidth)
	}
	io.WriteString(w, legend)
	return nil
}

// labWidth is how wide the default table is (-full: as wide as it takes).
const labWidth = 100

// mergeBins returns counts with every group bins merged into one, their
// largest.
func mergeBins(counts []int, group int) []int {
	out := make([]int, 0, (len(counts)+group-1)/group)
	for i := 0; i < len(counts); i += group {
		m := 0
		for _, n := range counts[i:min(i+group, len(counts))] {
			m = max(m, n)
		}
		out = append(out, m)
	}
	return out
}

// compactNames are the columns of the default table, by the full table's
// header, with their short names: success, failed calls' wait, calls held,
// load on the server, recovery, and what a scenario is about (hedges,
// criticality, the chain's hops).
var compactNames = map[string]string{
	"CONTENDER": "CONTENDER", "ATTEMPTS/CALL": "ATT/CALL", "SUCCESS": "SUCCESS", "SUCCESS AFTER": "AFTER",
	"RECOVER (s)": "RECOVER (s)", "FAIL P50 (ms)": "FAIL P50", "MEAN IN FLIGHT IN TRIGGER": "HELD",
	"OUTAGE ATTEMPTS ÷ CAP": "LOAD", "OVERLOAD ATTEMPTS ÷ CAP": "LOAD", "SLOWDOWN ATTEMPTS ÷ CAP": "LOAD",
	"CRITICAL": "CRITICAL", "SHEDDABLE": "SHEDDABLE", "AT C/CALL": "AT C/CALL", "AT B/CALL": "AT B/CALL",
	"MET BAD": "MET BAD", "BAD REPEATS": "REPEATS", "HEDGE REPEATS": "REPEATS",
	"FIRST P99 (ms)": "FIRST P99", "P50 (ms)": "P50", "P99 (ms)": "P99", "P99.9 (ms)": "P99.9",
}

// compactLatency: the columns of successes' latency are kept only where
// latency is what the scenario measures (no failure trigger: the slow
// replicas, the stragglers).
func compactColumns(header []string, rows [][]string) ([]string, [][]string) {
	latency := true
	for _, h := range header {
		if h == "FAIL P50 (ms)" {
			continue
		}
		if strings.HasSuffix(h, "÷ CAP") || h == "AT C/CALL" || h == "GOODPUT" {
			latency = false
		}
	}
	var keep []int
	var out []string
	for i, h := range header {
		name, ok := compactNames[h]
		if !ok || !latency && (h == "P50 (ms)" || h == "P99 (ms)" || h == "P99.9 (ms)") {
			continue
		}
		keep = append(keep, i)
		out = append(out, name)
	}
	rs := make([][]string, len(rows))
	for j, r := range rows {
		for _, i := range keep {
			rs[j] = append(rs[j], r[i])
		}
	}
	return out, rs
}

// labVerdict is a scenario's one line: stagger against no retry and the
// best of the other retry layers, on what the scenario is about. "" when
// the run has no stagger or no no-retry row.
func labVerdict(rep *lab.Report) string {
	var stg, none *lab.Result
	var best *lab.Result
	for i := range rep.Results {
		r := &rep.Results[i]
		switch {
		case r.Contender == "stagger":
			stg = r
		case r.Contender == "no-retry":
			none = r
		case strings.HasPrefix(r.Contender, "stagger"):
		default:
			if best == nil || r.SuccessRate > best.SuccessRate {
				best = r
			}
		}
	}
	if stg == nil || none == nil {
		return ""
	}
	pct := func(v float64) string { return fmtFloat(100*v, 1) + "%" }
	c := rep.Config
	switch c.Scenario {
	case lab.ScenarioChain:
		return fmt.Sprintf("verdict: stagger sent C %s attempts per call in its outage (no retry %s); %s of the calls after it succeeded (no retry %s)",
			fmtFloat(stg.BottomAttemptsPerCall, 2), fmtFloat(none.BottomAttemptsPerCall, 2), pct(stg.SuccessAfter), pct(none.SuccessAfter))
	case lab.ScenarioSlowReplica, lab.ScenarioSlowReplicaStream, lab.ScenarioSlowReplica3, lab.ScenarioStragglers:
		return fmt.Sprintf("verdict: stagger's p99 %s ms with %s attempts per call (no retry %s ms)",
			ms(stg.P99), fmtFloat(stg.AttemptsPerCall, 2), ms(none.P99))
	}
	v := fmt.Sprintf("verdict: stagger %s success (no retry %s", pct(stg.SuccessRate), pct(none.SuccessRate))
	if best != nil {
		v += fmt.Sprintf(", best other %s %s", best.Contender, pct(best.SuccessRate))
	}
	v += fmt.Sprintf("); its failed calls took %s ms at p50 (no retry %s ms)", ms(stg.FailP50), ms(none.FailP50))
	if c.Scenario.HasTrigger() {
		v += fmt.Sprintf(", %s calls held in the trigger (no retry %s), load %s× the capacity (no retry %s×)",
			fmtFloat(stg.MeanInFlight, 1), fmtFloat(none.MeanInFlight, 1), fmtFloat(stg.OutageLoad, 2), fmtFloat(none.OutageLoad, 2))
	}
	return v
}

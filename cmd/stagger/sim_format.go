package main

import (
	"fmt"
	"io"
	"math"
	"strconv"
	"time"

	"github.com/stagger-go/stagger/sim"
)

type occJSON struct {
	Clients    int     `json:"clients"`
	Strategy   string  `json:"strategy"`
	MeanTimeMS float64 `json:"mean_time_ms"`
	MeanCalls  float64 `json:"mean_calls"`
}

func writeOCC(w io.Writer, f format, res []sim.OCCResult) error {
	switch f {
	case "json":
		out := make([]occJSON, len(res))
		for i, r := range res {
			out[i] = occJSON{r.Clients, r.Strategy, float64(r.MeanTime) / float64(time.Millisecond), r.MeanCalls}
		}
		return writeJSON(w, out)
	case "csv":
		rows := make([][]string, len(res))
		for i, r := range res {
			rows[i] = []string{strconv.Itoa(r.Clients), r.Strategy, ms(r.MeanTime), fmtFloat(r.MeanCalls, 1)}
		}
		return writeCSV(w, []string{"clients", "strategy", "mean_time_ms", "mean_calls"}, rows)
	}
	// The bars compare strategies within one client count.
	maxCalls := map[int]float64{}
	for _, r := range res {
		maxCalls[r.Clients] = math.Max(maxCalls[r.Clients], r.MeanCalls)
	}
	rows := make([][]string, len(res))
	for i, r := range res {
		rows[i] = []string{strconv.Itoa(r.Clients), r.Strategy, ms(r.MeanTime), fmtFloat(r.MeanCalls, 1), bar(r.MeanCalls, maxCalls[r.Clients], 30)}
	}
	return writeTable(w, []string{"CLIENTS", "STRATEGY", "MEAN TIME (ms)", "MEAN CALLS", "CALLS"}, rows)
}

// failureJSON is what the rows of the failure models (failrate, partial)
// share.
type failureJSON struct {
	Clients       int     `json:"clients"`
	Strategy      string  `json:"strategy"`
	Calls         int     `json:"calls"`
	Attempts      int     `json:"attempts"`
	Successes     int     `json:"successes"`
	Amplification float64 `json:"amplification"`
	SuccessRate   float64 `json:"success_rate"`
}

func newFailureJSON(r sim.FailureStats) failureJSON {
	return failureJSON{r.Clients, r.Contender, r.Calls, r.Attempts, r.Successes, r.Amplification, r.SuccessRate}
}

type failRateJSON struct {
	P float64 `json:"p"`
	failureJSON
}

type partialJSON struct {
	FailKeys float64 `json:"fail_keys"`
	failureJSON
	HealthyCalls       int     `json:"healthy_calls"`
	HealthySuccessRate float64 `json:"healthy_success_rate"`
}

func writeFailRate(w io.Writer, f format, res []sim.FailRateResult, withClients bool) error {
	if f == "json" {
		out := make([]failRateJSON, len(res))
		for i, r := range res {
			out[i] = failRateJSON{r.P, newFailureJSON(r.FailureStats)}
		}
		return writeJSON(w, out)
	}
	rows := make([]failureRow, len(res))
	for i, r := range res {
		rows[i] = failureRow{x: r.P, FailureStats: r.FailureStats}
	}
	return writeFailureRows(w, f, failureLayout{param: "p", paramHeader: "P"}, rows, withClients)
}

func writePartial(w io.Writer, f format, res []sim.PartialResult, withClients bool) error {
	if f == "json" {
		out := make([]partialJSON, len(res))
		for i, r := range res {
			out[i] = partialJSON{r.FailKeys, newFailureJSON(r.FailureStats), r.HealthyCalls, r.HealthySuccessRate}
		}
		return writeJSON(w, out)
	}
	rows := make([]failureRow, len(res))
	for i, r := range res {
		rows[i] = failureRow{x: r.FailKeys, FailureStats: r.FailureStats, own: r.HealthySuccessRate}
	}
	return writeFailureRows(w, f, failureLayout{param: "fail_keys", paramHeader: "FAIL KEYS", own: "healthy_success_rate", ownHeader: "SUCCESS OF HEALTHY"}, rows, withClients)
}

// failureLayout names a failure model's columns in a table or CSV: its
// parameter's, and, when own is set, that of a rate of the model's own,
// after the success rate.
type failureLayout struct {
	param, paramHeader string
	own, ownHeader     string
}

// failureRow is one row of a failure model's table or CSV.
type failureRow struct {
	// x is the model's parameter.
	x float64
	sim.FailureStats
	// own is the model's own rate, when its layout names one.
	own float64
}

func writeFailureRows(w io.Writer, f format, l failureLayout, res []failureRow, withClients bool) error {
	if f == "csv" {
		header := []string{l.param}
		if withClients {
			header = append(header, "clients")
		}
		header = append(header, "strategy", "amplification", "success_rate")
		if l.own != "" {
			header = append(header, l.own)
		}
		rows := make([][]string, len(res))
		for i, r := range res {
			row := []string{strconv.FormatFloat(r.x, 'g', -1, 64)}
			if withClients {
				row = append(row, strconv.Itoa(r.Clients))
			}
			row = append(row, r.Contender, fmtFloat(r.Amplification, 3), fmtFloat(r.SuccessRate, 4))
			if l.own != "" {
				row = append(row, fmtFloat(r.own, 4))
			}
			rows[i] = row
		}
		return writeCSV(w, header, rows)
	}
	// Bars share one scale: the largest amplification of the run.
	var maxAmp float64
	for _, r := range res {
		maxAmp = math.Max(maxAmp, r.Amplification)
	}
	header := []string{l.paramHeader, "CLIENTS", "STRATEGY", "AMPLIFICATION", "SUCCESS"}
	if l.own != "" {
		header = append(header, l.ownHeader)
	}
	header = append(header, "ATTEMPTS PER CALL")
	rows := make([][]string, len(res))
	for i, r := range res {
		row := []string{strconv.FormatFloat(r.x, 'g', -1, 64), strconv.Itoa(r.Clients), r.Contender,
			fmtFloat(r.Amplification, 3), fmtFloat(100*r.SuccessRate, 2) + "%"}
		if l.own != "" {
			row = append(row, fmtFloat(100*r.own, 2)+"%")
		}
		rows[i] = append(row, bar(r.Amplification, maxAmp, 24))
	}
	return writeTable(w, header, rows)
}

type outageJSON struct {
	Strategy        string  `json:"strategy"`
	Calls           int     `json:"calls"`
	Attempts        int     `json:"attempts"`
	Successes       int     `json:"successes"`
	AttemptsPerCall float64 `json:"attempts_per_call"`
	SuccessRate     float64 `json:"success_rate"`
	OutageLoad      float64 `json:"outage_load"`
	PeakAfter       float64 `json:"peak_after"`
	DrainMS         float64 `json:"drain_ms"`
	ArrivalsPer100  []int   `json:"arrivals_per_100ms"`
	// Ceiling is the model's (outageCeiling), the same in every record.
	Ceiling float64 `json:"ceiling"`
}

func perCall(r sim.OutageResult) float64 {
	if r.Calls == 0 {
		return 0
	}
	return float64(r.Attempts) / float64(r.Calls)
}

func writeOutage(w io.Writer, f format, cfg *sim.OutageConfig, res []sim.OutageResult, ceiling float64) error {
	switch f {
	case "json":
		out := make([]outageJSON, len(res))
		for i, r := range res {
			out[i] = outageJSON{r.Contender, r.Calls, r.Attempts, r.Successes, perCall(r), r.SuccessRate, r.OutageLoad, r.PeakAfter, float64(r.Drain) / float64(time.Millisecond), r.Arrivals, ceiling}
		}
		return writeJSON(w, out)
	case "csv":
		rows := make([][]string, len(res))
		for i, r := range res {
			rows[i] = []string{r.Contender, fmtFloat(perCall(r), 3), fmtFloat(r.SuccessRate, 4), fmtFloat(r.OutageLoad, 3), fmtFloat(r.PeakAfter, 3), ms(r.Drain)}
		}
		return writeCSV(w, []string{"strategy", "attempts_per_call", "success_rate", "outage_load", "peak_after", "drain_ms"}, rows)
	}
	deadline := "no call deadline"
	if cfg.CallTimeout > 0 {
		deadline = fmt.Sprintf("call deadline %v", cfg.CallTimeout)
	}
	fmt.Fprintf(w, "capacity %v/s, load %v calls/s from %d clients, outage [%v, %v) of %v, %s\n",
		cfg.Capacity, cfg.Load, cfg.Clients, cfg.OutageStart, cfg.OutageEnd, cfg.Duration, deadline)
	fmt.Fprintf(w, "ceiling %s%%: the success an ideal client could reach without ever sending more than the capacity\n\n", fmtFloat(100*ceiling, 2))
	rows := make([][]string, len(res))
	for i, r := range res {
		rows[i] = []string{r.Contender, fmtFloat(perCall(r), 3), fmtFloat(100*r.SuccessRate, 2) + "%",
			fmtFloat(r.OutageLoad, 2) + "×", fmtFloat(r.PeakAfter, 2) + "×", ms(r.Drain)}
	}
	err := writeTable(w, []string{"STRATEGY", "ATTEMPTS/CALL", "SUCCESS", "LOAD IN OUTAGE ÷ CAP", "PEAK/100ms AFTER ÷ CAP", "DRAIN (ms)"}, rows)
	if err != nil {
		return err
	}
	// One column per 100 ms bin, on one scale for every contender so that
	// heights compare; the ruler marks the outage.
	max := 0
	width := 0
	for _, r := range res {
		for _, c := range r.Arrivals {
			max = int(math.Max(float64(max), float64(c)))
		}
		width = int(math.Max(float64(width), float64(len(r.Arrivals))))
	}
	nameW := 0
	for _, r := range res {
		nameW = int(math.Max(float64(nameW), float64(len(r.Contender))))
	}
	fmt.Fprintf(w, "\narrivals per 100 ms (full block = %d, capacity = %.0f)\n", max, cfg.Capacity*sim.Bin.Seconds())
	for _, r := range res {
		fmt.Fprintf(w, "%-*s │%s\n", nameW, r.Contender, spark(r.Arrivals, max))
	}
	fmt.Fprintf(w, "%-*s └%s\n", nameW, "", outageRuler(width, sim.Bin, cfg.OutageStart, cfg.OutageEnd))
	fmt.Fprintf(w, "%-*s  ▔ = outage; one column per 100 ms, ┴ every second\n", nameW, "")
	return nil
}

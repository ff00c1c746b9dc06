package budget

// Load is what a backend's own load report on one attempt's answer said:
// gRFC A51's OrcaLoadReport in the trailer endpoint-load-metrics-bin, as
// grpc-go's orca package writes it (orca.CallMetricsServerOption). The
// interceptors read it on every attempt whose trailer they hold, a first
// attempt's as a retry's, and hand it to the budget in Attempt.Load. The
// zero value is an answer without a report.
//
// A Gate's pace for held retries follows it (see Gate); an outage, where
// no answer carries one, is judged by the Gate's own evidence. The other
// budgets read nothing of it.
type Load struct {
	// Utilization is the backend's utilization in [0, 1]: the report's
	// application_utilization, or its cpu_utilization when that is 0 (as
	// gRFC A58's weighted round robin reads them), at most 1.
	Utilization float64
	// Reported: the answer carried a well-formed report.
	Reported bool
	// Malformed: the answer carried a report that could not be read (not
	// an OrcaLoadReport, more than one, a negative or NaN utilization). It
	// is ignored, never an error for the call: Utilization is 0 and
	// Reported false.
	Malformed bool
}

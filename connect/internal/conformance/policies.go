package conformance

// Policies are the stagger policy files a run can use, by name: each covers
// every method of the suite's service and names as retryable (retry) or
// non-fatal (hedge) every code the suite's cases end with but CANCELED and
// DEADLINE_EXCEEDED, so that stagger retries or hedges each case that fails,
// and its result must still be the one the case expects. The methods are
// marked idempotent (the suite's server keeps no state), so that a reset
// is retried and every method is hedged. The backoff and the
// hedging delay are short (the suite has 4,618 cases); the budget is
// grpc-go's retryThrottling at its largest, as a service that wants retries
// would set it.
var Policies = map[string]string{
	"retry": `{"methodConfig": [{
  "name": [{"service": "connectrpc.conformance.v1.ConformanceService"}], "idempotent": true,
  "retryPolicy": {"maxAttempts": 3, "initialBackoff": "0.002s", "maxBackoff": "0.01s",
    "backoffMultiplier": 2, "retryableStatusCodes": ` + failureCodes + `}}],
  "retryThrottling": {"maxTokens": 1000, "tokenRatio": 1}}`,
	"hedge": `{"methodConfig": [{
  "name": [{"service": "connectrpc.conformance.v1.ConformanceService"}], "idempotent": true,
  "hedgingPolicy": {"maxAttempts": 3, "hedgingDelay": "0.005s",
    "nonFatalStatusCodes": ` + failureCodes + `}}],
  "retryThrottling": {"maxTokens": 1000, "tokenRatio": 1}}`,
}

const failureCodes = `["UNKNOWN", "INVALID_ARGUMENT", "NOT_FOUND", "ALREADY_EXISTS",
  "PERMISSION_DENIED", "RESOURCE_EXHAUSTED", "FAILED_PRECONDITION", "ABORTED", "OUT_OF_RANGE",
  "UNIMPLEMENTED", "INTERNAL", "UNAVAILABLE", "DATA_LOSS", "UNAUTHENTICATED"]`

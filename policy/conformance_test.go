package policy

import (
	"fmt"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// cfgGRPCAccepts reports whether grpc-go accepts doc as a service config:
// grpc.NewClient parses a default service config and fails on an invalid one.
func cfgGRPCAccepts(t *testing.T, doc string) bool {
	t.Helper()
	conn, err := grpc.NewClient("passthrough:///x",
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultServiceConfig(doc))
	if err != nil {
		return false
	}
	if err := conn.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	return true
}

// grpcRejectsBadRetry is the first grpc-go release that rejects a service
// config holding an invalid retryPolicy, as gRFC A21 and A6 ask (grpc-go pull
// request 7905). Releases before it drop the policy with a log line: the
// method silently does not retry, while stagger rejects the file and says why.
var grpcRejectsBadRetry = [2]int{1, 70}

// grpcVersionAtLeast reports whether version ("1.85.0", as grpc.Version
// spells it; a suffix such as "-dev" is ignored) is at least major.minor.
func grpcVersionAtLeast(version string, want [2]int) (bool, error) {
	var major, minor int
	if _, err := fmt.Sscanf(version, "%d.%d", &major, &minor); err != nil {
		return false, fmt.Errorf("grpc version %q: %v", version, err)
	}
	return major > want[0] || major == want[0] && minor >= want[1], nil
}

// Why a row's verdicts differ. The first three are stagger's deliberate
// differences from grpc-go's parser, each stated by its constant;
// diffDropsBadRetry holds only before grpcRejectsBadRetry (the table is run
// on the oldest grpc-go the module requires and on the newest).
const (
	diffThrottlingChecked = "difference 1: retryThrottling checked without methodConfig; tokenRatio kept to 3 decimals"
	diffRetryAndHedging   = "difference 2: retryPolicy and hedgingPolicy in one entry"
	diffExtensions        = "difference 3: stagger's extensions and hedging (grpc-go ignores hedgingPolicy and unknown keys)"
	diffDropsBadRetry     = "grpc-go before v1.70 drops an invalid retryPolicy (the method does not retry); stagger rejects the file and says why"
)

const cfgRetry = `"retryPolicy":{"maxAttempts":3,"initialBackoff":"0.1s","maxBackoff":"1s","backoffMultiplier":2,"retryableStatusCodes":["UNAVAILABLE"]}`

// cfgConformance is the corpus: each row is run through grpc-go and through
// ParseConfig. grpcOK records grpc-go's verdict (checked, so the table
// documents grpc-go too); diff is empty when stagger must agree, else the
// reason it must not. Rows whose diff is diffDropsBadRetry record the verdict
// of grpc-go before grpcRejectsBadRetry; rowVerdict gives the running
// version's.
var cfgConformance = []struct {
	name   string
	doc    string
	grpcOK bool
	diff   string
}{
	{"empty object", `{}`, true, ""},
	{"null document", `null`, true, ""},
	{"empty string", ``, false, ""},
	{"top-level array", `[]`, false, ""},
	{"trailing comma", `{"methodConfig":[],}`, false, ""},
	{"data after the document", `{} {}`, false, ""},
	{"plain retry", `{"methodConfig":[{"name":[{"service":"a.B"}],` + cfgRetry + `}]}`, true, ""},
	{"default entry", `{"methodConfig":[{"name":[{}],` + cfgRetry + `}]}`, true, ""},
	{"name missing", `{"methodConfig":[{` + cfgRetry + `}]}`, true, ""},
	{"name empty list", `{"methodConfig":[{"name":[],` + cfgRetry + `}]}`, true, ""},
	{"null entry", `{"methodConfig":[null]}`, true, ""},
	{"null name element is the default entry", `{"methodConfig":[{"name":[null]},{"name":[{}]}]}`, false, ""},
	{"retryPolicy null", `{"methodConfig":[{"name":[{"service":"a.B"}],"retryPolicy":null}]}`, true, ""},
	{"duplicate name in one entry", `{"methodConfig":[{"name":[{"service":"a.B"},{"service":"a.B"}]}]}`, false, ""},
	{"duplicate name across entries", `{"methodConfig":[{"name":[{"service":"a.B","method":"M"}]},{"name":[{"service":"a.B","method":"M"}]}]}`, false, ""},
	{"duplicate default entry", `{"methodConfig":[{"name":[{}]},{"name":[{"service":""}]}]}`, false, ""},
	{"service and service/method are distinct", `{"methodConfig":[{"name":[{"service":"a.B"}]},{"name":[{"service":"a.B","method":"M"}]}]}`, true, ""},
	{"method without a service", `{"methodConfig":[{"name":[{"method":"M"}]}]}`, false, ""},
	{"service not a string", `{"methodConfig":[{"name":[{"service":1}]}]}`, false, ""},
	{"name not a list", `{"methodConfig":[{"name":{"service":"a.B"}}]}`, false, ""},
	{"methodConfig not a list", `{"methodConfig":{}}`, false, ""},
	{"maxAttempts 6 is capped", `{"methodConfig":[{"name":[{"service":"a.B"}],"retryPolicy":{"maxAttempts":6,"initialBackoff":"1s","maxBackoff":"1s","backoffMultiplier":1,"retryableStatusCodes":[14]}}]}`, true, ""},
	{"maxAttempts 2", `{"methodConfig":[{"name":[{"service":"a.B"}],"retryPolicy":{"maxAttempts":2,"initialBackoff":"1s","maxBackoff":"1s","backoffMultiplier":1,"retryableStatusCodes":[14]}}]}`, true, ""},
	{"maxAttempts 1", `{"methodConfig":[{"name":[{"service":"a.B"}],"retryPolicy":{"maxAttempts":1,"initialBackoff":"1s","maxBackoff":"1s","backoffMultiplier":1,"retryableStatusCodes":[14]}}]}`, true, diffDropsBadRetry},
	{"maxAttempts missing", `{"methodConfig":[{"name":[{"service":"a.B"}],"retryPolicy":{"initialBackoff":"1s","maxBackoff":"1s","backoffMultiplier":1,"retryableStatusCodes":[14]}}]}`, true, diffDropsBadRetry},
	{"maxAttempts a string", `{"methodConfig":[{"name":[{"service":"a.B"}],"retryPolicy":{"maxAttempts":"3","initialBackoff":"1s","maxBackoff":"1s","backoffMultiplier":1,"retryableStatusCodes":[14]}}]}`, false, ""},
	{"maxAttempts 3.0", `{"methodConfig":[{"name":[{"service":"a.B"}],"retryPolicy":{"maxAttempts":3.0,"initialBackoff":"1s","maxBackoff":"1s","backoffMultiplier":1,"retryableStatusCodes":[14]}}]}`, false, ""},
	{"initialBackoff 0s", `{"methodConfig":[{"name":[{"service":"a.B"}],"retryPolicy":{"maxAttempts":3,"initialBackoff":"0s","maxBackoff":"1s","backoffMultiplier":1,"retryableStatusCodes":[14]}}]}`, true, diffDropsBadRetry},
	{"maxBackoff negative", `{"methodConfig":[{"name":[{"service":"a.B"}],"retryPolicy":{"maxAttempts":3,"initialBackoff":"1s","maxBackoff":"-1s","backoffMultiplier":1,"retryableStatusCodes":[14]}}]}`, true, diffDropsBadRetry},
	{"maxBackoff below initialBackoff", `{"methodConfig":[{"name":[{"service":"a.B"}],"retryPolicy":{"maxAttempts":3,"initialBackoff":"5s","maxBackoff":"1s","backoffMultiplier":1,"retryableStatusCodes":[14]}}]}`, true, ""},
	{"multiplier 0", `{"methodConfig":[{"name":[{"service":"a.B"}],"retryPolicy":{"maxAttempts":3,"initialBackoff":"1s","maxBackoff":"1s","backoffMultiplier":0,"retryableStatusCodes":[14]}}]}`, true, diffDropsBadRetry},
	{"multiplier 0.5", `{"methodConfig":[{"name":[{"service":"a.B"}],"retryPolicy":{"maxAttempts":3,"initialBackoff":"1s","maxBackoff":"1s","backoffMultiplier":0.5,"retryableStatusCodes":[14]}}]}`, true, ""},
	{"empty retryableStatusCodes", `{"methodConfig":[{"name":[{"service":"a.B"}],"retryPolicy":{"maxAttempts":3,"initialBackoff":"1s","maxBackoff":"1s","backoffMultiplier":1,"retryableStatusCodes":[]}}]}`, true, diffDropsBadRetry},
	{"duration without s", `{"methodConfig":[{"name":[{"service":"a.B"}],"retryPolicy":{"maxAttempts":3,"initialBackoff":"1","maxBackoff":"1s","backoffMultiplier":1,"retryableStatusCodes":[14]}}]}`, false, ""},
	{"duration a number", `{"methodConfig":[{"name":[{"service":"a.B"}],"timeout":1}]}`, false, ""},
	{"timeout without s", `{"methodConfig":[{"name":[{"service":"a.B"}],"timeout":"10"}]}`, false, ""},
	{"timeout 9 decimals", `{"methodConfig":[{"name":[{"service":"a.B"}],"timeout":"1.000000001s"}]}`, true, ""},
	{"timeout negative", `{"methodConfig":[{"name":[{"service":"a.B"}],"timeout":"-1s"}]}`, true, ""},
	{"Go duration 100ms", `{"methodConfig":[{"name":[{"service":"a.B"}],"retryPolicy":{"maxAttempts":3,"initialBackoff":"100ms","maxBackoff":"1s","backoffMultiplier":1,"retryableStatusCodes":[14]}}]}`, false, diffExtensions},
	{"Go duration 1m timeout", `{"methodConfig":[{"name":[{"service":"a.B"}],"timeout":"1m"}]}`, false, diffExtensions},
	{"10 decimals read as a Go duration", `{"methodConfig":[{"name":[{"service":"a.B"}],"timeout":"1.0000000001s"}]}`, false, diffExtensions},
	{"codes as names and integers", `{"methodConfig":[{"name":[{"service":"a.B"}],"retryPolicy":{"maxAttempts":3,"initialBackoff":"1s","maxBackoff":"1s","backoffMultiplier":1,"retryableStatusCodes":["UNAVAILABLE",8,0,16]}}]}`, true, ""},
	{"code CANCELLED spelled as grpc-go spells it", `{"methodConfig":[{"name":[{"service":"a.B"}],"retryPolicy":{"maxAttempts":3,"initialBackoff":"1s","maxBackoff":"1s","backoffMultiplier":1,"retryableStatusCodes":["CANCELLED"]}}]}`, true, ""},
	{"code CANCELED", `{"methodConfig":[{"name":[{"service":"a.B"}],"retryPolicy":{"maxAttempts":3,"initialBackoff":"1s","maxBackoff":"1s","backoffMultiplier":1,"retryableStatusCodes":["CANCELED"]}}]}`, false, ""},
	{"code 17", `{"methodConfig":[{"name":[{"service":"a.B"}],"retryPolicy":{"maxAttempts":3,"initialBackoff":"1s","maxBackoff":"1s","backoffMultiplier":1,"retryableStatusCodes":[17]}}]}`, false, ""},
	{"code -1", `{"methodConfig":[{"name":[{"service":"a.B"}],"retryPolicy":{"maxAttempts":3,"initialBackoff":"1s","maxBackoff":"1s","backoffMultiplier":1,"retryableStatusCodes":[-1]}}]}`, false, ""},
	{"code as a numeric string", `{"methodConfig":[{"name":[{"service":"a.B"}],"retryPolicy":{"maxAttempts":3,"initialBackoff":"1s","maxBackoff":"1s","backoffMultiplier":1,"retryableStatusCodes":["14"]}}]}`, false, ""},
	{"code null reads as OK", `{"methodConfig":[{"name":[{"service":"a.B"}],"retryPolicy":{"maxAttempts":3,"initialBackoff":"1s","maxBackoff":"1s","backoffMultiplier":1,"retryableStatusCodes":[null]}}]}`, true, ""},
	{"lower-case code", `{"methodConfig":[{"name":[{"service":"a.B"}],"retryPolicy":{"maxAttempts":3,"initialBackoff":"1s","maxBackoff":"1s","backoffMultiplier":1,"retryableStatusCodes":["unavailable"]}}]}`, false, diffExtensions},
	{"mixed-case code", `{"methodConfig":[{"name":[{"service":"a.B"}],"retryPolicy":{"maxAttempts":3,"initialBackoff":"1s","maxBackoff":"1s","backoffMultiplier":1,"retryableStatusCodes":["Unavailable"]}}]}`, false, ""},
	{"mixed-case keys", `{"MethodConfig":[{"NAME":[{"Service":"a.B"}],"RetryPolicy":{"MAXATTEMPTS":3,"initialbackoff":"1s","MaxBackoff":"1s","BackoffMultiplier":1,"RetryableStatusCodes":[14]}}]}`, true, ""},
	{"case variants of one key: the last wins", `{"methodConfig":[{"name":[{"service":"a.B"}],"retryPolicy":{"maxAttempts":1,"MaxAttempts":3,"initialBackoff":"1s","maxBackoff":"1s","backoffMultiplier":1,"retryableStatusCodes":[14]}}]}`, true, ""},
	{"proto field names", `{"method_config":[{"name":[{"service":"a.B"}],"retry_policy":{"max_attempts":3,"initial_backoff":"1s","max_backoff":"1s","backoff_multiplier":1,"retryable_status_codes":[14]}}]}`, true, ""},
	{"proto field name with a bad value", `{"methodConfig":[{"name":[{"service":"a.B"}],"retryPolicy":{"maxAttempts":3,"initialBackoff":"1s","maxBackoff":"1s","backoffMultiplier":1,"retryableStatusCodes":[14],"max_attempts":1}}]}`, true, diffExtensions},
	{"waitForReady not a bool", `{"methodConfig":[{"name":[{"service":"a.B"}],"waitForReady":"yes"}]}`, false, ""},
	{"message sizes", `{"methodConfig":[{"name":[{"service":"a.B"}],"maxRequestMessageBytes":1024,"maxResponseMessageBytes":99999999999999}]}`, true, ""},
	{"message size fractional", `{"methodConfig":[{"name":[{"service":"a.B"}],"maxRequestMessageBytes":1.5}]}`, false, ""},
	{"retry and hedging in one entry", `{"methodConfig":[{"name":[{"service":"a.B"}],` + cfgRetry + `,"hedgingPolicy":{"maxAttempts":3,"hedgingDelay":"0.1s"}}]}`, true, diffRetryAndHedging},
	{"hedging", `{"methodConfig":[{"name":[{"service":"a.B"}],"hedgingPolicy":{"maxAttempts":3,"hedgingDelay":"0.1s","nonFatalStatusCodes":["UNAVAILABLE"]}}]}`, true, ""},
	{"hedging maxAttempts 1", `{"methodConfig":[{"name":[{"service":"a.B"}],"hedgingPolicy":{"maxAttempts":1}}]}`, true, diffExtensions},
	{"hedging delay not a duration", `{"methodConfig":[{"name":[{"service":"a.B"}],"hedgingPolicy":{"maxAttempts":2,"hedgingDelay":5}}]}`, true, diffExtensions},
	{"throttling", `{"methodConfig":[],"retryThrottling":{"maxTokens":10,"tokenRatio":0.1}}`, true, ""},
	{"throttling maxTokens 1000", `{"methodConfig":[],"retryThrottling":{"maxTokens":1000,"tokenRatio":1}}`, true, ""},
	{"throttling maxTokens 1001", `{"methodConfig":[],"retryThrottling":{"maxTokens":1001,"tokenRatio":1}}`, false, ""},
	{"throttling maxTokens 0", `{"methodConfig":[],"retryThrottling":{"maxTokens":0,"tokenRatio":1}}`, false, ""},
	{"throttling tokenRatio 0", `{"methodConfig":[],"retryThrottling":{"maxTokens":10,"tokenRatio":0}}`, false, ""},
	{"throttling tokenRatio 4 decimals", `{"methodConfig":[],"retryThrottling":{"maxTokens":10,"tokenRatio":0.1234}}`, true, ""},
	{"throttling tokenRatio below 0.001", `{"methodConfig":[],"retryThrottling":{"maxTokens":10,"tokenRatio":0.0004}}`, true, diffThrottlingChecked},
	{"throttling tokenRatio 0.0005 (docs/migrating-from-grpc-go.md, difference 1)", `{"methodConfig":[],"retryThrottling":{"maxTokens":10,"tokenRatio":0.0005}}`, true, diffThrottlingChecked},
	{"throttling not an object", `{"retryThrottling":5}`, false, ""},
	{"throttling without methodConfig, valid", `{"retryThrottling":{"maxTokens":10,"tokenRatio":0.1}}`, true, ""},
	{"throttling without methodConfig, maxTokens 0", `{"retryThrottling":{"maxTokens":0,"tokenRatio":0.1}}`, true, diffThrottlingChecked},
	{"throttling without methodConfig, maxTokens 1001", `{"retryThrottling":{"maxTokens":1001,"tokenRatio":0.1}}`, true, diffThrottlingChecked},
	{"unknown top-level key", `{"methodConfg":[]}`, true, ""},
	{"unknown key in retryPolicy", `{"methodConfig":[{"name":[{"service":"a.B"}],"retryPolicy":{"maxAttempts":3,"initialBackoff":"1s","maxBackoff":"1s","backoffMultiplier":1,"retryableStatusCodes":[14],"extra":true}}]}`, true, ""},
	{"retryBudget", `{"retryBudget":{"ratio":{"percent":10,"window":"10s"}}}`, true, ""},
	{"retryBudget token bucket", `{"retryBudget":{"tokenBucket":{"capacity":500,"retryCost":5}}}`, true, ""},
	{"retryBudget bad percent", `{"retryBudget":{"ratio":{"percent":101}}}`, true, diffExtensions},
	{"two budgets", `{"retryThrottling":{"maxTokens":10,"tokenRatio":0.1},"retryBudget":{"ratio":{}}}`, true, diffExtensions},
	{"jitter", `{"methodConfig":[{"name":[{"service":"a.B"}],"retryPolicy":{"maxAttempts":3,"initialBackoff":"1s","maxBackoff":"1s","backoffMultiplier":1,"retryableStatusCodes":[14],"jitter":"FULL","perAttemptRecvTimeout":"1s"}}]}`, true, ""},
	{"jitter unknown", `{"methodConfig":[{"name":[{"service":"a.B"}],"retryPolicy":{"maxAttempts":3,"initialBackoff":"1s","maxBackoff":"1s","backoffMultiplier":1,"retryableStatusCodes":[14],"jitter":"SOME"}}]}`, true, diffExtensions},
	{"idempotent not a bool", `{"methodConfig":[{"name":[{"service":"a.B"}],"idempotent":"yes"}]}`, true, diffExtensions},
	{"loadBalancingConfig round_robin", `{"loadBalancingConfig":[{"round_robin":{}}]}`, true, ""},
	{"loadBalancingConfig unknown then pick_first", `{"loadBalancingConfig":[{"no_such_policy":{}},{"pick_first":{}}]}`, true, ""},
	{"loadBalancingConfig only unknown", `{"loadBalancingConfig":[{"no_such_policy":{}}]}`, false, ""},
	{"loadBalancingConfig two keys", `{"loadBalancingConfig":[{"round_robin":{},"pick_first":{}}]}`, false, ""},
	{"loadBalancingConfig bad pick_first config", `{"loadBalancingConfig":[{"pick_first":{"shuffleAddressList":"x"}}]}`, false, ""},
	{"loadBalancingPolicy unknown", `{"loadBalancingPolicy":"no_such_policy"}`, true, ""},
	{"loadBalancingPolicy not a string", `{"loadBalancingPolicy":1}`, false, ""},
	{"healthCheckConfig", `{"healthCheckConfig":{"serviceName":"x"}}`, true, ""},
	{"healthCheckConfig not an object", `{"healthCheckConfig":[]}`, false, ""},
	{"healthCheckConfig serviceName a number", `{"healthCheckConfig":{"serviceName":1}}`, false, ""},
	{"huge number under an unknown key", `{"x":1e400}`, true, ""},
	{"maxTokens 1e400", `{"methodConfig":[],"retryThrottling":{"maxTokens":1e400,"tokenRatio":1}}`, false, ""},
	{"maxTokens 0.5", `{"methodConfig":[],"retryThrottling":{"maxTokens":0.5,"tokenRatio":1}}`, true, ""},
	{"message size overflows int64", `{"methodConfig":[{"name":[{"service":"a.B"}],"maxRequestMessageBytes":99999999999999999999}]}`, false, ""},
	{"message size negative", `{"methodConfig":[{"name":[{"service":"a.B"}],"maxRequestMessageBytes":-1}]}`, true, ""},
	{"method name with slashes", `{"methodConfig":[{"name":[{"service":"a/B","method":"c/d"}]}]}`, true, ""},
	{"case-variant keys in the name", `{"methodConfig":[{"name":[{"SERVICE":"a.B","Method":"M"}]},{"name":[{"service":"a.B","method":"M"}]}]}`, false, ""},
}

// rowVerdict is what grpc-go at version rejectsBadRetry accepts for a row
// and why stagger differs: from grpcRejectsBadRetry on, grpc-go rejects the
// rows it used to drop silently, and then agrees with stagger.
func rowVerdict(grpcOK bool, diff string, rejectsBadRetry bool) (bool, string) {
	if diff == diffDropsBadRetry && rejectsBadRetry {
		return false, ""
	}
	return grpcOK, diff
}

func TestConformanceWithGRPC(t *testing.T) {
	rejectsBadRetry, err := grpcVersionAtLeast(grpc.Version, grpcRejectsBadRetry)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("grpc-go %s: rejects an invalid retryPolicy = %v", grpc.Version, rejectsBadRetry)
	for _, row := range cfgConformance {
		t.Run(row.name, func(t *testing.T) {
			wantGRPC, diff := rowVerdict(row.grpcOK, row.diff, rejectsBadRetry)
			grpcOK := cfgGRPCAccepts(t, row.doc)
			if grpcOK != wantGRPC {
				t.Fatalf("grpc-go %s accepts = %v, the table says %v: fix the row", grpc.Version, grpcOK, wantGRPC)
			}
			_, err := ParseConfig([]byte(row.doc))
			staggerOK := err == nil
			switch {
			case diff == "" && staggerOK != grpcOK:
				t.Errorf("stagger accepts = %v, grpc-go %s = %v; want the same (err: %v)", staggerOK, grpc.Version, grpcOK, err)
			case diff != "" && staggerOK == grpcOK:
				t.Errorf("stagger accepts = %v like grpc-go %s, but the row says they differ (%s)", staggerOK, grpc.Version, diff)
			}
		})
	}
}

func TestGRPCVersionAtLeast(t *testing.T) {
	for _, tc := range []struct {
		version string
		want    bool
	}{
		{"1.64.1", false}, {"1.69.4", false}, {"1.70.0", true}, {"1.85.0", true},
		{"1.86.0-dev", true}, {"2.0.0", true}, {"0.99.0", false},
	} {
		got, err := grpcVersionAtLeast(tc.version, grpcRejectsBadRetry)
		if err != nil || got != tc.want {
			t.Errorf("grpcVersionAtLeast(%q, 1.70) = %v, %v; want %v", tc.version, got, err, tc.want)
		}
	}
	if _, err := grpcVersionAtLeast("dev", grpcRejectsBadRetry); err == nil {
		t.Error(`grpcVersionAtLeast("dev") = nil error, want one`)
	}
}

// TestConformanceMeaning checks that documents both accept mean the same to
// stagger as to grpc-go where the difference is not in the verdict.
func TestConformanceMeaning(t *testing.T) {
	tests := []struct {
		name, doc, method string
		wantAttempts      int
	}{
		{"mixed-case keys", `{"MethodConfig":[{"NAME":[{"Service":"a.B"}],"RetryPolicy":{"MAXATTEMPTS":3,"initialbackoff":"1s","MaxBackoff":"1s","BackoffMultiplier":1,"RetryableStatusCodes":[14]}}]}`, "/a.B/M", 3},
		{"last case variant wins", `{"methodConfig":[{"name":[{"service":"a.B"}],"retryPolicy":{"maxAttempts":2,"MaxAttempts":4,"initialBackoff":"1s","maxBackoff":"1s","backoffMultiplier":1,"retryableStatusCodes":[14]}}]}`, "/a.B/M", 4},
		{"capped at 5", `{"methodConfig":[{"name":[{"service":"a.B"}],"retryPolicy":{"maxAttempts":6,"initialBackoff":"1s","maxBackoff":"1s","backoffMultiplier":1,"retryableStatusCodes":[14]}}]}`, "/a.B/M", 5},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := ParseConfig([]byte(tt.doc))
			if err != nil {
				t.Fatal(err)
			}
			m := c.Method(tt.method)
			if m == nil || m.Retry == nil || m.Retry.MaxAttempts != tt.wantAttempts {
				t.Fatalf("Method(%q) = %+v, want a retry policy of %d attempts", tt.method, m, tt.wantAttempts)
			}
		})
	}
}

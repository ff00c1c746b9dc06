package policy

import (
	"strings"
	"testing"
)

// TestParseWarnsLongPauses: a backoff or hedging delay longer than what
// bounds its call is a warning naming the tightest bound it passes: the
// entry's timeout, the deferring budget's defer.maxWait (the default
// budget's when the file declares none; not for an entry with a timeout,
// whose calls all have a deadline), or an hour. "99999999999s" (292
// years, saturated) was accepted in silence.
func TestParseWarnsLongPauses(t *testing.T) {
	retry := func(initial, max string) string {
		return `"retryPolicy": {"maxAttempts": 3, "initialBackoff": "` + initial + `", "maxBackoff": "` + max + `", "backoffMultiplier": 2, "retryableStatusCodes": ["UNAVAILABLE"]}`
	}
	entry := func(extra string) string {
		return `{"methodConfig": [{"name": [{"service": "a.S"}], ` + extra + `}]`
	}
	tests := []struct {
		name, doc string
		want      []string
	}{
		{"absurd", entry(retry("99999999999s", "99999999999s")) + "}", []string{
			"methodConfig[0].retryPolicy.initialBackoff: the longest duration (about 292 years) is longer than the default budget's (stagger.DialOptions; the file declares none) defer.maxWait (10s), the longest a call without a deadline is held, and than an hour (a typo?)",
			"methodConfig[0].retryPolicy.maxBackoff: the longest duration (about 292 years) is longer than the default budget's (stagger.DialOptions; the file declares none) defer.maxWait (10s), the longest a call without a deadline is held, and than an hour (a typo?)",
		}},
		{"past the timeout", entry(`"timeout": "2s", `+retry("0.1s", "5s")) + "}", []string{
			"methodConfig[0].retryPolicy.maxBackoff: 5s is longer than the entry's timeout (2s): no attempt can follow such a pause",
		}},
		{"past the file's maxWait", entry(retry("0.1s", "40s")) + `, "retryBudget": {"ratio": {}, "defer": {"maxWait": "30s"}}}`, []string{
			"methodConfig[0].retryPolicy.maxBackoff: 40s is longer than the budget's defer.maxWait (30s), the longest a call without a deadline is held",
		}},
		{"a budget that does not defer", entry(retry("0.1s", "40s")) + `, "retryBudget": {"ratio": {}, "defer": false}}`, nil},
		{"past an hour, a budget that does not defer", entry(retry("0.1s", "2h")) + `, "retryThrottling": {"maxTokens": 10, "tokenRatio": 0.1}}`, []string{
			"methodConfig[0].retryPolicy.maxBackoff: 2h0m0s is longer than an hour (a typo?)",
		}},
		{"a timeout longer than maxWait", entry(`"timeout": "60s", `+retry("0.1s", "30s")) + "}", nil},
		{"hedging past the timeout", entry(`"timeout": "1s", "idempotent": true, "hedgingPolicy": {"maxAttempts": 2, "hedgingDelay": "2s"}`) + "}", []string{
			"methodConfig[0].hedgingPolicy.hedgingDelay: 2s is longer than the entry's timeout (1s): no attempt can follow such a pause",
		}},
		{"hedging past an hour", entry(`"idempotent": true, "hedgingPolicy": {"maxAttempts": 2, "hedgingDelay": "90m"}`) + "}", []string{
			"methodConfig[0].hedgingPolicy.hedgingDelay: 1h30m0s is longer than an hour (a typo?)",
		}},
		{"within every bound", entry(`"timeout": "10s", `+retry("0.1s", "5s")) + "}", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := ParseConfig([]byte(tt.doc), WithProtoFiles(nil))
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, w := range c.Warnings() {
				got = append(got, w.String())
			}
			if strings.Join(got, "\n") != strings.Join(tt.want, "\n") {
				t.Errorf("warnings:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(tt.want, "\n"))
			}
		})
	}
}

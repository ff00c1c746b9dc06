package main

import (
	"encoding/json"
	"strings"
	"testing"
)

// TestCheckWarnsLongPauses: check shows the parser's warning of a backoff
// longer than what bounds its call, placed, in text and JSON, and the file
// stays valid (exit 0: grpc-go accepts it).
func TestCheckWarnsLongPauses(t *testing.T) {
	file := writeTemp(t, `{"methodConfig": [{"name": [{"service": "a.A"}],
  "retryPolicy": {"maxAttempts": 3, "initialBackoff": "99999999999s", "maxBackoff": "99999999999s", "backoffMultiplier": 2, "retryableStatusCodes": ["UNAVAILABLE"]}}]}`)
	want := file + ":2:37: methodConfig[0].retryPolicy.initialBackoff: the longest duration (about 292 years) is longer than the default budget's (stagger.DialOptions; the file declares none) defer.maxWait (10s), the longest a call without a deadline is held, and than an hour (a typo?)"
	code, out, errOut := checkRun(t, "-width", "0", file)
	if code != 0 || !strings.Contains(out, want) || !strings.Contains(out, "retryPolicy.maxBackoff: the longest duration") {
		t.Errorf("exit %d, stderr %s, stdout:\n%s\nwant 0 and\n%s", code, errOut, out, want)
	}
	code, out, _ = checkRun(t, "-format", "json", file)
	var rep checkReport
	if err := json.Unmarshal([]byte(out), &rep); err != nil || code != 0 || !rep.Valid || len(rep.Warnings) < 2 || rep.Warnings[0] != want {
		t.Errorf("JSON: exit %d, %v, warnings %q", code, err, rep.Warnings)
	}
}

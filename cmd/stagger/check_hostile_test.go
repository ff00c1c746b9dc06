package main

import (
	"bytes"
	"encoding/json"
	"io"
	"os"
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

// TestCheckStdin: `stagger check -` reads the document from standard input
// (the only regular-file rule's way around a pipe: `... | stagger check -`),
// places its errors and warnings at <stdin>, and refuses one past the
// 4 MiB bound on a policy file without reading further.
func TestCheckStdin(t *testing.T) {
	defer func(r io.Reader) { stdin = r }(stdin)
	good, err := os.ReadFile(checkExamples + "retry.json")
	if err != nil {
		t.Fatal(err)
	}
	stdin = bytes.NewReader(good)
	code, out, errOut := checkRun(t, "-")
	if code != 0 || !strings.Contains(out, "<stdin>") {
		t.Fatalf("check - of a good file = %d\nstdout:\n%s\nstderr:\n%s", code, out, errOut)
	}
	// The same report as the file's, but for the name.
	_, fromFile, _ := checkRun(t, checkExamples+"retry.json")
	if want := strings.ReplaceAll(fromFile, checkExamples+"retry.json", "<stdin>"); out != want {
		t.Errorf("check - says\n%s\nwant what check FILE says:\n%s", out, want)
	}

	stdin = strings.NewReader("{\n  \"methodConfig\": [{\"name\": [{}], \"retryPolicy\": {\"maxAttempts\": 0}, \"retryPolicyy\": 1}]\n}\n")
	code, out, errOut = checkRun(t, "-")
	if code != 1 || !strings.Contains(errOut, "<stdin>:2:") || !strings.Contains(out, "<stdin>:2:") {
		t.Fatalf("check - of a bad file = %d, want 1 and the error and warning placed at <stdin>:2\nstdout:\n%s\nstderr:\n%s", code, out, errOut)
	}

	big := &countingReader{r: strings.NewReader("{\"methodConfig\": []}" + strings.Repeat(" ", 8<<20))}
	stdin = big
	code, _, errOut = checkRun(t, "-")
	if code != 1 || !strings.Contains(errOut, "over the bound") {
		t.Fatalf("check - of 8 MiB = %d, want 1 and the bound named; stderr:\n%s", code, errOut)
	}
	if big.n > maxStdinBytes+1 {
		t.Errorf("check - read %d bytes of standard input, want at most %d", big.n, maxStdinBytes+1)
	}
}

type countingReader struct {
	r io.Reader
	n int
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += n
	return n, err
}

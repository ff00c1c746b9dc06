package conformance

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
)

// clientEnv, set to a policy name ("" for none), makes the test binary the
// conformance client that connectconformance starts: TestConformanceSuite
// hands it its own binary, so the client runs under the race detector when
// the test does.
const clientEnv = "STAGGER_CONFORMANCE_CLIENT"

func TestMain(m *testing.M) {
	if policyName, ok := os.LookupEnv(clientEnv); ok {
		var stats Stats
		err := Run(context.Background(), os.Stdin, os.Stdout, policyName, 32, &stats)
		if policyName != "" {
			fmt.Fprintf(os.Stderr, "conformance client, policy %q: %s\n", policyName, &stats)
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "conformance client:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	goleak.VerifyTestMain(m)
}

// retriedOnly is the one difference from a case's expected result that a
// run through stagger may show: connectconformance's reference server
// reports every request after a case's first (checks.go, "client sent
// another request"), which is what a retry or a hedge is. Any other line
// in a failed case's report is a result stagger changed.
//
// With it, one more is allowed: the deadline a later request carried was
// shorter than the case's ("server echoed back a timeout (X ms) that did
// not match expected (Y ms)", X below Y). A retry or a hedge carries the
// call's time left when it is sent (gRFC A6, as grpc-go's), and a hedge
// sent after 1 s of a 2 s call carries about 1 s; the suite's 500 ms
// slack is for a call's one request. A longer deadline than the case's,
// or the line without another request, is still a failure.
var retriedOnly = regexp.MustCompile(`^client sent another request \(#\d+\) for the same test case(?:; server echoed back a timeout \((\d+) ms\) that did not match expected \((\d+) ms\))?$`)

// onlyRetried reports whether a failed case's report says no more than
// that the server saw more than one request (retriedOnly), and, if it
// says a deadline differed, that the later request's was the shorter.
func onlyRetried(report []string) bool {
	if len(report) != 1 {
		return false
	}
	m := retriedOnly.FindStringSubmatch(report[0])
	if m == nil {
		return false
	}
	if m[1] == "" {
		return true
	}
	got, err1 := strconv.Atoi(m[1])
	want, err2 := strconv.Atoi(m[2])
	return err1 == nil && err2 == nil && got > 0 && got < want
}

// suiteRun is what one connectconformance run reported.
type suiteRun struct {
	total, passed, failed int
	// failures are the failed cases' reports, by case name.
	failures map[string][]string
	// clientStats is the client's line about what stagger did.
	clientStats string
	took        time.Duration
}

// TestConformanceSuite runs the Connect conformance suite (connectconformance,
// client mode: every case of the default suite, over Connect, gRPC and
// gRPC-Web, HTTP/1.1 and HTTP/2, with and without TLS, proto and JSON,
// identity and gzip) against this package's client three times: without
// stagger, where every case must pass as connect-go's reference client's
// do (its known-failing list is empty), and with the retry and the hedging
// policy (Policies), where each case must end as it expects, the only
// report allowed being that the server saw more than one request (and
// that a later request carried the shorter deadline left: onlyRetried).
// `make conformance` runs it with CONNECTCONFORMANCE naming the binary.
func TestConformanceSuite(t *testing.T) {
	bin := os.Getenv("CONNECTCONFORMANCE")
	if bin == "" {
		t.Skip("CONNECTCONFORMANCE names no connectconformance binary: make conformance runs this test")
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	var cases int
	for _, policyName := range []string{"", "retry", "hedge"} {
		name := policyName
		if name == "" {
			name = "without stagger"
		}
		t.Run(name, func(t *testing.T) {
			run := runSuite(t, bin, self, policyName)
			t.Logf("%d cases in %v: %d passed, %d failed; %s", run.total, run.took.Round(time.Millisecond), run.passed, run.failed, run.clientStats)
			if run.total == 0 {
				t.Fatal("the suite ran no case")
			}
			if cases == 0 {
				cases = run.total
			} else if run.total != cases {
				t.Errorf("%d cases, %d without stagger", run.total, cases)
			}
			retried := 0
			for name, report := range run.failures {
				if policyName != "" && onlyRetried(report) {
					retried++
					continue
				}
				t.Errorf("%s:\n\t%s", name, strings.Join(report, "\n\t"))
			}
			if policyName != "" {
				t.Logf("%d cases were retried or hedged (the server saw more than one request) and ended as expected", retried)
			}
		})
	}
}

// runSuite runs connectconformance in client mode against this test binary
// as the client with policyName, and parses its report.
func runSuite(t *testing.T, bin, self, policyName string) suiteRun {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "--mode", "client", "--", self)
	cmd.Env = append(os.Environ(), clientEnv+"="+policyName)
	cmd.WaitDelay = 10 * time.Second
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	start := time.Now()
	err := cmd.Run()
	run := parseReport(out.String())
	run.took = time.Since(start)
	if err != nil && run.failed == 0 {
		t.Fatalf("connectconformance: %v\n%s", err, out.String())
	}
	if strings.Contains(out.String(), "could not be run") {
		t.Errorf("some cases could not be run:\n%s", out.String())
	}
	return run
}

var (
	failedLine  = regexp.MustCompile(`^FAILED: (.*?):?$`)
	totalLine   = regexp.MustCompile(`^Total cases: (\d+)$`)
	summaryLine = regexp.MustCompile(`^(\d+) passed, (\d+) failed$`)
)

// parseReport reads connectconformance's report: a "FAILED: name:" line
// then the failure's lines, indented by a tab, per failed case; "Total
// cases: N"; "P passed, F failed".
func parseReport(out string) suiteRun {
	run := suiteRun{failures: make(map[string][]string)}
	var current string
	sc := bufio.NewScanner(strings.NewReader(out))
	sc.Buffer(make([]byte, 1<<20), 1<<24)
	for sc.Scan() {
		line := sc.Text()
		if current != "" && strings.HasPrefix(line, "\t") {
			run.failures[current] = append(run.failures[current], strings.TrimPrefix(line, "\t"))
			continue
		}
		current = ""
		switch {
		case failedLine.MatchString(line):
			current = failedLine.FindStringSubmatch(line)[1]
			run.failures[current] = nil
		case totalLine.MatchString(line):
			run.total, _ = strconv.Atoi(totalLine.FindStringSubmatch(line)[1])
		case summaryLine.MatchString(line):
			m := summaryLine.FindStringSubmatch(line)
			run.passed, _ = strconv.Atoi(m[1])
			run.failed, _ = strconv.Atoi(m[2])
		case strings.HasPrefix(line, "conformance client, policy"):
			run.clientStats = line
		}
	}
	return run
}

// TestParseReport: the parser reads connectconformance's report as it is
// printed (a case with two lines, one with the retry note only).
func TestParseReport(t *testing.T) {
	out := "FAILED: Basic/HTTPVersion:1/x/unary/success:\n" +
		"\tclient sent another request (#2) for the same test case\n" +
		"FAILED: Errors/HTTPVersion:2/y/server-stream/error:\n" +
		"\tactual response headers missing \"x-custom-header\"\n" +
		"\tsecond line\n" +
		"conformance client, policy \"retry\": 3 calls\n" +
		"\nTotal cases: 3\n1 passed, 2 failed\n"
	run := parseReport(out)
	if run.total != 3 || run.passed != 1 || run.failed != 2 || len(run.failures) != 2 {
		t.Fatalf("parsed %+v", run)
	}
	if r := run.failures["Basic/HTTPVersion:1/x/unary/success"]; !onlyRetried(r) {
		t.Errorf("retried case: %q", r)
	}
	for line, want := range map[string]bool{
		"client sent another request (#3) for the same test case; server echoed back a timeout (1041 ms) that did not match expected (2000 ms)": true,
		"client sent another request (#2) for the same test case; server echoed back a timeout (2900 ms) that did not match expected (2000 ms)": false,
		"server echoed back a timeout (1041 ms) that did not match expected (2000 ms)":                                                          false,
		"client sent another request (#3) for the same test case; expecting 0 response messages but instead got 1":                              false,
	} {
		if got := onlyRetried([]string{line}); got != want {
			t.Errorf("onlyRetried(%q) = %v, want %v", line, got, want)
		}
	}
	if r := run.failures["Errors/HTTPVersion:2/y/server-stream/error"]; len(r) != 2 {
		t.Errorf("failed case: %q", r)
	}
	if run.clientStats == "" {
		t.Error("no client stats line")
	}
}

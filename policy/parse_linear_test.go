package policy

import (
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"
)

// unknownKeysDoc is a valid file with n unknown keys at its top level.
func unknownKeysDoc(n int, yaml bool) []byte {
	var b strings.Builder
	if yaml {
		b.WriteString("methodConfig: [{name: [{service: a.S}], timeout: 1s}]\n")
		for i := range n {
			fmt.Fprintf(&b, "k%06d: 1\n", i)
		}
		return []byte(b.String())
	}
	b.WriteString(`{"methodConfig": [{"name": [{"service": "a.S"}], "timeout": "1s"}]`)
	for i := range n {
		fmt.Fprintf(&b, `, "k%06d": 1`, i)
	}
	b.WriteString("}")
	return []byte(b.String())
}

// parseTime is the shortest of three parses of doc.
func parseTime(t *testing.T, doc []byte, opts ...ParseOption) time.Duration {
	t.Helper()
	best := time.Duration(1<<63 - 1)
	for range 3 {
		runtime.GC() // the collector's work for the parse is the parse's
		start := time.Now()
		_, _ = ParseConfig(doc, opts...)
		best = min(best, time.Since(start))
	}
	return best
}

// TestParseUnknownKeysLinear: a file of many unknown keys parses in time
// linear in its size (32k took 28.8 s, 16k 6.3 s: each warning placed by a
// scan of its object), and the warnings still name the keys: the first
// maxUnknownKeyReports, then how many more; so do keys given more than
// once.
func TestParseUnknownKeysLinear(t *testing.T) {
	const small, large = 8 << 10, 32 << 10
	for _, yaml := range []bool{false, true} {
		tSmall := parseTime(t, unknownKeysDoc(small, yaml), WithProtoFiles(nil))
		tLarge := parseTime(t, unknownKeysDoc(large, yaml), WithProtoFiles(nil))
		// Linear: 4 times the keys, about 4 times the time (5 to 7 under
		// -race, the collector's share growing with the heap); quadratic
		// is 16. The absolute bound is generous (-race, a loaded machine).
		t.Logf("yaml=%v: %d unknown keys in %v, %d in %v", yaml, small, tSmall, large, tLarge)
		if tLarge > 12*tSmall+50*time.Millisecond || tLarge > 5*time.Second {
			t.Errorf("yaml=%v: %d unknown keys parse in %v, %d in %v: not linear", yaml, small, tSmall, large, tLarge)
		}
	}
	if d := parseTime(t, unknownKeysDoc(large, false), Strict(), WithProtoFiles(nil)); d > 5*time.Second {
		t.Errorf("Strict: %d unknown keys parse in %v", large, d)
	}

	c, err := ParseConfig(unknownKeysDoc(large, false), WithProtoFiles(nil))
	if err != nil {
		t.Fatal(err)
	}
	ws := c.Warnings()
	if len(ws) != maxUnknownKeyReports+1 {
		t.Fatalf("%d warnings, want %d", len(ws), maxUnknownKeyReports+1)
	}
	if w := ws[0]; w.Path != "k000000" || w.Line != 1 || !strings.HasPrefix(w.Message, "unknown key, ignored") {
		t.Errorf("first warning = %+v", w)
	}
	if w := ws[maxUnknownKeyReports-1]; w.Path != fmt.Sprintf("k%06d", maxUnknownKeyReports-1) {
		t.Errorf("last listed warning = %+v", w)
	}
	want := fmt.Sprintf("%d more unknown keys, ignored, not listed (the first %d are)", large-maxUnknownKeyReports, maxUnknownKeyReports)
	if got := ws[maxUnknownKeyReports].String(); got != want {
		t.Errorf("summary = %q, want %q", got, want)
	}
	// Keys given more than once are listed as far, then counted.
	var b strings.Builder
	b.WriteString(`{"methodConfig": [{"name": [{}]`)
	for i := range large {
		fmt.Fprintf(&b, `, "timeout": "%ds"`, i+1)
	}
	b.WriteString(`}]}`)
	if d := parseTime(t, []byte(b.String()), WithProtoFiles(nil)); d > 5*time.Second {
		t.Errorf("%d repeated keys parse in %v", large, d)
	}
	c, err = ParseConfig([]byte(b.String()), WithProtoFiles(nil))
	if err != nil {
		t.Fatal(err)
	}
	ws = c.Warnings()
	want = fmt.Sprintf("%d more keys given more than once, not listed (the first %d are)", large-1-maxUnknownKeyReports, maxUnknownKeyReports)
	if len(ws) != maxUnknownKeyReports+1 || ws[maxUnknownKeyReports].String() != want {
		t.Errorf("%d warnings, the last %v; want %d, the last %q", len(ws), ws[len(ws)-1], maxUnknownKeyReports+1, want)
	}
	if got := c.Method("/a.S/M").Timeout; got != large*time.Second {
		t.Errorf("timeout %v, want the last one, %v", got, large*time.Second)
	}

	_, err = ParseConfig(unknownKeysDoc(large, false), Strict(), WithProtoFiles(nil))
	if err == nil || strings.Count(err.Error(), "\n") != maxUnknownKeyReports || !strings.Contains(err.Error(), fmt.Sprintf("got %d more", large-maxUnknownKeyReports)) {
		t.Errorf("Strict: %d lines, last %q", strings.Count(fmt.Sprint(err), "\n")+1, fmt.Sprint(err)[max(0, len(fmt.Sprint(err))-200):])
	}
}

// TestFoldKey: two keys share a fold key exactly when strings.EqualFold
// holds, so an object's index finds what a scan of its keys finds.
func TestFoldKey(t *testing.T) {
	words := []string{"k", "K", "\u212a", "s", "S", "\u017f", "maxAttempts", "MAXATTEMPTS", "max_attempts", "\xff", "\xfe", "\ufffd", "", "ß", "ẞ", "σ", "ς", "Σ", "ǅ", "ǆ", "Ǆ", "kk", "k\u212a"}
	for _, a := range words {
		for _, b := range words {
			if got, want := foldKey(a) == foldKey(b), strings.EqualFold(a, b); got != want {
				t.Errorf("foldKey(%q) == foldKey(%q) is %v; EqualFold says %v", a, b, got, want)
			}
		}
	}
	// The index and the scan agree on a large object: the last match wins.
	var keys []string
	for i := range fieldIndexMin + 4 {
		keys = append(keys, fmt.Sprintf("x%d", i))
	}
	keys = append(keys, "Timeout", "max_attempts", "TIMEOUT")
	n := &node{kind: nodeObject, keys: keys}
	for i := range keys {
		n.vals = append(n.vals, &node{kind: nodeNumber, s: fmt.Sprint(i)})
	}
	if v := n.field("timeout"); v == nil || v.s != fmt.Sprint(len(keys)-1) {
		t.Errorf("field(timeout) = %+v, want the last", v)
	}
	if v := n.field("maxAttempts", "max_attempts"); v == nil || v.s != fmt.Sprint(len(keys)-2) {
		t.Errorf("field(maxAttempts) = %+v", v)
	}
	if v := n.field("absent"); v != nil {
		t.Errorf("field(absent) = %+v", v)
	}
}

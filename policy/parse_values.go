package policy

import (
	"encoding/json"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
	"unicode"

	"google.golang.org/grpc/codes"
)

// shownValue prints a value of the wrong kind without quotes: "got an object".
type shownValue string

func (s shownValue) String() string { return string(s) }

func (w *walker) fail(path, rule string, v any) {
	if k, ok := w.misspelt[path]; ok && strings.HasPrefix(rule, "is required") {
		rule += fmt.Sprintf(" (the key %q is unknown: did you mean %q?)", k, path[strings.LastIndexByte(path, '.')+1:])
	}
	w.errs = append(w.errs, &FieldError{Path: path, Rule: rule, Value: v})
}

func (w *walker) warn(path, format string, args ...any) {
	w.warns = append(w.warns, Warning{Path: path, Message: fmt.Sprintf(format, args...)})
}

// warnTypo warns of a likely typo (Warning.Typo).
func (w *walker) warnTypo(path, format string, args ...any) {
	w.warn(path, format, args...)
	w.warns[len(w.warns)-1].Typo = true
}

func (w *walker) wrongKind(path, rule string, n *node) {
	var v any
	switch n.kind {
	case nodeString:
		v = n.s
	case nodeNumber:
		v = json.Number(n.s)
	case nodeBool:
		v = n.b
	default:
		v = shownValue(n.kind.String())
	}
	w.fail(path, rule, v)
}

// join names key inside path. A key that is not a plain name (empty, or
// holding a space, a quote or an unprintable character: a file's own
// hostile key) is quoted, so a path and the error or warning holding it
// stay one line: methodConfig[0]."a\nb".
func join(path, key string) string {
	if !plainKey(key) {
		key = strconv.Quote(key)
	}
	if path == "" {
		return key
	}
	return path + "." + key
}

func plainKey(key string) bool {
	if key == "" {
		return false
	}
	for _, r := range key {
		if r == ' ' || r == '"' || !unicode.IsPrint(r) {
			return false
		}
	}
	return true
}

func index(path string, i int) string { return path + "[" + strconv.Itoa(i) + "]" }

// snake turns a lowerCamel key into its proto field name: maxAttempts ->
// max_attempts.
func snake(camel string) string {
	var b strings.Builder
	for _, r := range camel {
		if r >= 'A' && r <= 'Z' {
			b.WriteByte('_')
			r += 'a' - 'A'
		}
		b.WriteRune(r)
	}
	return b.String()
}

// maxUnknownKeyReports bounds the unknown keys a parse reports one by one
// (warnings, or errors under Strict), and the keys given more than once;
// past it they are counted and one report says how many more. A file with
// more is no set of typos, and each such warning is a log line in every
// process that loads the file (Warning.Typo).
const maxUnknownKeyReports = 100

// object checks that n is an object and reports its keys that are not in
// known (unknown keys are warnings, or errors under Strict: the first
// maxUnknownKeyReports of the file, then a count) and keys given twice. It
// returns false, after reporting, when n is not an object. Its work is
// linear in n's keys: each is compared with the few known ones, and
// lookups in n go through its index (node.field).
func (w *walker) object(n *node, path string, known ...string) bool {
	if n.kind != nodeObject {
		w.wrongKind(path, "must be an object", n)
		return false
	}
	snakes := make([]string, len(known))
	for i, kn := range known {
		snakes[i] = snake(kn)
	}
	seen := make(map[string]bool, len(known))
	for _, k := range n.keys {
		name := ""
		for i, kn := range known {
			if strings.EqualFold(k, kn) || strings.EqualFold(k, snakes[i]) {
				name = kn
				break
			}
		}
		if name == "" {
			if w.unknownKeys++; w.unknownKeys > maxUnknownKeyReports {
				continue
			}
			hint, strictRule := "", "must be a known key (Strict)"
			if s := suggestKey(k, known); s != "" {
				hint = fmt.Sprintf(" (did you mean %q?)", s)
				strictRule = fmt.Sprintf("must be a known key (Strict; did you mean %q?)", s)
				if get(n, s) == nil {
					if w.misspelt == nil {
						w.misspelt = map[string]string{}
					}
					w.misspelt[join(path, s)] = k
				}
			}
			switch {
			case w.opts.strict:
				w.fail(join(path, k), strictRule, k)
			case hint != "":
				w.warnTypo(join(path, k), "unknown key, ignored%s", hint)
			default:
				w.warn(join(path, k), "unknown key, ignored%s", hint)
			}
			continue
		}
		if seen[name] {
			if w.repeatedKeys++; w.repeatedKeys <= maxUnknownKeyReports {
				w.warn(join(path, name), "key given more than once; the last one is used")
			}
		}
		seen[name] = true
	}
	return true
}

// unknownKeysUnlisted reports, once the file is walked, the unknown and
// the repeated keys past maxUnknownKeyReports: how many, as one warning
// each (an error under Strict for the unknown ones).
func (w *walker) unknownKeysUnlisted() {
	if more := w.repeatedKeys - maxUnknownKeyReports; more > 0 {
		w.warn("", "%d more keys given more than once, not listed (the first %d are)", more, maxUnknownKeyReports)
	}
	more := w.unknownKeys - maxUnknownKeyReports
	if more <= 0 {
		return
	}
	if w.opts.strict {
		w.fail("", fmt.Sprintf("must hold only known keys (Strict): the first %d unknown keys are listed, not the others", maxUnknownKeyReports), shownValue(fmt.Sprintf("%d more", more)))
		return
	}
	w.warn("", "%d more unknown keys, ignored, not listed (the first %d are)", more, maxUnknownKeyReports)
}

// suggestKey returns the key of known that k most likely misspells: the
// closest by edit distance, ignoring case and '_' (so "max_atempts" finds
// maxAttempts), within 2 edits and a third of its length; "" when none is
// that close.
func suggestKey(k string, known []string) string {
	norm := func(s string) string { return strings.ToLower(strings.ReplaceAll(s, "_", "")) }
	nk := norm(k)
	best, bestD := "", 3
	for _, kn := range known {
		c := norm(kn)
		if d := editDistance(nk, c); d < bestD && 3*d <= len(c) {
			best, bestD = kn, d
		}
	}
	return best
}

// editDistance is the Levenshtein distance between a and b, in bytes.
func editDistance(a, b string) int {
	if len(a) > 64 || len(b) > 64 {
		// Keys that long are no misspelling of ours; spare the work.
		if a == b {
			return 0
		}
		return len(a) + len(b)
	}
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

// get returns the field named camel (or its proto name) of object n; nil when
// absent or null, which the schema treats alike.
func get(n *node, camel string) *node {
	v := n.field(camel, snake(camel))
	if v == nil || v.kind == nodeNull {
		return nil
	}
	return v
}

func (w *walker) str(n *node, path string) (string, bool) {
	if n.kind != nodeString {
		w.wrongKind(path, "must be a string", n)
		return "", false
	}
	return n.s, true
}

func (w *walker) boolean(n *node, path string) (bool, bool) {
	if n.kind != nodeBool {
		w.wrongKind(path, "must be true or false", n)
		return false, false
	}
	return n.b, true
}

// integer reads an integer as encoding/json reads one into an int64: a
// literal with a fraction or an exponent is refused, as grpc-go refuses it.
func (w *walker) integer(n *node, path string) (int64, bool) {
	if n.kind != nodeNumber {
		w.wrongKind(path, "must be an integer", n)
		return 0, false
	}
	i, err := strconv.ParseInt(n.s, 10, 64)
	if err != nil {
		w.fail(path, "must be an integer", json.Number(n.s))
		return 0, false
	}
	return i, true
}

func (w *walker) number(n *node, path string) (float64, bool) {
	if n.kind != nodeNumber {
		w.wrongKind(path, "must be a number", n)
		return 0, false
	}
	f, err := strconv.ParseFloat(n.s, 64)
	if err != nil || math.IsInf(f, 0) {
		w.fail(path, "must be a finite number", json.Number(n.s))
		return 0, false
	}
	return f, true
}

const durationRule = `must be a duration such as "0.1s" (proto3 JSON) or "100ms" (Go)`

// duration reads a proto3 JSON duration ("0.1s"), exactly as grpc-go does, or
// a Go duration ("100ms", a stagger extension).
func (w *walker) duration(n *node, path string) (time.Duration, bool) {
	if n.kind != nodeString {
		w.wrongKind(path, durationRule, n)
		return 0, false
	}
	if d, ok := parseProtoDuration(n.s); ok {
		return d, true
	}
	if d, err := time.ParseDuration(n.s); err == nil {
		return d, true
	}
	w.fail(path, durationRule, n.s)
	return 0, false
}

// parseProtoDuration is grpc-go's reading of a proto3 JSON duration
// (internal/serviceconfig.Duration): "[-]S[.F]s", at most 9 fraction digits,
// saturating at the limits of time.Duration.
func parseProtoDuration(s string) (time.Duration, bool) {
	if !strings.HasSuffix(s, "s") {
		return 0, false
	}
	neg := false
	if s[0] == '-' {
		neg = true
		s = s[1:]
	}
	ss := strings.SplitN(s[:len(s)-1], ".", 3)
	if len(ss) > 2 {
		return 0, false
	}
	hasDigits := false
	var sec, ns int64
	if len(ss[0]) > 0 {
		var err error
		if sec, err = strconv.ParseInt(ss[0], 10, 64); err != nil {
			return 0, false
		}
		if sec > 315_576_000_000 {
			return 0, false
		}
		hasDigits = true
	}
	if len(ss) == 2 && len(ss[1]) > 0 {
		if len(ss[1]) > 9 {
			return 0, false
		}
		var err error
		if ns, err = strconv.ParseInt(ss[1], 10, 64); err != nil {
			return 0, false
		}
		for i := 9; i > len(ss[1]); i-- {
			ns *= 10
		}
		hasDigits = true
	}
	if !hasDigits {
		return 0, false
	}
	if neg {
		sec, ns = -sec, -ns
	}
	const maxSeconds = math.MaxInt64 / int64(time.Second)
	const maxNanosAtMaxSeconds = math.MaxInt64 % int64(time.Second)
	const minSeconds = math.MinInt64 / int64(time.Second)
	const minNanosAtMinSeconds = math.MinInt64 % int64(time.Second)
	switch {
	case sec > maxSeconds || (sec == maxSeconds && ns >= maxNanosAtMaxSeconds):
		return math.MaxInt64, true
	case sec < minSeconds || (sec == minSeconds && ns <= minNanosAtMinSeconds):
		return math.MinInt64, true
	}
	return time.Duration(sec*int64(time.Second) + ns), true
}

// CodeName returns the name gRFC A6 and a policy file give code c:
// "UNAVAILABLE", "DEADLINE_EXCEEDED", "OK", "CANCELLED". The parser accepts
// exactly these names (and their lower-case forms). A code above 16 is
// printed as its number.
func CodeName(c codes.Code) string {
	if c <= 16 {
		return codeNamesByCode[c]
	}
	return strconv.FormatUint(uint64(c), 10)
}

var codeNamesByCode = func() (out [17]string) {
	for name, c := range codeNames {
		out[c] = name
	}
	return out
}()

var codeNames = map[string]codes.Code{
	"OK": codes.OK, "CANCELLED": codes.Canceled, "UNKNOWN": codes.Unknown,
	"INVALID_ARGUMENT": codes.InvalidArgument, "DEADLINE_EXCEEDED": codes.DeadlineExceeded,
	"NOT_FOUND": codes.NotFound, "ALREADY_EXISTS": codes.AlreadyExists,
	"PERMISSION_DENIED": codes.PermissionDenied, "RESOURCE_EXHAUSTED": codes.ResourceExhausted,
	"FAILED_PRECONDITION": codes.FailedPrecondition, "ABORTED": codes.Aborted,
	"OUT_OF_RANGE": codes.OutOfRange, "UNIMPLEMENTED": codes.Unimplemented,
	"INTERNAL": codes.Internal, "UNAVAILABLE": codes.Unavailable,
	"DATA_LOSS": codes.DataLoss, "UNAUTHENTICATED": codes.Unauthenticated,
}

const codeRule = "must be a status code: an upper-case name such as UNAVAILABLE, or an integer 0-16"

// codeSet reads a list of status codes: names as grpc-go reads them
// ("UNAVAILABLE"), lower-case names (a stagger extension) and integers 0-16.
func (w *walker) codeSet(n *node, path string) (CodeSet, int, bool) {
	if n.kind != nodeArray {
		w.wrongKind(path, "must be an array of status codes", n)
		return 0, 0, false
	}
	var set CodeSet
	ok := true
	for i, e := range n.arr {
		p := index(path, i)
		switch e.kind {
		case nodeNumber:
			u, err := strconv.ParseUint(e.s, 10, 32)
			if err != nil || u > 16 {
				w.fail(p, codeRule, json.Number(e.s))
				ok = false
				continue
			}
			set |= 1 << u
		case nodeString:
			c, found := codeNames[e.s]
			if !found {
				c, found = codeNames[strings.ToUpper(e.s)]
			}
			if !found || strings.ToLower(e.s) != e.s && strings.ToUpper(e.s) != e.s {
				w.fail(p, codeRule, e.s)
				ok = false
				continue
			}
			set |= 1 << c
		case nodeNull:
			// grpc-go's codes.Code reads null as a no-op: code 0, OK.
			set |= 1 << codes.OK
		default:
			w.wrongKind(p, codeRule, e)
			ok = false
		}
	}
	return set, len(n.arr), ok
}

package policy

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"unicode"

	yaml "go.yaml.in/yaml/v3"
)

// A policy file is first read into a tree of nodes that keeps the order of
// object keys, so that repeated keys resolve as encoding/json resolves them
// (the last one wins, case-insensitively) and grpc-go and stagger read the
// same value. JSON and YAML both land in this tree; the schema is then walked
// once, whatever the syntax.

type nodeKind uint8

const (
	nodeNull nodeKind = iota
	nodeBool
	nodeNumber
	nodeString
	nodeArray
	nodeObject
)

var nodeKindNames = [...]string{"null", "a boolean", "a number", "a string", "an array", "an object"}

func (k nodeKind) String() string { return nodeKindNames[k] }

type node struct {
	// line and col place the value in the document, from 1 (col counts
	// bytes); 0 when unknown.
	line, col int
	// keyLine and keyCol place the key that names the value in its
	// object; 0 for an array's element or the root.
	keyLine, keyCol int
	kind            nodeKind
	b               bool
	s               string // a string's value, or a number's literal
	arr             []*node
	keys            []string
	vals            []*node
	// index maps the fold key (foldKey) of each of a large object's keys
	// to the last place it holds, built by field on first use.
	index map[string]int
}

// fieldIndexMin is the number of keys past which field looks keys up in
// an index rather than comparing each: a file's objects hold a handful,
// and a file of thousands of keys in one object must not cost a scan per
// lookup (one per warning placed: quadratic).
const fieldIndexMin = 16

// maxTreeDepth matches encoding/json's nesting limit, so a document grpc-go
// can decode is never refused for its depth.
const maxTreeDepth = 10000

// maxYAMLNodes bounds the tree built from YAML aliases, so a small file of
// nested aliases ("billion laughs") cannot exhaust memory.
const maxYAMLNodes = 1 << 20

var errTooDeep = errors.New("policy: document nested too deeply")

// decodeJSON reads one JSON value and nothing after it, as json.Unmarshal
// does. Its errors are *SyntaxError, placed at the byte that broke the
// syntax.
func decodeJSON(data []byte) (*node, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	r := &jsonReader{dec: dec, data: data}
	n, err := r.read(0)
	if err == nil {
		if _, err = dec.Token(); err == io.EOF {
			return n, nil
		} else if err == nil {
			err = errors.New("data after the top-level value")
		}
	}
	return nil, jsonSyntaxError(data, dec, err)
}

// jsonSyntaxError places err in data. A Decoder's offsets are relative to
// what it buffered, so the document is checked again by json.Unmarshal,
// whose *json.SyntaxError counts the bytes read, the bad one included; else
// the error is placed where the decoder stopped.
func jsonSyntaxError(data []byte, dec *json.Decoder, err error) error {
	var v any
	var se *json.SyntaxError
	if errors.As(json.Unmarshal(data, &v), &se) {
		off := int(se.Offset) - 1
		msg := se.Error()
		if off >= 0 && off < len(data) && (data[off] == '}' || data[off] == ']') {
			// The commonest slip: a comma after the last element.
			before := bytes.TrimRight(data[:off], " \t\r\n")
			if len(before) > 0 && before[len(before)-1] == ',' {
				comma := newSyntaxError("JSON", data, len(before)-1, "")
				msg += fmt.Sprintf(" (JSON allows no comma before %q: remove the one at line %d, column %d)", data[off], comma.Line, comma.Column)
			}
		}
		return newSyntaxError("JSON", data, off, msg)
	}
	return newSyntaxError("JSON", data, int(dec.InputOffset()), err.Error())
}

// newSyntaxError is a *SyntaxError at byte offset off of data.
func newSyntaxError(format string, data []byte, off int, msg string) *SyntaxError {
	off = max(0, min(off, len(data)))
	line := 1 + bytes.Count(data[:off], []byte("\n"))
	col := off - bytes.LastIndexByte(data[:off], '\n')
	return &SyntaxError{Format: format, Line: line, Column: col, Msg: msg}
}

// jsonReader reads a JSON document into nodes, placing each.
type jsonReader struct {
	dec  *json.Decoder
	data []byte
	// line and lineStart are the line of the last value placed and the
	// offset where it starts: values come in order, so placing one only
	// counts the newlines since the last.
	line, lineStart, scanned int
}

// place returns the line and column of the next token: the first byte at
// or after the decoder's offset that is not space, ':' or ','.
func (r *jsonReader) place() (line, col int) {
	off := int(r.dec.InputOffset())
	for off < len(r.data) {
		c := r.data[off]
		if c != ' ' && c != '\t' && c != '\r' && c != '\n' && c != ':' && c != ',' {
			break
		}
		off++
	}
	if r.line == 0 {
		r.line = 1
	}
	for ; r.scanned < off && r.scanned < len(r.data); r.scanned++ {
		if r.data[r.scanned] == '\n' {
			r.line++
			r.lineStart = r.scanned + 1
		}
	}
	return r.line, off - r.lineStart + 1
}

func (r *jsonReader) read(depth int) (*node, error) {
	if depth > maxTreeDepth {
		return nil, errTooDeep
	}
	line, col := r.place()
	n, err := r.readValue(depth)
	if n != nil {
		n.line, n.col = line, col
	}
	return n, err
}

func (r *jsonReader) readValue(depth int) (*node, error) {
	dec := r.dec
	tok, err := dec.Token()
	if err != nil {
		if err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		return nil, err
	}
	switch t := tok.(type) {
	case nil:
		return &node{kind: nodeNull}, nil
	case bool:
		return &node{kind: nodeBool, b: t}, nil
	case json.Number:
		return &node{kind: nodeNumber, s: string(t)}, nil
	case string:
		return &node{kind: nodeString, s: t}, nil
	case json.Delim:
		switch t {
		case '[':
			n := &node{kind: nodeArray}
			for dec.More() {
				v, err := r.read(depth + 1)
				if err != nil {
					return nil, err
				}
				n.arr = append(n.arr, v)
			}
			if _, err := dec.Token(); err != nil { // ']'
				return nil, err
			}
			return n, nil
		case '{':
			n := &node{kind: nodeObject}
			for dec.More() {
				kl, kc := r.place()
				kt, err := dec.Token()
				if err != nil {
					return nil, err
				}
				k, ok := kt.(string)
				if !ok {
					return nil, fmt.Errorf("object key is %v, not a string", kt)
				}
				v, err := r.read(depth + 1)
				if err != nil {
					return nil, err
				}
				v.keyLine, v.keyCol = kl, kc
				n.keys = append(n.keys, k)
				n.vals = append(n.vals, v)
			}
			if _, err := dec.Token(); err != nil { // '}'
				return nil, err
			}
			return n, nil
		}
	}
	return nil, fmt.Errorf("unexpected token %v", tok)
}

// decodeYAML reads one YAML document into the same tree as JSON: scalars keep
// their YAML type (3 is a number, "3" and 0.1s are strings). Its errors are
// *SyntaxError.
func decodeYAML(data []byte) (*node, error) {
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return nil, yamlSyntaxError(data, err)
	}
	if doc.Kind == 0 || (doc.Kind == yaml.DocumentNode && len(doc.Content) == 0) {
		return nil, errors.New("policy: empty policy file")
	}
	budget := maxYAMLNodes
	n, err := fromYAML(&doc, 0, &budget)
	if err != nil {
		var se *SyntaxError
		if !errors.As(err, &se) {
			se = &SyntaxError{Format: "YAML", Msg: err.Error()}
		}
		return nil, se
	}
	return n, nil
}

// yamlLineError is yaml's "yaml: line 3: did not find expected key".
var yamlLineError = regexp.MustCompile(`^line (\d+): (.*)$`)

// yamlSyntaxError places a YAML syntax error on its line. go.yaml.in/yaml/v3
// reports the line where the enclosing block or flow began (line 1 for a key
// mis-indented on line 5), and one line early for some errors; the line that
// broke the syntax is the shortest prefix of the document that fails with
// the same message, found by bisection (a handful of parses). yaml gives no
// column, so Column is 0.
func yamlSyntaxError(data []byte, err error) *SyntaxError {
	reported, msg := yamlMessage(err)
	lines := bytes.SplitAfter(data, []byte("\n"))
	failsAt := func(n int) bool {
		var doc yaml.Node
		err := yaml.Unmarshal(bytes.Join(lines[:n], nil), &doc)
		if err == nil {
			return false
		}
		_, m := yamlMessage(err)
		return m == msg
	}
	line := sort.Search(len(lines), func(i int) bool { return failsAt(i + 1) }) + 1
	if line > len(lines) {
		line = reported
	}
	return &SyntaxError{Format: "YAML", Line: line, Msg: msg + yamlHint(msg, lines, line)}
}

// yamlHint says what usually causes yaml's terser messages.
func yamlHint(msg string, lines [][]byte, line int) string {
	switch {
	case msg == "did not find expected key" || msg == "did not find expected '-' indicator":
		return " (is the line indented like the keys or items it belongs with?)"
	case msg == "found character that cannot start any token" && line >= 1 && line <= len(lines) && bytes.ContainsRune(lines[line-1], '\t'):
		return " (a tab: YAML indents with spaces only)"
	case msg == "mapping values are not allowed in this context":
		return ` (a value holding ": " needs quotes)`
	}
	return ""
}

// yamlMessage splits yaml's "yaml: line 3: did not find expected key" into
// the line it names (0 when none) and the message.
func yamlMessage(err error) (line int, msg string) {
	msg = strings.TrimPrefix(err.Error(), "yaml: ")
	if m := yamlLineError.FindStringSubmatch(msg); m != nil {
		line, _ = strconv.Atoi(m[1])
		msg = m[2]
	}
	return line, msg
}

func fromYAML(y *yaml.Node, depth int, budget *int) (*node, error) {
	if depth > maxTreeDepth {
		return nil, errTooDeep
	}
	if *budget--; *budget < 0 {
		return nil, errors.New("document too large once its aliases are expanded")
	}
	switch y.Kind {
	case yaml.DocumentNode:
		if len(y.Content) == 0 {
			return &node{kind: nodeNull}, nil
		}
		return fromYAML(y.Content[0], depth+1, budget)
	case yaml.AliasNode:
		if y.Alias == nil {
			return nil, &SyntaxError{Format: "YAML", Line: y.Line, Column: y.Column, Msg: "unknown alias"}
		}
		return fromYAML(y.Alias, depth+1, budget)
	case yaml.SequenceNode:
		n := &node{kind: nodeArray, line: y.Line, col: y.Column}
		for _, c := range y.Content {
			v, err := fromYAML(c, depth+1, budget)
			if err != nil {
				return nil, err
			}
			n.arr = append(n.arr, v)
		}
		return n, nil
	case yaml.MappingNode:
		n := &node{kind: nodeObject, line: y.Line, col: y.Column}
		for i := 0; i+1 < len(y.Content); i += 2 {
			kn := y.Content[i]
			if kn.Kind == yaml.AliasNode && kn.Alias != nil {
				kn = kn.Alias
			}
			if kn.Kind != yaml.ScalarNode {
				return nil, &SyntaxError{Format: "YAML", Line: kn.Line, Column: kn.Column, Msg: "a key must be a scalar"}
			}
			v, err := fromYAML(y.Content[i+1], depth+1, budget)
			if err != nil {
				return nil, err
			}
			v.keyLine, v.keyCol = kn.Line, kn.Column
			n.keys = append(n.keys, kn.Value)
			n.vals = append(n.vals, v)
		}
		return n, nil
	case yaml.ScalarNode:
		n, err := yamlScalar(y)
		if n != nil {
			n.line, n.col = y.Line, y.Column
		}
		return n, err
	}
	return nil, &SyntaxError{Format: "YAML", Line: y.Line, Column: y.Column, Msg: "unsupported YAML node"}
}

func yamlScalar(y *yaml.Node) (*node, error) {
	switch y.ShortTag() {
	case "!!null":
		return &node{kind: nodeNull}, nil
	case "!!bool":
		var b bool
		if err := y.Decode(&b); err != nil {
			return nil, err
		}
		return &node{kind: nodeBool, b: b}, nil
	case "!!int":
		// YAML ints may be written 0x1f, 0o17 or 1_000: keep the value, in
		// the decimal form the JSON schema walker expects.
		var i int64
		if err := y.Decode(&i); err == nil {
			return &node{kind: nodeNumber, s: strconv.FormatInt(i, 10)}, nil
		}
		var u uint64
		if err := y.Decode(&u); err == nil {
			return &node{kind: nodeNumber, s: strconv.FormatUint(u, 10)}, nil
		}
		return &node{kind: nodeNumber, s: y.Value}, nil
	case "!!float":
		var f float64
		if err := y.Decode(&f); err != nil {
			return nil, err
		}
		if math.IsInf(f, 0) || math.IsNaN(f) {
			return nil, &SyntaxError{Format: "YAML", Line: y.Line, Column: y.Column, Msg: y.Value + " is not a finite number"}
		}
		lit := strings.ReplaceAll(y.Value, "_", "")
		if _, err := strconv.ParseFloat(lit, 64); err != nil {
			lit = strconv.FormatFloat(f, 'g', -1, 64)
		}
		return &node{kind: nodeNumber, s: lit}, nil
	}
	return &node{kind: nodeString, s: y.Value}, nil
}

// looksLikeJSON reports whether data is meant as JSON: its first non-space
// byte opens an object or an array. Such a document is read as strict JSON,
// exactly as grpc-go reads it, never as a YAML flow mapping.
func looksLikeJSON(data []byte) bool {
	t := bytes.TrimLeft(data, " \t\r\n")
	t = bytes.TrimPrefix(t, []byte("\xef\xbb\xbf"))
	return len(t) > 0 && (t[0] == '{' || t[0] == '[')
}

// field returns the value of key in object n, matching keys as encoding/json
// does (case-insensitively, the last match winning) and also by the proto
// field name; nil when absent.
func (n *node) field(names ...string) *node {
	if len(n.keys) > fieldIndexMin {
		if n.index == nil {
			n.index = make(map[string]int, len(n.keys))
			for i, k := range n.keys {
				n.index[foldKey(k)] = i
			}
		}
		last := -1
		for _, name := range names {
			if i, ok := n.index[foldKey(name)]; ok && i > last {
				last = i
			}
		}
		if last < 0 {
			return nil
		}
		return n.vals[last]
	}
	for i := len(n.keys) - 1; i >= 0; i-- {
		for _, name := range names {
			if strings.EqualFold(n.keys[i], name) {
				return n.vals[i]
			}
		}
	}
	return nil
}

// foldKey returns the key two strings share exactly when strings.EqualFold
// holds between them: each rune replaced by the least rune of its case
// folding orbit (unicode.SimpleFold), as "K", "k" and the Kelvin sign
// all become "K".
func foldKey(s string) string {
	var b strings.Builder
	b.Grow(len(s))
	for _, r := range s {
		least := r
		for f := unicode.SimpleFold(r); f != r; f = unicode.SimpleFold(f) {
			least = min(least, f)
		}
		b.WriteRune(least)
	}
	return b.String()
}

// place returns where the problem at path sits in the document: the key
// that names the value at path, or the value itself when no key names it
// (an array's element, the root), or the object that lacks a required key.
func place(root *node, path string) (line, col int) {
	n := locate(root, path)
	if n == nil {
		return 0, 0
	}
	if n.keyLine > 0 && locatedByKey(root, n, path) {
		return n.keyLine, n.keyCol
	}
	return n.line, n.col
}

// locatedByKey reports whether locate reached n through path's last key,
// not stopped short of it (a missing key places at its object, whose own
// key is not the one at fault).
func locatedByKey(root, n *node, path string) bool {
	last := path[strings.LastIndexAny(path, ".]")+1:]
	if last == "" || strings.HasSuffix(path, "]") {
		return false
	}
	parent := root
	if i := strings.LastIndexByte(path, '.'); i >= 0 {
		parent = locate(root, path[:i])
	}
	return parent != nil && parent.kind == nodeObject && parent.field(last, snake(last)) == n
}

// locate returns the node at path ("methodConfig[0].retryPolicy.maxAttempts",
// keys matched as field matches them), or the deepest node on the way when
// the path leads nowhere (a required key missing: its object).
func locate(root *node, path string) *node {
	n := root
	for path != "" && n != nil {
		var part string
		part, path, _ = strings.Cut(path, ".")
		key, rest, _ := strings.Cut(part, "[")
		if key != "" {
			if n.kind != nodeObject {
				return n
			}
			v := n.field(key, snake(key))
			if v == nil {
				return n
			}
			n = v
		}
		for rest != "" {
			var idx string
			idx, rest, _ = strings.Cut(rest, "]")
			rest = strings.TrimPrefix(rest, "[")
			i, err := strconv.Atoi(idx)
			if err != nil || n.kind != nodeArray || i < 0 || i >= len(n.arr) {
				return n
			}
			n = n.arr[i]
		}
	}
	return n
}

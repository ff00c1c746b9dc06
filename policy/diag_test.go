package policy

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/descriptorpb"
)

// TestSyntaxErrorPlaces: a document that is not JSON or YAML is reported at
// the line (and, for JSON, the column) of the mistake. JSON errors once had
// no place at all, and YAML's named the line where the enclosing block began
// (line 1 for a key mis-indented on line 5).
func TestSyntaxErrorPlaces(t *testing.T) {
	tests := []struct {
		doc, want string
	}{
		{"{\n  \"methodConfig\": [\n    {\"name\": [{\"service\": \"a\"}],, }\n  ]\n}",
			`policy: invalid JSON at line 3, column 33: invalid character ',' looking for beginning of object key string`},
		{"{\n  \"a\": 1\n  \"b\": 2\n}",
			`policy: invalid JSON at line 3, column 3: invalid character '"' after object key:value pair`},
		{"{\n  \"a\": [1, 2,\n  ]\n}", `policy: invalid JSON at line 3, column 3: invalid character ']' looking for beginning of value (JSON allows no comma before ']': remove the one at line 2, column 13)`},
		{"{\"a\": 1} x", `policy: invalid JSON at line 1, column 10: invalid character 'x' after top-level value`},
		{"{\n  \"a\": [1, 2\n", `policy: invalid JSON at line 2, column 13: unexpected end of JSON input`},
		{"methodConfig:\n  - name: [{service: a.S}]\n    retryPolicy: {maxAttempts: 3\n",
			`policy: invalid YAML at line 3: did not find expected ',' or '}'`},
		{"methodConfig:\n  - name: [{service: a.S}]\n   retryPolicy: {}\n",
			`policy: invalid YAML at line 3: did not find expected '-' indicator (is the line indented like the keys or items it belongs with?)`},
		{"methodConfig:\n  - name: [{service: a.S}]\n    retryPolicy:\n      maxAttempts: 3\n     initialBackoff: 1s\n",
			`policy: invalid YAML at line 5: did not find expected key (is the line indented like the keys or items it belongs with?)`},
		{"a: 1\nb:\n\t- 1\n", `policy: invalid YAML at line 3: found character that cannot start any token (a tab: YAML indents with spaces only)`},
		{"a: 1\nb: .inf\n", `policy: invalid YAML at line 2, column 4: .inf is not a finite number`},
	}
	for _, tt := range tests {
		_, err := ParseConfig([]byte(tt.doc))
		var se *SyntaxError
		if !errors.As(err, &se) || err.Error() != tt.want {
			t.Errorf("ParseConfig(%q):\n got %v\nwant %s", tt.doc, err, tt.want)
		}
	}
	// A file's errors name it, as compilers do: file:line:col.
	dir := t.TempDir()
	for name, doc := range map[string]string{
		"retry.json": "{\n  \"methodConfig\": [\n    {\"name\": [{\"service\": \"a\"}],, }\n  ]\n}",
		"retry.yaml": "methodConfig:\n  - name: [{service: a.S}]\n   retryPolicy: {}\n",
	} {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, []byte(doc), 0o600); err != nil {
			t.Fatal(err)
		}
		want := map[string]string{
			"retry.json": "policy: " + path + ":3:33: invalid JSON: invalid character ',' looking for beginning of object key string",
			"retry.yaml": "policy: " + path + ":3: invalid YAML: did not find expected '-' indicator (is the line indented like the keys or items it belongs with?)",
		}[name]
		if _, err := LoadFile(path); err == nil || err.Error() != want {
			t.Errorf("LoadFile(%s):\n got %v\nwant %s", name, err, want)
		}
	}
}

// TestUnknownKeySuggestions: an unknown key names the known key it most
// likely misspells, and a required key that is missing because it was
// misspelt says so, with or without Strict (it once said only "is
// required").
func TestUnknownKeySuggestions(t *testing.T) {
	doc := `{"methodConfig": [{"name": [{"service": "a.S"}], "retryPolicy": {"maxAtempts": 3, "initial_backof": "1s", "maxBackoff": "1s",
	  "BackoffMultiplier": 2, "retryableStatusCodes": ["UNAVAILABLE"], "jiter": "FULL", "colour": 1}}]}`
	_, err := ParseConfig([]byte(doc))
	wantErrs := []string{
		`policy: methodConfig[0].retryPolicy.maxAttempts: is required (the key "maxAtempts" is unknown: did you mean "maxAttempts"?), got nothing`,
		`policy: methodConfig[0].retryPolicy.initialBackoff: is required (the key "initial_backof" is unknown: did you mean "initialBackoff"?), got nothing`,
	}
	if got := parseErrLines(t, err); !equalLines(got, wantErrs) {
		t.Errorf("errors:\n%s\nwant:\n%s", join2(got), join2(wantErrs))
	}
	fixed := `{"methodConfig": [{"name": [{"service": "a.S"}], "retryPolicy": {"maxAttempts": 3, "maxAtempts": 3, "initialBackoff": "1s", "maxBackoff": "1s",
	  "backoffMultiplier": 2, "retryableStatusCodes": ["UNAVAILABLE"], "jiter": "FULL", "colour": 1}}]}`
	c := parseMust(t, fixed, WithProtoFiles(nil))
	var got []string
	for _, w := range c.Warnings() {
		got = append(got, w.String())
	}
	want := []string{
		`methodConfig[0].retryPolicy.maxAtempts: unknown key, ignored (did you mean "maxAttempts"?)`,
		`methodConfig[0].retryPolicy.jiter: unknown key, ignored (did you mean "jitter"?)`,
		`methodConfig[0].retryPolicy.colour: unknown key, ignored`,
	}
	if !equalLines(got, want) {
		t.Errorf("warnings:\n%s\nwant:\n%s", join2(got), join2(want))
	}
	_, err = ParseConfig([]byte(doc), Strict())
	if got := join2(parseErrLines(t, err)); !strings.Contains(got, `maxAttempts: is required (the key "maxAtempts" is unknown: did you mean "maxAttempts"?)`) ||
		!strings.Contains(got, `methodConfig[0].retryPolicy.jiter: must be a known key (Strict; did you mean "jitter"?), got "jiter"`) {
		t.Errorf("Strict:\n%s", got)
	}
}

func TestSuggestKey(t *testing.T) {
	known := []string{"maxAttempts", "initialBackoff", "maxBackoff", "backoffMultiplier", "retryableStatusCodes", "jitter", "perAttemptRecvTimeout"}
	for k, want := range map[string]string{
		"maxAtempts": "maxAttempts", "max_atempts": "maxAttempts", "MAXATTEMPT": "maxAttempts", "maxBackof": "maxBackoff",
		"retryableStatusCode": "retryableStatusCodes", "retriableStatusCodes": "retryableStatusCodes", "jitters": "jitter",
		"colour": "", "x": "", "max": "", "attempts": "", strings.Repeat("a", 1000): "",
	} {
		if got := suggestKey(k, known); got != want {
			t.Errorf("suggestKey(%q) = %q, want %q", k, got, want)
		}
	}
}

func equalLines(a, b []string) bool { return join2(a) == join2(b) }

func join2(lines []string) string { return strings.Join(lines, "\n") }

// grpcTestingFiles is a descriptor set as `protoc --descriptor_set_out`
// writes one, declaring grpc.testing.TestService (grpc-go's interop
// service), which this program does not link.
func grpcTestingFiles(t *testing.T) *protoregistry.Files {
	t.Helper()
	fd := &descriptorpb.FileDescriptorProto{
		Name:        proto.String("grpc/testing/test.proto"),
		Package:     proto.String("grpc.testing"),
		Syntax:      proto.String("proto3"),
		MessageType: []*descriptorpb.DescriptorProto{{Name: proto.String("SimpleRequest")}},
		Service: []*descriptorpb.ServiceDescriptorProto{{
			Name: proto.String("TestService"),
			Method: []*descriptorpb.MethodDescriptorProto{
				{Name: proto.String("UnaryCall"), InputType: proto.String(".grpc.testing.SimpleRequest"), OutputType: proto.String(".grpc.testing.SimpleRequest")},
			},
		}},
	}
	files, err := protodesc.NewFiles(&descriptorpb.FileDescriptorSet{File: []*descriptorpb.FileDescriptorProto{fd}})
	if err != nil {
		t.Fatal(err)
	}
	return files
}

// TestNameCheck: a service or method that the proto files do not declare is
// warned about, with the name likely meant when one differs only by package
// or case (a name without its package once matched nothing, silently).
func TestNameCheck(t *testing.T) {
	const ts = "stagger.testing.v1.TestService"
	entry := func(svc, meth string) string {
		name := `{"service": "` + svc + `"`
		if meth != "" {
			name += `, "method": "` + meth + `"`
		}
		return `{"methodConfig": [{"name": [` + name + `}], "timeout": "1s"}]}`
	}
	tests := []struct {
		svc, meth string
		opts      []ParseOption
		want      string // "" for no warning
	}{
		{ts, "", nil, ""},
		{ts, "Get", nil, ""},
		{"TestService", "", nil, `methodConfig[0].name[0].service: service "TestService" is not declared in the known proto files; did you mean "stagger.testing.v1.TestService"? (a service is named with its proto package)`},
		{"stagger.testing.v1.testservice", "Get", nil, `methodConfig[0].name[0].service: service "stagger.testing.v1.testservice" is not declared in the known proto files; did you mean "stagger.testing.v1.TestService"? (a service is named with its proto package)`},
		{"nobody.Knows", "", nil, `methodConfig[0].name[0].service: service "nobody.Knows" is not declared in the known proto files (no mistake if the program registers it later; WithProtoFiles(nil) turns this check off)`},
		{ts, "get", nil, `methodConfig[0].name[0].method: method "get" is not a method of stagger.testing.v1.TestService; did you mean "Get"?`},
		{ts, "Gett", nil, `methodConfig[0].name[0].method: method "Gett" is not a method of stagger.testing.v1.TestService; did you mean "Get"?`},
		{ts, "Nothing", nil, `methodConfig[0].name[0].method: method "Nothing" is not a method of stagger.testing.v1.TestService`},
		{"TestService", "", []ParseOption{WithProtoFiles(nil)}, ""},
		{"TestService", "", []ParseOption{WithProtoFiles((*protoregistry.Files)(nil))}, ""},
		// Files from a descriptor set replace the linked ones.
		{"TestService", "", []ParseOption{WithProtoFiles(grpcTestingFiles(t))}, `methodConfig[0].name[0].service: service "TestService" is not declared in the known proto files; did you mean "grpc.testing.TestService"? (a service is named with its proto package)`},
		{"grpc.testing.TestService", "unaryCall", []ParseOption{WithProtoFiles(grpcTestingFiles(t))}, `methodConfig[0].name[0].method: method "unaryCall" is not a method of grpc.testing.TestService; did you mean "UnaryCall"?`},
		{ts, "", []ParseOption{WithProtoFiles(grpcTestingFiles(t))}, `methodConfig[0].name[0].service: service "stagger.testing.v1.TestService" is not declared in the known proto files; did you mean "grpc.testing.TestService"? (a service is named with its proto package)`},
	}
	for _, tt := range tests {
		c := parseMust(t, entry(tt.svc, tt.meth), tt.opts...)
		var got []string
		for _, w := range c.Warnings() {
			got = append(got, w.String())
		}
		if join2(got) != tt.want {
			t.Errorf("%s/%s: warnings\n%s\nwant\n%s", tt.svc, tt.meth, join2(got), tt.want)
		}
	}
}

// Under Strict a service or method name the proto files do not declare fails
// the parse (it would match no call); declared names still pass.
func TestNameCheckStrict(t *testing.T) {
	entry := func(svc, meth string) string {
		return `{"methodConfig": [{"name": [{"service": "` + svc + `", "method": "` + meth + `"}], "timeout": "1s"}]}`
	}
	tests := []struct {
		svc, meth string
		opts      []ParseOption
		want      string // "" for a valid file
	}{
		{"stagger.testing.v1.TestService", "Get", nil, ""},
		{"stagger.testng.v1.TestService", "", nil, `policy: methodConfig[0].name[0].service: must be a service the known proto files declare (Strict; did you mean "stagger.testing.v1.TestService"?), got "stagger.testng.v1.TestService"`},
		{"stagger.testing.v1.TestService", "get", nil, `policy: methodConfig[0].name[0].method: must be a method of stagger.testing.v1.TestService (Strict; did you mean "Get"?), got "get"`},
		{"grpc.testng.TestService", "", []ParseOption{WithProtoFiles(grpcTestingFiles(t))}, `policy: methodConfig[0].name[0].service: must be a service the known proto files declare (Strict; did you mean "grpc.testing.TestService"?), got "grpc.testng.TestService"`},
		{"nobody.Knows", "", []ParseOption{WithProtoFiles(nil)}, ""},
	}
	for _, tt := range tests {
		_, err := ParseConfig([]byte(entry(tt.svc, tt.meth)), append(tt.opts, Strict())...)
		got := ""
		if err != nil {
			got = err.Error()
		}
		if got != tt.want {
			t.Errorf("%s/%s: error\n%s\nwant\n%s", tt.svc, tt.meth, got, tt.want)
		}
	}
}

// TestNameCheckOnReload: a Source's reloads check names too.
func TestNameCheckOnReload(t *testing.T) {
	path := filepath.Join(t.TempDir(), "p.yaml")
	write := func(doc string) {
		if err := os.WriteFile(path, []byte(doc), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write("methodConfig: [{name: [{service: stagger.testing.v1.TestService}], timeout: 1s}]\n")
	src, err := WatchFile(path, WithPollTicks(make(chan time.Time)))
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	if w := src.Config().Warnings(); len(w) != 0 {
		t.Fatalf("warnings %v, want none", w)
	}
	write("methodConfig: [{name: [{service: TestService}], timeout: 1s}]\n")
	if err := src.Reload(); err != nil {
		t.Fatal(err)
	}
	w := src.Config().Warnings()
	if len(w) != 1 || !strings.Contains(w[0].String(), `did you mean "stagger.testing.v1.TestService"?`) {
		t.Errorf("warnings after reload: %v", w)
	}
}

// TestOnWarnings: OnWarnings receives the warnings of an invalid file too
// (Config.Warnings has none to give: there is no Config).
func TestOnWarnings(t *testing.T) {
	var got []Warning
	calls := 0
	_, err := ParseConfig([]byte(`{"methodConfig": [{"name": [{"service": "a.S"}], "retryPolicy": {"maxAtempts": 3}}]}`),
		WithProtoFiles(nil), OnWarnings(func(w []Warning) { got = w; calls++ }))
	if err == nil {
		t.Fatal("want an error")
	}
	if calls != 1 || len(got) != 1 || got[0].Path != "methodConfig[0].retryPolicy.maxAtempts" {
		t.Errorf("OnWarnings: %d calls, %v", calls, got)
	}
	calls = 0
	parseMust(t, `{}`, OnWarnings(func([]Warning) { calls++ }))
	if calls != 0 {
		t.Errorf("OnWarnings called %d times for a file without warnings", calls)
	}
}

// TestMaxAttemptsCapBounded: WithMaxAttemptsCap above MaxAttemptsCapLimit
// fails the parse, naming the option and the bound (a cap of 2e9 once sized
// the work of every tool that reads the policy); below 2 it keeps the
// default, as grpc.WithMaxCallAttempts does.
func TestMaxAttemptsCapBounded(t *testing.T) {
	for _, n := range []int{MaxAttemptsCapLimit + 1, 2_000_000_000} {
		_, err := ParseConfig([]byte(`{}`), WithMaxAttemptsCap(n))
		var fe *FieldError
		if !errors.As(err, &fe) || fe.Path != "WithMaxAttemptsCap" || !strings.Contains(err.Error(), "must be at most 1000 (MaxAttemptsCapLimit)") {
			t.Errorf("WithMaxAttemptsCap(%d): %v", n, err)
		}
		path := filepath.Join(t.TempDir(), "p.json")
		if err := os.WriteFile(path, []byte(`{}`), 0o600); err != nil {
			t.Fatal(err)
		}
		if _, err := LoadFile(path, WithMaxAttemptsCap(n)); !errors.As(err, &fe) {
			t.Errorf("LoadFile, WithMaxAttemptsCap(%d): %v", n, err)
		}
	}
	doc := `{"methodConfig": [{"name": [{}], "hedgingPolicy": {"maxAttempts": 5000}}]}`
	for n, want := range map[int]int{MaxAttemptsCapLimit: MaxAttemptsCapLimit, 1: DefaultMaxAttemptsCap, 0: DefaultMaxAttemptsCap, -1: DefaultMaxAttemptsCap} {
		c := parseMust(t, doc, WithMaxAttemptsCap(n))
		if got := c.Method("/a.S/M").Hedging.MaxAttempts; got != want {
			t.Errorf("WithMaxAttemptsCap(%d): maxAttempts = %d, want %d", n, got, want)
		}
	}
}

// TestCodeNameRoundTrip: CodeName prints every code by the name the parser
// reads back as that code (grpc-go's String gives "Canceled", and a naive
// conversion "O_K").
func TestCodeNameRoundTrip(t *testing.T) {
	for c := codes.Code(0); c <= 16; c++ {
		name := CodeName(c)
		got, ok := codeNames[name]
		if !ok || got != c || strings.ToUpper(name) != name {
			t.Errorf("CodeName(%d) = %q, parsed back as %v (%v)", c, name, got, ok)
		}
	}
	if CodeName(0) != "OK" || CodeName(1) != "CANCELLED" || CodeName(17) != "17" {
		t.Errorf("CodeName: %q %q %q", CodeName(0), CodeName(1), CodeName(17))
	}
}

// BenchmarkParseConfig measures a parse of a typical file, names checked
// against the linked protos (the default) and not checked.
func BenchmarkParseConfig(b *testing.B) {
	doc := []byte(`{"methodConfig": [
	  {"name": [{"service": "stagger.testing.v1.TestService", "method": "Get"}, {"service": "stagger.testing.v1.TestService", "method": "Put"}],
	   "retryPolicy": {"maxAttempts": 4, "initialBackoff": "0.1s", "maxBackoff": "5s", "backoffMultiplier": 2, "retryableStatusCodes": ["UNAVAILABLE"]}},
	  {"name": [{}], "timeout": "2s"}],
	  "retryThrottling": {"maxTokens": 10, "tokenRatio": 0.1}}`)
	for _, bc := range []struct {
		name string
		opts []ParseOption
	}{{"names=checked", nil}, {"names=unchecked", []ParseOption{WithProtoFiles(nil)}}} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			for i := 0; i < b.N; i++ {
				if _, err := ParseConfig(doc, bc.opts...); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// TestFieldErrorPlaces: errors and warnings carry the line and column of the
// key their path names (or of the object that lacks a required key), in
// JSON and YAML alike, so that a tool can print file:line:col.
func TestFieldErrorPlaces(t *testing.T) {
	type place struct {
		path         string
		line, column int
	}
	tests := []struct {
		doc   string
		errs  []place
		warns []place
	}{
		{"{\n  \"methodConfig\": [{\n    \"name\": [{\"service\": \"a.S\"}, {\"method\": \"M\"}],\n    \"retryPolicy\": {\"maxAtempts\": 3,\n      \"initialBackoff\": \"0s\", \"maxBackoff\": \"1s\", \"backoffMultiplier\": 2, \"retryableStatusCodes\": [14]}\n  }]\n}",
			[]place{{"methodConfig[0].retryPolicy.maxAttempts", 4, 20}, {"methodConfig[0].retryPolicy.initialBackoff", 5, 7}, {"methodConfig[0].name[1].method", 3, 35}},
			[]place{{"methodConfig[0].retryPolicy.maxAtempts", 4, 21}}},
		{"methodConfig:\n  - name: [{service: a.S}]\n    retryPolicy:\n      maxAtempts: 3\n      initialBackoff: 0s\n      maxBackoff: 1s\n      backoffMultiplier: 2\n      retryableStatusCodes: [14]\n",
			[]place{{"methodConfig[0].retryPolicy.maxAttempts", 4, 7}, {"methodConfig[0].retryPolicy.initialBackoff", 5, 7}},
			[]place{{"methodConfig[0].retryPolicy.maxAtempts", 4, 7}}},
	}
	for _, tt := range tests {
		var warns []Warning
		_, err := ParseConfig([]byte(tt.doc), WithProtoFiles(nil), OnWarnings(func(w []Warning) { warns = w }))
		var got []place
		for _, e := range err.(interface{ Unwrap() []error }).Unwrap() {
			fe := e.(*FieldError)
			got = append(got, place{fe.Path, fe.Line, fe.Column})
		}
		if fmt.Sprint(got) != fmt.Sprint(tt.errs) {
			t.Errorf("%q:\nerrors placed at %v\nwant %v", tt.doc, got, tt.errs)
		}
		got = nil
		for _, w := range warns {
			got = append(got, place{w.Path, w.Line, w.Column})
		}
		if fmt.Sprint(got) != fmt.Sprint(tt.warns) {
			t.Errorf("%q:\nwarnings placed at %v\nwant %v", tt.doc, got, tt.warns)
		}
	}
	// Paths that lead nowhere place at the deepest node found, never panic.
	root, err := decodeJSON([]byte(`{"a": [{"b": 1}]}`))
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"", "a", "a[0]", "a[0].b", "a[9].b", "a[x", "a[-1]", "a.b.c", "z", "a[0][0]", "a]["} {
		if n := locate(root, p); n == nil || n.line != 1 {
			t.Errorf("locate(%q) = %+v", p, n)
		}
	}
}

// TestNearlyNamed: a call the file was likely meant to cover, and does not.
func TestNearlyNamed(t *testing.T) {
	c := parseMust(t, `{"methodConfig": [
	  {"name": [{"service": "grpc.testing.TestServce"}, {"service": "a.B", "method": "Gett"}, {"service": "Cart"}], "timeout": "1s"},
	  {"name": [{"service": "a.C"}], "timeout": "2s"}, {"name": [{}], "timeout": "3s"}]}`, WithProtoFiles(nil))
	for _, tt := range []struct{ method, want string }{
		{"/grpc.testing.TestService/EmptyCall", "/grpc.testing.TestServce/"},
		{"/a.B/Get", "/a.B/Gett"},
		{"/a.B/Gett", ""},
		{"/a.B/Put", ""},
		{"/a.C/Get", ""}, // named: a.C's entry covers it, whatever a.B says
		{"/shop.v1.Cart/Get", "/Cart/"},
		{"/x.Y/Z", ""},
		{"", ""},
	} {
		if got := c.NearlyNamed(tt.method); got != tt.want {
			t.Errorf("NearlyNamed(%q) = %q, want %q", tt.method, got, tt.want)
		}
	}
	if (*Config)(nil).NearlyNamed("/a.B/Get") != "" {
		t.Error("nil Config")
	}
}

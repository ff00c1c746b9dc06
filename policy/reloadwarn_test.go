package policy

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"
)

// warnRetryFile retries the methods of svc (method: only that one).
func warnRetryFile(svc, method string) string {
	name := fmt.Sprintf(`{"service": %q}`, svc)
	if method != "" {
		name = fmt.Sprintf(`{"service": %q, "method": %q}`, svc, method)
	}
	return `{"methodConfig": [{"name": [` + name + `],
		"retryPolicy": {"maxAttempts": 3, "initialBackoff": "0.1s", "maxBackoff": "1s",
			"backoffMultiplier": 2, "retryableStatusCodes": ["UNAVAILABLE"]}}]}`
}

// TestReloadWithWarnings: a good file swapped in that names a service no
// linked proto declares (TestServce), or that turns off the retries of a
// name that had them, is a reload with warnings: Warned counts it and
// gives its event, whose Warnings say why; a clean reload after it clears
// the event and keeps the count. Before, both were plain successes.
func TestReloadWithWarnings(t *testing.T) {
	const svc = "stagger.testing.v1.TestService"
	path := filepath.Join(t.TempDir(), "retry.json")
	cfgWrite(t, path, warnRetryFile(svc, "Get"))
	var events cfgEvents
	src, err := WatchFile(path, WithPollInterval(0), OnReload(events.record))
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	const typo = `"/stagger.testing.v1.TestServce/": names no method the process served or the known proto files declare`
	off := func(method string) string {
		return `"/stagger.testing.v1.TestService/` + method + `": retried under the previous file, not retried now`
	}
	all := []string{"Write", "Get", "Put", "ListItems", "Upload", "Chat"}
	allOff := func(but string) []string {
		var out []string
		for _, m := range all {
			if m != but {
				out = append(out, off(m))
			}
		}
		return out
	}
	steps := []struct {
		name, file string
		n          uint64
		// want are the warnings, in order; none: a clean reload.
		want []string
	}{
		{"the whole service", warnRetryFile(svc, ""), 0, nil},
		{"a misspelt service", warnRetryFile("stagger.testing.v1.TestServce", ""), 1, append([]string{typo}, allOff("")...)},
		{"fixed", warnRetryFile(svc, ""), 1, nil},
		{"retries turned off", `{"methodConfig": [{"name": [{"service": "` + svc + `"}], "timeout": "1s"}]}`, 2, allOff("")},
		{"one method back", warnRetryFile(svc, "Get"), 2, nil},
		{"the service again", warnRetryFile(svc, ""), 2, nil},
		{"narrowed to one method", warnRetryFile(svc, "Get"), 3, allOff("Get")},
		{"an unknown method", warnRetryFile(svc, "Gte"), 4, []string{
			`"/stagger.testing.v1.TestService/Gte": names no method the process served or the known proto files declare`, off("Get"),
		}},
	}
	for _, st := range steps {
		cfgWrite(t, path, st.file)
		if err := src.Reload(); err != nil {
			t.Fatalf("%s: %v", st.name, err)
		}
		n, ev := src.Warned()
		evs := events.list()
		last := evs[len(evs)-1]
		if want := strings.Join(st.want, "\n"); n != st.n || ev.Warnings != want || last.Warnings != want {
			t.Fatalf("%s: Warned %d %q, OnReload's warnings %q; want %d, %q", st.name, n, ev.Warnings, last.Warnings, st.n, st.want)
		}
		if st.want != nil && (ev.Config != src.Config() || ev.Path != path) {
			t.Errorf("%s: Warned's event is not the config in use's", st.name)
		}
		_, claimed := src.ClaimWarned()
		_, again := src.ClaimWarned()
		if claimed != (st.want != nil) || again {
			t.Errorf("%s: ClaimWarned %v then %v, want %v then false", st.name, claimed, again, st.want != nil)
		}
	}
}

// Without a name check (WithProtoFiles(nil)), an unknown name is no
// warning; turning retries off still is, by the names of the file.
func TestReloadWithWarningsNoNameCheck(t *testing.T) {
	cfg := func(file string) *Config {
		c, err := ParseConfig([]byte(file), WithProtoFiles(nil))
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	src := NewSource(cfg(warnRetryFile("a.S", "M")), WithProtoFiles(nil))
	if err := src.Update(cfg(warnRetryFile("a.S", ""))); err != nil {
		t.Fatal(err)
	}
	if n, _ := src.Warned(); n != 0 {
		t.Fatalf("a wider entry of a service no proto declares: %d warned, want 0", n)
	}
	if err := src.Update(cfg(warnRetryFile("b.S", ""))); err != nil {
		t.Fatal(err)
	}
	if n, ev := src.Warned(); n != 1 || ev.Warnings != `"/a.S/": retried under the previous file, not retried now` {
		t.Fatalf("a.S's retries turned off: %d warned %q, want 1", n, ev.Warnings)
	}
}

// A name no linked proto declares is no warning once the process called a
// method under it (Source.Served: a client without the protos, such as a
// generic proxy); one it never called still is, and turning the served
// one's retries off is.
func TestReloadWithWarningsServed(t *testing.T) {
	cfg := func(file string) *Config {
		c, err := ParseConfig([]byte(file))
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	src := NewSource(cfg(warnRetryFile("a.S", "M")))
	src.Served("/a.S/M")
	if err := src.Update(cfg(warnRetryFile("a.S", ""))); err != nil {
		t.Fatal(err)
	}
	if n, ev := src.Warned(); n != 0 {
		t.Fatalf("a service the process called: warned %d %q, want 0", n, ev.Warnings)
	}
	if err := src.Update(cfg(warnRetryFile("b.S", ""))); err != nil {
		t.Fatal(err)
	}
	want := `"/b.S/": names no method the process served or the known proto files declare` + "\n" +
		`"/a.S/": retried under the previous file, not retried now`
	if n, ev := src.Warned(); n != 1 || ev.Warnings != want {
		t.Fatalf("a service never called, a.S's retries off: warned %d %q, want 1 %q", n, ev.Warnings, want)
	}
}

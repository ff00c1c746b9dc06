package policy

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stagger-go/stagger/budget"
)

// cfgVersionDoc is a file whose two entries carry the same version number,
// so a reader can tell a whole config from a half-applied one.
func cfgVersionDoc(version int, budget string) string {
	return fmt.Sprintf(`{"methodConfig":[{"name":[{"service":"a.S"}],"timeout":"%ds"},{"name":[{"service":"b.S"}],"timeout":"%ds"}]%s}`, version, version, budget)
}

// cfgWriteAtomic replaces path as editors and config managers do: write a
// temporary file, then rename it over the old one.
func cfgWriteAtomic(t *testing.T, path, content string) {
	t.Helper()
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

func cfgWrite(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
}

type cfgEvents struct {
	mu  sync.Mutex
	evs []SourceEvent
}

func (e *cfgEvents) record(ev SourceEvent) {
	e.mu.Lock()
	e.evs = append(e.evs, ev)
	e.mu.Unlock()
}

func (e *cfgEvents) list() []SourceEvent {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]SourceEvent(nil), e.evs...)
}

// watchVersion writes version 1 of the test's file (cfgVersionDoc, with
// extra) and watches it, polling only when asked, recording its events.
// The caller closes the source.
func watchVersion(t *testing.T, extra string) (string, *Source, *cfgEvents) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "policy.json")
	cfgWrite(t, path, cfgVersionDoc(1, extra))
	events := &cfgEvents{}
	src, err := WatchFile(path, WithPollInterval(0), OnReload(events.record))
	if err != nil {
		t.Fatal(err)
	}
	return path, src, events
}

func TestSourceReload(t *testing.T) {
	const throttle = `,"retryThrottling":{"maxTokens":10,"tokenRatio":0.1}`
	path, src, events := watchVersion(t, throttle)
	defer src.Close()
	first := src.Config()
	if first.Method("/a.S/M").Timeout != time.Second {
		t.Fatal("first config not loaded")
	}
	firstBudget := first.BudgetSettings()
	if firstBudget.Kind == budget.KindNone {
		t.Fatal("no budget")
	}

	steps := []struct {
		name        string
		write       func()
		wantErr     bool
		wantVersion int
		wantEvents  int
		budgetKept  bool
	}{
		{"unchanged file", func() {}, false, 1, 0, true},
		{"atomic rename, same budget", func() { cfgWriteAtomic(t, path, cfgVersionDoc(2, throttle)) }, false, 2, 1, true},
		{"broken write keeps the last good config", func() { cfgWrite(t, path, cfgVersionDoc(3, throttle)[:40]) }, true, 2, 2, true},
		{"the same broken content is reported once", func() {}, false, 2, 2, true},
		{"invalid values keep the last good config", func() {
			cfgWrite(t, path, strings.Replace(cfgVersionDoc(3, throttle), `"maxTokens":10`, `"maxTokens":0`, 1))
		}, true, 2, 3, true},
		{"file removed", func() { os.Remove(path) }, true, 2, 4, true},
		{"file back, new budget", func() {
			cfgWriteAtomic(t, path, cfgVersionDoc(4, `,"retryThrottling":{"maxTokens":20,"tokenRatio":0.1}`))
		}, false, 4, 5, false},
	}
	for _, st := range steps {
		st.write()
		err := src.Reload()
		if (err != nil) != st.wantErr {
			t.Fatalf("%s: Reload() = %v, want error %v", st.name, err, st.wantErr)
		}
		c := src.Config()
		if got := c.Method("/a.S/M").Timeout; got != time.Duration(st.wantVersion)*time.Second {
			t.Fatalf("%s: config version %v, want %d", st.name, got, st.wantVersion)
		}
		if evs := events.list(); len(evs) != st.wantEvents {
			t.Fatalf("%s: %d events, want %d: %+v", st.name, len(evs), st.wantEvents, evs)
		}
		if kept := c.BudgetSettings() == firstBudget; kept != st.budgetKept {
			t.Fatalf("%s: budget kept = %v, want %v", st.name, kept, st.budgetKept)
		}
	}
	evs := events.list()
	if evs[0].Err != nil || evs[0].Previous != first || !evs[0].BudgetKept || evs[0].Path != path {
		t.Errorf("event 0 = %+v", evs[0])
	}
	if evs[1].Err == nil || evs[1].Config.Method("/a.S/M").Timeout != 2*time.Second {
		t.Errorf("event 1 (broken write) = %+v", evs[1])
	}
	if !strings.Contains(evs[2].Err.Error(), "retryThrottling.maxTokens") {
		t.Errorf("event 2 error = %v", evs[2].Err)
	}
	if evs[4].Err != nil || evs[4].BudgetKept {
		t.Errorf("event 4 = %+v", evs[4])
	}
}

func TestSourcePollsOnTicks(t *testing.T) {
	path := filepath.Join(t.TempDir(), "policy.yaml")
	cfgWrite(t, path, "methodConfig: [{name: [{service: a.S}], timeout: 1s}]\n")
	ticks := make(chan time.Time)
	got := make(chan SourceEvent, 1)
	src, err := WatchFile(path, WithPollTicks(ticks), OnReload(func(ev SourceEvent) { got <- ev }))
	if err != nil {
		t.Fatal(err)
	}
	cfgWriteAtomic(t, path, "methodConfig: [{name: [{service: a.S}], timeout: 2s}]\n")
	ticks <- time.Time{}
	ev := <-got
	if ev.Err != nil || ev.Config.Method("/a.S/M").Timeout != 2*time.Second || src.Config() != ev.Config {
		t.Fatalf("event = %+v", ev)
	}
	if err := src.Close(); err != nil {
		t.Fatal(err)
	}
	if err := src.Close(); err != nil { // twice is fine
		t.Fatal(err)
	}
	if src.Config() != ev.Config {
		t.Error("Config after Close should be the last one")
	}
}

func TestSourceWithTimer(t *testing.T) {
	// The real ticker path: only checks that Close stops it (goleak in
	// TestMain fails the package otherwise); timing is not asserted.
	path := filepath.Join(t.TempDir(), "policy.json")
	cfgWrite(t, path, cfgVersionDoc(1, ""))
	src, err := WatchFile(path, WithPollInterval(time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	if err := src.Close(); err != nil {
		t.Fatal(err)
	}
}

func TestSourceFirstLoadMustSucceed(t *testing.T) {
	dir := t.TempDir()
	if _, err := WatchFile(filepath.Join(dir, "missing.json")); err == nil {
		t.Error("a missing file should fail")
	}
	bad := filepath.Join(dir, "bad.json")
	cfgWrite(t, bad, `{"methodConfig":[{"name":[{"method":"M"}]}]}`)
	if _, err := WatchFile(bad); err == nil {
		t.Error("an invalid file should fail")
	}
}

func TestSourceNoHalfAppliedConfig(t *testing.T) {
	path := filepath.Join(t.TempDir(), "policy.json")
	cfgWrite(t, path, cfgVersionDoc(1, ""))
	src, err := WatchFile(path, WithPollInterval(0))
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var torn sync.Once
	for r := 0; r < 4; r++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				c := src.Config()
				if c.Method("/a.S/x").Timeout != c.Method("/b.S/x").Timeout {
					torn.Do(func() { t.Error("a reader saw a half-applied config") })
				}
			}
		}()
	}
	for v := 2; v <= 50; v++ {
		cfgWriteAtomic(t, path, cfgVersionDoc(v, ""))
		if err := src.Reload(); err != nil {
			t.Fatal(err)
		}
	}
	close(stop)
	wg.Wait()
	if got := src.Config().Method("/a.S/x").Timeout; got != 50*time.Second {
		t.Errorf("last version = %v", got)
	}
}

func TestSourceUpdate(t *testing.T) {
	a := parseMust(t, cfgVersionDoc(1, `,"retryBudget":{"ratio":{}}`))
	b := parseMust(t, cfgVersionDoc(2, `,"retryBudget":{"ratio":{}}`))
	var events cfgEvents
	src := NewSource(a, OnReload(events.record))
	if err := src.Update(b); err != nil {
		t.Fatal(err)
	}
	if got := src.Config(); got != b || got.Method("/a.S/M").Timeout != 2*time.Second {
		t.Error("Update should swap the config in")
	}
	if err := src.Update(nil); err == nil {
		t.Error("Update(nil) should fail")
	}
	if evs := events.list(); len(evs) != 1 || !evs[0].BudgetKept {
		t.Errorf("events = %+v", evs)
	}
	if err := src.Reload(); err != nil {
		t.Error(err)
	}
	if err := src.Close(); err != nil {
		t.Error(err)
	}
}

// TestSourceReloadErrorPlaced: a broken file reloaded by WatchFile reports
// file:line:col of the key at fault, as LoadFile and `stagger check` do, in
// Reload's error and in OnReload's event alike.
func TestSourceReloadErrorPlaced(t *testing.T) {
	path, src, events := watchVersion(t, "")
	defer src.Close()
	cfgWrite(t, path, "{\n  \"methodConfig\": [{\"name\": [{\"service\": \"a.S\"}], \"timeout\": \"1s\"}],\n  \"retryThrottling\": {\"maxTokens\": 0, \"tokenRatio\": 0.1}\n}\n")
	err := src.Reload()
	want := "policy: " + path + ":3:23: retryThrottling.maxTokens: "
	if err == nil || !strings.HasPrefix(err.Error(), want) {
		t.Fatalf("Reload() = %v, want an error starting %q", err, want)
	}
	if evs := events.list(); len(evs) != 1 || evs[0].Err == nil || evs[0].Err.Error() != err.Error() {
		t.Fatalf("events = %+v", evs)
	}
	// ParseConfig knows no file: the place is in the FieldError, not the text.
	_, err = ParseConfig([]byte("{\"retryThrottling\": {\"maxTokens\": 0, \"tokenRatio\": 0.1}}"))
	var fe *FieldError
	if !errors.As(err, &fe) || fe.Line != 1 || fe.Column != 22 || fe.File != "" || strings.Contains(err.Error(), "1:22") {
		t.Fatalf("ParseConfig: %v (%+v)", err, fe)
	}
}

// TestSourceLoaded: the generation counts the configs swapped in (a
// refused file and a content already in use change nothing), and the hash
// is the SHA-256 of the file's content in use ("" after Update).
func TestSourceLoaded(t *testing.T) {
	path, src, _ := watchVersion(t, "")
	defer src.Close()
	hashOf := func(content string) string {
		h := sha256.Sum256([]byte(content))
		return hex.EncodeToString(h[:])
	}
	check := func(wantGen uint64, wantHash string) {
		t.Helper()
		if gen, hash := src.Loaded(); gen != wantGen || hash != wantHash {
			t.Errorf("Loaded() = %d, %q; want %d, %q", gen, hash, wantGen, wantHash)
		}
	}
	check(1, hashOf(cfgVersionDoc(1, "")))
	cfgWriteAtomic(t, path, cfgVersionDoc(2, ""))
	if err := src.Reload(); err != nil {
		t.Fatal(err)
	}
	check(2, hashOf(cfgVersionDoc(2, "")))
	cfgWriteAtomic(t, path, `{"methodConfig": [`)
	if err := src.Reload(); err == nil {
		t.Fatal("a broken file was loaded")
	}
	check(2, hashOf(cfgVersionDoc(2, "")))
	cfgWriteAtomic(t, path, cfgVersionDoc(3, ""))
	if err := src.Reload(); err != nil {
		t.Fatal(err)
	}
	check(3, hashOf(cfgVersionDoc(3, "")))
	if err := src.Update(parseMust(t, cfgVersionDoc(4, ""))); err != nil {
		t.Fatal(err)
	}
	check(4, "")
	if gen, hash := NewSource(parseMust(t, "{}")).Loaded(); gen != 1 || hash != "" {
		t.Errorf("NewSource: Loaded() = %d, %q; want 1, \"\"", gen, hash)
	}
	var none *Source
	if gen, hash := none.Loaded(); gen != 0 || hash != "" {
		t.Errorf("nil Source: Loaded() = %d, %q", gen, hash)
	}
}

// TestSourceRefusalClears: a file that goes missing and comes back as it
// was ends the refusal (Refused's event zero again, its count kept;
// OnReload hears of it with Previous the config in use; nothing swapped),
// and a second disappearance is a new refusal, reported again. So does a
// broken file put back as it was, and a file missing then broken is each
// reported.
func TestSourceRefusalClears(t *testing.T) {
	path, src, events := watchVersion(t, "")
	defer src.Close()
	first := src.Config()
	good, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	steps := []struct {
		name      string
		change    func()
		wantErr   bool
		refusals  uint64
		refused   bool
		newEvents int
	}{
		{"missing", func() { os.Remove(path) }, true, 1, true, 1},
		{"still missing", func() {}, true, 1, true, 0},
		{"back as it was", func() { cfgWriteAtomic(t, path, string(good)) }, false, 1, false, 1},
		{"unchanged", func() {}, false, 1, false, 0},
		{"missing again", func() { os.Remove(path) }, true, 2, true, 1},
		{"back again", func() { cfgWriteAtomic(t, path, string(good)) }, false, 2, false, 1},
		{"broken", func() { cfgWriteAtomic(t, path, `{"methodConfig": [`) }, true, 3, true, 1},
		{"missing after broken", func() { os.Remove(path) }, true, 4, true, 1},
		{"broken as before", func() { cfgWriteAtomic(t, path, `{"methodConfig": [`) }, true, 5, true, 1},
		{"good as before", func() { cfgWriteAtomic(t, path, string(good)) }, false, 5, false, 1},
	}
	seen := 0
	for _, st := range steps {
		st.change()
		if err := src.Reload(); (err != nil) != st.wantErr {
			t.Fatalf("%s: Reload() = %v, want error %v", st.name, err, st.wantErr)
		}
		n, ev := src.Refused()
		if n != st.refusals || (ev.Err != nil) != st.refused {
			t.Errorf("%s: Refused() = %d, %v; want %d, refused %v", st.name, n, ev.Err, st.refusals, st.refused)
		}
		evs := events.list()
		if got := len(evs) - seen; got != st.newEvents {
			t.Fatalf("%s: %d new events, want %d: %+v", st.name, got, st.newEvents, evs[seen:])
		}
		for _, ev := range evs[seen:] {
			if !st.wantErr && (ev.Err != nil || ev.Config != first || ev.Previous != first || !ev.BudgetKept) {
				t.Errorf("%s: event %+v, want the refusal's end, the first config in use", st.name, ev)
			}
		}
		seen = len(evs)
		if src.Config() != first {
			t.Fatalf("%s: the config changed", st.name)
		}
		if gen, _ := src.Loaded(); gen != 1 {
			t.Errorf("%s: generation %d, want 1 (nothing swapped)", st.name, gen)
		}
	}
}

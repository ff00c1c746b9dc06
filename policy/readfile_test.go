package policy

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// TestPolicyFileSizeBound: a policy file of up to 4 MiB is read; a larger
// one is refused, naming its size and the bound, by LoadFile, WatchFile and
// a reload alike, without being read whole (a 64 MiB file costs a reload
// no more than a few MiB of allocations: it cost 768 MiB for 256 MiB);
// ParseConfig refuses such a document too.
func TestPolicyFileSizeBound(t *testing.T) {
	dir := t.TempDir()
	doc := cfgVersionDoc(1, "")
	atBound := filepath.Join(dir, "at.json")
	cfgWrite(t, atBound, doc+strings.Repeat(" ", maxFileSize-len(doc)))
	if _, err := LoadFile(atBound); err != nil {
		t.Fatalf("a file of exactly %d bytes: %v", maxFileSize, err)
	}
	over := filepath.Join(dir, "over.json")
	cfgWrite(t, over, doc+strings.Repeat(" ", maxFileSize+1-len(doc)))
	wantMsg := func(path string, size int64) string {
		return fmt.Sprintf("policy: read %s: %d bytes, over the bound of %d bytes (4 MiB) on a policy file", path, size, maxFileSize)
	}
	_, err := LoadFile(over)
	var pe *fs.PathError
	if err == nil || err.Error() != wantMsg(over, maxFileSize+1) || !errors.As(err, &pe) {
		t.Errorf("LoadFile(over) = %v\nwant %s", err, wantMsg(over, maxFileSize+1))
	}
	if s, err := WatchFile(over, WithPollInterval(0)); err == nil {
		s.Close()
		t.Error("WatchFile(over) loaded it")
	}
	if _, err := ParseConfig([]byte(doc + strings.Repeat(" ", maxFileSize))); err == nil || !strings.Contains(err.Error(), "over the bound of 4194304 bytes (4 MiB)") {
		t.Errorf("ParseConfig(over) = %v", err)
	}

	// A reload of a large (sparse) file: refused, at little cost.
	path, src, events := watchVersion(t, "")
	defer src.Close()
	const huge = 64 << 20
	if err := os.Truncate(path, huge); err != nil {
		t.Fatal(err)
	}
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	err = src.Reload()
	runtime.ReadMemStats(&after)
	if err == nil || err.Error() != wantMsg(path, huge) {
		t.Errorf("Reload() = %v\nwant %s", err, wantMsg(path, huge))
	}
	if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 8<<20 {
		t.Errorf("the reload of a %d MiB file allocated %d MiB", huge>>20, alloc>>20)
	}
	if n, ev := src.Refused(); n != 1 || ev.Err == nil || len(events.list()) != 1 {
		t.Errorf("Refused() = %d, %+v; events %+v", n, ev, events.list())
	}
}

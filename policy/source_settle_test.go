//go:build go1.25

package policy

import (
	"testing"
	"testing/synctest"
	"time"
)

// TestSourceReloadSettles: an editor that truncates the file, then writes
// it, shows the poll an empty file for a moment; the reload looks again
// before reporting it, and finds the new file. A file still broken then is
// reported, once.
func TestSourceReloadSettles(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		path, src, events := watchVersion(t, "")
		defer src.Close()
		cfgWrite(t, path, "")
		go func() {
			time.Sleep(reloadSettle / 4)
			cfgWrite(t, path, cfgVersionDoc(2, ""))
		}()
		if err := src.Reload(); err != nil {
			t.Fatalf("Reload() = %v, want the file written after the truncation", err)
		}
		evs := events.list()
		if len(evs) != 1 || evs[0].Err != nil || src.Config().Method("/a.S/M").Timeout != 2*time.Second {
			t.Fatalf("events = %+v", evs)
		}
		// Neither file declares a budget: the one in force is unchanged.
		if !evs[0].BudgetKept {
			t.Errorf("BudgetKept = false on a reload of a file without a budget")
		}
		cfgWrite(t, path, "")
		if err := src.Reload(); err == nil || err.Error() != "policy: empty policy file" {
			t.Fatalf("Reload() of a file left empty = %v", err)
		}
		synctest.Wait()
		if evs := events.list(); len(evs) != 2 || evs[1].Err == nil {
			t.Fatalf("events = %+v", evs)
		}
	})
}

package staggerotel

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/stagger-go/stagger/budget"
	"github.com/stagger-go/stagger/policy"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
)

// TestReloadMetrics: a Source's reloads show as metrics: successes,
// reloads with warnings (a misspelt service swapped in: it turns the
// service's retries off) and failures, the generation and hash of the
// config in use, and whether the latest file was refused (the last good
// config staying in use), back to 0 when the file comes back as it was.
func TestReloadMetrics(t *testing.T) {
	path := filepath.Join(t.TempDir(), "retry.json")
	write := func(content string) string {
		t.Helper()
		if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		h := sha256.Sum256([]byte(content))
		return hex.EncodeToString(h[:])
	}
	first := write(retryConfig)
	src, err := policy.WatchFile(path, policy.WithPollInterval(0))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = src.Close() }()
	reader := sdkmetric.NewManualReader()
	if _, err := Option(Options{MeterProvider: sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader)), Budgets: []budget.Budget{}, Sources: []*policy.Source{src}}); err != nil {
		t.Fatal(err)
	}
	check := func(step string, want string) {
		t.Helper()
		ms := collect(t, reader)
		var got []string
		for _, dp := range ms[MetricConfigReloads].Data.(metricdata.Sum[int64]).DataPoints {
			a := attrMap(dp.Attributes)
			if a[AttrConfigPath] != path {
				t.Errorf("%s: reloads path %q, want %q", step, a[AttrConfigPath], path)
			}
			got = append(got, fmt.Sprintf("%s=%d", a[AttrReloadResult], dp.Value))
		}
		// warned, success, failure, whatever the SDK's order
		sort.Sort(sort.Reverse(sort.StringSlice(got)))
		for _, dp := range ms[MetricConfigGeneration].Data.(metricdata.Gauge[int64]).DataPoints {
			got = append(got, fmt.Sprintf("generation=%d hash=%s", dp.Value, attrMap(dp.Attributes)[AttrConfigHash]))
		}
		for _, dp := range ms[MetricConfigReloadFailed].Data.(metricdata.Gauge[int64]).DataPoints {
			got = append(got, fmt.Sprintf("failed=%d", dp.Value))
		}
		if fmt.Sprint(got) != want {
			t.Errorf("%s: %v\nwant %s", step, got, want)
		}
	}
	check("first load", "[warned=0 success=0 failure=0 generation=1 hash="+first+" failed=0]")
	second := write(hedgeConfig)
	if err := src.Reload(); err != nil {
		t.Fatal(err)
	}
	check("reloaded", "[warned=0 success=1 failure=0 generation=2 hash="+second+" failed=0]")
	write(`{"methodConfig": [`)
	if err := src.Reload(); err == nil {
		t.Fatal("a broken file was loaded")
	}
	check("refused", "[warned=0 success=1 failure=1 generation=2 hash="+second+" failed=1]")
	third := write(retryConfig)
	if err := src.Reload(); err != nil {
		t.Fatal(err)
	}
	check("reloaded again", "[warned=0 success=2 failure=1 generation=3 hash="+third+" failed=0]")
	typo := write(strings.Replace(retryConfig, "TestService", "TestServce", 1))
	if err := src.Reload(); err != nil {
		t.Fatal(err)
	}
	check("a misspelt service", "[warned=1 success=2 failure=1 generation=4 hash="+typo+" failed=0]")
	// A file that goes missing and comes back as it was: the gauge falls
	// back to 0, and a second disappearance is a new failure.
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	if err := src.Reload(); err == nil {
		t.Fatal("a missing file was loaded")
	}
	check("missing", "[warned=1 success=2 failure=2 generation=4 hash="+typo+" failed=1]")
	write(strings.Replace(retryConfig, "TestService", "TestServce", 1))
	if err := src.Reload(); err != nil {
		t.Fatal(err)
	}
	check("back as it was", "[warned=1 success=2 failure=2 generation=4 hash="+typo+" failed=0]")
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	if err := src.Reload(); err == nil {
		t.Fatal("a missing file was loaded")
	}
	check("missing again", "[warned=1 success=2 failure=3 generation=4 hash="+typo+" failed=1]")
}

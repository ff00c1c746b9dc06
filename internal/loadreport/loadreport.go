// Package loadreport reads the load report a backend sends on an answer
// (gRFC A51, ORCA): the trailer endpoint-load-metrics-bin holding one
// OrcaLoadReport, as grpc-go's orca package writes it. The interceptors
// read every attempt's trailer they hold with Read and hand the result to
// the backend's budget (budget.Attempt.Load); Last keeps a backend's latest
// with its time, for whoever owns the backend's state.
//
// A report that cannot be read is ignored and counted (Malformed), never an
// error for the call. An answer without the trailer costs one map lookup
// and no allocation.
package loadreport

import (
	"math"
	"sync"
	"sync/atomic"
	"time"

	orcapb "github.com/cncf/xds/go/xds/data/orca/v3"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/proto"

	"github.com/stagger-go/stagger/budget"
)

// Key is the trailer that carries the report (grpc-go's orca package
// writes it; metadata keys arrive lower case).
const Key = "endpoint-load-metrics-bin"

// maxBytes bounds a report read: a well-formed one with a few named
// metrics is under 200 bytes, and grpc-go already bounds the trailer at
// its header list size (16 KiB by default).
const maxBytes = 4096

// malformed counts the reports Read ignored, in the process.
var malformed atomic.Uint64

// Malformed is the number of reports Read has ignored in the process.
func Malformed() uint64 { return malformed.Load() }

// Read returns the load trailer's report says: the zero Load when it
// carries none; Malformed (and counted) when it carries more than one, more
// than 4 KiB, bytes that are no OrcaLoadReport, or a negative or NaN
// utilization. Utilization is the report's application_utilization, or its
// cpu_utilization when that is 0 (as gRFC A58 reads them), at most 1.
// Safe for concurrent use.
func Read(trailer metadata.MD) budget.Load {
	vs, ok := trailer[Key]
	if !ok {
		return budget.Load{}
	}
	u, ok := utilization(vs)
	if !ok {
		malformed.Add(1)
		return budget.Load{Malformed: true}
	}
	return budget.Load{Utilization: u, Reported: true}
}

// utilization parses the trailer's values; false: malformed.
func utilization(vs []string) (float64, bool) {
	if len(vs) != 1 || len(vs[0]) > maxBytes {
		return 0, false
	}
	var r orcapb.OrcaLoadReport
	if err := proto.Unmarshal([]byte(vs[0]), &r); err != nil {
		return 0, false
	}
	u := r.GetApplicationUtilization()
	if u == 0 {
		u = r.GetCpuUtilization()
	}
	if u < 0 || math.IsNaN(u) {
		return 0, false
	}
	return min(u, 1), true
}

// Last is one backend's latest load report and when it came. The zero
// value has none. Safe for concurrent use.
type Last struct {
	mu   sync.Mutex
	load budget.Load
	at   time.Time
}

// Observe keeps l, read at now, when it is a report; an answer without one
// (or with a malformed one) changes nothing.
func (s *Last) Observe(l budget.Load, now time.Time) {
	if !l.Reported {
		return
	}
	s.mu.Lock()
	s.load, s.at = l, now
	s.mu.Unlock()
}

// Get returns the latest report kept and when it came (zero Load and time:
// none yet).
func (s *Last) Get() (budget.Load, time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.load, s.at
}

package loadreport

import (
	"math"
	"strings"
	"testing"
	"time"

	orcapb "github.com/cncf/xds/go/xds/data/orca/v3"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/proto"

	"github.com/stagger-go/stagger/budget"
)

func report(t *testing.T, r *orcapb.OrcaLoadReport) string {
	t.Helper()
	b, err := proto.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestRead(t *testing.T) {
	bad := budget.Load{Malformed: true}
	for _, tc := range []struct {
		name    string
		trailer metadata.MD
		want    budget.Load
	}{
		{"no trailer", nil, budget.Load{}},
		{"no report", metadata.Pairs("grpc-retry-pushback-ms", "10"), budget.Load{}},
		{"application", metadata.Pairs(Key, report(t, &orcapb.OrcaLoadReport{ApplicationUtilization: 0.4, CpuUtilization: 0.9})), budget.Load{Utilization: 0.4, Reported: true}},
		{"cpu when no application", metadata.Pairs(Key, report(t, &orcapb.OrcaLoadReport{CpuUtilization: 0.7})), budget.Load{Utilization: 0.7, Reported: true}},
		{"empty report reads 0", metadata.Pairs(Key, ""), budget.Load{Reported: true}},
		{"above 1 is 1", metadata.Pairs(Key, report(t, &orcapb.OrcaLoadReport{CpuUtilization: 3})), budget.Load{Utilization: 1, Reported: true}},
		{"named metrics only", metadata.Pairs(Key, report(t, &orcapb.OrcaLoadReport{NamedMetrics: map[string]float64{"q": 9}})), budget.Load{Reported: true}},
		{"garbage", metadata.Pairs(Key, "\xff\xff\xff"), bad},
		{"two reports", metadata.Pairs(Key, report(t, &orcapb.OrcaLoadReport{CpuUtilization: 0.1}), Key, report(t, &orcapb.OrcaLoadReport{CpuUtilization: 0.2})), bad},
		{"negative", metadata.Pairs(Key, report(t, &orcapb.OrcaLoadReport{ApplicationUtilization: -0.5})), bad},
		{"NaN", metadata.Pairs(Key, report(t, &orcapb.OrcaLoadReport{CpuUtilization: math.NaN()})), bad},
		{"too long", metadata.Pairs(Key, report(t, &orcapb.OrcaLoadReport{CpuUtilization: 0.5, NamedMetrics: map[string]float64{strings.Repeat("x", maxBytes): 1}})), bad},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := Malformed()
			if got := Read(tc.trailer); got != tc.want {
				t.Errorf("Read = %+v, want %+v", got, tc.want)
			}
			if n := Malformed() - before; n != map[bool]uint64{true: 1}[tc.want.Malformed] {
				t.Errorf("Malformed counted %d", n)
			}
		})
	}
}

func TestLast(t *testing.T) {
	var s Last
	if l, at := s.Get(); l != (budget.Load{}) || !at.IsZero() {
		t.Fatalf("zero Last = %+v at %v", l, at)
	}
	t0 := time.Unix(100, 0)
	s.Observe(budget.Load{Utilization: 0.5, Reported: true}, t0)
	s.Observe(budget.Load{}, t0.Add(time.Second))
	s.Observe(budget.Load{Malformed: true}, t0.Add(2*time.Second))
	if l, at := s.Get(); l.Utilization != 0.5 || !at.Equal(t0) {
		t.Fatalf("Last = %+v at %v, want 0.5 at %v (no report changes nothing)", l, at, t0)
	}
}

func BenchmarkReadNoReport(b *testing.B) {
	md := metadata.Pairs("grpc-status", "0", "x-other", "y")
	b.ReportAllocs()
	for range b.N {
		if Read(md).Reported {
			b.Fatal("report")
		}
	}
}

func BenchmarkRead(b *testing.B) {
	v, _ := proto.Marshal(&orcapb.OrcaLoadReport{ApplicationUtilization: 0.4})
	md := metadata.Pairs(Key, string(v))
	b.ReportAllocs()
	for range b.N {
		if !Read(md).Reported {
			b.Fatal("no report")
		}
	}
}

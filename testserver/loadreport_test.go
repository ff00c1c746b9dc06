package testserver_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/orca"
	"google.golang.org/grpc/status"

	"github.com/stagger-go/stagger/budget"
	"github.com/stagger-go/stagger/internal/loadreport"
	testingv1 "github.com/stagger-go/stagger/proto/stagger/testing/v1"
	"github.com/stagger-go/stagger/testserver"
)

// TestWorkersReportLoad: over loopback TCP, two workers with ReportLoad
// and grpc-go's orca option report the workers busy as each attempt
// arrives: alone 0.5, beside another 1, and 1 on the one they reject; in
// an outage, none. Without ReportLoad, none.
func TestWorkersReportLoad(t *testing.T) {
	for _, report := range []bool{true, false} {
		t.Run(map[bool]string{true: "ReportLoad", false: "off"}[report], func(t *testing.T) {
			s := testserver.New(testserver.WithTCP(), testserver.WithServerOptions(orca.CallMetricsServerOption(nil)),
				testserver.WithWorkers(testserver.Workers{Count: 2, Service: time.Second, ReportLoad: report}))
			defer s.Close()
			cc, err := s.DialTCP()
			if err != nil {
				t.Fatal(err)
			}
			defer cc.Close()
			client := testingv1.NewTestServiceClient(cc)
			want := func(u float64) budget.Load {
				if !report {
					return budget.Load{}
				}
				return budget.Load{Utilization: u, Reported: true}
			}
			type answer struct {
				load budget.Load
				code codes.Code
			}
			call := func(key string) answer {
				var tr metadata.MD
				_, err := client.Get(context.Background(), &testingv1.GetRequest{Script: &testingv1.Script{Key: key}}, grpc.Trailer(&tr))
				return answer{loadreport.Read(tr), status.Code(err)}
			}
			var wg sync.WaitGroup
			got := make([]answer, 2)
			for i, key := range []string{"a", "b"} {
				wg.Add(1)
				go func() { defer wg.Done(); got[i] = call(key) }()
				for s.Stats().InFlight < i+1 {
					time.Sleep(time.Millisecond)
				}
			}
			if c := call("c"); c != (answer{want(1), codes.ResourceExhausted}) {
				t.Errorf("c, rejected: %+v, want %+v", c, answer{want(1), codes.ResourceExhausted})
			}
			wg.Wait()
			if got[0] != (answer{want(0.5), codes.OK}) || got[1] != (answer{want(1), codes.OK}) {
				t.Errorf("a, b: %+v, want utilization 0.5 and 1, served", got)
			}
			s.SetOutage(true)
			if d := call("d"); d != (answer{budget.Load{}, codes.Unavailable}) {
				t.Errorf("d, in an outage: %+v, want no report, UNAVAILABLE", d)
			}
		})
	}
}

package budget_test

import (
	"fmt"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stagger-go/stagger/budget"
)

// BenchmarkBackendsGet looks up one known key of a set of 1 or 1,024
// targets, alone or while another goroutine adds new targets (past the
// cap: forgetting the least recently used). adds/op is the adder's pace;
// with it the B/op are the adder's (Get allocates nothing:
// TestBackendsGetAllocs). cpu-ns/op is the looking-up thread's CPU time
// per lookup, which a loaded machine disturbs less than ns/op.
func BenchmarkBackendsGet(b *testing.B) {
	for _, n := range []int{1, 1024} {
		for _, adding := range []bool{false, true} {
			b.Run(fmt.Sprintf("targets=%d/adding=%v", n, adding), func(b *testing.B) {
				bs, err := budget.NewBackends(budget.DefaultSettings())
				if err != nil {
					b.Fatal(err)
				}
				for i := range n {
					bs.Get("t"+strconv.Itoa(i), "/svc/M")
				}
				names := make([]string, 1<<16)
				for i := range names {
					names[i] = "new" + strconv.Itoa(i)
				}
				var stop atomic.Bool
				var adds atomic.Int64
				var wg sync.WaitGroup
				if adding {
					wg.Add(1)
					go func() {
						defer wg.Done()
						for i := 0; !stop.Load(); i++ {
							bs.Get(names[i%len(names)], "/svc/M")
							adds.Add(1)
							// Paced (tens of thousands of adds a second, far
							// past any process's): on two cores an adder
							// flat out measures the CPU it takes, not
							// whether lookups wait.
							time.Sleep(10 * time.Microsecond)
						}
					}()
				}
				runtime.LockOSThread()
				defer runtime.UnlockOSThread()
				b.ReportAllocs()
				b.ResetTimer()
				cpu0, ok := threadCPU()
				for range b.N {
					bs.Get("t0", "/svc/M")
				}
				cpu1, _ := threadCPU()
				b.StopTimer()
				if ok {
					b.ReportMetric(float64(cpu1-cpu0)/float64(b.N), "cpu-ns/op")
				}
				stop.Store(true)
				wg.Wait()
				b.ReportMetric(float64(adds.Load())/float64(b.N), "adds/op")
			})
		}
	}
}

// TestBackendsGetAllocs: a lookup of a known key allocates nothing, in a
// set of one target and of many.
func TestBackendsGetAllocs(t *testing.T) {
	bs, err := budget.NewBackends(budget.DefaultSettings())
	if err != nil {
		t.Fatal(err)
	}
	for i := range 1024 {
		bs.Get("t"+strconv.Itoa(i), "/svc/M")
	}
	s := bs.Slot("t0", "/svc/M")
	if n := testing.AllocsPerRun(1000, func() {
		bs.Get("t0", "/svc/M")
		s.Budget()
	}); n != 0 {
		t.Fatalf("Get and Slot.Budget of a known key: %v allocs; want 0", n)
	}
}

// BenchmarkBackendsBytes measures the heap a set holds per target (each
// with one method's Gate) at the targets' cap, and per method at one
// target's cap of methods: B/target and B/method.
func BenchmarkBackendsBytes(b *testing.B) {
	measure := func(b *testing.B, targets, methods int) float64 {
		var keep []*budget.Backends
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		for range b.N {
			bs, err := budget.NewBackends(budget.DefaultSettings())
			if err != nil {
				b.Fatal(err)
			}
			for i := range targets {
				for m := range methods {
					bs.Get("10.0.0."+strconv.Itoa(i)+":443", "/pkg.Service/Method"+strconv.Itoa(m))
				}
			}
			keep = append(keep, bs)
		}
		runtime.GC()
		runtime.ReadMemStats(&after)
		runtime.KeepAlive(keep)
		return float64(after.HeapAlloc-before.HeapAlloc) / float64(b.N)
	}
	b.Run("per=target/targets=1024", func(b *testing.B) {
		b.ReportMetric(measure(b, 1024, 1)/1024, "B/target")
	})
	b.Run("per=method/methods=256", func(b *testing.B) {
		b.ReportMetric(measure(b, 1, 256)/256, "B/method")
	})
}

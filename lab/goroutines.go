package lab

import (
	"bufio"
	"bytes"
	"context"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync"
	"time"
)

// goroutineLabel is the profiler label (runtime/pprof) that marks each
// contender's goroutines: its value names the run and the contender, so that
// runs at the same time are told apart.
const goroutineLabel = "stagger-lab-contender"

// goroutineSampler counts, every Bin, the goroutines that carry each
// contender's label, and keeps the largest count. A goroutine inherits the
// labels of the goroutine that starts it, so the count covers the calls'
// goroutines, the client connections' and any the retry layer starts; a
// goroutine the runtime starts for a timer (time.AfterFunc) takes the
// labels of whatever goroutine its thread was running, if any, which makes
// a short-lived one now and then land on the wrong contender, or on none.
//
// A sample reads the goroutine profile (debug=1), which costs about 1.5 µs
// per goroutine in the process.
type goroutineSampler struct {
	mu    sync.Mutex
	peaks map[string]int // by label value
	stop  chan struct{}
	done  chan struct{}
}

// sampleGoroutines starts sampling the goroutines labelled with each of
// values until stop is called.
func sampleGoroutines(values []string) *goroutineSampler {
	g := &goroutineSampler{peaks: map[string]int{}, stop: make(chan struct{}), done: make(chan struct{})}
	for _, v := range values {
		g.peaks[v] = 0
	}
	// The sampler's own goroutine is no contender's.
	go pprof.Do(context.Background(), pprof.Labels(), func(context.Context) {
		defer close(g.done)
		t := time.NewTicker(Bin)
		defer t.Stop()
		var buf bytes.Buffer
		for {
			g.sample(&buf)
			select {
			case <-g.stop:
				return
			case <-t.C:
			}
		}
	})
	return g
}

// peaksAfterStop stops the sampler and returns the peak per label value.
func (g *goroutineSampler) peaksAfterStop() map[string]int {
	close(g.stop)
	<-g.done
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.peaks
}

func (g *goroutineSampler) sample(buf *bytes.Buffer) {
	buf.Reset()
	if err := pprof.Lookup("goroutine").WriteTo(buf, 1); err != nil {
		return
	}
	counts := labelCounts(buf.Bytes(), goroutineLabel)
	g.mu.Lock()
	defer g.mu.Unlock()
	for v, n := range counts {
		if p, ok := g.peaks[v]; ok {
			g.peaks[v] = max(p, n)
		}
	}
}

// labelCounts counts, in a goroutine profile written with debug=1, the
// goroutines per value of the label key. Each group of goroutines with the
// same stack and labels is a line "N @ 0x... 0x...", followed, when they
// carry labels, by a line `# labels: {"key":"value", ...}`.
func labelCounts(profile []byte, key string) map[string]int {
	counts := map[string]int{}
	prefix := strconv.Quote(key) + ":"
	n := 0
	sc := bufio.NewScanner(bytes.NewReader(profile))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if count, _, ok := strings.Cut(line, " @ "); ok {
			n, _ = strconv.Atoi(count)
			continue
		}
		labels, ok := strings.CutPrefix(line, "# labels: ")
		if !ok || n == 0 {
			continue
		}
		if _, rest, ok := strings.Cut(labels, prefix); ok {
			if v, err := strconv.QuotedPrefix(rest); err == nil {
				if v, err := strconv.Unquote(v); err == nil {
					counts[v] += n
				}
			}
		}
		n = 0
	}
	return counts
}

package lab

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"
)

// Report is a run's configuration (defaults filled in) and its results, in
// the order of Config.Contenders.
type Report struct {
	Config  Config
	Results []Result
	// Ceiling is Ceiling(Config): the success rate an ideal client could
	// reach in the scenario without ever sending more than capacity.
	Ceiling float64
	// Wall is how long the run took on the time package's clock.
	Wall time.Duration
}

// Run fills in cfg's defaults, validates it, and runs every contender at the
// same time, each against its own server. It returns when every call and
// server has ended. Cancelling ctx stops offering calls and cancels those in
// flight (the results then cover what ran).
func Run(ctx context.Context, cfg Config) (*Report, error) {
	cfg = cfg.Defaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	start := time.Now()
	results := make([]Result, len(cfg.Contenders))
	errs := make([]error, len(cfg.Contenders))
	run := runs.Add(1)
	labels := make([]string, len(cfg.Contenders))
	for i, name := range cfg.Contenders {
		labels[i] = fmt.Sprintf("%d/%s", run, name)
	}
	sampler := sampleGoroutines(labels)
	done := make(chan struct{})
	for i, name := range cfg.Contenders {
		c, _ := contenderByName(cfg.Scenario, name)
		go func() {
			defer func() { done <- struct{}{} }()
			results[i], errs[i] = runContender(ctx, &cfg, c, labels[i])
		}()
	}
	for range cfg.Contenders {
		<-done
	}
	peaks := sampler.peaksAfterStop()
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	for i := range results {
		results[i].PeakGoroutines = peaks[labels[i]]
	}
	return &Report{Config: cfg, Results: results, Ceiling: Ceiling(cfg), Wall: time.Since(start)}, nil
}

// runs numbers the runs of this process, for the goroutine labels.
var runs atomic.Int64

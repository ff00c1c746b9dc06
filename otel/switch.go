package staggerotel

import (
	"context"
	"fmt"

	"github.com/stagger-go/stagger/interceptor"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
)

// The switch gauge's points, by what turned the switch.
var (
	switchProcess = metric.WithAttributeSet(attribute.NewSet(attribute.String(AttrSwitch, SwitchProcess)))
	switchFile    = metric.WithAttributeSet(attribute.NewSet(attribute.String(AttrSwitch, SwitchFile)))
)

// registerSwitch creates the switch gauge and the panics counter on m and
// the callback that reads the process's switch, states' files' and
// recovered panics when the metrics are collected.
func registerSwitch(m metric.Meter, states []*interceptor.State) error {
	var sts []*interceptor.State
	for _, s := range states {
		if s != nil {
			sts = append(sts, s)
		}
	}
	off, err := m.Int64ObservableGauge(MetricSwitch, metric.WithUnit("1"),
		metric.WithDescription("1 while stagger is switched off (calls sent once: no retry, hedge or wait), else 0; stagger.switch says by what: process (SetDisabled, STAGGER_DISABLE) or file (the policy file's \"disabled\")."))
	if err != nil {
		return fmt.Errorf("staggerotel: instrument %s: %w", MetricSwitch, err)
	}
	panics, err := m.Int64ObservableCounter(MetricCallbackPanics, metric.WithUnit("{panic}"),
		metric.WithDescription("Panics of user code (hooks, loggers, predicates, resume functions, OnFinish, a breaker set's onChange) that stagger recovered in the process."))
	if err != nil {
		return fmt.Errorf("staggerotel: instrument %s: %w", MetricCallbackPanics, err)
	}
	_, err = m.RegisterCallback(func(_ context.Context, obs metric.Observer) error {
		obs.ObserveInt64(panics, interceptor.RecoveredPanics())
		obs.ObserveInt64(off, flag(interceptor.Disabled()), switchProcess)
		if len(sts) == 0 {
			return nil
		}
		var file bool
		for _, s := range sts {
			file = file || s.Disabled()
		}
		obs.ObserveInt64(off, flag(file), switchFile)
		return nil
	}, off, panics)
	if err != nil {
		return fmt.Errorf("staggerotel: callback of %s and %s: %w", MetricSwitch, MetricCallbackPanics, err)
	}
	return nil
}

// flag is 1 for true, else 0.
func flag(on bool) int64 {
	if on {
		return 1
	}
	return 0
}

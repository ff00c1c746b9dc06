package staggerotel

import (
	"context"
	"fmt"

	"github.com/stagger-go/stagger/policy"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
)

// registerReloads creates the reload metrics on m and the callback that
// reads sources when the metrics are collected; nothing without sources.
func registerReloads(m metric.Meter, sources []*policy.Source) error {
	var srcs []*policy.Source
	for _, s := range sources {
		if s != nil {
			srcs = append(srcs, s)
		}
	}
	if len(srcs) == 0 {
		return nil
	}
	reloads, err := m.Int64ObservableCounter(MetricConfigReloads, metric.WithUnit("{reload}"),
		metric.WithDescription("Reloads of the policy file: success (a new config swapped in), warned (swapped in, but it names no known method or turns a method's retries off) or failure (the file could not be read or parsed; the last good config stays)."))
	if err != nil {
		return fmt.Errorf("staggerotel: instrument %s: %w", MetricConfigReloads, err)
	}
	generation, err := m.Int64ObservableGauge(MetricConfigGeneration, metric.WithUnit("{config}"),
		metric.WithDescription("The generation of the config in use: 1 for the first, one more at each change; stagger.config.hash is the SHA-256 of its file's content."))
	if err != nil {
		return fmt.Errorf("staggerotel: instrument %s: %w", MetricConfigGeneration, err)
	}
	failed, err := m.Int64ObservableGauge(MetricConfigReloadFailed, metric.WithUnit("1"),
		metric.WithDescription("1 while the latest content of the policy file was refused and an older config stays in use, else 0."))
	if err != nil {
		return fmt.Errorf("staggerotel: instrument %s: %w", MetricConfigReloadFailed, err)
	}
	_, err = m.RegisterCallback(func(_ context.Context, obs metric.Observer) error {
		for _, s := range srcs {
			observeSource(obs, s, reloads, generation, failed)
		}
		return nil
	}, reloads, generation, failed)
	if err != nil {
		return fmt.Errorf("staggerotel: callback of %s: %w", MetricConfigReloads, err)
	}
	return nil
}

// observeSource reports s: its reloads that swapped a config in are its
// generations after the first, those with warnings (policy.Source.Warned)
// counted apart from the plain successes, its failures the refusals it
// counted (one per refusal: a file still missing is one failure, one
// that goes missing again after it came back is another).
func observeSource(obs metric.Observer, s *policy.Source, reloads metric.Int64ObservableCounter, generation, failed metric.Int64ObservableGauge) {
	gen, hash := s.Loaded()
	refusals, last := s.Refused()
	warned, _ := s.Warned()
	var path []attribute.KeyValue
	if p := s.Path(); p != "" {
		path = append(path, attribute.String(AttrConfigPath, p))
	}
	with := func(kv ...attribute.KeyValue) metric.ObserveOption {
		return metric.WithAttributes(append(path[:len(path):len(path)], kv...)...)
	}
	// Read one after the other, a reload between the two reads could
	// count as warned before its generation: never below 0.
	obs.ObserveInt64(reloads, max(int64(gen)-1-int64(warned), 0), with(attribute.String(AttrReloadResult, "success")))
	obs.ObserveInt64(reloads, int64(warned), with(attribute.String(AttrReloadResult, "warned")))
	obs.ObserveInt64(reloads, int64(refusals), with(attribute.String(AttrReloadResult, "failure")))
	if hash != "" {
		obs.ObserveInt64(generation, int64(gen), with(attribute.String(AttrConfigHash, hash)))
	} else {
		obs.ObserveInt64(generation, int64(gen), with())
	}
	var refused int64
	if last.Err != nil {
		refused = 1
	}
	obs.ObserveInt64(failed, refused, with())
}

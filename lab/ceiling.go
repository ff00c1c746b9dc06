package lab

import (
	"math"

	"github.com/stagger-go/stagger/internal/ceiling"
)

// Ceiling is the success rate an ideal client could reach in cfg's scenario
// (defaults filled in) without ever sending the server more than its
// capacity, for the calls the lab offers (every client's calls, evenly
// spread as Run spreads them). See CeilingOf for the rule. The outages
// (ScenarioUnavailable, the refused scenarios, ScenarioBlip,
// ScenarioMetastable, and ScenarioChain with Capacity) leave the server
// nothing during the trigger: the server is as useless while gone as while
// it answers UNAVAILABLE. In ScenarioOverload the server serves
// ReducedCapacity during the overload, in the slowdowns Capacity ÷ Slow
// during the slowdown (OutageCapacity); the ideal client never makes the
// worker server reject or serve a caller that has gone, so no attempt
// costs it anything but a served one's time, and none waits in its queue.
// The slow replicas and ScenarioStragglers have no trigger and no limit: 1. ScenarioFlakyQuiet:
// 1 (every call is served on its third attempt); ScenarioFlakyQuietRandom:
// 1 − FailureRate^MaxAttempts, the chance that one of a call's attempts is
// served.
func Ceiling(cfg Config) float64 {
	cfg = cfg.Defaults()
	switch {
	case cfg.Scenario == ScenarioSlowReplica || cfg.Scenario == ScenarioSlowReplicaStream, cfg.Scenario.replicated(), cfg.Scenario == ScenarioStragglers:
		return 1
	case cfg.Scenario == ScenarioFlakyQuiet:
		if cfg.MaxAttempts > FlakyFailAttempts {
			return 1
		}
		return 0
	case cfg.Scenario == ScenarioFlakyQuietRandom:
		return 1 - math.Pow(cfg.FailureRate, float64(cfg.MaxAttempts))
	}
	in := CeilingInput{Starts: callStarts(&cfg), Capacity: float64(cfg.Capacity), CallTimeout: cfg.CallTimeout,
		OutageStart: cfg.OutageStart, OutageEnd: cfg.OutageEnd}
	switch {
	case cfg.Scenario.overloaded():
		in.OutageCapacity = cfg.ReducedCapacity()
	case cfg.Scenario.slowed():
		in.OutageCapacity = float64(cfg.Capacity) / cfg.Slow
	}
	return CeilingOf(in)
}

// CeilingInput describes the calls and the server CeilingOf reckons with:
// their start times (one element a call, counted from the start of the
// load), the attempts per second the server serves (Capacity; OutageCapacity
// in [OutageStart, OutageEnd), 0 for a server that is down) and each call's
// deadline from its start (CallTimeout, none when 0 or less).
type CeilingInput = ceiling.Input

// CeilingOf is the success rate (of len(in.Starts) calls) an ideal client
// reaches without ever sending more than in.Capacity attempts per second,
// counted in Bin-wide bins, each call served by its deadline, by greedy
// earliest-deadline-first over the spare capacity. The rule, with its
// edges, is written once, in internal/ceiling (Of), which `stagger sim`
// shares.
func CeilingOf(in CeilingInput) float64 { return ceiling.Of(in) }

// Bin and ceiling.Bin are one width: the ceiling's bins are the load
// series'. The two conversions fail to compile when they differ.
const (
	_ = uint64(Bin - ceiling.Bin)
	_ = uint64(ceiling.Bin - Bin)
)

package interceptor

import (
	"context"
	"fmt"
	"log/slog"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors/logging"
)

// DisableEnv's values: one that says no leaves the switch off, any other
// turns it on (an operator in an emergency types what comes to mind).
func TestDisableEnvValues(t *testing.T) {
	for v, want := range map[string]bool{"": false, "0": false, "false": false, "OFF": false, " no ": false, "1": true, "true": true, "yes": true, "on": true} {
		if got := envOn(v); got != want {
			t.Errorf("%s=%q: on %v, want %v", DisableEnv, v, got, want)
		}
	}
}

// The switch says when it turns: SetDisabled at each change (warn when on,
// info when off, never for a call that changes nothing), and, when the
// environment turned it on at the start, the first call that finds it on,
// once (offFor).
func TestSwitchSaysWhenItTurns(t *testing.T) {
	var lines []string
	old := slogDefault
	slogDefault = logging.LoggerFunc(func(_ context.Context, l logging.Level, msg string, kv ...any) {
		lines = append(lines, fmt.Sprint(slog.Level(l), " ", msg, " ", kv))
	})
	was, said := switchedOff.Load(), switchSaid.Load()
	defer func() { slogDefault = old; switchedOff.Store(was); switchSaid.Store(said) }()

	switchedOff.Store(false)
	SetDisabled(true)
	SetDisabled(true)
	SetDisabled(false)
	SetDisabled(false)
	// As DisableEnv at the start: on, and nothing said yet.
	switchedOff.Store(true)
	switchSaid.Store(false)
	offFor(nil)
	offFor(nil)
	want := []string{
		"WARN " + msgSwitchedOff + " [stagger.switch SetDisabled]",
		"INFO " + msgSwitchedOn + " [stagger.switch SetDisabled]",
		"WARN " + msgSwitchedOff + " [stagger.switch " + DisableEnv + "]",
	}
	if fmt.Sprint(lines) != fmt.Sprint(want) {
		t.Fatalf("heard\n%q\nwant\n%q", lines, want)
	}
}

// TestSetDisabledRaceSaysItsCause: a call that starts while SetDisabled(true)
// turns the switch on, in a process whose environment left it off, never
// logs DisableEnv as what turned it (offFor saw the switch on before
// SetDisabled said so). A race over real time, run switchRaceTrials times:
// each call spins until it sees the switch on, then starts. With one P the
// call would meet SetDisabled half done only if preempted there.
func TestSetDisabledRaceSaysItsCause(t *testing.T) {
	if runtime.GOMAXPROCS(0) < 2 {
		t.Skip("the race needs two Ps")
	}
	var (
		mu    sync.Mutex
		lines []string
	)
	old := slogDefault
	slogDefault = logging.LoggerFunc(func(_ context.Context, l logging.Level, msg string, kv ...any) {
		mu.Lock()
		defer mu.Unlock()
		lines = append(lines, fmt.Sprint(slog.Level(l), " ", msg, " ", kv))
	})
	was, said := switchedOff.Load(), switchSaid.Load()
	defer func() { slogDefault = old; switchedOff.Store(was); switchSaid.Store(said) }()

	bad := 0
	for range switchRaceTrials {
		// As a process started without DisableEnv, before any change.
		switchedOff.Store(false)
		switchSaid.Store(false)
		lines = lines[:0]
		var wg sync.WaitGroup
		start := make(chan struct{})
		wg.Add(2)
		go func() { defer wg.Done(); <-start; SetDisabled(true) }()
		go func() {
			defer wg.Done()
			<-start
			for !switchedOff.Load() {
			}
			offFor(nil)
		}()
		close(start)
		wg.Wait()
		want := []string{"WARN " + msgSwitchedOff + " [stagger.switch SetDisabled]"}
		if fmt.Sprint(lines) != fmt.Sprint(want) {
			if bad++; bad == 1 {
				t.Errorf("heard\n%q\nwant\n%q", lines, want)
			}
		}
	}
	if bad > 0 {
		t.Errorf("%d of %d trials heard another cause than SetDisabled", bad, switchRaceTrials)
	}
}

const switchRaceTrials = 10000

// A log handler that turns the switch as it hears the switch turn (an
// operator's hook) does not hang: SetDisabled and the first call's line
// are decided under switchMu and logged after it.
func TestSwitchLogHandlerMayTurnIt(t *testing.T) {
	old := slogDefault
	was, said := switchedOff.Load(), switchSaid.Load()
	defer func() { slogDefault = old; switchedOff.Store(was); switchSaid.Store(said) }()
	var heard []string
	slogDefault = logging.LoggerFunc(func(_ context.Context, _ logging.Level, msg string, kv ...any) {
		heard = append(heard, fmt.Sprint(msg, " ", kv))
		if len(heard) == 1 {
			SetDisabled(false)
		}
	})
	done := make(chan struct{})
	go func() {
		defer close(done)
		switchedOff.Store(false)
		SetDisabled(true)
		switchedOff.Store(true)
		switchSaid.Store(false)
		heard = heard[:0]
		offFor(nil)
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("SetDisabled from a log handler hung")
	}
	if len(heard) != 2 || switchedOff.Load() {
		t.Errorf("heard %q, switch on %v; want the env's line, then SetDisabled's, and the switch off", heard, switchedOff.Load())
	}
}

package interceptor

import "testing"

// DisableEnv's values: one that says no leaves the switch off, any other
// turns it on (an operator in an emergency types what comes to mind).
func TestDisableEnvValues(t *testing.T) {
	for v, want := range map[string]bool{"": false, "0": false, "false": false, "OFF": false, " no ": false, "1": true, "true": true, "yes": true, "on": true} {
		if got := envOn(v); got != want {
			t.Errorf("%s=%q: on %v, want %v", DisableEnv, v, got, want)
		}
	}
}

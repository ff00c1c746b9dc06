package policy_test

import (
	"testing"

	"github.com/stagger-go/stagger/policy"
)

func TestConfigMaxAttemptsCap(t *testing.T) {
	const file = `{"methodConfig": [{"name": [{"service": "s"}], "retryPolicy": {"maxAttempts": 3,
		"initialBackoff": "1s", "maxBackoff": "1s", "backoffMultiplier": 2, "retryableStatusCodes": ["UNAVAILABLE"]}}]}`
	tests := []struct {
		name string
		opts []policy.ParseOption
		want int
	}{
		{"default", nil, policy.DefaultMaxAttemptsCap},
		{"raised", []policy.ParseOption{policy.WithMaxAttemptsCap(10)}, 10},
		{"lowered", []policy.ParseOption{policy.WithMaxAttemptsCap(3)}, 3},
		{"below 2 keeps the default", []policy.ParseOption{policy.WithMaxAttemptsCap(1)}, policy.DefaultMaxAttemptsCap},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg, err := policy.ParseConfig([]byte(file), tt.opts...)
			if err != nil {
				t.Fatal(err)
			}
			if got := cfg.MaxAttemptsCap(); got != tt.want {
				t.Errorf("MaxAttemptsCap() = %d, want %d", got, tt.want)
			}
		})
	}
	var none *policy.Config
	if got := none.MaxAttemptsCap(); got != policy.DefaultMaxAttemptsCap {
		t.Errorf("nil Config: MaxAttemptsCap() = %d, want %d", got, policy.DefaultMaxAttemptsCap)
	}
}

package budget

import (
	"fmt"
	"time"
)

// SettingsError reports a budget setting that breaks its rule. Field is the
// setting's Go name, within its settings struct (MaxTokens, RetryCost,
// Window, MaxWait...); package policy names the policy file's key instead.
type SettingsError struct {
	Field string
	Rule  string
	Value any
}

func (e *SettingsError) Error() string {
	v := e.Value
	if d, ok := v.(time.Duration); ok {
		v = d.String()
	}
	return fmt.Sprintf("budget: %s: %s, got %v", e.Field, e.Rule, v)
}

package policy

import (
	"reflect"
	"strings"
	"testing"
)

// TestConfigIsData: a Config holds settings, never live budgets, Gates or
// breakers, so that parsing a file twice gives equal Configs and a reload
// has no state of its own to hand over (the interceptors keep it).
func TestConfigIsData(t *testing.T) {
	const doc = `{
		"methodConfig": [
			{"name": [{"service": "a.S"}], "retryPolicy": {"maxAttempts": 3, "initialBackoff": "0.1s", "maxBackoff": "1s", "backoffMultiplier": 2, "retryableStatusCodes": ["UNAVAILABLE"]}},
			{"name": [{"service": "b.S"}], "circuitBreaker": {"failureRatio": 0.9}}
		],
		"retryBudget": {"tokenBucket": {}},
		"circuitBreaker": {},
		"adaptiveThrottling": {}
	}`
	a := parseMust(t, doc)
	b := parseMust(t, doc)
	if !reflect.DeepEqual(a, b) {
		t.Fatal("two parses of one file differ")
	}
	// A live budget or breaker made at parse time would be reachable from
	// the Config's fields: only the settings types of budget and breaker
	// may be (and the parse options, functions that build nothing here).
	seen := map[reflect.Type]bool{}
	var walk func(ty reflect.Type, path string)
	walk = func(ty reflect.Type, path string) {
		if seen[ty] {
			return
		}
		seen[ty] = true
		pkg := ty.PkgPath()
		if strings.HasSuffix(pkg, "/stagger/budget") || strings.HasSuffix(pkg, "/stagger/breaker") {
			switch {
			case strings.HasSuffix(ty.Name(), "Settings"), strings.HasSuffix(ty.Name(), "Mode"), ty.Name() == "Kind", ty.Name() == "Scope", ty.Name() == "Option":
			default:
				t.Errorf("Config reaches %s (%s): live state, not settings", ty, path)
			}
		}
		switch ty.Kind() {
		case reflect.Pointer, reflect.Slice, reflect.Array:
			walk(ty.Elem(), path+"[]")
		case reflect.Map:
			walk(ty.Key(), path+"{key}")
			walk(ty.Elem(), path+"{}")
		case reflect.Struct:
			for i := range ty.NumField() {
				walk(ty.Field(i).Type, path+"."+ty.Field(i).Name)
			}
		case reflect.Interface:
			if pkg != "" && ty.PkgPath() != "github.com/stagger-go/stagger/policy" {
				t.Errorf("Config reaches the interface %s (%s)", ty, path)
			}
		}
	}
	walk(reflect.TypeFor[Config](), "Config")
}

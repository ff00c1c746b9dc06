package policy_test

import (
	"fmt"

	"github.com/stagger-go/stagger/policy"
)

func ExampleParseConfig() {
	cfg, err := policy.ParseConfig([]byte(`
methodConfig:
  - name: [{service: shop.v1.Cart}]
    retryPolicy:
      maxAttempts: 4
      initialBackoff: 0.1s
      maxBackoff: 5s
      backoffMultiplier: 2
      retryableStatusCodes: [UNAVAILABLE]
      jitter: FULL
      maxAtempts: 9
retryBudget:
  ratio: {percent: 10, window: 10s}
`))
	if err != nil {
		fmt.Println(err)
		return
	}
	m := cfg.Method("/shop.v1.Cart/Checkout")
	fmt.Println(m.Retry.MaxAttempts, m.Retry.Backoff.Initial, m.Retry.Backoff.Jitter)
	fmt.Println(cfg.Method("/shop.v1.Pay/Get") == nil)
	fmt.Println(cfg.BudgetSettings().Kind)
	for _, w := range cfg.Warnings() {
		fmt.Println(w)
	}

	_, err = policy.ParseConfig([]byte(`{"methodConfig":[{"name":[{"service":"a.S"}],
		"retryPolicy":{"maxAttempts":1,"initialBackoff":"0s","maxBackoff":"1s","backoffMultiplier":2,"retryableStatusCodes":["UNAVAILABLE"]}}]}`))
	fmt.Println(err)
	// Output:
	// 4 100ms FULL
	// true
	// ratio
	// methodConfig[0].retryPolicy.maxAtempts: unknown key, ignored (did you mean "maxAttempts"?)
	// methodConfig[0].name[0].service: service "shop.v1.Cart" is not declared in the known proto files (no mistake if the program registers it later; WithProtoFiles(nil) turns this check off)
	// policy: methodConfig[0].retryPolicy.maxAttempts: must be at least 2 (it counts the first attempt: 2 means 1 retry), got 1
	// policy: methodConfig[0].retryPolicy.initialBackoff: must be > 0, got "0s"
}

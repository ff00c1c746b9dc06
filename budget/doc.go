// Package budget holds stagger's retry budgets: one Budget interface and three
// kinds, the gRFC A6 throttle, a token bucket (the AWS SDKs' standard mode) and
// a ratio of retries to requests over a sliding window. One budget is shared by
// every call of a process, so that retries cannot multiply an outage's load.
package budget

// Package policy holds stagger's pure decisions: the backoff and its jitter
// kinds, the retry and hedging policies of a method, and the policy files
// (gRPC service configs, gRFC A6) that configure them per method.
//
// Nothing here performs an RPC, reads the clock or draws a random number
// behind the caller's back: time and randomness come in as arguments, so the
// same code runs in the interceptors, in tests on fixed values and in the
// simulator on virtual time.
package policy

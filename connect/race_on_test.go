//go:build race

package staggerconnect_test

// raceOn: the race detector is on, and slows the calls of the model test
// (TestModelOneAttemptSeen) about fourfold.
const raceOn = true

//go:build race

package staggerconnect_test

// raceOn: the race detector is on (the model test runs fewer seeds).
const raceOn = true

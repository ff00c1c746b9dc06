//go:build race

package budget

// raceOn: the race detector slows the property test's histories tenfold.
const raceOn = true

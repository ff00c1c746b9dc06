//go:build !race

package staggerconnect_test

const raceOn = false

//go:build !race

package vmops

// raceOn is false without the race detector (race_on_test.go).
const raceOn = false

//go:build race

package vmops

// raceOn: the race detector slows the property tests tenfold; they run fewer
// rounds under it (the rounds are about logic; a race shows in a few).
const raceOn = true

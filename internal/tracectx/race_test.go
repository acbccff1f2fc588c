//go:build race

package tracectx

// raceEnabled reports that the race detector is on: allocation counts
// are meaningless.
const raceEnabled = true

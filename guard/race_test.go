//go:build race

package guard

// raceEnabled: the race detector slows everything about tenfold, so
// wall-clock bounds are reported but not asserted, and allocation tests
// are skipped.
const raceEnabled = true

//go:build race

package guard_test

// raceEnabled: the race detector slows everything about tenfold, so
// wall-clock bounds are reported but not asserted, and allocation tests
// are skipped.
const raceEnabled = true
